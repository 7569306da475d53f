"""Render a resolved protocol into files: Python modules, JSON Schema and vectors.

The reference pages are :mod:`codegen.reference`'s. Output is deterministic: stable order, no
timestamps, Python formatted by the pinned ruff and parsed back (``ast``) before anything is
returned.
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
from codegen.ir import Constant, Field, Message, Protocol, Struct
from codegen.jsonschema_export import export_schema
from codegen.machines import machine_view
from codegen.pyframes import build_frames
from codegen.pymodel import PyClass, PyModel, build
from codegen.pyroles import build_roles
from codegen.pytext import LINE_LENGTH, docstring, docstring_literal, string_literal, wrap
from codegen.reference import reference_pages
from codegen.statistics import Statistics, statistics_view
from codegen.templating import Proxy, constant_groups
from codegen.vectors import render_vectors

__all__ = ["RUFF_VERSION", "RenderError", "package_stub", "render"]

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
_TEMPLATES.filters["doc"] = lambda lines, indent=4, args=(): docstring_literal(lines, indent, args)
_TEMPLATES.filters["classdoc"] = lambda c, field_sets: _class_docstring(c, field_sets)
_TEMPLATES.filters["wrap"] = lambda paragraphs, indent=0: "\n".join(wrap(paragraphs, indent))
_TEMPLATES.filters["pystr"] = lambda text, indent=4: string_literal(text, indent)
_TEMPLATES.globals["names"] = names  # every name a template prints comes from codegen.names


def _class_docstring(c: PyClass, field_sets: list[PyClass]) -> str:
    """A Struct's docstring with an ``Attributes:`` section (Google style), each field and its
    description, inherited fields first: what ``help()`` and documentation tools show."""
    bases = c.base.split(", ")
    fields = [f for s in field_sets if s.name in bases for f in s.fields] + c.fields
    if not fields:
        return docstring_literal(c.doc, 4)
    lines = [*wrap(c.doc, 4), "", "Attributes:"]
    for f in fields:
        entry = f"{f.attr}: {f.doc[0] if f.doc else ''}"
        width = LINE_LENGTH - 4 - 4
        wrapped = textwrap.wrap(entry, width, subsequent_indent="    ", break_on_hyphens=False)
        lines += ["    " + line for line in wrapped]
    body = "\n    ".join(lines).replace("\n    \n", "\n\n")
    return f'"""{body}\n    """'


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
    modules["roles.py"] = _roles(protocol, header)
    if protocol.machines:
        modules["machines.py"] = _machines(protocol, header)
    if protocol.statistics is not None:
        modules["statistics.py"] = _statistics(protocol, protocol.statistics, header)
    modules["_api.py"] = _init(protocol, header, modules)
    modules["__init__.pyi"] = _package_stub(header, package.removeprefix("generated/"), "_api")
    outputs = [
        Output(package + name, _format_python(package + name, text))
        for name, text in modules.items()
    ]
    schema = export_schema(protocol)
    outputs.append(
        Output(package + "schema.json", json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
    )
    outputs.append(Output(package + "vectors.jsonl", render_vectors(protocol)))
    outputs += [Output(path, text) for path, text in reference_pages(protocol)]
    # The PEP 561 marker where type checkers look for it in an editable install, which puts this
    # folder on sys.path apart from runtime/ (whose voxwire/py.typed covers the hand-written half).
    outputs.append(Output(package + "py.typed", header))
    return sorted(outputs, key=lambda o: o.path)


# -- headers and formatting --------------------------------------------------------------------


def _python_header(p: Protocol) -> str:
    return (
        f"# Generated by `python -m codegen generate` from {p.spec_file}\n"
        f"# (sha256 {p.spec_sha256}).\n"
        "# Do not edit: change the spec or codegen/templates, then regenerate.\n"
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
    code_sets: list[dict[str, Any]] = []
    carriers = sorted({c for e in p.errors for c in e.carried_by})
    for carrier in carriers:
        what = "the body of an HTTP answer" if carrier == "http" else f"``{carrier}``"
        code_sets.append(
            {
                "name": names.carried_by(carrier),
                "members": [e.py_name for e in p.errors if carrier in e.carried_by],
                "doc": docstring(f"The codes {what} carries."),
            }
        )
    for origin in sorted({e.raised_by for e in p.errors if e.raised_by is not None}):
        code_sets.append(
            {
                "name": names.raised_by(origin),
                "members": [e.py_name for e in p.errors if e.raised_by == origin],
                "doc": docstring(
                    "The codes only the protocol machinery raises (a handshake or resume "
                    "refusal); an application never sends them."
                    if origin == "protocol"
                    else "The codes only an application raises; the protocol machinery never does."
                ),
            }
        )
    ending = [(e.py_name, e.end_reason) for e in p.errors if e.end_reason is not None]
    end_enum = ending[0][1][0].name if ending else None  # the resolver checks they share one
    end_reasons = [(code, f"{enum.name}.{value.py_name}") for code, (enum, value) in ending]
    exports = [names.ERROR_DESCRIPTIONS, names.ERROR_CODE, names.PROTOCOL_ERROR]
    exports += [names.RECOVERABLE] if recoverable else []
    exports += [c["name"] for c in code_sets]
    exports += [names.END_REASONS] if end_reasons else []
    close_after = [(e.py_name, e.close_code.py_name) for e in p.errors if e.close_code]
    exports += [names.CLOSE_AFTER] if close_after else []
    return _TEMPLATES.get_template("errors.py.j2").render(
        header=header,
        p=Proxy(p, errors=errors),
        recoverable=recoverable,
        code_sets=code_sets,
        end_enum=end_enum,
        end_reasons_name=names.END_REASONS,
        end_reasons=end_reasons,
        close_after=close_after,
        exports=_sorted_all(exports),
    )


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
                    "name": names.plaintext_hosts(key),
                    "literal": repr(tuple(hosts[key])),
                    "doc": docstring(doc),
                }
            )
        out.append(
            {
                "name": names.plaintext_hosts("single_label"),
                "literal": repr(hosts["single_label"]),
                "doc": docstring(
                    "What a single-label host name (no dot) gets: accept, warn or refuse."
                ),
            }
        )
    return out


def _constants(p: Protocol, header: str) -> str:
    groups = [
        {
            "title": title,
            "constants": [
                {
                    "py_name": c.py_name,
                    "literal": _constant_literal(c.value),
                    "doc": _constant_doc(c),
                }
                for c in members
            ],
        }
        for title, members in constant_groups(p)
    ]
    transport = _transport_constants(p)
    exports = [c.py_name for c in p.constants] + [t["name"] for t in transport]
    close_codes = [
        {"py_name": c.py_name, "code": c.code, "doc": docstring(c.description)}
        for c in p.close_codes
    ]
    if close_codes:
        exports.append(names.CLOSE_CODE)
    return _TEMPLATES.get_template("constants.py.j2").render(
        header=header,
        p=p,
        groups=groups,
        transport=transport,
        close_code_enum=names.CLOSE_CODE,
        close_codes=close_codes,
        exports=_sorted_all(exports),
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


def _message_imports(model: PyModel) -> dict[str, Any]:
    """What the messages module imports: the names its annotations, defaults and inline tests
    (``check_when``) use."""
    p = model.protocol
    text_all = " ".join(f.annotation for c in (*model.structs, *model.messages) for f in c.fields)
    typing_names = ["ClassVar", "Final", "Literal", "TypeAlias"]
    for name in ("Annotated", "Any"):
        if re.search(rf"\b{name}\b", text_all):
            typing_names.append(name)
    safe_integer = names.JSON_SAFE_INTEGER in text_all
    msgspec_names = ["UNSET", "UnsetType"]
    if model.uses_meta:
        msgspec_names.append("Meta")
    fast = " ".join(c.check_when for c in model.messages if c.check_when)
    constant_imports = sorted(
        {c for c in _referenced_constants(_all_fields(p)) if re.search(rf"\b{c}\b", text_all)}
        | {c.py_name for c in p.constants if re.search(rf"\b{c.py_name}\b", fast)}
    )
    return {
        "typing_names": sorted(typing_names),
        "msgspec_names": sorted(msgspec_names),
        "constant_imports": constant_imports,
        "rule_imports": [
            *([names.JSON_SAFE_INTEGER] if safe_integer else []),
            *sorted(r for r in names.RULES if re.search(rf"\b{r}\(", fast)),
        ],
        "uses_datetime": bool(re.search(r"\bdatetime\b", text_all)),
        "check_imports": sorted(c.check for c in model.messages if c.check),
    }


def _messages(model: PyModel, header: str) -> str:
    p = model.protocol
    unions = [
        {
            "name": u.name,
            "doc": docstring(u.description),
            "members": [m.class_name for m in u.members],
            "types_name": u.types_name,
            "types": sorted(m.type for m in u.members),
        }
        for u in p.unions
    ]
    exports = (
        [e.name for e in model.enums]
        + [c.name for c in model.structs]
        + [c.name for c in model.messages]
        + [u.name for u in p.unions]
        + [u.types_name for u in p.unions]
        + [names.MESSAGE_TYPES, names.MESSAGE_BASE, names.OBJECT_BASE]
    )
    enum_bases = sorted({e.base for e in model.enums}) or ["StrEnum"]
    intro = docstring(
        "Each class is tagged with its wire ``type`` (readable as ``message.type``), takes keyword "
        "arguments only, and leaves out of the wire what is absent (``UNSET``) or equal to its "
        "default. The unions (each with a ``*_TYPES`` set of its wire types) name what each sender "
        "may send, and the messages a field set or an enum of message types groups."
    )
    return _TEMPLATES.get_template("messages.py.j2").render(
        header=header,
        p=p,
        intro=intro,
        enums=model.enums,
        enum_bases=enum_bases,
        structs=model.structs,
        messages=model.messages,
        unions=unions,
        exports=_sorted_all(exports),
        **_message_imports(model),
    )


def _checks(model: PyModel, header: str) -> str:
    p = model.protocol
    body = "\n".join(line for c in model.checks for line in c.body)
    rule_names = sorted({name for c in model.checks for name in c.rules})
    constant_imports = sorted(
        c.py_name for c in p.constants if re.search(rf"\b{c.py_name}\b", body)
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
    senders = []
    for s in p.senders:
        result = s.union_name + (f" | {names.UNKNOWN_MESSAGE}" if s.accepts_unknown else "")
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
        + ([names.UNKNOWN_MESSAGE] if any(s.accepts_unknown for s in p.senders) else [])
    )
    error_names = {e.code: e.py_name for e in p.errors}
    return _TEMPLATES.get_template("codec.py.j2").render(
        header=header,
        p=p,
        senders=senders,
        all_results=all_results,
        decode_codes=[(key, error_names[code]) for key, code in p.decode_errors.items()],
        field_codes=[(mtype, path, error_names[code]) for mtype, path, code in model.field_codes],
        message_imports=sorted(
            {s.union_name for s in p.senders}
            | {s.envelope_name for s in p.senders if s.envelope_name is not None}
        ),
    )


def _frames(p: Protocol, header: str) -> str:
    frames = build_frames(p)
    views = []
    for fr in frames:
        decode, encode = names.frame_functions(fr.name, only=len(frames) == 1)
        expect = next(
            f.name
            for frame in p.frames
            if frame.name == fr.name
            for f in frame.header
            if f.enum is not None
        )
        views.append(
            Proxy(
                fr,
                decode=decode,
                encode=encode,
                expect=names.expected_argument(expect),
                expect_field=expect,
            )
        )
    frame_enums = sorted(
        {f.enum.name for frame in p.frames for f in frame.header if f.enum is not None}
    )
    enum_sets = [(names.enum_values(e), e) for e in frame_enums]
    exports = []
    for view in views:
        exports += [view.name, view.size_constant, view.decode, view.encode]
        exports += [const for const, _, _, _ in view.flags]
    return _TEMPLATES.get_template("frames.py.j2").render(
        header=header,
        p=p,
        frames=views,
        frame_enums=frame_enums,
        enum_sets=enum_sets,
        exports=_sorted_all(exports),
    )


def _roles(p: Protocol, header: str) -> str:
    model = build_roles(p)
    exports = [c for r in model.roles for c in (r.sends_class, r.receives_class)]
    intro = docstring(
        "A hand-written adapter inherits its role's mixins: the ``*Sends`` one gives it a typed "
        "send method per message the role may send (keyword arguments: the message's own "
        "fields; the core adds the envelope), the ``*Receives`` one a typed ``on()`` that takes "
        "only the types the other end sends and calls a handler with that class. A message of "
        "the wrong direction has no method, and ``on()`` refuses its type."
    )
    return _TEMPLATES.get_template("roles.py.j2").render(
        header=header,
        p=p,
        intro=intro,
        roles=model.roles,
        type_imports=model.type_imports,
        uses_unset=model.uses_unset,
        uses_datetime=model.uses_datetime,
        sent=names.SENT,
        send_hook=names.SEND_HOOK,
        on_hook=names.ON_HOOK,
        on=names.ON,
        exports=_sorted_all(exports),
    )


def _machines(p: Protocol, header: str) -> str:
    views = [machine_view(m) for m in p.machines]
    exports = [
        name
        for v in views
        for name in (
            v["State"],
            v["Input"],
            v["Action"],
            v["name"],
            *(g["name"] for g in v["groups"]),
        )
    ]
    return _TEMPLATES.get_template("machines.py.j2").render(
        header=header, p=p, machines=views, exports=_sorted_all(exports)
    )


def _statistics(p: Protocol, s: Statistics, header: str) -> str:
    return _TEMPLATES.get_template("statistics.py.j2").render(
        header=header, p=p, s=statistics_view(s), senders=[x.id for x in p.senders]
    )


def _init(p: Protocol, header: str, modules: dict[str, str]) -> str:
    imports = []
    exports = [names.UNKNOWN_MESSAGE, names.PROTOCOL_TITLE, names.SPEC_SHA256]
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
    define_version = names.PROTOCOL_VERSION not in exports
    if define_version:
        exports.append(names.PROTOCOL_VERSION)
    intro = docstring(p.description)
    return _TEMPLATES.get_template("_api.py.j2").render(
        header=header,
        p=p,
        intro=intro,
        frames=bool(p.frames),
        first_sender=p.senders[0].id,
        imports=imports,
        define_version=define_version,
        exports=_sorted_all(exports),
    )


def _package_stub(header: str, folder: str, module: str | None) -> str:
    return _TEMPLATES.get_template("__init__.pyi.j2").render(
        header=header,
        folder=folder.rstrip("/"),
        module=module and folder.rstrip("/").replace("/", ".") + "." + module,
    )


def package_stub() -> Output:
    """The type checkers' marker that makes ``generated/voxwire`` a regular package too."""
    path = "generated/voxwire/__init__.pyi"
    header = (
        "# Generated by `python -m codegen generate`.\n"
        "# Do not edit: change codegen/templates, then regenerate.\n"
    )
    return Output(path, _format_python(path, _package_stub(header, "voxwire", None)))
