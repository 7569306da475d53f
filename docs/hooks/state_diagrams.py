"""mkdocs hook: draws a core's transition table where a page asks for it.

A page writes ``<!-- state-machine: voxwire.brisvox.engine_core.ENGINE_TRANSITIONS -->`` on a line
of its own; the hook imports that table (``{State: {Input: Transition(target, actions)}}``, the
form every voxwire core uses) and puts an SVG of it there (:func:`codegen.diagrams.state_svg`).
The picture is drawn from the running code at every build, so it cannot drift from the table.
A name that does not resolve to such a table fails the build, naming the page and the name.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from codegen.diagrams import Edge, state_svg

_PLACEHOLDER = re.compile(r"^<!-- state-machine: ([\w.]+) -->$", re.M)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    def draw(match: re.Match[str]) -> str:
        name = match[1]
        table = _table(name, page.file.src_path)
        states = [s for s in type(next(iter(table))) if isinstance(s, Enum)]
        edges = [
            Edge(str(state.value), str(step.target.value), (str(event.value),))
            for state, inputs in table.items()
            for event, step in inputs.items()
        ]
        title = name.rsplit(".", 1)[-1].lower().replace("_", " ")
        svg = state_svg(title, [str(s.value) for s in states], edges)
        anchor = name.rsplit(".", 1)[-1].lower().replace("_", "-")
        return f'<div class="voxwire-diagram" id="state-{anchor}">\n{svg}\n</div>'

    return _PLACEHOLDER.sub(draw, markdown)


def _table(name: str, page: str) -> Mapping[Enum, Mapping[Enum, Any]]:
    module_name, _, attribute = name.rpartition(".")
    try:
        table = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"{page}: state-machine {name!r} does not resolve: {exc}") from None
    if not (
        isinstance(table, Mapping)
        and table
        and all(
            isinstance(inputs, Mapping) and all(hasattr(t, "target") for t in inputs.values())
            for inputs in table.values()
        )
    ):
        raise PluginError(f"{page}: {name!r} is not a transition table {{state: {{input: step}}}}")
    return table
