"""The code, generated and hand-written, passes ruff and mypy --strict as a wheel and as an editable
install lay it out (tests/test_package.py type-checks a user's program against both)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def _run(*command: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


LINTED = ("codegen", "runtime", "generated", "tests", "benchmarks", "fuzz", "hatch_build.py")


def test_ruff_lint_and_format() -> None:
    lint = _run("ruff", "check", *LINTED)
    assert lint.returncode == 0, lint.stdout
    form = _run("ruff", "format", "--check", *LINTED)
    assert form.returncode == 0, form.stdout


def test_mypy_strict_on_the_package_as_the_wheel_lays_it_out(tmp_path: Path) -> None:
    # One import package from two folders: check it merged, as users import it. The
    # benchmarks use it as users do, so they are checked against the same tree.
    merged = tmp_path / "voxwire"
    shutil.copytree(
        ROOT / "runtime" / "voxwire", merged, ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(
        ROOT / "generated" / "voxwire",
        merged,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__", "__init__.pyi"),
    )
    # The fuzzer builds the npm package with the generator's assemble(): codegen is beside them
    # as in the repository (checked as source, not as an untyped installed module).
    for tool in ("benchmarks", "fuzz", "codegen"):
        shutil.copytree(ROOT / tool, tmp_path / tool, ignore=shutil.ignore_patterns("__pycache__"))
    packages = ("-p", "voxwire", "-p", "benchmarks", "-p", "fuzz")
    done = _run("mypy", "--strict", "--no-incremental", *packages, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout


def test_mypy_strict_on_the_package_as_the_editable_install_lays_it_out(tmp_path: Path) -> None:
    # Run outside the repository, without its configuration: mypy finds voxwire where users'
    # checkers find it, through the install's path file (runtime/ and generated/ apart).
    done = _run(
        "mypy", "--strict", "--no-incremental", "--config-file", "", "-p", "voxwire", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout


def test_mypy_strict_on_codegen() -> None:
    done = _run("mypy", "--strict", "--no-incremental", "codegen", "hatch_build.py")
    assert done.returncode == 0, done.stdout + done.stderr
