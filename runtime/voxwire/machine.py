"""The one step function every role's session runs, over the tables generated from the spec.

Each role's session rules are data in its protocol's spec (``sessions:``, docs/spec-format.md):
states, inputs, actions and transitions. ``python -m codegen generate`` turns them into one
:class:`Machine` per role (``voxwire.ovp.machines.CLIENT_MACHINE``, ...); a role's core keeps its
state, asks :func:`step` where an input leads, and runs the transition's actions in order. This
module knows no protocol by name: the TypeScript binding has the same function over the same
tables (``runtime/machine.ts``).

```text
transition = step(CLIENT_MACHINE, ClientState.LIVE, ClientInput.LINK_LOST)
transition.target   # ClientState.DROPPED
transition.actions  # ()
```
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from voxwire.errors import SessionStateError

__all__ = ["Machine", "Taken", "Transition", "TransitionRefused", "step", "traced"]

S = TypeVar("S", bound=Enum)
I = TypeVar("I", bound=Enum)  # noqa: E741 (the table's own letters: state, input, action)
A = TypeVar("A", bound=Enum)


@dataclass(frozen=True, slots=True)
class Transition(Generic[S, A]):
    """One cell of a table: the state an input leads to, and the actions run on the way."""

    target: S
    actions: tuple[A, ...] = ()


@dataclass(frozen=True, slots=True)
class Machine(Generic[S, I, A]):
    """One role's session rules, as the spec states them (generated: never written by hand)."""

    protocol: str
    role: str
    initial: S
    transitions: Mapping[S, Mapping[I, Transition[S, A]]]
    """``transitions[state][input]``: an input a state does not list cannot happen in it."""
    receiving: frozenset[S]
    """The states in which the peer's messages are taken (elsewhere they are refused)."""
    sending: frozenset[S]
    """The states in which the role may send its messages."""
    final: frozenset[S]
    """The states nothing leaves."""


class TransitionRefused(SessionStateError):
    """An input the role's table does not allow in the session's state."""

    def __init__(self, machine: Machine[S, I, A], state: S, event: I) -> None:
        super().__init__(
            f"{machine.protocol} {machine.role}: {event.value!r} cannot happen "
            f"in state {state.value!r}"
        )
        self.state = state
        self.event = event


@dataclass(frozen=True, slots=True)
class Taken:
    """A transition a session took: ``protocol role: state --input--> target``."""

    protocol: str
    role: str
    state: str
    input: str
    target: str


_taken: list[Taken] | None = None
"""Where :func:`traced` collects; ``None`` (one comparison per transition) when nobody asks."""


def step(machine: Machine[S, I, A], state: S, event: I) -> Transition[S, A]:
    """Where ``event`` leads from ``state``, and what to do on the way.

    Raises :class:`TransitionRefused` (a :class:`~voxwire.errors.SessionStateError`) when the
    table has no such transition: the caller broke the session's rules, or the core has a bug.
    """
    found = machine.transitions[state].get(event)
    if found is None:
        raise TransitionRefused(machine, state, event)
    if _taken is not None:
        _taken.append(
            Taken(machine.protocol, machine.role, state.value, event.value, found.target.value)
        )
    return found


@contextmanager
def traced() -> Iterator[list[Taken]]:
    """Record every transition taken in this thread's block, in order (the conformance runner
    proves with it that a session case takes the transitions it claims to cover)."""
    global _taken
    outer, _taken = _taken, []
    try:
        yield _taken
    finally:
        _taken = outer
