"""What help() and the API page (docs/api.md, mkdocstrings) show of the package."""

from __future__ import annotations

import html
import importlib
import os
import pydoc
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.public import public_modules
from voxwire import brisvox, ovp

DOTTED = re.compile(r"``(voxwire(?:\.\w+)+)``")
"""A dotted voxwire name a docstring cites."""

ROLE = re.compile(r":(?:py:)?(?:class|meth|attr|func|mod|data|exc|obj|const):`")


def _help(thing: object) -> str:
    return pydoc.render_doc(thing, renderer=pydoc.plaintext)


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or a name inside one, that exists."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for part in parts[cut:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


def test_every_name_a_module_docstring_cites_exists() -> None:
    cited = {
        (module.__name__, dotted)
        for module in public_modules()
        for dotted in DOTTED.findall(module.__doc__ or "")
    }
    assert len(cited) > 10  # the pattern finds what the docstrings cite
    assert [c for c in sorted(cited) if not _resolves(c[1])] == []


def test_help_of_a_message_shows_every_field_with_its_description() -> None:
    say = _help(brisvox.Say)
    assert "Attributes:" in say
    assert "text: The line to speak." in say
    assert "id: The command's id" in say  # inherited from the command field set
    thinking = _help(ovp.AgentThinking)
    for field in ("seq", "ts", "session_id", "turn_id", "delta"):
        assert re.search(rf"\n \|      {field}: \w", thinking), field


@pytest.fixture(scope="module")
def api_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    site = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    return (site / "api" / "index.html").read_text(encoding="utf-8")


def _section(page: str, identifier: str) -> str:
    """The text of one object's entry: from its heading to the next heading."""
    start = page.rindex("<", 0, page.index(f'id="{identifier}"'))
    end = page.find('class="doc doc-heading"', start + len(identifier) + 40)
    text = re.sub(r"<[^>]+>", " ", page[start : end if end > 0 else None])
    return re.sub(r" : ", ": ", " ".join(html.unescape(text).split()))


def test_the_api_page_holds_no_raw_role_and_links_cross_references(api_page: str) -> None:
    text = html.unescape(re.sub(r"<[^>]+>", "", api_page))
    assert ROLE.findall(text) == []
    links = re.findall(r'<a class="autorefs autorefs-internal"[^>]*href="#([^"]+)"', api_page)
    assert "voxwire.brisvox.agent.AgentSession" in links


def test_the_api_page_lists_dataclass_fields_and_typed_attributes(api_page: str) -> None:
    assert "error: str | None" in _section(
        api_page, "voxwire.brisvox.engine_core.ToolFinished.error"
    )
    for name, kind in (("code", "str"), ("detail", "str"), ("path", "str | None")):
        entry = _section(api_page, f"voxwire.errors.ProtocolError.{name}")
        assert f"{name}: {kind}" in entry, entry


def test_the_api_page_shows_a_context_manager_as_such(api_page: str) -> None:
    entry = _section(api_page, "voxwire.testing.engine.AgentCall.open")
    assert "AbstractAsyncContextManager[AgentCall]" in entry.replace(" ", "")
    assert entry.startswith("open async with classmethod ")  # its labels: entered, not awaited


@pytest.mark.parametrize("protocol_id", ["brisvox", "ovp"])
def test_help_of_decode_and_encode_shows_their_precise_types(protocol_id: str) -> None:
    module = {"brisvox": brisvox, "ovp": ovp}[protocol_id]
    unions = {"brisvox": "ServerMessage | AgentMessage", "ovp": "ServerMessage | ClientMessage"}
    decode = pydoc.render_doc(module.decode, renderer=pydoc.plaintext)
    assert f"-> '{unions[protocol_id]} | UnknownMessage'" in decode and "Any" not in decode
    assert "sender: 'Sender'" in decode and "Raises ``ProtocolError``" in decode
    encode = pydoc.render_doc(module.encode, renderer=pydoc.plaintext)
    assert "-> 'bytes'" in encode and "Any" not in encode
