"""Render a resolved protocol's reference pages: the messages, types, codes, limits and decisions.

Markdown for the mkdocs site (``docs/reference/``), deterministic like every generated file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jinja2

from codegen.diagrams import frame_svg, sequence_svg
from codegen.flows import Flows
from codegen.ir import (
    Constant,
    Field,
    FieldSet,
    Frame,
    Message,
    Protocol,
    Rule,
    Sender,
    Struct,
    TypeRef,
)
from codegen.pytext import limit_phrases
from codegen.statistics import Mark, When
from codegen.templating import Proxy, constant_groups

__all__ = [
    "anchor",
    "asyncapi_page",
    "cell",
    "diagram_pages",
    "direction",
    "first_sentence",
    "reference_pages",
    "sender_page",
]

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,
)
_TEMPLATES.filters["oneline"] = lambda text: " ".join(str(text).split())
_TEMPLATES.filters["cell"] = lambda text: cell(str(text))
# An admonition's title is a quoted string on one line: no double quotes, no line breaks.
_TEMPLATES.filters["title_text"] = lambda text: " ".join(str(text).split()).replace('"', "'")


def reference_pages(p: Protocol) -> list[tuple[str, str]]:
    """The reference pages of ``p``: ``(path, text)`` pairs, paths relative to the repository."""
    return [
        (f"docs/reference/{p.id}.md", _reference(p)),
        (f"docs/reference/{p.id}-decisions.md", _decisions(p)),
        *((f"docs/reference/{sender_page(p, s)}", _sender_index(p, s)) for s in p.senders),
    ]


def diagram_pages(p: Protocol, flows: Flows | None) -> list[tuple[str, str]]:
    """The diagrams page of ``p`` (its flows and frame layouts), if it has anything to draw."""
    if flows is None and not p.frames:
        return []
    text = _TEMPLATES.get_template("diagrams.md.j2").render(
        header=_markdown_header(p),
        p=p,
        flows_file=flows.spec_file if flows else "",
        flows=[
            {
                "title": f.title,
                "anchor": anchor("flow", f.id),
                "description": f.description,
                "source": f.source,
                "svg": sequence_svg(f),
            }
            for f in (flows.flows if flows else ())
        ],
        frames=[
            {
                "name": fr.name,
                "anchor": anchor("layout", fr.name),
                "reference_anchor": anchor("frame", fr.name),
                "description": fr.description,
                "svg": frame_svg(fr),
            }
            for fr in p.frames
        ],
    )
    return [(f"docs/reference/{p.id}-diagrams.md", text)]


def asyncapi_page(
    p: Protocol, document: dict[str, Any], text: str, version: str
) -> tuple[str, str]:
    """The page that shows ``p``'s AsyncAPI ``document`` (its YAML ``text`` folded below)."""
    channel_id, channel = next(iter(document["channels"].items()))
    by_class = {m.class_name: m for m in p.messages}
    operations = []
    for op_id, op in document["operations"].items():
        messages = []
        for ref in op["messages"]:
            name = ref["$ref"].rsplit("/", 1)[-1]
            message = by_class.get(name)
            if message is not None:
                messages.append(
                    {
                        "name": message.type,
                        "anchor": anchor(message.type),
                        "summary": message.summary,
                    }
                )
            else:  # a binary frame (x-frame), drawn in the reference's frame layout
                summary = document["components"]["messages"][name].get("summary", "")
                messages.append({"name": name, "anchor": anchor("frame", name), "summary": summary})
        operations.append(
            {
                "id": op_id,
                "action": op["action"],
                "title": op["title"],
                "summary": op["summary"],
                "description": op.get("description", ""),
                "unknown": {"accept": "accept", "reject": "refus"}.get(
                    op.get("x-unknown-types", ""), ""
                ),
                "messages": messages,
            }
        )
    page = _TEMPLATES.get_template("asyncapi.md.j2").render(
        header=_markdown_header(p),
        p=p,
        version=version,
        channel_id=channel_id,
        channel=channel,
        operations=operations,
        errors=document.get("x-error-codes", []),
        close_codes=document.get("x-close-codes", []),
        text="".join(
            line for line in text.splitlines(keepends=True) if not line.startswith("#")
        ).strip(),
    )
    return f"docs/reference/{p.id}-asyncapi.md", page


def sender_page(p: Protocol, sender: Sender) -> str:
    """The file name of the page listing every message ``sender`` sends."""
    return f"{p.id}-from-{sender.id}.md"


_CODE_SPAN = re.compile(r"`([^`]*)`")


def cell(text: str) -> str:
    """Text for one Markdown table cell: one line, and no bare ``|`` to split the row.

    A code span holding a ``|`` is written as HTML, every punctuation character an entity
    (``<code>a&#124;b</code>``): escaped with a backslash, Python-Markdown would show the
    backslash, and it reads Markdown (``[0-9]`` as a link) inside inline HTML.
    """

    def code(match: re.Match[str]) -> str:
        if "|" not in match.group(1):
            return match.group(0)
        body = "".join(c if c.isalnum() or c == " " else f"&#{ord(c)};" for c in match.group(1))
        return f"<code>{body}</code>"

    text = _CODE_SPAN.sub(code, " ".join(text.split()))
    parts = re.split(r"(<code>.*?</code>)", text)
    return "".join(
        part if part.startswith("<code>") else part.replace("|", "\\|") for part in parts
    )


def _markdown_header(p: Protocol) -> str:
    return (
        f"<!-- Generated by `python -m codegen generate` from {p.spec_file} "
        f"(sha256 {p.spec_sha256}). Do not edit: change the spec or codegen/templates. -->\n"
    )


def anchor(*parts: str) -> str:
    return "-".join(re.sub(r"[^a-z0-9]+", "-", part.lower()).strip("-") for part in parts)


def _type_text(ref: TypeRef) -> str:
    if ref.kind == "array":
        assert ref.item is not None
        return f"array of {_type_text(ref.item)}"
    if ref.kind == "map":
        assert ref.item is not None
        return f"map of {_type_text(ref.item)}"
    if ref.kind == "enum":
        assert ref.enum is not None
        return f"[{ref.enum.name}](#{anchor(ref.enum.name)})"
    if ref.kind == "struct":
        assert ref.struct is not None
        return f"[{ref.struct}](#{anchor(ref.struct)})"
    if ref.kind == "datetime":
        return "datetime (RFC 3339, with a zone)"
    return ref.kind


def _constant_link(constant: Constant) -> str:
    return f"[`{constant.py_name}`](#{anchor('constant', constant.name)})"


def _limits_text(f: Field) -> str:
    return cell(", ".join(limit_phrases(f, _constant_link, "`")))


def _fields_table(fields: tuple[Field, ...]) -> str:
    """Three columns, so the description gets the width: what the field must be opens it."""
    rows = ["| field | type | description |", "|---|---|---|"]
    for f in fields:
        type_text = _type_text(f.type) + (" or null" if f.nullable else "")
        must = ["Required." if f.required else "Optional."]
        if f.has_default:
            must.append(f"Default `{json.dumps(f.default)}`.")
        limits = _limits_text(f)
        if limits:
            must.append(limits[0].upper() + limits[1:] + ".")
        name = f"`{f.wire_name}`" + (f" (`{f.py_name}`)" if f.py_name != f.wire_name else "")
        description = " ".join(f.description.split()).replace("|", "\\|")
        rows.append(f"| {name} | {type_text} | *{' '.join(must)}* {description} |")
    return "\n".join(rows)


def _rule_text(rule: Rule) -> str:
    return " ".join(rule.description.split())


def _errors_of(
    p: Protocol, fields: tuple[Field, ...], structs: dict[str, Struct], reject: bool
) -> list[str]:
    codes = p.decode_errors
    found = [codes["malformed"], codes["too_large"], codes["wrong_type"], codes["wrong_sender"]]
    if any(f.required for f in fields):
        found.append(codes["missing_field"])
    found.append(codes["invalid_value"])
    if any(f.max_length is not None and f.type.kind in ("array", "map") for f in fields):
        found.append(codes["too_many"])
    if reject:
        found.append(codes["unknown_field"])
    for f in fields:
        if f.code:
            found.append(f.code)
        element = f.type.element
        if element.kind == "struct" and element.struct:
            inner = structs[element.struct]
            found += _errors_of(p, inner.fields, structs, inner.reject_unknown_fields)
    order = [e.code for e in p.errors]
    return sorted(set(found), key=order.index)


def _reference(p: Protocol) -> str:
    structs = {s.name: s for s in p.structs}
    groups: dict[str, list[dict[str, Any]]] = {}
    for m in p.messages:
        groups.setdefault(m.group, []).append(_message_view(p, m, structs))
    groups_of_constants = [
        {
            "title": title,
            "constants": [
                {
                    "py_name": c.py_name,
                    "anchor": anchor("constant", c.name),
                    "value_text": json.dumps(c.value),
                    "unit": c.unit,
                    "description": c.description,
                    "env": c.env,
                }
                for c in members
            ],
        }
        for title, members in constant_groups(p)
    ]
    transport = [
        (key.replace("_", " "), _transport_value(value)) for key, value in p.transport.items()
    ]
    errors = [Proxy(e, anchor=anchor("error", e.code)) for e in p.errors]
    return _TEMPLATES.get_template("reference.md.j2").render(
        header=_markdown_header(p),
        p=Proxy(p, errors=errors),
        groups=[{"title": title, "messages": views} for title, views in groups.items()],
        field_sets=[_field_set_view(p, fs, structs) for fs in p.field_sets],
        sender_pages={s.id: sender_page(p, s) for s in p.senders},
        types=[
            {
                "name": s.name,
                "anchor": anchor(s.name),
                "description": s.description,
                "reject_unknown": s.reject_unknown_fields,
                "fields_table": _fields_table(s.fields),
                "rules": [_rule_text(r) for r in s.rules],
            }
            for s in p.structs
        ],
        enums=[Proxy(e, anchor=anchor(e.name)) for e in p.enums],
        constant_groups=groups_of_constants,
        frames=[_frame_view(p, fr) for fr in p.frames],
        transport=transport,
        statistics=_statistics_rows(p),
        recoverable=any(e.recoverable is not None for e in p.errors),
        decision_anchor=lambda d: f"{p.id}-decisions.md#{anchor('decision', d)}",
    )


def _statistics_rows(p: Protocol) -> list[tuple[str, str]]:
    """(what, what is read) of each part of ``statistics:``, as Markdown cells."""
    s = p.statistics
    if s is None:
        return []

    def link(wire_type: str) -> str:
        return f"[`{wire_type}`](#{anchor(wire_type)})"

    def when(w: When | None) -> str:
        if w is None:
            return ""
        if w.present is not None:
            return f" with `{w.field.wire}` {'present' if w.present else 'absent'}"
        return f" with `{w.field.wire}` = `{json.dumps(w.equals)}`"

    def marks(found: tuple[Mark, ...]) -> str:
        return ", ".join(link(m.type) + when(m.when) for m in found)

    rows = []
    if s.sequence is not None:
        rows.append(
            ("sequence", f"`{s.sequence.wire}` of every message from {', '.join(s.sequenced)}")
        )
    if s.frames is not None:
        f = s.frames
        frame = f"[`{f.frame}`](#{anchor('frame', f.frame)})"
        duration = f"{f.duration_ms} ms" + (
            f" (`{f.duration_constant}`)" if f.duration_constant else ""
        )
        rows.append(
            (
                "audio frames",
                f"{frame}: counter `{f.sequence}`, clock `{f.clock}`, silence flag "
                f"`{f.silence}`, {duration} each",
            )
        )
    rows.append(("the user's turn ends", marks(s.turn_end)))
    rows.append(("the agent's output", marks(s.turn_output)))
    call = s.tool_call
    rows.append(
        ("a tool call starts", f"{link(call.type)}, key `{call.key.wire}`, tool `{call.name.wire}`")
    )
    for o in s.tool_outcomes:
        stated = f", duration `{o.duration_ms.wire}`" if o.duration_ms else ""
        rows.append(
            (
                f"a tool call ends: {o.outcome}",
                f"{link(o.type)}{when(o.when)}, key `{o.key.wire}`{stated}",
            )
        )
    if s.resume is not None:
        replayed = s.resume.replayed_before
        rows.append(
            (
                "the session resumes",
                link(s.resume.type)
                + when(s.resume.when)
                + (
                    f"; replayed: the other side's events made (`{replayed.wire}`) before it"
                    if replayed
                    else ""
                ),
            )
        )
    if s.loss_report is not None:
        rows.append(("events lost", f"{link(s.loss_report.type)}, `{s.loss_report.count.wire}`"))
    return rows


def _transport_value(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(
            f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in value.items()
        )
    return " ".join(str(value).split())


def _message_view(p: Protocol, m: Message, structs: dict[str, Struct]) -> dict[str, Any]:
    own = m.own_fields
    return {
        "type": m.type,
        "anchor": anchor(m.type),
        "class_name": m.class_name,
        "senders": m.senders,
        "direction": direction(p, m),
        "summary": m.summary,
        "description": m.description,
        "source": m.source,
        "base": _field_set_link(m.base) if m.base is not None else None,
        "fields_table": _fields_table(own) if own else None,
        "rules": [_rule_text(r) for r in m.rules],
        "errors": [
            f"[`{c}`](#{anchor('error', c)})" for c in _errors_of(p, m.fields, structs, False)
        ],
        "examples": [
            {
                "description": ex.description,
                "source": ex.source,
                "json": json.dumps(ex.json, indent=2, ensure_ascii=False),
            }
            for ex in m.examples
        ],
        "decisions": [
            Proxy(d, summary=first_sentence(d.decision))
            for d in m.decisions + tuple(d for f in own for d in f.decisions)
        ],
    }


def direction(p: Protocol, m: Message) -> str:
    """Who sends ``m`` to whom, as an arrow: ``agent → server``, or ``both ways``."""
    receivers = [s.id for s in p.senders if s.id not in m.senders]
    if not receivers:
        return "both ways"
    return f"{' and '.join(m.senders)} → {' and '.join(receivers)}"


def _field_set_link(fs: FieldSet) -> str:
    names = ", ".join(f"`{f.wire_name}`" for f in fs.fields)
    return f"[`{fs.class_name}`](#{anchor('fields', fs.name)}) ({names})"


def _field_set_view(p: Protocol, fs: FieldSet, structs: dict[str, Struct]) -> dict[str, Any]:
    carried_by = [
        f"every message of the {u}" if any(s.id == u for s in p.senders) else f"`{u}`"
        for u in fs.users
    ]
    return {
        "name": fs.name,
        "class_name": fs.class_name,
        "anchor": anchor("fields", fs.name),
        "carried_by": carried_by,
        "fields_table": _fields_table(fs.fields),
        "decisions": [
            Proxy(d, summary=first_sentence(d.decision)) for f in fs.fields for d in f.decisions
        ],
    }


def _sender_index(p: Protocol, sender: Sender) -> str:
    return _TEMPLATES.get_template("sender-index.md.j2").render(
        header=_markdown_header(p),
        p=p,
        sender=sender,
        receivers=[s for s in p.senders if s.id != sender.id],
        messages=[
            {
                "type": m.type,
                "link": f"{p.id}.md#{anchor(m.type)}",
                "class_name": m.class_name,
                "group": m.group,
                "summary": m.summary,
            }
            for m in sender.messages
        ],
    )


def _frame_view(p: Protocol, fr: Frame) -> dict[str, Any]:
    return {
        "name": fr.name,
        "anchor": anchor("frame", fr.name),
        "description": fr.description,
        "size": fr.size,
        "byte_order": fr.byte_order,
        "error": fr.error,
        "fields": fr.fields,
        "svg": frame_svg(fr),
        "examples": [
            {
                "description": ex.description,
                "hex": ex.to_bytes(fr)[: fr.payload.offset + 4].hex(" ") + " ...",
            }
            for ex in fr.examples
        ],
    }


def _decisions(p: Protocol) -> str:
    return _TEMPLATES.get_template("decisions.md.j2").render(
        header=_markdown_header(p),
        p=p,
        decisions=[
            Proxy(d, anchor=anchor("decision", d.id), summary=first_sentence(d.decision))
            for d in p.decisions
        ],
    )


_SENTENCE_END = re.compile(r"(?<![ (]e\.g\.)(?<![ (]i\.e\.)(?<=[.!?])\s+(?=[A-Za-z`(\"])")
_ABOUT_THE_SOURCE = re.compile(
    r"^(The (protocol )?documents?|The (reference )?notes|The SDK|Neither|Nothing in)\b"
)


def first_sentence(text: str) -> str:
    """A decision's one-line summary: its first sentence that says what the spec does.

    Decisions often open with what the document leaves open ("The document is silent on ..."):
    that sentence is the question, so the summary is the first one after it.
    """
    sentences = _SENTENCE_END.split(" ".join(text.split()))
    decided = [s for s in sentences if not _ABOUT_THE_SOURCE.match(s)] or sentences
    summary = decided[0]
    # A verdict alone ("recoverable: true.") says too little without its reason.
    if len(summary) < 40 and len(decided) > 1:
        summary += " " + decided[1]
    return summary
