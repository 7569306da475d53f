"""What the fuzzer judges: each sender's JSON decoder of each protocol, OVP frames, and
``voxwire validate`` on captures (:mod:`fuzz.captures`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Protocol

from fuzz.captures import ValidateTarget
from fuzz.mutate import FrameMutator, MessageMutator
from fuzz.oracle import FrameOracle, MessageOracle, Outcome
from fuzz.seeds import load_seeds

__all__ = ["DECODERS", "TARGETS", "Fuzzed", "Target"]


@dataclass(frozen=True)
class Target:
    """One decoder: how to make its inputs and how to judge its answers, from one seed."""

    name: str
    protocol: str
    sender: str | None
    """None for the frame decoder."""

    def build(
        self, seed: int, time_bound: float
    ) -> tuple[Callable[[], bytes], Callable[[bytes], Outcome]]:
        """The input generator and the oracle, both drawing from ``seed`` and the name."""
        module = import_module(f"voxwire.{self.protocol}")
        seeds = load_seeds(self.protocol)
        inputs = random.Random(f"{seed}/{self.name}/inputs")
        judging = random.Random(f"{seed}/{self.name}/oracle")
        if self.sender is None:
            return FrameMutator(inputs, seeds.frames), FrameOracle(module, time_bound, judging)
        every_type = sorted({t for types in seeds.types.values() for t in types})
        mutator = MessageMutator(
            inputs, seeds.messages[self.sender], every_type, module.MAX_MESSAGE_BYTES
        )
        return mutator, MessageOracle(module, self.sender, time_bound, judging)


class Fuzzed(Protocol):
    """Anything the run feeds: a name, and its input generator and oracle from a seed."""

    @property
    def name(self) -> str: ...

    def build(
        self, seed: int, time_bound: float
    ) -> tuple[Callable[[], bytes], Callable[[bytes], Outcome]]: ...


DECODERS: tuple[Target, ...] = (
    Target("brisvox-server", "brisvox", "server"),
    Target("brisvox-agent", "brisvox", "agent"),
    Target("ovp-server", "ovp", "server"),
    Target("ovp-client", "ovp", "client"),
    Target("ovp-frames", "ovp", None),
)
"""Every decoder: each sender's JSON decoder of each protocol, and OVP's frame decoder."""

TARGETS: tuple[Fuzzed, ...] = (*DECODERS, ValidateTarget())
"""Every target, named as the command line names them: the decoders and ``voxwire validate``."""
