"""The resolver's messages: each message with its sender's envelope and its included field
sets, the senders' session roles, and the unions the generated code names (each sender's
messages, each included field set's, each enum of message types).
"""

from __future__ import annotations

from typing import Any

from codegen import names
from codegen.ir import Enum, Example, Field, Message, Sender, Union
from codegen.loader import PathT
from codegen.resolver.fields import FieldResolver

__all__ = ["MessageResolver"]


class MessageResolver(FieldResolver):
    def _envelopes(self, field_sets: dict[str, tuple[Field, ...]]) -> dict[str, tuple[Field, ...]]:
        """The fields every message of each sender carries (its included field sets)."""
        sender_data = self.raw.data["senders"]
        self._unique([s["id"] for s in sender_data], ("senders",), "sender", "id")
        envelopes: dict[str, tuple[Field, ...]] = {}
        for i, s in enumerate(sender_data):
            envelopes[s["id"]] = self._include(
                s.get("include", []), field_sets, ("senders", i, "include")
            )
        return envelopes

    def _messages(
        self, envelopes: dict[str, tuple[Field, ...]], field_sets: dict[str, tuple[Field, ...]]
    ) -> tuple[Message, ...]:
        messages = tuple(
            self._message(m, ("messages", i), envelopes, field_sets)
            for i, m in enumerate(self.raw.data["messages"])
        )
        self._unique([m.type for m in messages], ("messages",), "message type", "type")
        self._check_send_methods(messages)
        self._check_session_roles(messages)
        return messages

    def _check_send_methods(self, messages: tuple[Message, ...]) -> None:
        """What one sender sends has one typed send method a message, each named apart (a
        duplicate message type is reported as such, once)."""
        raw = self.raw.data["messages"]
        first: dict[str, int] = {}
        for i, m in enumerate(messages):
            first.setdefault(m.type, i)
        for s in self.raw.data["senders"]:
            sent = [
                i
                for i, m in enumerate(messages)
                if first[m.type] == i and s["id"] in m.senders and not m.stamped
            ]
            spelled = ["send_method" if "send_method" in raw[i] else "type" for i in sent]
            self._unique(
                [messages[i].send_method for i in sent],
                (),
                f"send method of {s['id']}",
                None,
                [("messages", i, key) for i, key in zip(sent, spelled, strict=True)],
            )

    def _class_names(
        self, messages: tuple[Message, ...], named: list[tuple[str, PathT]]
    ) -> dict[str, PathT]:
        """The Python class names in use (messages', enums', types', field sets'), where each is
        spelled; each name once."""
        # Messages against each other and against enums and types (duplicate message types and
        # type names are reported before, so each counts once here).
        classes: list[tuple[str, PathT]] = []
        for i, m in enumerate(messages):
            if m.type not in [x.type for x in messages[:i]]:
                spelled = "name" if "name" in self.raw.data["messages"][i] else "type"
                classes.append((m.class_name, ("messages", i, spelled)))
        for name, where in named:
            if where[0] != "frames" and name not in [n for n, w in classes if w[0] != "messages"]:
                classes.append((name, where))
        self._unique(
            [n for n, _ in classes], (), "Python class name", None, [w for _, w in classes]
        )
        return dict(classes) | {
            fs.class_name: ("field_sets", fs.name) for fs in self.field_sets.values()
        }

    def _senders(
        self, envelopes: dict[str, tuple[Field, ...]], messages: tuple[Message, ...]
    ) -> tuple[Sender, ...]:
        data = self.raw.data
        senders = tuple(
            Sender(
                id=s["id"],
                role=s.get("role", s["id"]),
                title=s["title"],
                description=s["description"],
                union_name=names.sender_union(s["id"]),
                accepts_unknown=s["unknown_types"] == "accept",
                envelope=envelopes[s["id"]],
                envelope_name=self._envelope_name(s),
                messages=tuple(m for m in messages if s["id"] in m.senders),
                decisions=self._decisions(s, ("senders", i), f"sender {s['id']}"),
            )
            for i, s in enumerate(data["senders"])
        )
        sender_ids = [s.id for s in senders]
        for i, m in enumerate(data["messages"]):
            for j, sender_id in enumerate(m["senders"]):
                if sender_id not in sender_ids:
                    self.fail(("messages", i, "senders", j), f"unknown sender {sender_id!r}")
        return senders

    def _include(
        self, wanted: list[str], sets: dict[str, tuple[Field, ...]], path: PathT
    ) -> tuple[Field, ...]:
        out: tuple[Field, ...] = ()
        for i, name in enumerate(wanted):
            if name not in sets:
                self.fail((*path, i), f"unknown field set {name!r}")
            else:
                out += sets[name]
        return out

    def _message(
        self,
        m: dict[str, Any],
        path: PathT,
        envelopes: dict[str, tuple[Field, ...]],
        field_sets: dict[str, tuple[Field, ...]],
    ) -> Message:
        envelope_sets = {tuple(envelopes.get(s, ())) for s in m["senders"]}
        if len(envelope_sets) > 1:
            self.fail((*path, "senders"), "senders with different envelopes cannot share a message")
        envelope = next(iter(envelope_sets))
        own = self._fields(m.get("fields", []), (*path, "fields"), f"message {m['type']}")
        included = self._include(m.get("include", []), field_sets, (*path, "include"))
        fields = envelope + included + own
        # Where each field comes from: its field set (envelope), the include entry, its own entry.
        envelope_names: list[str] = next(
            (
                s.get("include", [])
                for s in self.raw.data["senders"]
                if s["id"] in m["senders"] and envelopes[s["id"]] == envelope
            ),
            [],
        )
        paths: list[PathT] = [
            ("field_sets", name, j)
            for name in envelope_names
            for j in range(len(field_sets.get(name, ())))
        ]
        for k, name in enumerate(m.get("include", [])):
            paths += [(*path, "include", k)] * len(field_sets.get(name, ()))
        paths += [(*path, "fields", i) for i in range(len(own))]
        self._check_names(fields, paths)
        examples = tuple(
            Example(
                e["description"].strip(),
                e.get("source"),
                e["json"],
                self.raw.line((*path, "examples", i)),
            )
            for i, e in enumerate(m["examples"])
        )
        for i, example in enumerate(examples):
            if example.json.get("type") != m["type"]:
                self.fail(
                    (*path, "examples", i, "json", "type"),
                    f"example of {m['type']} has type {example.json.get('type')!r}",
                )
        sets = [*envelope_names, *m.get("include", [])]
        base = self.field_sets.get(sets[0]) if len(set(sets)) == 1 else None
        if m.get("stamped", False) and "send_method" in m:
            self.fail((*path, "send_method"), f"{m['type']} is stamped: it has no send method")
        return Message(
            base=base,
            stamped=m.get("stamped", False),
            send_method=names.send_method(m["type"], m.get("send_method")),
            session=m.get("session"),
            type=m["type"],
            class_name=m.get("name") or names.class_name(m["type"]),
            senders=tuple(m["senders"]),
            group=m["group"],
            summary=m["summary"].strip(),
            description=m.get("description", "").strip(),
            fields=fields,
            rules=self._rules(m.get("rules", []), fields, (*path, "rules")),
            examples=examples,
            source=m.get("source"),
            decisions=self._decisions(m, path, f"message {m['type']}"),
        )

    def _envelope_name(self, sender: dict[str, Any]) -> str | None:
        """The class of a sender's envelope: its one field set's, or one of its own for several."""
        included = sender.get("include", [])
        if not included:
            return None
        if len(included) == 1 and included[0] in self.field_sets:
            return self.field_sets[included[0]].class_name
        return names.envelope(sender["id"])

    def _check_session_roles(self, messages: tuple[Message, ...]) -> None:
        """A session role but ``event`` belongs to one message, which one sender sends; where a
        session has a ``start``, each sender has an ``event`` too."""
        roles = [(i, m.session) for i, m in enumerate(messages) if m.session not in (None, "event")]
        self._unique(
            [str(role) for _, role in roles],
            ("messages",),
            "session role",
            None,
            [("messages", i, "session") for i, _ in roles],
        )
        for i, role in roles:
            if len(messages[i].senders) != 1:
                self.fail(
                    ("messages", i, "session"),
                    f"a message with session role {role!r} has one sender, not "
                    f"{len(messages[i].senders)}",
                )
        if "start" in (role for _, role in roles):
            with_event = {s for m in messages if m.session == "event" for s in m.senders}
            for i, sender in enumerate(self.raw.data["senders"]):
                if sender["id"] not in with_event:
                    self.fail(
                        ("senders", i, "id"),
                        f"{sender['id']} sends no message with session role 'event': the "
                        "session vectors play one between the others",
                    )

    def _unions(
        self,
        senders: tuple[Sender, ...],
        messages: tuple[Message, ...],
        enums: tuple[Enum, ...],
        taken: dict[str, PathT],
    ) -> tuple[Union, ...]:
        """Each sender's messages, each message-included field set's, each enum of types'.

        ``taken``: the Python class names in use, where each is spelled; a union may not reuse one.
        """
        found: list[tuple[Union, PathT]] = [
            (self._union(s.union_name, f"Every message the {s.id} may send.", s.messages), where)
            for s, where in zip(
                senders, [("senders", i, "id") for i in range(len(senders))], strict=True
            )
        ]
        raw_messages = self.raw.data["messages"]
        for name in self.field_sets:
            members = tuple(
                m
                for m, raw in zip(messages, raw_messages, strict=True)
                if name in raw.get("include", [])
            )
            if members:
                listed = ", ".join(m.type for m in members)
                doc = f"Every message that carries the ``{name}`` field set: {listed}."
                union = self._union(names.field_set_union(name), doc, members)
                found.append((union, ("field_sets", name)))
        by_type = {m.type: m for m in messages}
        for i, e in enumerate(enums):
            if not e.message_types:
                continue
            missing = [str(v.value) for v in e.values if v.value not in by_type]
            if missing:
                self.fail(
                    ("enums", i, "message_types"),
                    f"{e.name} holds values that are no message type: {', '.join(missing)}",
                )
                continue
            doc = f"Every message whose type is a value of {e.name}."
            members = tuple(by_type[str(v.value)] for v in e.values)
            found.append(
                (self._union(names.enum_union(e.name), doc, members), ("enums", i, "name"))
            )
        for union, where in found:
            if union.name in taken:
                first = self.raw.line(taken[union.name])
                self.fail(where, f"the union {union.name} has the name of a class (line {first})")
        return tuple(union for union, _ in found)

    @staticmethod
    def _union(name: str, description: str, members: tuple[Message, ...]) -> Union:
        return Union(name, names.union_types(name), description, members)
