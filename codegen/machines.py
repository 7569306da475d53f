"""Each role's session state machine, as the spec states it (``sessions:``), resolved and checked.

A machine is binding-neutral data: states, named groups of states, inputs, actions and the
transitions ``state -> input -> (next state, actions)``. The generator prints it as a table for
every binding (``voxwire.<protocol>.machines`` in Python, ``<protocol>/machines.ts`` in
TypeScript), the docs draw it, and each binding's one step function runs it. Nothing here knows
a protocol: what a role does on an action is its core's business.

Checks (each problem named by file, line and path): a role is a sender's role; every id is
unique in its list; the initial state, every target, action, group member and cited decision
exists; the transitions name every state and only known inputs; every state can be reached
from the initial one; every input and action is used; ``receiving`` and ``sending`` groups are
present; a state with no way out is a final state and every other state has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from codegen import names
from codegen.loader import PathT, Problem, RawSpec, SpecError

__all__ = [
    "REQUIRED_GROUPS",
    "Machine",
    "MachineItem",
    "MachineTransition",
    "StateGroup",
    "machine_view",
    "resolve_machines",
]

REQUIRED_GROUPS: Final = ("receiving", "sending")
"""The groups every machine names: where the peer's messages are taken, and where the role sends."""


@dataclass(frozen=True)
class MachineItem:
    """A state, an input or an action: its id and what it means."""

    id: str
    summary: str


@dataclass(frozen=True)
class StateGroup:
    """A named set of states (in the machine's state order)."""

    id: str
    summary: str
    states: tuple[str, ...]


@dataclass(frozen=True)
class MachineTransition:
    """``source --input--> target``, running ``actions`` in order on the way."""

    source: str
    input: str
    target: str
    actions: tuple[str, ...]
    decision: str | None
    line: int
    """Where the spec writes it (problems about it name this line)."""


@dataclass(frozen=True)
class Machine:
    """One role's session rules."""

    protocol: str
    role: str
    summary: str
    source: str
    initial: str
    states: tuple[MachineItem, ...]
    groups: tuple[StateGroup, ...]
    inputs: tuple[MachineItem, ...]
    actions: tuple[MachineItem, ...]
    transitions: tuple[MachineTransition, ...]
    """In the spec's order: by state, then by input as written."""
    line: int
    """Where the spec writes the machine (``sessions[n]``)."""

    @property
    def final(self) -> tuple[str, ...]:
        """The states nothing leaves (no transition, or only back to themselves)."""
        leaving = {t.source for t in self.transitions if t.target != t.source}
        return tuple(s.id for s in self.states if s.id not in leaving)

    def group(self, group_id: str) -> StateGroup:
        return next(g for g in self.groups if g.id == group_id)

    def from_state(self, state: str) -> tuple[MachineTransition, ...]:
        return tuple(t for t in self.transitions if t.source == state)


def resolve_machines(
    raw: RawSpec, protocol_id: str, roles: set[str], decisions: set[str]
) -> tuple[Machine, ...]:
    """The ``sessions:`` of a schema-checked spec; raise :class:`SpecError` with every problem."""
    problems: list[Problem] = []
    machines = []
    seen: set[str] = set()
    for index, data in enumerate(raw.data.get("sessions", [])):
        path: PathT = ("sessions", index)
        checker = _Checker(raw, path, problems)
        if data["role"] not in roles:
            checker.fail(("role",), f"no sender has the role {data['role']!r} ({_listed(roles)})")
        if data["role"] in seen:
            checker.fail(("role",), f"a second machine for the role {data['role']!r}")
        seen.add(data["role"])
        machines.append(checker.machine(protocol_id, data, decisions))
    if problems:
        raise SpecError(problems)
    return tuple(machines)


def machine_view(m: Machine) -> dict[str, Any]:
    """What the machine templates of both bindings print: every name decided here."""
    member = names.machine_member
    return {
        "role": m.role,
        "summary": m.summary,
        "name": names.machine(m.role),
        "State": names.machine_states(m.role),
        "Input": names.machine_inputs(m.role),
        "Action": names.machine_actions(m.role),
        "initial": member(m.initial),
        "initial_id": m.initial,
        "states": [{"id": s.id, "member": member(s.id), "summary": s.summary} for s in m.states],
        "inputs": [{"id": i.id, "member": member(i.id), "summary": i.summary} for i in m.inputs],
        "actions": [{"id": a.id, "member": member(a.id), "summary": a.summary} for a in m.actions],
        "rows": [
            {
                "state": member(s.id),
                "id": s.id,
                "cells": [
                    {
                        "input": member(t.input),
                        "input_id": t.input,
                        "target": member(t.target),
                        "target_id": t.target,
                        "actions": [member(a) for a in t.actions],
                        "action_ids": list(t.actions),
                    }
                    for t in m.from_state(s.id)
                ],
            }
            for s in m.states
        ],
        "receiving": [member(s) for s in m.group("receiving").states],
        "sending": [member(s) for s in m.group("sending").states],
        "final": [member(s) for s in m.final],
        "groups": [
            {
                "id": g.id,
                "name": names.state_group(m.role, g.id),
                "summary": g.summary,
                "states": [member(s) for s in g.states],
                "state_ids": list(g.states),
            }
            for g in m.groups
        ],
        "receiving_ids": list(m.group("receiving").states),
        "sending_ids": list(m.group("sending").states),
        "final_ids": list(m.final),
    }


@dataclass
class _Checker:
    raw: RawSpec
    path: PathT
    problems: list[Problem]

    def fail(self, where: PathT, message: str) -> None:
        self.problems.append(self.raw.problem((*self.path, *where), message))

    def items(self, data: dict[str, Any], key: str) -> tuple[MachineItem, ...]:
        items = tuple(MachineItem(i["id"], i["summary"]) for i in data.get(key, []))
        seen: set[str] = set()
        for n, item in enumerate(items):
            if item.id in seen:
                self.fail((key, n, "id"), f"{item.id!r} is listed twice in {key}")
            seen.add(item.id)
        return items

    def machine(self, protocol_id: str, data: dict[str, Any], decisions: set[str]) -> Machine:
        states = self.items(data, "states")
        inputs = self.items(data, "inputs")
        actions = self.items(data, "actions")
        state_ids = [s.id for s in states]
        if data["initial"] not in state_ids:
            self.fail(("initial",), f"no state {data['initial']!r} ({_listed(state_ids)})")
        groups = self._groups(data, state_ids)
        transitions = self._transitions(data, state_ids, inputs, actions, decisions)
        machine = Machine(
            protocol_id,
            data["role"],
            " ".join(data["summary"].split()),
            data["source"],
            data["initial"],
            states,
            groups,
            inputs,
            actions,
            transitions,
            self.raw.line(self.path),
        )
        self._check_use(machine)
        return machine

    def _groups(self, data: dict[str, Any], state_ids: list[str]) -> tuple[StateGroup, ...]:
        groups = []
        for n, g in enumerate(data["groups"]):
            for m, state in enumerate(g["states"]):
                if state not in state_ids:
                    self.fail(("groups", n, "states", m), f"no state {state!r}")
            members = tuple(s for s in state_ids if s in g["states"])
            groups.append(StateGroup(g["id"], " ".join(g["summary"].split()), members))
        ids = [g.id for g in groups]
        for n, group_id in enumerate(ids):
            if group_id in ids[:n]:
                self.fail(("groups", n, "id"), f"{group_id!r} is listed twice in groups")
        for required in REQUIRED_GROUPS:
            if required not in ids:
                self.fail(("groups",), f"no {required!r} group (every machine names one)")
        return tuple(groups)

    def _transitions(
        self,
        data: dict[str, Any],
        state_ids: list[str],
        inputs: tuple[MachineItem, ...],
        actions: tuple[MachineItem, ...],
        decisions: set[str],
    ) -> tuple[MachineTransition, ...]:
        table: dict[str, dict[str, Any]] = data["transitions"]
        input_ids = {i.id for i in inputs}
        action_ids = {a.id for a in actions}
        for state in state_ids:
            if state not in table:
                self.fail(
                    ("transitions",), f"state {state!r} has no entry ({{}} if none leaves it)"
                )
        found = []
        for source, row in table.items():
            where: PathT = ("transitions", source)
            if source not in state_ids:
                self.fail(where, f"no state {source!r} ({_listed(state_ids)})")
                continue
            for event, cell in (row or {}).items():
                spot = (*where, event)
                if event not in input_ids:
                    self.fail(spot, f"no input {event!r} ({_listed(input_ids)})")
                    continue
                cell = {"to": cell} if isinstance(cell, str) else cell
                if cell["to"] not in state_ids:
                    self.fail((*spot, "to"), f"no state {cell['to']!r}")
                for n, action in enumerate(cell.get("do", [])):
                    if action not in action_ids:
                        self.fail((*spot, "do", n), f"no action {action!r}")
                decision = cell.get("decision")
                if decision is not None and decision not in decisions:
                    self.fail((*spot, "decision"), f"no decision {decision!r} in this spec")
                found.append(
                    MachineTransition(
                        source,
                        event,
                        cell["to"],
                        tuple(cell.get("do", [])),
                        decision,
                        self.raw.line((*self.path, *spot)),
                    )
                )
        return tuple(found)

    def _check_use(self, machine: Machine) -> None:
        reached = {machine.initial}
        frontier = [machine.initial]
        while frontier:
            state = frontier.pop()
            for t in machine.from_state(state):
                if t.target not in reached:
                    reached.add(t.target)
                    frontier.append(t.target)
        for n, item in enumerate(machine.states):
            if item.id not in reached:
                self.fail(
                    ("states", n), f"state {item.id!r} cannot be reached from the initial one"
                )
        used_inputs = {t.input for t in machine.transitions}
        for n, item in enumerate(machine.inputs):
            if item.id not in used_inputs:
                self.fail(("inputs", n), f"input {item.id!r} moves no state")
        used_actions = {a for t in machine.transitions for a in t.actions}
        for n, item in enumerate(machine.actions):
            if item.id not in used_actions:
                self.fail(("actions", n), f"action {item.id!r} is run by no transition")


def _listed(ids: Any) -> str:
    return "known: " + ", ".join(sorted(ids)) if ids else "none listed"
