"""Render a resolved protocol into files: Python modules, JSON Schema and reference pages.

Output is deterministic: stable order, no timestamps, Python formatted by the pinned ruff and
parsed back (``ast``) before anything is returned.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from codegen import names
from codegen.ir import Constant, Field, Frame, Message, Protocol, Rule, Struct, TypeRef
from codegen.jsonschema_export import export_schema
from codegen.pymodel import (
    LINE_LENGTH,
    PyModel,
    build,
    build_frames,
    docstring,
    limit_phrases,
    wrap,
)
from codegen.vectors import render_vectors
from voxwire import _rules as rules

__all__ = ["RUFF_VERSION", "RenderError", "render"]

ROOT = Path(__file__).resolve().parent.parent
RUFF_VERSION = "0.17.6"
"""The formatter whose output is committed; another version would change the bytes."""

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,
)
_TEMPLATES.filters["oneline"] = lambda text: " ".join(str(text).split())
_TEMPLATES.filters["py"] = repr
_TEMPLATES.filters["doc"] = lambda lines, indent=4: _docstring_literal(lines, indent)
_TEMPLATES.filters["wrap"] = lambda paragraphs, indent=0: "\n".join(wrap(paragraphs, indent))
_TEMPLATES.filters["pystr"] = lambda text, indent=4: _string_literal(text, indent)
_TEMPLATES.filters["cell"] = lambda text: _cell(str(text))

_GROUP_TITLES = {
    "limits": "Limits",
    "timings": "Timings",
    "audio": "Audio",
    "protocol": "Protocol",
    "security": "Security",
}


def _docstring_literal(paragraphs: list[str], indent: int) -> str:
    """A docstring literal: one line, or several with the closing quotes on their own line."""
    lines = wrap(paragraphs, indent)
    if len(lines) == 1:
        return f'"""{lines[0]}"""'
    pad = " " * indent
    body = ("\n" + pad).join(lines).replace("\n" + pad + "\n", "\n\n")
    return f'"""{body}\n{pad}"""'


def _string_literal(text: str, indent: int) -> str:
    """A string literal that fits the line length: implicit concatenation in parentheses."""
    text = " ".join(text.split())
    width = LINE_LENGTH - indent - 8
    if len(repr(text)) <= 40:
        return repr(text)
    # Always parenthesized and wrapped: ruff joins the pieces again where one line fits.
    words = textwrap.wrap(text, width, break_on_hyphens=False, drop_whitespace=False)
    pad = " " * (indent + 4)
    return "(\n" + "\n".join(pad + repr(chunk) for chunk in words) + "\n" + " " * indent + ")"


_CODE_SPAN = re.compile(r"`([^`]*)`")


def _cell(text: str) -> str:
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


class RenderError(Exception):
    """A template produced something that is not valid output (a bug in codegen)."""


@dataclass(frozen=True)
class Output:
    path: str
    """Relative to the repository root."""
    text: str


def render(protocol: Protocol) -> list[Output]:
    """Every file generated from ``protocol``, formatted and checked, in a stable order."""
    model = build(protocol)
    header = _python_header(protocol)
    package = f"generated/{names.module_path(protocol.id, '')}"
    modules = {
        "errors.py": _errors(protocol, header),
        "constants.py": _constants(protocol, header),
        "messages.py": _messages(model, header),
        "checks.py": _checks(model, header),
        "codec.py": _codec(model, header),
    }
    if protocol.frames:
        modules["frames.py"] = _frames(protocol, header)
    modules["__init__.py"] = _init(protocol, header, modules)
    outputs = [
        Output(package + name, _format_python(package + name, text))
        for name, text in modules.items()
    ]
    schema = export_schema(protocol)
    outputs.append(
        Output(package + "schema.json", json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
    )
    outputs.append(Output(package + "vectors.jsonl", render_vectors(protocol)))
    outputs.append(Output(f"docs/reference/{protocol.id}.md", _reference(protocol, model)))
    outputs.append(Output(f"docs/reference/{protocol.id}-decisions.md", _decisions(protocol)))
    return sorted(outputs, key=lambda o: o.path)


# -- headers and formatting --------------------------------------------------------------------


def _python_header(p: Protocol) -> str:
    return (
        f"# Generated by `python -m codegen generate` from {p.spec_file}\n"
        f"# (sha256 {p.spec_sha256}).\n"
        "# Do not edit: change the spec or codegen/templates, then regenerate.\n"
    )


def _markdown_header(p: Protocol) -> str:
    return (
        f"<!-- Generated by `python -m codegen generate` from {p.spec_file} "
        f"(sha256 {p.spec_sha256}). Do not edit: change the spec or codegen/templates. -->\n"
    )


def _format_python(path: str, text: str) -> str:
    for command in (
        ["check", "--select", "I", "--fix-only", "--exit-zero", "--quiet"],
        ["format", "--quiet"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--stdin-filename", path, "-"],
            input=text,
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        if done.returncode != 0:
            raise RenderError(
                f"{path}: ruff {command[0]} failed:\n{done.stderr.strip()}\n{_numbered(text)}"
            )
        text = done.stdout
    try:
        ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise RenderError(
            f"{path}:{exc.lineno}: generated code does not parse: {exc.msg}"
        ) from None
    return text


def _numbered(text: str) -> str:
    return "\n".join(f"{i:4} {line}" for i, line in enumerate(text.splitlines(), 1))


def _sorted_all(items: Iterable[str]) -> list[str]:
    return sorted(set(items), key=lambda n: (not n.isupper(), n))


# -- Python modules ----------------------------------------------------------------------------


def _errors(p: Protocol, header: str) -> str:
    recoverable = any(e.recoverable is not None for e in p.errors)
    errors = [
        {
            "py_name": e.py_name,
            "code": e.code,
            "doc": docstring(e.description),
            "description": e.description,
            "recoverable": bool(e.recoverable),
        }
        for e in p.errors
    ]
    return _TEMPLATES.get_template("errors.py.j2").render(
        header=header, p=_Proxy(p, errors=errors), recoverable=recoverable
    )


class _Proxy:
    """An object whose attributes are the IR object's, some replaced (for a template's view)."""

    def __init__(self, base: object, **overrides: Any) -> None:
        self._base = base
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._base, name)


def _constant_doc(c: Constant) -> list[str]:
    unit = "" if c.unit == "none" else f"Unit: {c.unit}."
    env = f"Environment: ``{c.env}``." if c.env else ""
    side = f"Enforced by: {c.side}." if c.side else ""
    source = f"Source: {c.source}." if c.source else ""
    return docstring(c.description, " ".join(x for x in (unit, env, side, source) if x))


def _transport_constants(p: Protocol) -> list[dict[str, Any]]:
    out = []
    t = p.transport
    defined = {c.name for c in p.constants}
    for key, doc in (
        ("subprotocol", "The WebSocket subprotocol both sides must negotiate, exactly."),
        ("endpoint", "Path template of the WebSocket endpoint."),
    ):
        # A constant of the same name wins; the IR checks that both agree.
        if key in t and key not in defined:
            out.append(
                {"name": names.constant(key), "literal": repr(t[key]), "doc": docstring(doc)}
            )
    hosts = t.get("plaintext_hosts")
    if hosts:
        for key, doc in (
            (
                "ipv4",
                "IPv4 networks a plaintext ws:// URL may name (an IPv4-mapped IPv6 counts too).",
            ),
            ("ipv6", "IPv6 networks a plaintext ws:// URL may name."),
            ("ipv6_zone", "IPv6 networks on which a zone id (%25eth0) is allowed."),
            ("names", "Host names a plaintext ws:// URL may name exactly."),
            ("suffixes", "Host name suffixes a plaintext ws:// URL may name."),
        ):
            out.append(
                {
                    "name": names.constant(
                        f"plaintext_{key}" if key != "names" else "plaintext_host_names"
                    ),
                    "literal": repr(tuple(hosts[key])),
                    "doc": docstring(doc),
                }
            )
        out.append(
            {
                "name": "PLAINTEXT_SINGLE_LABEL",
                "literal": repr(hosts["single_label"]),
                "doc": docstring(
                    "What a single-label host name (no dot) gets: accept, warn or refuse."
                ),
            }
        )
    return out


def _constants(p: Protocol, header: str) -> str:
    groups = []
    for group in _GROUP_TITLES:
        members = [c for c in p.constants if c.group == group]
        if members:
            groups.append(
                {
                    "title": _GROUP_TITLES[group],
                    "constants": [
                        {
                            "py_name": c.py_name,
                            "literal": _constant_literal(c.value),
                            "doc": _constant_doc(c),
                        }
                        for c in members
                    ],
                }
            )
    transport = _transport_constants(p)
    exports = [c.py_name for c in p.constants] + [t["name"] for t in transport]
    return _TEMPLATES.get_template("constants.py.j2").render(
        header=header, p=p, groups=groups, transport=transport, exports=_sorted_all(exports)
    )


def _constant_literal(value: Any) -> str:
    return repr(tuple(value)) if isinstance(value, list) else repr(value)


def _referenced_constants(fields: Iterable[Field]) -> set[str]:
    found = set()
    for f in fields:
        for bound in (f.minimum, f.maximum, f.min_length, f.max_length, f.min_bytes, f.max_bytes):
            if bound is not None and bound.constant is not None:
                found.add(bound.constant.py_name)
    return found


def _all_fields(p: Protocol) -> list[Field]:
    owners: list[Struct | Message] = [*p.structs, *p.messages]
    return [f for owner in owners for f in owner.fields]


def _messages(model: PyModel, header: str) -> str:
    p = model.protocol
    text_all = " ".join(f.annotation for c in (*model.structs, *model.messages) for f in c.fields)
    uses_datetime = bool(re.search(r"\bdatetime\b", text_all))
    typing_names = ["ClassVar", "Final", "Literal", "TypeAlias"]
    for name in ("Annotated", "Any"):
        if re.search(rf"\b{name}\b", text_all):
            typing_names.append(name)
    safe_integer = "JSON_SAFE_INTEGER" in text_all
    msgspec_names = ["UNSET", "UnsetType"]
    if model.uses_meta:
        msgspec_names.append("Meta")
    constant_imports = sorted(
        c for c in _referenced_constants(_all_fields(p)) if re.search(rf"\b{c}\b", text_all)
    )
    senders = [
        {
            "id": s.id,
            "union": s.union_name,
            "members": [m.class_name for m in s.messages],
        }
        for s in p.senders
    ]
    exports = (
        [e.name for e in model.enums]
        + [c.name for c in model.structs]
        + [c.name for c in model.messages]
        + [s.union_name for s in p.senders]
        + ["MESSAGE_TYPES", "Message", "Object"]
    )
    enum_bases = sorted({e.base for e in model.enums}) or ["StrEnum"]
    intro = docstring(
        "Each class is tagged with its wire ``type`` (readable as ``message.type``), takes keyword "
        "arguments only, and leaves out of the wire what is absent (``UNSET``) or equal to its "
        "default. The unions name what each sender may send."
    )
    return _TEMPLATES.get_template("messages.py.j2").render(
        header=header,
        p=p,
        intro=intro,
        enums=model.enums,
        enum_bases=enum_bases,
        structs=model.structs,
        messages=model.messages,
        senders=senders,
        typing_names=sorted(typing_names),
        msgspec_names=sorted(msgspec_names),
        constant_imports=constant_imports,
        safe_integer=safe_integer,
        uses_datetime=uses_datetime,
        exports=_sorted_all(exports),
    )


def _checks(model: PyModel, header: str) -> str:
    p = model.protocol
    body = "\n".join(line for c in model.checks for line in c.body)
    rule_names = sorted(set(re.findall(r"\b([a-z_]+)\(", body)) & set(rules.__all__))
    constant_imports = sorted(
        c for c in _referenced_constants(_all_fields(p)) if re.search(rf"\b{c}\b", body)
    )
    return _TEMPLATES.get_template("checks.py.j2").render(
        header=header,
        p=p,
        checks=model.checks,
        exports=sorted(c.function for c in model.checks),
        rule_imports=rule_names,
        constant_imports=constant_imports,
        message_imports=sorted({c.class_name for c in model.checks}),
    )


def _codec(model: PyModel, header: str) -> str:
    p = model.protocol
    checks = [(c.class_name, c.function) for c in model.checks if c.message_type is not None]
    senders = []
    for s in p.senders:
        result = s.union_name + (" | UnknownMessage" if s.accepts_unknown else "")
        senders.append(
            {
                "id": s.id,
                "literal": json.dumps(s.id),
                "literal_type": f"Literal[{json.dumps(s.id)}]",
                "union": s.union_name,
                "accepts_unknown": s.accepts_unknown,
                "envelope": s.envelope_name,
                "result": result,
            }
        )
    all_results = " | ".join(
        [s.union_name for s in p.senders]
        + (["UnknownMessage"] if any(s.accepts_unknown for s in p.senders) else [])
    )
    error_names = {e.code: e.py_name for e in p.errors}
    return _TEMPLATES.get_template("codec.py.j2").render(
        header=header,
        p=p,
        senders=senders,
        all_results=all_results,
        decode_codes=[(key, error_names[code]) for key, code in p.decode_errors.items()],
        checks=checks,
        field_codes=[(mtype, path, error_names[code]) for mtype, path, code in model.field_codes],
        check_imports=sorted(check for _, check in checks),
        message_imports=sorted(
            {name for name, _ in checks}
            | {s.union_name for s in p.senders}
            | {s.envelope_name for s in p.senders if s.envelope_name is not None}
        ),
    )


def _frames(p: Protocol, header: str) -> str:
    frames = build_frames(p)
    views = []
    for fr in frames:
        snake = (
            "frame" if len(frames) == 1 else names.check_function(fr.name).removeprefix("check_")
        )
        expect = next(
            f.name
            for frame in p.frames
            if frame.name == fr.name
            for f in frame.header
            if f.enum is not None
        )
        views.append(_Proxy(fr, snake=snake, expect=f"expected_{expect}", expect_field=expect))
    frame_enums = sorted(
        {f.enum.name for frame in p.frames for f in frame.header if f.enum is not None}
    )
    enum_sets = [(names.enum_values(e), e) for e in frame_enums]
    exports = []
    for view in views:
        exports += [view.name, view.size_constant, f"decode_{view.snake}", f"encode_{view.snake}"]
        exports += [const for const, _, _, _ in view.flags]
    return _TEMPLATES.get_template("frames.py.j2").render(
        header=header,
        p=p,
        frames=views,
        frame_enums=frame_enums,
        enum_sets=enum_sets,
        exports=_sorted_all(exports),
    )


def _init(p: Protocol, header: str, modules: dict[str, str]) -> str:
    imports = []
    exports = ["UnknownMessage", "SPEC_SHA256"]
    for module in ("codec", "constants", "errors", "frames", "messages"):
        if module + ".py" not in modules:
            continue
        tree = ast.parse(modules[module + ".py"])
        public = next(
            (
                [ast.literal_eval(elt) for elt in node.value.elts]  # type: ignore[attr-defined]
                for node in tree.body
                if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", None) == "__all__"
            ),
            [],
        )
        imports.append((module, sorted(public)))
        exports += public
    # The spec may name its version as a constant too (the resolver checks they agree).
    define_version = "PROTOCOL_VERSION" not in exports
    if define_version:
        exports.append("PROTOCOL_VERSION")
    intro = docstring(p.description)
    return _TEMPLATES.get_template("__init__.py.j2").render(
        header=header,
        p=p,
        intro=intro,
        frames=bool(p.frames),
        first_sender=p.senders[0].id,
        imports=imports,
        define_version=define_version,
        exports=_sorted_all(exports),
    )


# -- reference pages ---------------------------------------------------------------------------


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
    return _cell(", ".join(limit_phrases(f, _constant_link, "`")))


def _fields_table(fields: tuple[Field, ...]) -> str:
    rows = [
        "| field | type | required | default | limits | description |",
        "|---|---|---|---|---|---|",
    ]
    for f in fields:
        required = "yes" if f.required else "no"
        type_text = _type_text(f.type) + (" or null" if f.nullable else "")
        default = f"`{json.dumps(f.default)}`" if f.has_default else ""
        name = f"`{f.wire_name}`" + (f" (`{f.py_name}`)" if f.py_name != f.wire_name else "")
        description = " ".join(f.description.split()).replace("|", "\\|")
        rows.append(
            f"| {name} | {type_text} | {required} | {default} | {_limits_text(f)} | {description} |"
        )
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


def _reference(p: Protocol, model: PyModel) -> str:
    structs = {s.name: s for s in p.structs}
    groups: dict[str, list[dict[str, Any]]] = {}
    for m in p.messages:
        groups.setdefault(m.group, []).append(_message_view(p, m, structs))
    constant_groups = []
    for group, title in _GROUP_TITLES.items():
        members = [c for c in p.constants if c.group == group]
        if members:
            constant_groups.append(
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
            )
    transport = [
        (key.replace("_", " "), _transport_value(value)) for key, value in p.transport.items()
    ]
    errors = [_Proxy(e, anchor=anchor("error", e.code)) for e in p.errors]
    return _TEMPLATES.get_template("reference.md.j2").render(
        header=_markdown_header(p),
        p=_Proxy(p, errors=errors),
        groups=[{"title": title, "messages": views} for title, views in groups.items()],
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
        enums=[_Proxy(e, anchor=anchor(e.name)) for e in p.enums],
        constant_groups=constant_groups,
        frames=[_frame_view(p, fr) for fr in p.frames],
        transport=transport,
        recoverable=any(e.recoverable is not None for e in p.errors),
        decision_anchor=lambda d: f"{p.id}-decisions.md#{anchor('decision', d)}",
    )


def _transport_value(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(
            f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in value.items()
        )
    return " ".join(str(value).split())


def _message_view(p: Protocol, m: Message, structs: dict[str, Struct]) -> dict[str, Any]:
    return {
        "type": m.type,
        "anchor": anchor(m.type),
        "class_name": m.class_name,
        "senders": m.senders,
        "summary": m.summary,
        "description": m.description,
        "source": m.source,
        "fields_table": _fields_table(m.fields) if m.fields else "No fields besides `type`.",
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
        "decisions": m.decisions + tuple(d for f in m.fields for d in f.decisions),
    }


def _frame_view(p: Protocol, fr: Frame) -> dict[str, Any]:
    return {
        "name": fr.name,
        "anchor": anchor("frame", fr.name),
        "description": fr.description,
        "size": fr.size,
        "byte_order": fr.byte_order,
        "error": fr.error,
        "fields": fr.fields,
        "diagram": _diagram(fr),
        "examples": [
            {
                "description": ex.description,
                "hex": ex.to_bytes(fr)[: fr.payload.offset + 4].hex(" ") + " ...",
            }
            for ex in fr.examples
        ],
    }


def _diagram(fr: Frame) -> str:
    """A byte diagram: one cell per field, as wide as its name or its size allows."""
    cells = []
    for f in fr.fields:
        label = f"{f.name} ({f.kind}{'' if f.kind != 'bytes' else ' ' + str(f.size)})"
        cells.append((f.offset, label))
    top = "offset  " + "".join(f"{offset:<{len(label) + 3}}" for offset, label in cells)
    line = "        +" + "+".join("-" * (len(label) + 2) for _, label in cells) + "+"
    middle = "        |" + "|".join(f" {label} " for _, label in cells) + "|"
    return "\n".join([top.rstrip(), line, middle, line, f"        total {fr.size} bytes"])


def _decisions(p: Protocol) -> str:
    return _TEMPLATES.get_template("decisions.md.j2").render(
        header=_markdown_header(p),
        p=p,
        decisions=[_Proxy(d, anchor=anchor("decision", d.id)) for d in p.decisions],
    )
