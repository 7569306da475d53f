"""Every Python example in the README and the hand-written docs runs and type-checks, so none can rot.

A block fenced as ``python`` must run on its own and pass ``mypy --strict`` and pyright as users
run them (against the installed package); show a fragment as ``text`` instead. A block that is a
test file (a ``def test_...`` of its own: the guides' "Test it" sections) runs under pytest, as
users run it, with the fixtures of voxwire's pytest plugin, loaded by its entry point.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.conftest import ROOT
from tests.node import node

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A fence may be indented (inside a tab or an admonition) and carry options after the language.
BLOCK = re.compile(r"^( *)```python\b[^\n]*\n(.*?)^\1```", re.S | re.M)


def _examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        blocks = BLOCK.findall(page.read_text(encoding="utf-8"))
        for index, (indent, code) in enumerate(blocks):
            code = re.sub(rf"^{indent}", "", code, flags=re.M)
            found.append((f"{page.relative_to(ROOT)}#{index}", code))
    return found


EXAMPLES = _examples()
TEST_FILE = re.compile(r"^def test_\w+\(", re.M)
"""A block that is a pytest test file."""
PROGRAMS = [(name, code) for name, code in EXAMPLES if not TEST_FILE.search(code)]
TEST_FILES = [(name, code) for name, code in EXAMPLES if TEST_FILE.search(code)]
GUIDES = ["brisvox-agent.md", "brisvox-engine.md", "ovp-client.md", "ovp-gateway.md"]
"""The guides of the four roles: each ends with a "Test it" section, a test file."""


def test_the_readme_has_examples() -> None:
    assert any(name.startswith("README.md") for name, _ in EXAMPLES)


@pytest.mark.parametrize(("name", "code"), PROGRAMS, ids=[name for name, _ in PROGRAMS])
def test_example_runs(name: str, code: str) -> None:
    exec(compile(code, name, "exec"), {"__name__": f"example:{name}"})


def _module_name(name: str) -> str:
    return "example_" + re.sub(r"\W", "_", name)


@pytest.mark.parametrize("guide", GUIDES)
def test_each_guide_ends_with_a_test_it_section_of_tests(guide: str) -> None:
    text = (ROOT / "docs" / guide).read_text(encoding="utf-8")
    last = text.rsplit("\n## ", 1)[1]
    assert last.startswith("Test it\n"), f"{guide} ends with the section {last.splitlines()[0]!r}"
    assert any(name.startswith(f"docs/{guide}#") for name, _ in TEST_FILES)
    assert BLOCK.search(last), f"the Test it section of {guide} has no python block"


@pytest.fixture(scope="module")
def pytest_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Every test file of the docs run once under pytest, in a folder of their own (no
    configuration, no conftest: the plugin comes from its entry point); the outcomes of each
    file's tests, by file."""
    folder = tmp_path_factory.mktemp("docs_tests")
    for name, code in TEST_FILES:
        (folder / f"test_{_module_name(name)}.py").write_text(code, encoding="utf-8")
    report = folder / "report.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={report}"],
        cwd=folder, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert report.exists(), done.stdout + done.stderr
    outcomes: dict[str, list[str]] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        failed = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcome = failed[0] if failed else "passed"
        outcomes.setdefault(case.get("classname", ""), []).append(outcome)
    outcomes["output"] = [done.stdout]
    return outcomes


@pytest.mark.parametrize(("name", "code"), TEST_FILES, ids=[name for name, _ in TEST_FILES])
def test_example_tests_pass_under_pytest(
    name: str, code: str, pytest_outcomes: dict[str, list[str]]
) -> None:
    found = pytest_outcomes.get(f"test_{_module_name(name)}", [])
    output = pytest_outcomes["output"][0]
    assert found and set(found) == {"passed"}, output
    assert len(found) == len(TEST_FILE.findall(code))


def test_every_example_type_checks_under_mypy_strict(tmp_path: Path) -> None:
    where = {}
    for name, code in EXAMPLES:
        module = _module_name(name)
        (tmp_path / f"{module}.py").write_text(code, encoding="utf-8")
        where[module] = name
    # Outside the repository and without its configuration: the package as users import it.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", "",
         "--cache-dir", str(tmp_path / ".mypy"), *sorted(f"{m}.py" for m in where)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    # One line per (place, error code): a union's members repeat the same complaint.
    errors: dict[tuple[str, str], str] = {}
    for line in done.stdout.splitlines():
        found = re.match(r"(example_\w+)\.py:(\d+): error: (.*?)(?:  \[([\w-]+)\])?$", line)
        if found:
            place = f"{where[found.group(1)]} line {found.group(2)}"
            errors.setdefault((place, found.group(4) or ""), f"{place}: {found.group(3)}")
    assert done.returncode == 0 and not errors, "\n".join(errors.values()) or done.stdout


def test_every_example_type_checks_under_pyright(tmp_path: Path) -> None:
    node()  # pyright runs on it (the PyPI package carries pyright itself)
    for name, code in EXAMPLES:
        (tmp_path / f"{_module_name(name)}.py").write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "."],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "0 errors" in done.stdout, done.stdout + done.stderr
