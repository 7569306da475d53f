"""The resolver: a schema-checked spec to the IR (:mod:`codegen.ir`), every problem at once.

:func:`resolve` checks what a JSON Schema cannot (references, duplicates, sizes, anchored
patterns), collecting every problem before it raises :class:`~codegen.loader.SpecError`. Its
phases run in this order, each reading what the earlier ones resolved:

1. the protocol-wide items (:mod:`.items`): error codes, constants, enums;
2. the types (:mod:`.fields`): type names, field sets, nested types and their fields;
3. the messages (:mod:`.messages`): senders' envelopes, messages, class names, senders, unions;
4. the constants that list message types, close codes, then each error code's facts (its
   carriers, close code, end reason);
5. the frames (:mod:`.frames`) and the transport;
6. the checks across the whole spec (constants that the transport and the protocol repeat, the
   close codes acceptances move to, duplicate decision ids);
7. each role's session machine (:mod:`codegen.machines`), once the rest resolved;
8. what the statistics read (:mod:`codegen.statistics`), against the resolved messages.

The ledger (:mod:`.ledger`) is what all phases share: the problems and the decisions so far.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

from codegen.ir import CloseCode, Constant, Decision, Protocol
from codegen.loader import RawSpec, SpecError
from codegen.machines import resolve_machines
from codegen.resolver.frames import FrameResolver
from codegen.resolver.items import ItemResolver
from codegen.resolver.messages import MessageResolver
from codegen.statistics import resolve_statistics

__all__ = ["resolve"]


def resolve(raw: RawSpec) -> Protocol:
    """Resolve a schema-checked spec; raise :class:`SpecError` listing every problem."""
    protocol = _Resolver(raw).run()
    roles = {s.role for s in protocol.senders}
    decisions = {d.id for d in protocol.decisions}
    machines = resolve_machines(raw, protocol.id, roles, decisions)
    statistics = resolve_statistics(raw, protocol)
    return dataclasses.replace(protocol, machines=machines, statistics=statistics)


class _Resolver(ItemResolver, MessageResolver, FrameResolver):
    def run(self) -> Protocol:
        data = self.raw.data
        protocol = data["protocol"]
        errors, decode_errors = self._error_codes()
        constants = self._constants()
        enums = tuple(self._enum(e, ("enums", i)) for i, e in enumerate(data.get("enums", [])))
        self.enums = {e.name: e for e in enums}
        named = self._type_names()
        field_sets = self._field_sets()
        structs = self._structs()
        envelopes = self._envelopes(field_sets)
        messages = self._messages(envelopes, field_sets)
        taken = self._class_names(messages, named)
        senders = self._senders(envelopes, messages)
        unions = self._unions(senders, messages, enums, taken)
        self._check_message_type_constants(constants, messages)
        close_codes = self._close_codes()
        errors = tuple(
            self._error_facts(e, raw_error, ("errors", i), messages, close_codes)
            for i, (e, raw_error) in enumerate(zip(errors, data["errors"], strict=True))
        )
        frames = tuple(self._frame(f, ("frames", i)) for i, f in enumerate(data.get("frames", [])))
        transport, transport_decisions = self._transport()
        self._decisions(protocol, ("protocol",), "the protocol")
        self._decisions(data, (), "the protocol")
        self._decisions(data.get("statistics", {}), ("statistics",), "the statistics")
        max_bytes = self._check_repeated(transport)
        self._check_references(close_codes)
        if self.problems:
            raise SpecError(self.problems)
        assert max_bytes is not None
        return Protocol(
            id=protocol["id"],
            title=protocol["title"],
            version=protocol["version"],
            document=protocol["document"],
            notes=protocol.get("notes"),
            description=protocol["description"].strip(),
            max_message_bytes=max_bytes,
            senders=senders,
            field_sets=tuple(
                fs
                for fs in self.field_sets.values()
                if any(m.base is fs for m in messages)
                or any(s.envelope_name == fs.class_name for s in senders)
            ),
            unions=unions,
            errors=errors,
            decode_errors=decode_errors,
            close_codes=close_codes,
            constants=constants,
            enums=enums,
            structs=structs,
            messages=messages,
            frames=frames,
            transport=transport,
            transport_decisions=transport_decisions,
            decisions=tuple(sorted(self.decisions, key=lambda d: self.decision_lines[d.id])),
            spec_file=self.raw.display,
            spec_sha256=self.raw.sha256,
        )

    def _transport(self) -> tuple[dict[str, Any], tuple[Decision, ...]]:
        """The transport's facts (its decisions apart) and its decisions."""
        transport = dict(self.raw.data.get("transport", {}))
        transport_decisions = self._decisions(transport, ("transport",), "transport")
        transport.pop("decisions", None)
        self._check_networks(transport)
        return transport, transport_decisions

    def _check_networks(self, transport: dict[str, Any]) -> None:
        hosts = transport.get("plaintext_hosts")
        if not hosts:
            return
        for key, version in (("ipv4", 4), ("ipv6", 6), ("ipv6_zone", 6)):
            for i, text in enumerate(hosts[key]):
                try:
                    net = ipaddress.ip_network(text)
                except ValueError as exc:
                    self.fail(("transport", "plaintext_hosts", key, i), f"bad network: {exc}")
                    continue
                if net.version != version:
                    self.fail(
                        ("transport", "plaintext_hosts", key, i), f"not an IPv{version} network"
                    )

    def _check_repeated(self, transport: dict[str, Any]) -> Constant | None:
        """The constant ``protocol.max_message_bytes`` names (``None``: reported), and the facts
        that the transport and the protocol repeat checked against their constants."""
        protocol = self.raw.data["protocol"]
        max_bytes = self.constants.get(protocol["max_message_bytes"])
        if max_bytes is None or not isinstance(max_bytes.value, int):
            self.fail(
                ("protocol", "max_message_bytes"),
                f"unknown integer constant {protocol['max_message_bytes']!r}",
            )
        for key in ("subprotocol", "endpoint"):
            twin = self.constants.get(key)
            if key in transport and twin is not None and twin.value != transport[key]:
                self.fail(
                    ("transport", key),
                    f"transport.{key} {transport[key]!r} differs from "
                    f"the constant {key} {twin.value!r}",
                )
        version = self.constants.get("protocol_version")
        if version is not None and version.value != protocol["version"]:
            self.fail(
                ("protocol", "version"),
                f"protocol.version {protocol['version']!r} differs from the constant "
                f"protocol_version {version.value!r}",
            )
        return max_bytes

    def _check_references(self, close_codes: tuple[CloseCode, ...]) -> None:
        """The close codes acceptances move to exist; no decision id is taken twice."""
        close_names = {c.name for c in close_codes}
        for at, target in self.moves:
            if target.removeprefix("close_codes.") not in close_names:
                self.fail(at, f"moved to {target!r}, which is no close code of this spec")
        # Items resolve in no file order (senders after messages): a duplicate is the later one.
        sites = sorted(self.decision_sites, key=lambda site: site[0])
        self._unique([s[1] for s in sites], (), "decision id", None, [s[2] for s in sites])
