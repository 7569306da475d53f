"""``python -m benchmarks``: every comparison side by side in one run, as a table of ratios.

The machines are shared and noisy: every number is the median of interleaved rounds, and what
counts is the ratio to the other contenders measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.codec import TARGETS, Group, run_codec_benchmarks

__all__ = ["main"]


def _machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "msgspec": msgspec.__version__,
        "platform": platform.platform(terse=True),
    }


def _table(group: Group) -> str:
    lines = [
        f"## {group.title}",
        "",
        "| implementation | ns per message | messages per second | time vs voxwire |",
        "|---|---:|---:|---:|",
    ]
    for result in group.results:
        lines.append(
            f"| {result.name} | {result.ns_per_item:,.0f} | {result.per_second:,.0f} | "
            f"{group.ratio(result.name):.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--rounds", type=int, default=15, help="interleaved rounds per comparison (default 15)"
    )
    parser.add_argument("--size", type=int, default=2000, help="messages per corpus (default 2000)")
    parser.add_argument(
        "--quick", action="store_true", help="3 rounds of 300 messages: a smoke run"
    )
    parser.add_argument(
        "--json", type=Path, help="also write the results as JSON (for docs/performance.md)"
    )
    args = parser.parse_args(argv)
    rounds, size = (3, 300) if args.quick else (args.rounds, args.size)
    machine = _machine()
    print(f"voxwire benchmarks: {rounds} rounds of {size} messages")
    print(f"{machine['cpu']}, {machine['cores']} cores, Python {machine['python']}\n")
    groups = run_codec_benchmarks(rounds, size)
    for group in groups:
        print(_table(group), end="\n\n")
    by_title = {g.title: g for g in groups}
    print("## Targets\n")
    missed = 0
    verdicts = []
    for target in TARGETS:
        ok, ratio = target.check(by_title[target.group])
        missed += not ok
        verdicts.append(
            {
                "group": target.group,
                "target": target.description,
                "ratio": round(ratio, 2),
                "met": ok,
            }
        )
        verdict = "met   " if ok else "MISSED"
        print(f"- {verdict} {target.group}: {target.description} (measured {ratio:.2f}x)")
    if args.json:
        report = {
            "machine": machine,
            "rounds": rounds,
            "size": size,
            "groups": [
                {
                    "title": g.title,
                    "results": [
                        {
                            "name": r.name,
                            "ns": round(r.ns_per_item, 1),
                            "spread": round(r.spread, 3),
                            "ratio": round(g.ratio(r.name), 3),
                        }
                        for r in g.results
                    ],
                }
                for g in groups
            ],
            "targets": verdicts,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{len(TARGETS) - missed} of {len(TARGETS)} targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
