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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.brisvox_transport import (
    Throughput,
    brisvox_transport_table,
    run_brisvox_transport_benchmark,
)
from benchmarks.cluster import Cluster, cluster_table, run_cluster_benchmark
from benchmarks.codec import TARGETS, Group, run_codec_benchmarks
from benchmarks.resume import Resume, resume_table, run_resume_benchmark
from benchmarks.timing import LOOP_ENV, loop_name
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
        "loop": loop_name(),
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


def _transport_table(transport: dict[str, list[Level]], seconds: float, pacer: str) -> str:
    names = {"ovp": "voxwire OVP gateway", "echo": "bare websockets echo"}
    paced = "one shared pacer" if pacer == "shared" else "a sleep per call"
    lines = [
        f"## Concurrent real-time calls ({seconds:g} s of 50 fps audio each way per level once "
        f"all its calls are connected, load paced by {paced})",
        "",
        "| server | calls | set-up of all calls | frame echo p50 | p99 | frames lost | "
        "under 20 ms |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for server, ramp in transport.items():
        for lv in ramp:
            lost = lv.frames_expected - lv.frames_back
            ok = "yes" if lv.sustained else "no"
            lines.append(
                f"| {names[server]} | {lv.calls} | {lv.setup_ms:,.0f} ms | {lv.p50_ms:.1f} ms | "
                f"{lv.p99_ms:.1f} ms | {lost} | {ok} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.environ[LOOP_ENV] = args.loop  # the child servers inherit it
    rounds, size = (3, 300) if args.quick else (args.rounds, args.size)
    machine = _machine()
    print(f"voxwire benchmarks: {rounds} rounds of {size} messages")
    print(
        f"{machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, "
        f"{machine['loop']} loop\n"
    )
    groups = run_codec_benchmarks(rounds, size)
    for group in groups:
        print(_table(group), end="\n\n")
    verdicts: list[dict[str, Any]] = []
    missed = _codec_targets(groups, verdicts)
    transport = _Transport()
    if not args.no_transport:
        transport, transport_missed = _transport_runs(args.quick, args.pacer, verdicts)
        missed += transport_missed
    if args.json:
        report = _report(machine, rounds, size, groups, transport, args.pacer, verdicts)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    total = len(TARGETS) + (0 if args.no_transport else 3)
    print(f"\n{total - missed} of {total} targets met")
    return 0


def _parser() -> argparse.ArgumentParser:
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
    parser.add_argument(
        "--loop",
        choices=["asyncio", "uvloop"],
        default="asyncio",
        help="the event loop of every process (uvloop: pip install 'voxwire[uvloop]')",
    )
    parser.add_argument(
        "--pacer",
        choices=["sleep", "shared"],
        default="sleep",
        help="how the call load generator paces its frames: a sleep per call and frame, or "
        "one shared benchmarks.pacer.Pacer (default sleep)",
    )
    return parser


def _codec_targets(groups: list[Group], verdicts: list[dict[str, Any]]) -> int:
    """Print whether each codec target is met, add its verdict; the number missed."""
    by_title = {g.title: g for g in groups}
    print("## Targets\n")
    missed = 0
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
    return missed


@dataclass
class _Transport:
    """What the transport runs measured (nothing with ``--no-transport``)."""

    calls: dict[str, list[Level]] = field(default_factory=dict)
    brisvox: list[Throughput] = field(default_factory=list)
    resume: Resume | None = None
    cluster: Cluster | None = None


def _transport_runs(
    quick: bool, pacer: str, verdicts: list[dict[str, Any]]
) -> tuple[_Transport, int]:
    """Run the transport benchmarks, print them and whether each target is met, add its
    verdict; what they measured, and the number of targets missed."""
    missed = 0
    levels, seconds = ([10, 25], 1.0) if quick else ([25, 50, 100, 150, 200, 300, 400], 3.0)
    transport = run_transport_benchmarks(levels, seconds, shared_pacer=pacer == "shared")
    print(_transport_table(transport, seconds, pacer))
    gateway, echo = sustained(transport["ovp"]), sustained(transport["echo"])
    share = gateway / echo if echo else 0.0
    ok = share >= 1.0
    missed += not ok
    verdicts.append(
        {
            "group": "OVP transport",
            "target": "the gateway sustains at least as many calls as a bare echo",
            "ratio": round(share, 2),
            "met": ok,
        }
    )
    verdict = "met   " if ok else "MISSED"
    print(f"- {verdict} OVP transport: {gateway} calls vs {echo} for the bare echo ({share:.0%})")
    events, event_rounds = (5_000, 3) if quick else (20_000, 7)
    brisvox_transport = run_brisvox_transport_benchmark(events, event_rounds)
    print("\n" + brisvox_transport_table(brisvox_transport))
    ratio = brisvox_transport[0].per_second / brisvox_transport[-1].per_second
    ok = ratio >= 0.9
    missed += not ok
    verdicts.append(
        {
            "group": "Brisvox transport",
            "target": "EngineLink to AgentServer carries at least 0.9x the events per second "
            "of a bare websockets pair",
            "ratio": round(ratio, 2),
            "met": ok,
        }
    )
    print(f"- {'met   ' if ok else 'MISSED'} Brisvox transport: {ratio:.2f}x the bare pair")
    resume = run_resume_benchmark(3 if quick else 7)
    print("\n" + resume_table(resume))
    missed += not resume.completed
    verdicts.append(
        {
            "group": "OVP resume",
            "target": f"a resume that replays {resume.expected} events completes",
            "ratio": 1.0 if resume.completed else 0.0,
            "met": resume.completed,
        }
    )
    print(
        f"- {'met   ' if resume.completed else 'MISSED'} OVP resume: "
        + (f"{resume.seconds:.3f} s" if resume.completed else "did not complete")
    )
    cluster = run_cluster_benchmark(3 if quick else 7)
    print("\n" + cluster_table(cluster))
    return _Transport(transport, brisvox_transport, resume, cluster), missed


def _report(
    machine: dict[str, Any],
    rounds: int,
    size: int,
    groups: list[Group],
    found: _Transport,
    pacer: str,
    verdicts: list[dict[str, Any]],
) -> dict[str, Any]:
    """The results as JSON (``--json``, for docs/performance.md)."""
    transport, brisvox_transport = found.calls, found.brisvox
    resume, cluster = found.resume, found.cluster
    return {
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
                    "setup_ms": round(lv.setup_ms, 1),
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
        "resume": None
        if resume is None
        else {
            "events": resume.expected,
            "received": resume.received,
            "seconds": round(resume.seconds, 4) if resume.completed else None,
            "rounds": resume.rounds,
            "failed": resume.failed,
        },
        "cluster": None
        if cluster is None
        else {
            "events": cluster.events,
            "memory_append_ns": round(cluster.memory_append_ns),
            "redis_append_ns": None
            if cluster.redis_append_ns is None
            else round(cluster.redis_append_ns),
            "memory_read_ns": round(cluster.memory_read_ns),
            "redis_read_ns": None
            if cluster.redis_read_ns is None
            else round(cluster.redis_read_ns),
            "frames": cluster.frames,
            "direct_us": round(cluster.direct_us, 1),
            "relayed_us": round(cluster.relayed_us, 1),
        },
        "pacer": pacer,
        "targets": verdicts,
    }


if __name__ == "__main__":
    sys.exit(main())
