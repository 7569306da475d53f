"""The boundary pair of each limit of a field: a value at the limit (valid) and one past it
(invalid), each fitting the field's other rules, for ranges, lengths, UTF-8 byte counts,
patterns, blank text, constants, enums, array lengths and uniqueness.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from typing import Any

from codegen.cases.base import CaseBuilder, Mutation
from codegen.cases.validator import utf8_size
from codegen.ir import Bound, Field, TypeRef

__all__ = ["Limits"]

_CHARS = {"ascii": "a", "2-byte": "é", "3-byte": "€", "4-byte": "\U0001d11e"}
"""One character of each UTF-8 length, to cross a byte limit with the last character."""
_FILLERS = "a0A_-.x"


def _bound_text(bound: Bound) -> str:
    return bound.constant.name if bound.constant is not None else json.dumps(bound.value)


class Limits:
    """The boundary pairs of one field's limits: at the limit (valid), one past it (invalid)."""

    def __init__(self, gen: CaseBuilder, f: Field, case: Callable[..., bool], owner: str) -> None:
        self.gen = gen
        self.owner = owner
        self.f = f
        self.case = case
        self.invalid = f.code or gen.codes["invalid_value"]
        self.code_why = "code" if f.code else "decode_errors.invalid_value"

    def pair(
        self,
        check: str,
        bound: Any,
        good: list[tuple[str, Any]],
        bad: list[tuple[str, Any]],
        why: str,
        mutation: Callable[[Any], Mutation],
        *,
        code: str | None = None,
        code_why: str | None = None,
        path: str | None = None,
        prefix: str = "",
    ) -> None:
        covers = {"check": check, "bound": bound}
        code = code or self.invalid
        extra = {} if path is None else {"path": path}
        made_good = [
            self.case(f"{prefix}{check}/{v}", mutation(x), None, why, covers, **extra)
            for v, x in good
        ]
        made_bad = [
            self.case(
                f"{prefix}{check}/{v}",
                mutation(x),
                (check, code),
                f"{why}; {code_why or self.code_why}",
                covers,
                **extra,
            )
            for v, x in bad
        ]
        if not any(made_good) or not any(made_bad):
            self.gen.skip(
                "no boundary pair: no value at the limit fits the field's other rules",
                f"{self.owner}.{self.f.wire_name} {check}",
            )

    def scalar(
        self,
        ref: TypeRef,
        seeds: list[Any],
        put: Callable[[Any], Mutation],
        *,
        element: bool,
        path: str,
    ) -> None:
        """The limits of one value: the field, or item 0 of its array."""
        f = self.f
        prefix = "item/" if element else ""

        def pair(check: str, bound: Any, good: Any, bad: Any, why: str) -> None:
            self.pair(check, bound, good, bad, why, put, path=path, prefix=prefix)

        if f.has_const:
            pair(
                "const",
                f.const,
                [("at-limit", f.const)],
                [("other", _other_value(f.const))],
                f"const {json.dumps(f.const)}",
            )
            return
        kind = ref.kind
        if kind == "string":
            strings = [s for s in seeds if isinstance(s, str)]
            self.strings(strings[0] if strings else "", pair, element=element)
        elif kind in ("integer", "number"):
            for check, bound, step in (("minimum", f.minimum, -1), ("maximum", f.maximum, 1)):
                if bound is None:
                    continue
                at = bound.value
                past: Any = (
                    int(at) + step
                    if kind == "integer"
                    else math.nextafter(float(at), math.inf * step)
                )
                pair(
                    check, at, [("at-limit", at)], [("past", past)], f"{check}={_bound_text(bound)}"
                )
        elif kind == "enum" and ref.enum is not None:
            values = [v.value for v in ref.enum.values]
            good = [(f"value-{v}", v) for v in values]
            if ref.enum.open:
                for variant, value in [*good, ("new-value", "conformance_new_value")]:
                    self.case(
                        f"{prefix}enum/{variant}",
                        put(value),
                        None,
                        f"enum {ref.enum.name} (open: any string)",
                        {"check": "open_enum", "bound": ref.enum.name},
                        path,
                    )
                return
            pair(
                "enum",
                ref.enum.name,
                good,
                [("not-listed", _not_in(values))],
                f"enum {ref.enum.name} (closed)",
            )

    def strings(self, seed: str, pair: Callable[..., None], *, element: bool) -> None:
        """The text limits of one value (lengths only for a string field, not an item), each
        pair grown or cut from ``seed``, an example's value."""
        f = self.f
        v = self.gen.v

        def ok(text: str) -> bool:
            return not v.string_faults(text, f, element=element)

        def only(check: str) -> Callable[[str], bool]:
            return lambda text: all(c == check for c in v.string_faults(text, f, element=element))

        if f.max_bytes is not None:
            self._max_bytes(f.max_bytes, pair, ok)
        if f.min_bytes is not None:
            self._min_bytes(f.min_bytes, seed, pair, ok)
        if not element:
            for check, bound in (("max_length", f.max_length), ("min_length", f.min_length)):
                if bound is not None:
                    self._length(check, bound, seed, pair, ok, only)
        if f.pattern is not None:
            self._pattern(f.pattern, seed, pair, ok, only)
        if f.not_blank:
            good = [("not-blank", seed)] if seed and ok(seed) else [("not-blank", "a")]
            bad = [("space", " "), ("whitespace", " \t\n"), ("empty", "")]
            pair("not_blank", True, good, bad, "not_blank")

    @staticmethod
    def _max_bytes(bound: Bound, pair: Callable[..., None], ok: Callable[[str], bool]) -> None:
        n = int(bound.value)
        good: list[tuple[str, Any]] = []
        bad: list[tuple[str, Any]] = []
        for label, char in _CHARS.items():
            size = utf8_size(char)
            if n >= size and ok("a" * (n - size) + char):
                # The last character crosses the limit: fewer characters than bytes.
                good.append((f"at-limit-{label}", "a" * (n - size) + char))
                bad.append((f"over-{label}", "a" * (n - size + 1) + char))
        pair("max_bytes", n, good, bad, f"max_bytes={_bound_text(bound)} (UTF-8 bytes)")

    @staticmethod
    def _min_bytes(
        bound: Bound, seed: str, pair: Callable[..., None], ok: Callable[[str], bool]
    ) -> None:
        n = int(bound.value)
        at = _fit(seed, n, ok) if seed.isascii() else None
        good = [("at-limit", at or "a" * n)]
        bad = [("under", "a" * (n - 1))] if n >= 1 else []
        if n >= 2:
            good.append(("at-limit-2-byte", "a" * (n - 2) + "é"))
        pair("min_bytes", n, good, bad, f"min_bytes={_bound_text(bound)} (UTF-8 bytes)")

    @staticmethod
    def _length(
        check: str,
        bound: Bound,
        seed: str,
        pair: Callable[..., None],
        ok: Callable[[str], bool],
        only: Callable[[str], Callable[[str], bool]],
    ) -> None:
        n = int(bound.value)
        past_n = n + 1 if check == "max_length" else n - 1
        good: list[tuple[str, Any]] = []
        bad: list[tuple[str, Any]] = []
        at = _fit(seed, n, ok)
        if at is not None:
            good.append(("at-limit", at))
        if past_n >= 0:
            past = _fit(seed, past_n, only(check)) or (seed + "a" * past_n)[:past_n]
            bad.append(("over" if check == "max_length" else "under", past))
        astral = _CHARS["4-byte"] * n
        if check == "max_length" and n and ok(astral):
            # A character is a code point: one of U+10000 and above counts once.
            good.append(("at-limit-4-byte", astral))
            bad.append(("over-4-byte", astral + _CHARS["4-byte"]))
        pair(check, n, good, bad, f"{check}={_bound_text(bound)} (characters)")

    @staticmethod
    def _pattern(
        pattern: str,
        seed: str,
        pair: Callable[..., None],
        ok: Callable[[str], bool],
        only: Callable[[str], Callable[[str], bool]],
    ) -> None:
        good = [("matching", seed)] if seed and ok(seed) else []
        bad: list[tuple[str, Any]] = []
        for variant, texts in (
            ("trailing-newline", (seed + "\n", seed[:-1] + "\n")),
            ("leading-space", (" " + seed, " " + seed[1:])),
            ("trailing-space", (seed + " ", seed[:-1] + " ")),
        ):
            fits = [t for t in texts if re.fullmatch(pattern, t) is None and only("pattern")(t)]
            if fits and len(bad) < 2:
                bad.append((variant, fits[0]))
        pair("pattern", pattern, good, bad, f"pattern {pattern}")

    def array(self, seeds: list[Any], put: Callable[[Any], Mutation]) -> None:
        f = self.f
        gen = self.gen
        lists = [s for s in seeds if isinstance(s, list) and s]
        element = f.type.element
        if not lists and element.kind == "struct" and element.struct in gen.samples:
            lists = [[gen.samples[element.struct]]]
        items: list[Any] = lists[0] if lists else []

        def grown(count: int) -> list[tuple[str, Any]]:
            built = self.items(f, items, count)
            return [] if built is None else [("", built)]

        if f.max_length is not None:
            n = int(f.max_length.value)
            self.pair(
                "max_length",
                n,
                [("at-limit", x) for _, x in grown(n)],
                [("over", x) for _, x in grown(n + 1)],
                f"max_length={_bound_text(f.max_length)} (items)",
                put,
                code=f.code or gen.codes["too_many"],
                code_why="code" if f.code else "decode_errors.too_many",
            )
        if f.min_length is not None:
            n = int(f.min_length.value)
            self.pair(
                "min_length",
                n,
                [("at-limit", x) for _, x in grown(n)],
                [("under", x) for _, x in grown(n - 1)] if n > 0 else [],
                f"min_length={_bound_text(f.min_length)} (items)",
                put,
            )
        if f.unique_by is not None:
            self.pair(
                "unique_by",
                f.unique_by,
                [("distinct", x) for _, x in grown(2)],
                [("repeated", [items[0], items[0]])] if items else [],
                f"unique_by {f.unique_by}",
                put,
            )

    def items(self, f: Field, items: list[Any], count: int) -> list[Any] | None:
        """``count`` items repeated from ``items``, made unique where the field asks it."""
        if count <= 0:
            return []
        if not items:
            return None
        out = []
        key = f.unique_by
        element = f.type.element
        for i in range(count):
            item = copy.deepcopy(items[i % len(items)])
            if key is not None and i >= len(items):
                if key == "value" and isinstance(item, str):
                    new = _suffixed(item, i, self._fits(f, element=True))
                    if new is None:
                        return None
                    item = new
                elif isinstance(item, dict) and element.struct is not None:
                    kf = next(
                        x for x in self.gen.structs[element.struct].fields if x.wire_name == key
                    )
                    seed = item.get(key)
                    new = _suffixed(seed, i, self._fits(kf)) if isinstance(seed, str) else None
                    if new is None:
                        return None
                    item[key] = new
                else:
                    return None
            out.append(item)
        return out

    def _fits(self, f: Field, *, element: bool = False) -> Callable[[str], bool]:
        """Accepts a text that keeps every string rule of ``f``."""
        return lambda text: not self.gen.v.string_faults(text, f, element=element)


def _other_value(value: Any) -> Any:
    """A value of the same JSON type as ``value`` that differs from it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    return None


def _not_in(values: list[Any]) -> Any:
    """A value of the values' JSON type listed nowhere: the first, upper-cased where that works."""
    if all(isinstance(v, int) for v in values):
        return max(values) + 1
    first = str(values[0])
    for candidate in (first.upper(), first + "_x", "conformance_not_listed"):
        if candidate not in values:
            return candidate
    raise AssertionError("unreachable")


def _fit(seed: str, n: int, ok: Callable[[str], bool]) -> str | None:
    """A string of exactly ``n`` characters that ``ok`` accepts, grown or cut from ``seed``."""
    alphabet = "".join(dict.fromkeys(seed + _FILLERS))
    candidates = [seed[:n]] if len(seed) >= n else []
    candidates += [seed + c * (n - len(seed)) for c in alphabet if len(seed) < n]
    candidates += [c * n for c in alphabet]
    for text in candidates:
        if len(text) == n and ok(text):
            return text
    if len(seed) >= n or not ok(seed):
        return None
    # Grow one or two characters at a time, each step accepted (a tag's subtags, say).
    text = seed
    chunks = list(alphabet) + [a + b for a in "-_." for b in alphabet]
    while len(text) < n:
        for chunk in chunks:
            if len(text) + len(chunk) <= n and ok(text + chunk):
                text += chunk
                break
        else:
            return None
    return text


def _suffixed(seed: str, i: int, ok: Callable[[str], bool]) -> str | None:
    for text in (f"{seed}{i}", f"{seed}_{i}", seed[: max(0, len(seed) - len(str(i)))] + str(i)):
        if text != seed and ok(text):
            return text
    return None
