"""The typed API the generator writes per role, under mypy --strict and pyright.

tests/typecheck/misuse.py marks each line that must be an error (``# error``): a misspelled or
mistyped send field, an envelope field passed by hand, a wrong-direction send, an unknown type in
``on()``, a handler typed for another message. Both checkers must flag exactly those lines, and
nothing in tests/typecheck/correct.py. The samples use minimal stub adapters
(tests/typecheck/stubs.py) and the real ones: OVPClient, GatewaySession, AgentSession, EngineLink.
The package is checked as the wheel lays it out (runtime and generated merged), as users import
it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SAMPLES = ROOT / "tests" / "typecheck"
PYRIGHT_VERSION = "1.1.414"
PYRIGHT_PREFIX = ROOT / ".cache" / "pyright"
"""Where the test installs pyright from npm (gitignored)."""


def _marked(path: Path) -> set[int]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {number for number, line in enumerate(lines, 1) if line.rstrip().endswith("# error")}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("typed-api")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "runtime" / "voxwire", root / "voxwire", ignore=ignore)
    shutil.copytree(
        ROOT / "generated" / "voxwire", root / "voxwire", dirs_exist_ok=True, ignore=ignore
    )
    shutil.copytree(SAMPLES, root / "typecheck", ignore=ignore)
    return root


def _mypy(tree: Path, sample: str) -> dict[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", f"typecheck/{sample}"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    errors: dict[int, list[str]] = {}
    for match in re.finditer(rf"^typecheck/{sample}:(\d+): error: (.*)$", done.stdout, re.M):
        errors.setdefault(int(match[1]), []).append(match[2])
    assert done.returncode == (1 if errors else 0), done.stdout + done.stderr
    return errors


def _pyright_command() -> list[str]:
    found = shutil.which("pyright")
    if found:
        return [found]
    local = PYRIGHT_PREFIX / "node_modules" / ".bin" / "pyright"
    if not local.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("pyright is not installed and npm is missing to install it")
        subprocess.run(
            [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix",
             str(PYRIGHT_PREFIX), f"pyright@{PYRIGHT_VERSION}"],
            check=True,
            timeout=600,
        )  # fmt: skip
    return [str(local)]


def _pyright(tree: Path, sample: str) -> dict[int, list[str]]:
    config = {"typeCheckingMode": "strict", "pythonVersion": "3.11", "include": ["typecheck"]}
    (tree / "pyrightconfig.json").write_text(json.dumps(config), encoding="utf-8")
    done = subprocess.run(
        [
            *_pyright_command(),
            "--outputjson",
            "--pythonpath",
            sys.executable,
            f"typecheck/{sample}",
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(done.stdout)
    errors: dict[int, list[str]] = {}
    for diagnostic in report["generalDiagnostics"]:
        if diagnostic["severity"] == "error":
            line = diagnostic["range"]["start"]["line"] + 1
            errors.setdefault(line, []).append(diagnostic["message"].splitlines()[0])
    return errors


CHECKERS = {"mypy": _mypy, "pyright": _pyright}


@pytest.mark.parametrize("checker", CHECKERS)
def test_every_misuse_is_an_error_and_nothing_else(tree: Path, checker: str) -> None:
    errors = CHECKERS[checker](tree, "misuse.py")
    expected = _marked(SAMPLES / "misuse.py")
    missed = sorted(expected - errors.keys())
    extra = {line: errors[line] for line in sorted(errors.keys() - expected)}
    assert not missed, f"{checker} accepts the misuses on lines {missed}"
    assert not extra, f"{checker} flags unmarked lines: {extra}"


@pytest.mark.parametrize("checker", CHECKERS)
def test_the_correct_uses_pass(tree: Path, checker: str) -> None:
    assert CHECKERS[checker](tree, "correct.py") == {}


def test_the_errors_name_the_mistake(tree: Path) -> None:
    """mypy's words for a few of them: the misspelled field, the missing method, the overload."""
    errors = _mypy(tree, "misuse.py")
    text = (SAMPLES / "misuse.py").read_text(encoding="utf-8").splitlines()

    def said(marker: str) -> str:
        return " ".join(errors[next(n for n, line in enumerate(text, 1) if marker in line)])

    assert 'did you mean "text"' in said('send_agent_input(txt="hello"')
    assert '"Client" has no attribute "send_agent_output"' in said("client.send_agent_output(")
    assert 'No overload variant of "on"' in said('"transcript.finall"')
    assert 'No overload variant of "on"' in said('client.on("transcript.final", on_partial)')
    assert 'Unexpected keyword argument "seq"' in said("final=True, seq=3")
