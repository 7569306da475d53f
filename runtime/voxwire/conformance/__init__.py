"""Run the conformance vectors against voxwire, or against another implementation.

```text
python -m voxwire.conformance                     # every vector against voxwire, in process
python -m voxwire.conformance --testee "CMD ..."  # against another implementation (stdin/stdout)
python -m voxwire.conformance --serve             # voxwire as a testee, for the line above
```

The vectors are JSON Lines shipped in the package (``voxwire/<protocol>/vectors.jsonl``, generated
from the spec, and ``vectors_handwritten.jsonl``); docs/conformance.md specifies their format and
the testee's line protocol. The parts: :mod:`voxwire.conformance.vectors` (reading the files),
:mod:`voxwire.conformance.answers` (voxwire's answers), :mod:`voxwire.conformance.judge`
(judging them, the report), :mod:`voxwire.conformance.testee` (another implementation as the
testee, voxwire as one) and :mod:`voxwire.conformance.sessions` (the session players); every
name of the first four is importable from here.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from voxwire._rules import json_equal
from voxwire.conformance.answers import answer, request
from voxwire.conformance.judge import Outcome, Report, check, run
from voxwire.conformance.testee import Testee, serve
from voxwire.conformance.vectors import (
    DEFAULT_EXPECTED_FAILURES,
    KINDS,
    PROTOCOLS,
    Case,
    VectorError,
    default_expected_failures,
    load_cases,
    load_expected_failures,
    read_vectors,
)

__all__ = [
    "DEFAULT_EXPECTED_FAILURES",
    "KINDS",
    "PROTOCOLS",
    "Case",
    "Outcome",
    "Report",
    "Testee",
    "VectorError",
    "answer",
    "check",
    "json_equal",
    "load_cases",
    "load_expected_failures",
    "main",
    "read_vectors",
    "request",
    "run",
    "serve",
]


# -- the command -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m voxwire.conformance",
        description="Run the conformance vectors against voxwire (default), against another "
        "implementation (--testee), or serve voxwire as a testee (--serve). Exit status: 0 when "
        "every case is as expected, 1 otherwise, 2 for a usage or file error.",
    )
    parser.add_argument(
        "--vectors",
        action="append",
        metavar="PATH",
        help="a vectors file (JSON Lines); repeatable; default: the files shipped with voxwire",
    )
    parser.add_argument("--protocol", action="append", help="run only this protocol (repeatable)")
    parser.add_argument("--kind", action="append", choices=KINDS, help="run only this kind")
    parser.add_argument("--match", metavar="TEXT", help="run only the cases whose id contains TEXT")
    parser.add_argument(
        "--testee",
        metavar="COMMAND",
        help="another implementation to run (one shell-quoted string)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="the testee's time to answer one case (default 10)",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="added to the first answer after the testee (re)starts (default 30)",
    )
    parser.add_argument(
        "--expected-failures",
        metavar="FILE",
        help="ids expected to fail, one a line; default: voxwire's own list without --testee, "
        "none with it",
    )
    parser.add_argument("--serve", action="store_true", help="be a testee: answer stdin on stdout")
    parser.add_argument("--list", action="store_true", help="print the selected case ids and exit")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also show the expected failures"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.serve:
        return serve(sys.stdin.buffer, sys.stdout.buffer)
    try:
        cases = load_cases(args.vectors)
        if args.expected_failures:
            path = Path(args.expected_failures)
            listed = load_expected_failures(path.read_text(encoding="utf-8"), str(path))
        elif args.testee:
            listed = {}
        else:
            listed = default_expected_failures()
    except (VectorError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    known = [c.id for c in cases]
    selected = [
        c
        for c in cases
        if (not args.protocol or c.protocol in args.protocol)
        and (not args.kind or c.kind in args.kind)
        and (not args.match or args.match in c.id)
    ]
    if args.list:
        for c in selected:
            print(c.id)
        return 0
    started = time.monotonic()
    if args.testee:
        testee = Testee(shlex.split(args.testee), args.timeout, args.startup_timeout)
        try:
            report = run(selected, testee.ask, listed, known)
        except VectorError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            testee.stop()
    else:
        report = run(selected, lambda case: answer(request(case)), listed, known)
    for line in report.lines(verbose=args.verbose):
        print(line)
    print(f"({time.monotonic() - started:.1f} s)")
    return 0 if report.ok else 1
