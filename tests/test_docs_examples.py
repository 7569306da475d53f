"""Every Python example in the README and the hand-written docs runs, so none can rot.

A block fenced as ``python`` must run on its own; show a fragment as ``text`` instead.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for index, code in enumerate(BLOCK.findall(page.read_text(encoding="utf-8"))):
            found.append((f"{page.relative_to(ROOT)}#{index}", code))
    return found


EXAMPLES = _examples()


def test_the_readme_has_examples() -> None:
    assert any(name.startswith("README.md") for name, _ in EXAMPLES)


@pytest.mark.parametrize(("name", "code"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_example_runs(name: str, code: str) -> None:
    exec(compile(code, name, "exec"), {"__name__": f"example:{name}"})
