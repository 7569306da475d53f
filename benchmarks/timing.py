"""Timing that holds on a shared, noisy machine: interleaved rounds, medians, ratios; and the
event loop every asyncio benchmark runs on (asyncio's own, or uvloop with ``--loop uvloop``)."""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import random
import statistics
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["LOOP_ENV", "Contender", "Result", "loop_name", "measure", "run"]

LOOP_ENV = "VOXWIRE_BENCHMARK_LOOP"
"""``uvloop`` runs every benchmark process (this one and the servers it starts) on uvloop."""

T = TypeVar("T")


def loop_name() -> str:
    """The event loop this run uses: ``asyncio`` or ``uvloop``."""
    return "uvloop" if os.environ.get(LOOP_ENV) == "uvloop" else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the run's event loop (uvloop: ``pip install voxwire[uvloop]``)."""
    if loop_name() == "uvloop":
        uvloop = importlib.import_module("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    return asyncio.run(main)


@dataclass(frozen=True)
class Contender:
    """One way of doing the job: ``run(item)`` for each item of the corpus."""

    name: str
    run: Callable[[Any], Any]


@dataclass(frozen=True)
class Result:
    name: str
    ns_per_item: float
    """Median over the rounds."""
    spread: float
    """(max - min) / median of the rounds: how noisy the machine was."""

    @property
    def per_second(self) -> float:
        return 1e9 / self.ns_per_item


def measure(
    contenders: Sequence[Contender], corpus: Sequence[Any], rounds: int, seed: int = 0
) -> list[Result]:
    """Time each contender over the whole corpus ``rounds`` times, in a new order each round."""
    rng = random.Random(seed)
    samples: dict[str, list[float]] = {c.name: [] for c in contenders}
    for contender in contenders:  # warm up: caches, lazy imports, msgspec's type info
        for item in corpus[:200]:
            contender.run(item)
    order = list(contenders)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            rng.shuffle(order)
            for contender in order:
                run = contender.run
                start = time.perf_counter_ns()
                for item in corpus:
                    run(item)
                samples[contender.name].append((time.perf_counter_ns() - start) / len(corpus))
                # Untimed: what one contender left for the collector (a validator's cycles)
                # would otherwise slow the next one in the round.
                gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()
    results = []
    for contender in contenders:
        values = samples[contender.name]
        median = statistics.median(values)
        results.append(Result(contender.name, median, (max(values) - min(values)) / median))
    return results
