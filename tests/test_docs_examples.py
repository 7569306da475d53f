"""Every Python example in the README and the hand-written docs runs and type-checks, so none can rot.

A block fenced as ``python`` must run on its own and pass ``mypy --strict`` as users run it
(against the installed package); show a fragment as ``text`` instead.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

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


def test_the_readme_has_examples() -> None:
    assert any(name.startswith("README.md") for name, _ in EXAMPLES)


@pytest.mark.parametrize(("name", "code"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_example_runs(name: str, code: str) -> None:
    exec(compile(code, name, "exec"), {"__name__": f"example:{name}"})


def _module_name(name: str) -> str:
    return "example_" + re.sub(r"\W", "_", name)


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
