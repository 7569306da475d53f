"""The resolver's protocol-wide items: constants, enums, error codes and close codes.

These resolve first (error codes and constants before anything that names them) and stand on
their own; an error code's carriers, close code and end reason are checked last, once the
messages and close codes they name are resolved (:meth:`ItemResolver._error_facts`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from codegen import names
from codegen.ir import CloseCode, Constant, Enum, EnumValue, ErrorCode, Message
from codegen.loader import PathT
from codegen.resolver.ledger import Ledger

__all__ = ["ItemResolver"]


class ItemResolver(Ledger):
    def _error_codes(self) -> tuple[tuple[ErrorCode, ...], dict[str, str]]:
        """The error codes (each its facts unchecked yet) and the code of each decode error."""
        data = self.raw.data
        errors = tuple(self._error(e, ("errors", i)) for i, e in enumerate(data["errors"]))
        self._unique([e.code for e in errors], ("errors",), "error code", "code")
        self.error_codes = {e.code for e in errors}
        decode_errors = dict(data["decode_errors"])
        for klass, code in decode_errors.items():
            self._code(code, ("decode_errors", klass))
        return errors, decode_errors

    def _constants(self) -> tuple[Constant, ...]:
        constants = tuple(
            self._constant(c, ("constants", i)) for i, c in enumerate(self.raw.data["constants"])
        )
        self._unique([c.name for c in constants], ("constants",), "constant", "name")
        self.constants = {c.name: c for c in constants}
        return constants

    def _check_message_type_constants(
        self, constants: tuple[Constant, ...], messages: tuple[Message, ...]
    ) -> None:
        """A constant of unit ``message_types`` lists message types of this spec, each once."""
        types = {m.type for m in messages}
        for i, c in enumerate(constants):
            if c.unit != "message_types":
                continue
            path: PathT = ("constants", i, "value")
            if not isinstance(c.value, list) or not c.value:
                self.fail(path, f"{c.name}: a message_types constant lists message types")
                continue
            for j, value in enumerate(c.value):
                if value not in types:
                    self.fail((*path, j), f"{c.name}: unknown message type {value!r}")
            self._unique(
                [str(v) for v in c.value],
                path,
                "message type",
                None,
                [(*path, j) for j in range(len(c.value))],
            )

    def _close_codes(self) -> tuple[CloseCode, ...]:
        close_codes = tuple(
            self._close_code(c, ("close_codes", i))
            for i, c in enumerate(self.raw.data.get("close_codes", []))
        )
        self._unique([c.name for c in close_codes], ("close_codes",), "close code", "name")
        self._unique([str(c.code) for c in close_codes], ("close_codes",), "close code", "code")
        return close_codes

    def _constant(self, c: dict[str, Any], path: PathT) -> Constant:
        return Constant(
            name=c["name"],
            py_name=names.constant(c["name"]),
            value=c["value"],
            unit=c["unit"],
            group=c["group"],
            description=c["description"].strip(),
            env=c.get("env"),
            side=c.get("side"),
            source=c.get("source"),
            decisions=self._decisions(c, path, f"constant {c['name']}"),
        )

    def _enum(self, e: dict[str, Any], path: PathT) -> Enum:
        values = []
        kinds = {type(v["value"]) for v in e["values"]}
        if len(kinds) > 1:
            self.fail((*path, "values"), "values mix strings and integers")
        for i, v in enumerate(e["values"]):
            if isinstance(v["value"], int) and "name" not in v:
                self.fail((*path, "values", i), "an integer value needs a name")
            values.append(
                EnumValue(
                    v["value"],
                    names.enum_member(v["value"], v.get("name")),
                    v["description"].strip(),
                )
            )
        self._unique([str(v.value) for v in values], (*path, "values"), "enum value", "value")
        self._unique(
            [v.py_name for v in values],
            (*path, "values"),
            "enum member name",
            None,
            [(*path, "values", i) for i in range(len(values))],
        )
        return Enum(
            name=e["name"],
            description=e["description"].strip(),
            open=e.get("open", False),
            values=tuple(values),
            message_types=e.get("message_types", False),
            source=e.get("source"),
            decisions=self._decisions(e, path, f"enum {e['name']}"),
        )

    def _error(self, e: dict[str, Any], path: PathT) -> ErrorCode:
        return ErrorCode(
            code=e["code"],
            py_name=names.enum_member(e["code"], None),
            description=e["description"].strip(),
            used_in=e.get("used_in"),
            recoverable=e.get("recoverable"),
            carried_by=tuple(e.get("carried_by", ())),
            raised_by=e.get("raised_by"),
            end_reason=None,
            close_code=None,
            source=e.get("source"),
            decisions=self._decisions(e, path, f"error code {e['code']}"),
        )

    def _error_facts(
        self,
        error: ErrorCode,
        e: dict[str, Any],
        path: PathT,
        messages: tuple[Message, ...],
        close_codes: tuple[CloseCode, ...],
    ) -> ErrorCode:
        """``error`` with its carriers checked and its close code and end reason resolved
        (after the messages, close codes and enums they name)."""
        types = {m.type for m in messages}
        for i, carrier in enumerate(error.carried_by):
            if carrier != "http" and carrier not in types:
                self.fail((*path, "carried_by", i), f"unknown message type {carrier!r}")
        if "close_code" in e:
            close = next((c for c in close_codes if c.name == e["close_code"]), None)
            if close is None:
                self.fail((*path, "close_code"), f"unknown close code {e['close_code']!r}")
            else:
                error = dataclasses.replace(error, close_code=close)
        spelled = e.get("end_reason")
        if spelled is None:
            return error
        enum = self.enums.get(spelled["enum"])
        if enum is None:
            self.fail((*path, "end_reason", "enum"), f"unknown enum {spelled['enum']!r}")
            return error
        value = next((v for v in enum.values if v.value == spelled["value"]), None)
        if value is None:
            self.fail(
                (*path, "end_reason", "value"),
                f"{spelled['value']!r} is not a value of {enum.name}",
            )
            return error
        others = {e.get("end_reason", {}).get("enum") for e in self.raw.data["errors"]} - {None}
        if len(others) > 1:
            self.fail(
                (*path, "end_reason", "enum"), f"end reasons name several enums: {sorted(others)}"
            )
        return dataclasses.replace(error, end_reason=(enum, value))

    def _close_code(self, c: dict[str, Any], path: PathT) -> CloseCode:
        return CloseCode(
            name=c["name"],
            py_name=names.enum_member(c["name"], None),
            code=c["code"],
            description=c["description"].strip(),
            source=c.get("source"),
            decisions=self._decisions(c, path, f"close code {c['name']}"),
        )
