"""How spec prose and values are spelled in generated Python: docstrings wrapped to the line
length and their literals, a field's limits in words, a long string, a bound or a default as a
literal.

Every part of the Python view (:mod:`codegen.pymodel` and its siblings) and the reference pages
spell them the same way, from here.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Iterable

from codegen import names
from codegen.ir import JSON_SAFE_INTEGER, Bound, Constant, Field

__all__ = [
    "LINE_LENGTH",
    "bound_literal",
    "default_literal",
    "docstring",
    "docstring_literal",
    "limit_phrases",
    "string_literal",
    "wrap",
]

LINE_LENGTH = 100
"""The line length of generated Python (pyproject.toml: tool.ruff.line-length)."""


def docstring(*parts: str) -> list[str]:
    """The paragraphs of a docstring, whitespace folded; the filter ``doc`` wraps them."""
    paragraphs = []
    for part in parts:
        for paragraph in part.strip().split("\n\n"):
            text = " ".join(paragraph.split())
            if text:
                paragraphs.append(text.replace('"""', "'''").replace("\\", "\\\\"))
    return paragraphs


def wrap(paragraphs: list[str], indent: int) -> list[str]:
    """Paragraphs as lines that fit the line length at ``indent``, a blank line between."""
    width = LINE_LENGTH - indent - 6  # room for the quotes at both ends
    lines: list[str] = []
    for paragraph in paragraphs:
        if lines:
            lines.append("")
        lines.extend(textwrap.wrap(paragraph, width, break_on_hyphens=False) or [""])
    return lines


def limit_phrases(f: Field, constant: Callable[[Constant], str], quote: str) -> list[str]:
    """The limits of ``f`` in words ("≤ 4096 UTF-8 bytes (MAX_LINE_BYTES)", "not blank").

    ``constant`` spells a constant (a name in a docstring, a link in the reference), ``quote``
    marks code ("``" in reST docstrings, "`" in Markdown).
    """

    def bound(value: Bound, unit: str) -> str:
        named = f" ({constant(value.constant)})" if value.constant is not None else ""
        return " ".join(part for part in (str(value.value), unit) if part) + named

    out = []
    unit_len = "characters" if f.type.kind == "string" else "items"
    if f.has_const:
        out.append(f"always {quote}{json.dumps(f.const)}{quote}")
    if f.minimum is not None and f.minimum.value != -JSON_SAFE_INTEGER:
        out.append("≥ " + bound(f.minimum, ""))
    if f.maximum is not None and f.maximum.value != JSON_SAFE_INTEGER:
        out.append("≤ " + bound(f.maximum, ""))
    for value, sign, unit in (
        (f.min_length, "≥", unit_len),
        (f.max_length, "≤", unit_len),
        (f.min_bytes, "≥", "UTF-8 bytes"),
        (f.max_bytes, "≤", "UTF-8 bytes"),
    ):
        if value is not None:
            out.append(f"{sign} {bound(value, unit)}")
    if f.pattern is not None:
        out.append(f"matches {quote}{f.pattern}{quote}")
    if f.not_blank:
        out.append("not blank")
    if f.unique_by is not None:
        out.append("unique" if f.unique_by == "value" else f"unique {quote}{f.unique_by}{quote}")
    if f.type.element.kind == "integer" and not out:
        out.append("a JSON-safe integer")
    return out


def default_literal(f: Field) -> str:
    """The default as Python writes it: a float for a number field, even when the spec says 0."""
    return repr(float(f.default)) if f.type.kind == "number" else repr(f.default)


def bound_literal(bound: Bound) -> str:
    """A bound as generated code spells it: its constant's name, or the number."""
    if bound.constant is not None:
        return bound.constant.py_name
    if bound.value == JSON_SAFE_INTEGER:
        return names.JSON_SAFE_INTEGER
    if bound.value == -JSON_SAFE_INTEGER:
        return "-" + names.JSON_SAFE_INTEGER
    return repr(bound.value)


def docstring_literal(
    paragraphs: list[str], indent: int, args: Iterable[tuple[str, str]] = ()
) -> str:
    """A docstring literal: one line, or several with the closing quotes on their own line;
    ``args`` (name, text) become a Google-style ``Args:`` section."""
    lines = wrap(paragraphs, indent)
    entries = [
        textwrap.wrap(
            f"{name}: {text}",
            LINE_LENGTH - indent - 4,
            initial_indent="    ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
        for name, text in args
    ]
    if entries:
        lines += ["", "Args:", *(line for entry in entries for line in entry)]
    if len(lines) == 1:
        return f'"""{lines[0]}"""'
    pad = " " * indent
    body = ("\n" + pad).join(lines).replace("\n" + pad + "\n", "\n\n")
    return f'"""{body}\n{pad}"""'


def string_literal(text: str, indent: int) -> str:
    """A string literal that fits the line length: implicit concatenation in parentheses."""
    text = " ".join(text.split())
    width = LINE_LENGTH - indent - 8
    if len(repr(text)) <= 40:
        return repr(text)
    # Always parenthesized and wrapped: ruff joins the pieces again where one line fits.
    words = textwrap.wrap(text, width, break_on_hyphens=False, drop_whitespace=False)
    pad = " " * (indent + 4)
    return "(\n" + "\n".join(pad + repr(chunk) for chunk in words) + "\n" + " " * indent + ")"
