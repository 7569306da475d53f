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

from benchmarks.brisvox_transport import (
    Throughput,
    brisvox_transport_table,
    run_brisvox_transport_benchmark,
)
from benchmarks.codec import TARGETS, Group, run_codec_benchmarks
from benchmarks.transport import Level, run_transport_benchmarks, sustained

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


def _transport_table(transport: dict[str, list[Level]], seconds: float) -> str:
    names = {"ovp": "voxwire OVP gateway", "echo": "bare websockets echo"}
    lines = [
        f"## Concurrent real-time calls ({seconds:g} s of 50 fps audio each way per level)",
        "",
        "| server | calls | frame echo p50 | p99 | frames lost | under 20 ms |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for server, ramp in transport.items():
        for lv in ramp:
            lost = lv.frames_expected - lv.frames_back
            ok = "yes" if lv.sustained else "no"
            lines.append(
                f"| {names[server]} | {lv.calls} | {lv.p50_ms:.1f} ms | {lv.p99_ms:.1f} ms | "
                f"{lost} | {ok} |"
            )
    return "\n".join(lines) + "\n"


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
    parser.add_argument(
        "--no-transport",
        action="store_true",
        help="skip the transport runs (calls, Brisvox events)",
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
    transport: dict[str, list[Level]] = {}
    brisvox_transport: list[Throughput] = []
    if not args.no_transport:
        levels, seconds = ([10, 25], 1.0) if args.quick else ([25, 50, 100, 150, 200, 300], 3.0)
        transport = run_transport_benchmarks(levels, seconds)
        print(_transport_table(transport, seconds))
        gateway, echo = sustained(transport["ovp"]), sustained(transport["echo"])
        share = gateway / echo if echo else 0.0
        ok = share >= 0.85
        missed += not ok
        verdicts.append(
            {
                "group": "OVP transport",
                "target": "the gateway sustains at least 85% of the calls a bare echo does",
                "ratio": round(share, 2),
                "met": ok,
            }
        )
        verdict = "met   " if ok else "MISSED"
        print(
            f"- {verdict} OVP transport: {gateway} calls vs {echo} for the bare echo ({share:.0%})"
        )
        events, event_rounds = (5_000, 3) if args.quick else (20_000, 7)
        brisvox_transport = run_brisvox_transport_benchmark(events, event_rounds)
        print("\n" + brisvox_transport_table(brisvox_transport))
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
            "transport": {
                server: [
                    {
                        "calls": lv.calls,
                        "p50_ms": round(lv.p50_ms, 2),
                        "p99_ms": round(lv.p99_ms, 2),
                        "frames_lost": lv.frames_expected - lv.frames_back,
                        "sustained": lv.sustained,
                    }
                    for lv in ramp
                ]
                for server, ramp in transport.items()
            },
            "brisvox_transport": [
                {
                    "name": r.name,
                    "events": r.events,
                    "received": r.received,
                    "seconds": round(r.seconds, 4),
                    "per_second": round(r.per_second),
                    "vs_bare": round(r.per_second / brisvox_transport[-1].per_second, 3),
                    "rounds": r.rounds,
                    "lost": r.lost,
                }
                for r in brisvox_transport
            ],
            "targets": verdicts,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    total = len(TARGETS) + (0 if args.no_transport else 1)
    print(f"\n{total - missed} of {total} targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
