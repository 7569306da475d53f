"""The generated checks: the rules of a class that its typed decoding cannot carry.

msgspec enforces a field's type, range, length and pattern while it decodes (:mod:`codegen.pymodel`
spells them as ``Meta``); UTF-8 byte limits, blank text, uniqueness, rules across fields and the
nesting bound of free-form values are checked by a generated function each class runs when it is
built. :class:`CheckBuilder` writes each function's body, and the inline tests that let a
message skip the call where they prove the rules hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from codegen import names
from codegen.ir import Field, FieldSet, Protocol, Rule, TypeRef
from codegen.pytext import bound_literal, docstring

__all__ = ["CheckBuilder", "PyCheck"]


@dataclass(frozen=True)
class PyCheck:
    function: str
    class_name: str
    message_type: str | None
    doc: list[str]
    body: list[str]
    """Indented lines of the function body."""
    rules: list[str]
    """The value rules of ``voxwire._rules`` the body calls."""
    fast: list[str] | None
    """Inline tests on ``self`` that, all true, prove the rules hold (``PyClass.check_when``)."""


class CheckBuilder:
    """The checks of one protocol's classes, and the error codes its fields use."""

    def __init__(self, protocol: Protocol) -> None:
        self.p = protocol
        self.error_codes = {e.code: e.py_name for e in protocol.errors}
        self.structs = {s.name: s for s in protocol.structs}
        self._members: dict[str, tuple[tuple[Field, ...], tuple[Rule, ...]]] = {
            **{s.name: (s.fields, s.rules) for s in protocol.structs},
            **{fs.class_name: (fs.fields, ()) for fs in protocol.field_sets},
            **{s.envelope_name: (s.envelope, ()) for s in protocol.senders if s.envelope_name},
            **{m.class_name: (m.fields, m.rules) for m in protocol.messages},
        }
        self._checked: dict[str, bool] = {}
        self._rules_called: set[str] = set()
        """The value rules the check being built calls."""

    def _needs(self, name: str) -> bool:
        """Whether a class has rules its typed decoding cannot carry (memoised)."""
        if name not in self._checked:
            fields, rules = self._members[name]
            self._checked[name] = bool(rules) or any(self._field_needs(f) for f in fields)
        return self._checked[name]

    def _field_needs(self, f: Field) -> bool:
        element = f.type.element
        own = f.max_bytes is not None or f.min_bytes is not None or f.not_blank
        own = own or f.unique_by is not None
        if element.kind == "struct" and element.struct is not None:
            return own or self._needs(element.struct)
        return own

    def _code(self, code: str | None, default: str) -> str:
        code_name = self.error_codes[code or self.p.decode_errors[default]]
        return f"{names.ERRORS_MODULE}.{names.ERROR_CODE}.{code_name}"

    def _free_form(self, ref: TypeRef) -> bool:
        """Whether a value of type ``ref`` may hold any JSON, nested to any depth."""
        if ref.kind in ("object", "any"):
            return True
        if ref.item is not None:
            return self._free_form(ref.item)
        if ref.kind == "struct" and ref.struct is not None:
            return any(self._free_form(f.type) for f in self._members[ref.struct][0])
        return False

    def check(
        self,
        name: str,
        message_type: str | None,
        fields: tuple[Field, ...],
        rules: tuple[Rule, ...],
        base: FieldSet | None = None,
        free_form: tuple[Field, ...] = (),
    ) -> PyCheck | None:
        """A class's check; a message's also bounds the nesting of its free-form values
        (``free_form``: all its fields), which its typed decoding cannot bound."""
        deep = [f for f in free_form if self._free_form(f.type)]
        if not self._needs(name) and not deep:
            return None
        self._rules_called = set()
        body: list[str] = []
        if base is not None and self._needs(base.class_name):
            body.append(f"{names.check_function(base.class_name)}(value, path, message_type)")
        for f in fields:
            body.extend(self._field_lines(f))
        if rules:
            body.extend(self._rule_lines(fields, rules))
        for f in deep:
            body.extend(self._nesting_lines(f))
        what = f"``{message_type}``" if message_type else f"``{name}``"
        return PyCheck(
            function=names.check_function(name),
            class_name=name,
            message_type=message_type,
            doc=docstring(f"Check the rules of {what} that its typed decoding cannot carry."),
            body=body,
            rules=sorted(self._rules_called),
            fast=self._fast(fields, rules, base, deep),
        )

    # -- the inline tests a message's __post_init__ runs before its check ----------------------

    def _fast(
        self,
        fields: tuple[Field, ...],
        rules: tuple[Rule, ...],
        base: FieldSet | None,
        deep: list[Field],
    ) -> list[str] | None:
        """Tests on ``self``, each cheaper than its rule and true only where the rule holds
        (a text of at most limit/4 characters is within limit UTF-8 bytes); ``None`` when a
        rule has no such test (items of arrays, nested objects with checks of their own), and
        the check then always runs."""
        tests: list[str] = []
        if base is not None and self._needs(base.class_name):
            inherited = self._fast(self._members[base.class_name][0], (), None, [])
            if inherited is None:
                return None
            tests += inherited
        for f in fields:
            test = self._fast_field(f)
            if test is None:
                return None
            tests += test
        for r in rules:
            tests.append(self._fast_rule(fields, r))
        for f in deep:
            if f.type.kind == "struct":
                return None
            value = f"self.{f.py_name}"
            limit = self.p.max_nesting_depth
            rule = names.rule("free_form_problem")
            shallow = f'{rule}({value}, "$", ".{f.wire_name}", 2, {limit.py_name}) is None'
            if int(limit.value) > 2:  # a flat object in a field is 2 deep: one C call
                shallow = f"({names.rule('flat_object')}({value}) or {shallow})"
            tests.append(_or_absent(f, value, shallow))
        return tests

    def _fast_field(self, f: Field) -> list[str] | None:
        value = f"self.{f.py_name}"
        element = f.type.element
        if element.kind == "struct" and element.struct is not None and self._needs(element.struct):
            return None
        if f.type.kind in ("array", "map"):
            if element.kind == "string" and _text_rules(f):
                return None
            return [_or_absent(f, value, f"len({value}) < 2")] if f.unique_by else []
        if element.kind != "string" or f.has_const:
            return []
        tests = [_INLINE[rule].format(v=value, bound=bound) for rule, bound in _text_rules(f)]
        return [_or_absent(f, value, " and ".join(tests))] if tests else []

    def _fast_rule(self, fields: tuple[Field, ...], r: Rule) -> str:
        if r.kind in ("at_most_one_of", "exactly_one_of", "at_least_one_of", "min_fields"):
            candidates = r.fields if r.fields else tuple(f for f in fields if not f.required)
            count = " + ".join(
                "1" if f.required else f"(self.{f.py_name} is not UNSET)" for f in candidates
            )
            bound = {
                "at_most_one_of": "<= 1",
                "exactly_one_of": "== 1",
                "at_least_one_of": ">= 1",
                "min_fields": f">= {r.count}",
            }[r.kind]
            return f"{count} {bound}"
        assert r.field is not None and r.other is not None
        same = "is" if r.equals is None or isinstance(r.equals, bool) else "=="
        return (
            f"(self.{r.field.py_name} in (UNSET, None, False) "
            f"or self.{r.other.py_name} {same} {r.equals!r})"
        )

    def _nesting_lines(
        self, f: Field, owner: str = "value", where: str = "", depth: int = 2
    ) -> list[str]:
        """The bound on the nesting of a free-form value, found through nested objects; the
        message is 1 deep, its fields' values 2."""
        value = f"{owner}.{f.py_name}"
        where = f"{where}.{f.wire_name}"
        guard = _present(f, value)
        if f.type.kind == "struct" and f.type.struct is not None:
            inner = [
                line
                for g in self._members[f.type.struct][0]
                if self._free_form(g.type)
                for line in self._nesting_lines(g, value, where, depth + 1)
            ]
            if guard:
                return [f"if {' and '.join(guard)}:", *("    " + line for line in inner)]
            return inner
        limit = self.p.max_nesting_depth.py_name
        call = f'{self._rule("free_form_problem")}({value}, path, "{where}", {depth}, {limit})'
        code = self._code(None, "malformed")
        return [  # not `problem`: the other rules' problem is a str, this one a (path, detail)
            f"if {' and '.join([*guard, f'(too_deep := {call}) is not None'])}:",
            f"    raise {self._error}({code}, too_deep[1], path=too_deep[0], "
            "message_type=message_type)",
        ]

    @property
    def _error(self) -> str:
        """The exception the checks raise, spelled through the errors module."""
        return f"{names.ERRORS_MODULE}.{names.PROTOCOL_ERROR}"

    def _rule(self, function: str) -> str:
        """A value rule's function name, recorded for the check's imports."""
        self._rules_called.add(names.rule(function))
        return function

    def _raise(self, code: str, where: str, problem: str = "problem") -> str:
        path = f'f"{{path}}{where}"'
        error = self._error
        return f"raise {error}({code}, {problem}, path={path}, message_type=message_type)"

    def _chain(self, conditions: list[str], calls: list[str], code: str, where: str) -> list[str]:
        """``if <conditions> and (problem := a or b) is not None: raise ...``"""
        test = " and ".join([*conditions, f"(problem := {' or '.join(calls)}) is not None"])
        return [f"if {test}:", f"    {self._raise(code, where)}"]

    def _field_lines(self, f: Field) -> list[str]:
        """The checks of one field: a chain of rule calls per value, an item loop for arrays."""
        value = f"value.{f.py_name}"
        where = f".{f.wire_name}"
        guard = _present(f, value)
        invalid = self._code(f.code, "invalid_value")
        ref = f.type
        lines: list[str] = []
        if ref.kind in ("array", "map"):
            if f.unique_by is not None:
                keys = "item" if f.unique_by == "value" else f"item.{names.attribute(f.unique_by)}"
                lines += self._chain(
                    guard, [f"{self._rule('unique')}([{keys} for item in {value}])"], invalid, where
                )
            item_where = f"{where}[{{index}}]" if ref.kind == "array" else f"{where}.{{index}}"
            iterate = f"enumerate({value})" if ref.kind == "array" else f"{value}.items()"
            item = names.item_variable(f.py_name)  # one name per loop: each has its own type
            body = self._value_lines(f, item, item_where, invalid)
            if body:
                loop = [f"for index, {item} in {iterate}:", *("    " + line for line in body)]
                if guard:
                    loop = [f"if {' and '.join(guard)}:", *("    " + line for line in loop)]
                lines += loop
            return lines
        body = self._value_lines(f, value, where, invalid)
        if len(body) == 2 and body[0].startswith("if "):  # one chain: fold the guard in
            return [f"if {' and '.join([*guard, body[0][3:-1]])}:", body[1]]
        if body and guard:
            return [f"if {' and '.join(guard)}:", *("    " + line for line in body)]
        return body

    def _value_lines(self, f: Field, value: str, where: str, invalid: str) -> list[str]:
        """Checks of one value (the field, or one item of an array or map)."""
        calls: list[str] = []
        element = f.type.element
        if element.kind == "string" and not f.has_const:
            for rule, bound in _text_rules(f):
                arguments = value if bound is None else f"{value}, {bound}"
                calls.append(f"{self._rule(rule)}({arguments})")
        if calls:
            return self._chain([], calls, invalid, where)
        if element.kind == "struct" and element.struct is not None and self._needs(element.struct):
            return [
                f'{names.check_function(element.struct)}({value}, f"{{path}}{where}", message_type)'
            ]
        return []

    def _rule_lines(self, fields: tuple[Field, ...], rules: tuple[Rule, ...]) -> list[str]:
        lines: list[str] = []
        for r in rules:
            code = self._code(r.code, "invalid_value")
            if r.kind in ("at_most_one_of", "exactly_one_of", "at_least_one_of", "min_fields"):
                candidates = r.fields if r.fields else tuple(f for f in fields if not f.required)
                present = ", ".join(
                    f'"{f.wire_name}"'
                    if f.required
                    else f'*(("{f.wire_name}",) if value.{f.py_name} is not UNSET else ())'
                    for f in candidates
                )
                names_tuple = ", ".join(f'"{f.wire_name}"' for f in candidates)
                arguments = {
                    "at_most_one_of": f"({present},)",
                    "exactly_one_of": f"({present},), ({names_tuple},)",
                    "at_least_one_of": f"({present},), ({names_tuple},)",
                    "min_fields": f"({present},), {r.count}",
                }[r.kind]
                call = f"{self._rule(r.kind)}({arguments})"
            else:
                assert r.field is not None and r.other is not None
                f, other = r.field, r.other
                is_set = f"value.{f.py_name} not in (UNSET, None, False)"
                pair = f'("{f.wire_name}", "{other.wire_name}")'
                arguments = f"{is_set}, value.{other.py_name}, {r.equals!r}, {pair}"
                call = f"{self._rule('requires')}({arguments})"
            lines.append(f"if (problem := {call}) is not None:")
            detail = f'f"{{problem}}: {_escape(r.description)}"'
            lines.append(
                f"    raise {self._error}({code}, {detail}, path=path, message_type=message_type)"
            )
        return lines

    def field_codes(self) -> list[tuple[str, str, str]]:
        """(wire type, JSON path, error code) where a field's rules use their own code."""
        out: list[tuple[str, str, str]] = []

        def walk(fields: tuple[Field, ...], mtype: str, prefix: str, seen: tuple[str, ...]) -> None:
            for f in fields:
                path = f"{prefix}.{f.wire_name}"
                if f.code is not None:
                    out.append((mtype, path, f.code))
                element = f.type.element
                if element.kind == "struct" and element.struct and element.struct not in seen:
                    inner = self.structs[element.struct]
                    suffix = "[]" if f.type.kind == "array" else ""
                    walk(inner.fields, mtype, path + suffix, (*seen, element.struct))

        for m in self.p.messages:
            walk(m.fields, m.type, "$", ())
        return out


def _text_rules(f: Field) -> list[tuple[str, str | None]]:
    """The value rules of a text field (or of each text item), each with its bound if it has
    one, in the order the checks apply them."""
    rules: list[tuple[str, str | None]] = []
    if f.not_blank:
        rules.append(("not_blank", None))
    if f.min_bytes is not None:
        rules.append(("min_bytes", bound_literal(f.min_bytes)))
    if f.max_bytes is not None:
        rules.append(("max_bytes", bound_literal(f.max_bytes)))
    return rules


_INLINE: Final = {
    "not_blank": "{v} and not {v}.isspace()",
    "min_bytes": "len({v}) >= {bound}",  # a character is at least 1 UTF-8 byte
    "max_bytes": "len({v}) * 4 <= {bound}",  # and at most 4
}
"""Each text rule's inline test (``PyClass.check_when``), true only where the rule holds."""


def _or_absent(f: Field, value: str, test: str) -> str:
    """``test`` of field ``f``, or true when the field holds no value to check."""
    guard = _present(f, value)
    if not guard:
        return test
    absent = " or ".join(g.replace(" is not ", " is ") for g in guard)
    return f"({absent} or ({test}))" if " and " in test else f"({absent} or {test})"


def _escape(text: str) -> str:
    return (
        " ".join(text.split())
        .replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("{", "{{")
        .replace("}", "}}")
    )


def _present(f: Field, value: str) -> list[str]:
    """The conditions under which field ``f``, spelled ``value``, holds a value to check."""
    guard = []
    if not f.required and not f.has_default:
        guard.append(f"{value} is not UNSET")
    if f.nullable:
        guard.append(f"{value} is not None")
    return guard
