"""``python -m fuzz``: fuzz every decoder, print a table, exit 1 on any finding.

python -m fuzz                          # 10,000 inputs per decoder, seed 0
python -m fuzz --inputs 1000000         # the nightly run (docs/fuzzing.md)
python -m fuzz --target ovp-client --seconds 60 --seed 7
python -m fuzz --atheris --seconds 180  # coverage-guided, where atheris installs
python -m fuzz --differential           # the Python and TypeScript bindings, side by side
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fuzz.run import Report, TargetReport, run
from fuzz.targets import DECODERS, TARGETS

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=10_000, help="inputs per decoder")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    parser.add_argument(
        "--target",
        action="append",
        choices=[t.name for t in TARGETS],
        help="a decoder to fuzz (repeatable; default: all)",
    )
    parser.add_argument("--seconds", type=float, help="stop each decoder after this long")
    parser.add_argument(
        "--time-bound", type=float, default=2.0, help="seconds one input may take (default 2)"
    )
    parser.add_argument("--json", type=Path, help="also write the report here, as JSON")
    parser.add_argument(
        "--atheris", action="store_true", help="coverage-guided fuzzing with atheris instead"
    )
    parser.add_argument(
        "--differential",
        action="store_true",
        help="feed the same inputs to the TypeScript binding (node) and compare the answers",
    )
    args = parser.parse_args(argv)
    targets = [t for t in TARGETS if not args.target or t.name in args.target]
    if args.differential:
        from fuzz.differential import main as differential

        decoders = [t for t in DECODERS if t in targets]
        if len(decoders) < len(targets) and args.target:
            parser.error("--differential compares the decoders of both bindings, not validate")
        return differential(decoders, args.inputs, args.seed, args.seconds, args.json)
    if args.atheris:
        from fuzz.coverage import fuzz_with_atheris

        return fuzz_with_atheris(targets[0], args.seconds or 180.0, args.seed, args.time_bound)

    def progress(partial: TargetReport) -> None:
        _progress(partial)
        if args.json is not None:  # a long run can be read before it ends
            args.json.write_text(json.dumps(_as_json(Report(args.seed, [partial])), indent=2))

    report = run(
        targets,
        args.inputs,
        seed=args.seed,
        time_bound=args.time_bound,
        seconds=args.seconds,
        progress=progress,
    )
    print(report.table())
    _print_findings(report)
    if args.json is not None:
        args.json.write_text(json.dumps(_as_json(report), indent=2) + "\n")
    return 0 if report.ok else 1


def _progress(report: TargetReport) -> None:
    print(
        f"{report.name}: {report.inputs:,} inputs, {len(report.findings)} kinds of finding, "
        f"{report.seconds:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    for finding in report.findings.values():
        if finding.count == 1 and not finding.shown:
            finding.shown = True
            print(
                f"  new: {finding.kind}: {finding.detail}\n  input: {finding.data[:300]!r}",
                file=sys.stderr,
                flush=True,
            )


def _print_findings(report: Report) -> None:
    for target in report.targets:
        for finding in target.findings.values():
            print(f"\n{target.name}: {finding.kind} x{finding.count}: {finding.detail}")
            print(f"  input ({len(finding.data)} bytes): {finding.data[:300]!r}")


def _as_json(report: Report) -> dict[str, object]:
    return {
        "seed": report.seed,
        "max_rss_kib": report.max_rss_kib,
        "targets": [
            {
                "name": t.name,
                "inputs": t.inputs,
                "seconds": round(t.seconds, 1),
                "slowest_ms": round(t.slowest * 1000, 1),
                "verdicts": dict(t.verdicts.most_common()),
                "findings": [
                    {"kind": f.kind, "count": f.count, "detail": f.detail, "input": f.data.hex()}
                    for f in t.findings.values()
                ],
            }
            for t in report.targets
        ],
    }


if __name__ == "__main__":
    sys.exit(main())
