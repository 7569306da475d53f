"""Coverage-guided fuzzing with atheris (libFuzzer for Python), where it installs.

``pip install atheris`` ships wheels for CPython on x86-64 Linux; elsewhere it builds from
source against a clang with libFuzzer, or not at all. The oracle is the same as the
structure-aware run's; libFuzzer starts from the same seeds (the spec's examples and the
vectors) and keeps the inputs that reach new code.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from fuzz.seeds import load_seeds
from fuzz.targets import Fuzzed, Target

__all__ = ["fuzz_with_atheris"]


def fuzz_with_atheris(target: Fuzzed, seconds: float, seed: int, time_bound: float) -> int:
    """Run libFuzzer on one decoder for ``seconds``; an oracle finding stops it with the input
    saved (``crash-*``); returns libFuzzer's exit status otherwise."""
    if not isinstance(target, Target):
        print(f"atheris fuzzes the decoders, not {target.name}")
        return 2
    try:
        import atheris  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        print("atheris is not installed: pip install atheris (see docs/fuzzing.md)")
        return 2
    _make, judge = target.build(seed, time_bound)
    atheris.instrument_all()

    def test_one(data: bytes) -> None:
        outcome = judge(data)
        if outcome.findings:
            finding = outcome.findings[0]
            raise AssertionError(f"{target.name}: {finding.kind}: {finding.detail}")

    seeds = load_seeds(target.protocol)
    inputs = seeds.frames if target.sender is None else seeds.messages[target.sender]
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{target.name}-") as corpus:
        for i, data in enumerate(inputs):
            (Path(corpus) / f"seed-{i}").write_bytes(data)
        atheris.Setup(
            [
                sys.argv[0],
                f"-max_total_time={int(seconds)}",
                f"-seed={seed + 1}",
                "-max_len=70000",
                f"-timeout={int(time_bound) + 1}",
                corpus,
            ],
            test_one,
        )
        atheris.Fuzz()
    return 0
