"""mkdocs hook: draws a core's transition table, or a flow of the spec, where a page asks.

- ``<!-- state-machine: voxwire.brisvox.engine_core.ENGINE_TRANSITIONS -->`` on a line of its
  own: the hook imports that table (``{State: {Input: Transition(target, actions)}}``, the form
  or ``{State: {Input: State}}``) and puts an SVG of it there (:func:`codegen.diagrams.state_svg`),
  drawn from the running code at every build, so it cannot drift from the table.
- ``<!-- flow: ovp.resume-behind-a-balancer -->``: the flow of that id in
  ``spec/flows/<protocol>.yaml``, checked against the spec as ``python -m codegen`` checks it.

A name that does not resolve fails the build, naming the page and the name.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # codegen, from the repository

from codegen.diagrams import Edge, load_flows, sequence_svg, state_svg
from codegen.pipeline import load_protocols

_PLACEHOLDER = re.compile(r"^<!-- state-machine: ([\w.]+) -->$", re.M)
_FLOW = re.compile(r"^<!-- flow: (\w+)\.([\w-]+) -->$", re.M)
_ROOT = Path(__file__).resolve().parents[2]


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    def draw(match: re.Match[str]) -> str:
        name = match[1]
        table = _table(name, page.file.src_path)
        states = [s for s in type(next(iter(table))) if isinstance(s, Enum)]
        edges = [
            Edge(str(state.value), str(_target(step).value), (str(event.value),))
            for state, inputs in table.items()
            for event, step in inputs.items()
        ]
        title = name.rsplit(".", 1)[-1].lower().replace("_", " ")
        svg = state_svg(title, [str(s.value) for s in states], edges)
        anchor = name.rsplit(".", 1)[-1].lower().replace("_", "-")
        return f'<div class="voxwire-diagram" id="state-{anchor}">\n{svg}\n</div>'

    def flow(match: re.Match[str]) -> str:
        protocol, flow_id = match[1], match[2]
        flows = {p.id: load_flows(p, _ROOT) for p in load_protocols(_ROOT)}.get(protocol)
        found = next((f for f in flows.flows if f.id == flow_id), None) if flows else None
        if found is None:
            raise PluginError(
                f"{page.file.src_path}: no flow {flow_id!r} in spec/flows/{protocol}.yaml"
            )
        svg = sequence_svg(found)
        return f'<div class="voxwire-diagram" id="flow-{flow_id}-diagram">\n{svg}\n</div>'

    return _FLOW.sub(flow, _PLACEHOLDER.sub(draw, markdown))


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
            isinstance(inputs, Mapping)
            and all(isinstance(t, Enum) or hasattr(t, "target") for t in inputs.values())
            for inputs in table.values()
        )
    ):
        raise PluginError(f"{page}: {name!r} is not a transition table {{state: {{input: step}}}}")
    return table


def _target(step: Any) -> Enum:
    """The state a table cell leads to: the cell itself (OVP's cores), or its ``target``."""
    target = step if isinstance(step, Enum) else step.target
    assert isinstance(target, Enum)
    return target
