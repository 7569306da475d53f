"""The suite's timing-sensitive tests pass on a loaded machine.

The tests listed in ``tests/under_load.txt`` run in a pytest subprocess while one busy loop per
CPU keeps every CPU it may use busy (two CPUs, as in CI: the child and the loops are pinned to
them, so a larger machine is as loaded). Each of those tests judges time on the injectable clock
or allows the scheduling delay it measured (``tests/timing.py``); a fixed wall-time margin among
them fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

LISTED = Path(__file__).with_name("under_load.txt")
CPUS = 2
"""How many CPUs the run is pinned to, each kept busy by a loop."""
BUDGET = 240.0
"""Real seconds the loaded run may take (the suite's other worker runs another module beside it)."""


def listed() -> list[str]:
    """The node ids of ``under_load.txt`` (``#`` starts a comment)."""
    lines = (line.partition("#")[0].strip() for line in LISTED.read_text("utf-8").splitlines())
    return [line for line in lines if line]


def test_the_list_names_tests_that_exist() -> None:
    ids = listed()
    assert len(ids) == len(set(ids)) > 4
    for node in ids:
        path, _, name = node.partition("::")
        function = name.partition("[")[0]  # a parametrized test's id names its parameters
        assert f"def {function}(" in (ROOT / path).read_text("utf-8"), f"{node}: no such test"


def test_the_timing_sensitive_tests_pass_while_every_cpu_is_busy(tmp_path: Path) -> None:
    ids = listed()
    cpus = sorted(os.sched_getaffinity(0))[:CPUS]
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in cpus]
    try:
        for loop in loops:
            os.sched_setaffinity(loop.pid, cpus)
        suite = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:randomly",
                "-p",
                "no:cacheprovider",
                f"--basetemp={tmp_path / 'run'}",
                *ids,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        os.sched_setaffinity(suite.pid, cpus)  # before it starts a test: its children inherit
        try:
            out, _ = suite.communicate(timeout=BUDGET)
        except subprocess.TimeoutExpired:
            suite.kill()
            out, _ = suite.communicate()
            pytest.fail(f"the listed tests took more than {BUDGET:g} s under load:\n{out[-6000:]}")
        assert all(loop.poll() is None for loop in loops)  # busy all along
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    summary = out.strip().splitlines()[-1]  # all passed: none skipped, none deselected
    passed = re.fullmatch(r"(\d+) passed(, \d+ warnings?)? in .*", summary)
    assert suite.returncode == 0 and passed, out[-6000:]
    assert int(passed[1]) >= len(ids)  # a parametrized test runs each of its cases
