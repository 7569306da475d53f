"""One fuzzing run: inputs per decoder, counted by verdict, with every finding kept once."""

from __future__ import annotations

import resource
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fuzz.oracle import Finding
from fuzz.targets import Fuzzed

__all__ = ["Report", "TargetReport", "run"]


@dataclass
class TargetReport:
    """What one decoder did with its inputs."""

    name: str
    inputs: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    findings: dict[tuple[str, str], Finding] = field(default_factory=dict)
    seconds: float = 0.0
    slowest: float = 0.0
    """The most CPU time one input took, in seconds."""

    def count(self, kind: str) -> int:
        """How many inputs broke the oracle in this way."""
        return sum(f.count for f in self.findings.values() if f.kind == kind)


@dataclass
class Report:
    """A whole run, decoder by decoder."""

    seed: int
    targets: list[TargetReport]
    max_rss_kib: int = 0

    @property
    def ok(self) -> bool:
        return not any(t.findings for t in self.targets)

    @property
    def inputs(self) -> int:
        return sum(t.inputs for t in self.targets)

    def table(self) -> str:
        """The run as a Markdown table (what docs/fuzzing.md shows)."""
        lines = [
            "| decoder | inputs | accepted | refused | escapes | round-trip failures | "
            "verdict differences | most CPU for one input |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for t in self.targets:
            accepted = t.verdicts["accepted"]
            lines.append(
                f"| {t.name} | {t.inputs:,} | {accepted:,} | {t.inputs - accepted:,} | "
                f"{t.count('escape'):,} | {t.count('round-trip') + t.count('encode'):,} | "
                f"{t.count('verdict'):,} | {t.slowest * 1000:.1f} ms |"
            )
        return "\n".join(lines)


def run(
    targets: Sequence[Fuzzed],
    inputs: int,
    *,
    seed: int = 0,
    time_bound: float = 1.0,
    seconds: float | None = None,
    progress: Callable[[TargetReport], None] | None = None,
) -> Report:
    """Feed ``inputs`` mutated inputs to each target (or as many as ``seconds`` allow each)."""
    reports = []
    for target in targets:
        make, judge = target.build(seed, time_bound)
        report = TargetReport(target.name)
        started = time.perf_counter()
        deadline = started + seconds if seconds is not None else None
        for i in range(inputs):
            data = make()
            begun = time.process_time()
            outcome = judge(data)
            report.slowest = max(report.slowest, time.process_time() - begun)
            report.inputs += 1
            report.verdicts[outcome.label] += 1
            for finding in outcome.findings:
                known = report.findings.get(finding.signature)
                if known is None:
                    report.findings[finding.signature] = finding
                    if progress is not None:
                        progress(report)  # a new kind of finding is shown at once
                else:
                    known.count += 1
            if progress is not None and (i + 1) % 100_000 == 0:
                report.seconds = time.perf_counter() - started
                progress(report)
            if deadline is not None and i % 256 == 0 and time.perf_counter() > deadline:
                break
        report.seconds = time.perf_counter() - started
        reports.append(report)
        if progress is not None:
            progress(report)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return Report(seed=seed, targets=reports, max_rss_kib=rss)
