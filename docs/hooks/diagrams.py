"""mkdocs hook: draws a role's session machine, or a flow of the spec, where a page asks.

- ``<!-- state-machine: ovp.client -->`` on a line of its own: the spec's ``sessions:`` machine
  of that role (the same table both bindings generate and run): an SVG of it
  (:func:`codegen.diagrams.state_svg`) and the table itself (state, input, next state, actions,
  the decision it follows), drawn from the spec at every build, so it cannot drift.
- ``<!-- flow: ovp.resume-behind-a-balancer -->``: the flow of that id in
  ``spec/flows/<protocol>.yaml``, checked against the spec as ``python -m codegen`` checks it.

A name that does not resolve fails the build, naming the page and the name.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # codegen, from the repository

from codegen.diagrams import Edge, machine_markdown, sequence_svg, state_svg
from codegen.flows import load_flows
from codegen.pipeline import load_protocols

_PLACEHOLDER = re.compile(r"^<!-- state-machine: (\w+)\.(\w+) -->$", re.M)
_FLOW = re.compile(r"^<!-- flow: (\w+)\.([\w-]+) -->$", re.M)
_ROOT = Path(__file__).resolve().parents[2]


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if not (_PLACEHOLDER.search(markdown) or _FLOW.search(markdown)):
        return markdown  # most pages draw nothing: the specs are loaded only for those that do
    protocols = {p.id: p for p in load_protocols(_ROOT)}

    def draw(match: re.Match[str]) -> str:
        protocol_id, role = match[1], match[2]
        protocol = protocols.get(protocol_id)
        machine = next((m for m in protocol.machines if m.role == role), None) if protocol else None
        if machine is None:
            raise PluginError(
                f"{page.file.src_path}: no session machine {role!r} in spec/{protocol_id}.yaml"
            )
        edges = [Edge(t.source, t.target, (t.input,)) for t in machine.transitions]
        svg = state_svg(f"{protocol_id} {role}", [s.id for s in machine.states], edges)
        anchor = f"state-{protocol_id}-{role}"
        table = machine_markdown(machine, decisions_page=f"reference/{protocol_id}-decisions.md")
        return f'<div class="voxwire-diagram" id="{anchor}">\n{svg}\n</div>\n\n{table}'

    def flow(match: re.Match[str]) -> str:
        protocol, flow_id = match[1], match[2]
        flows = load_flows(protocols[protocol], _ROOT) if protocol in protocols else None
        found = next((f for f in flows.flows if f.id == flow_id), None) if flows else None
        if found is None:
            raise PluginError(
                f"{page.file.src_path}: no flow {flow_id!r} in spec/flows/{protocol}.yaml"
            )
        svg = sequence_svg(found)
        return f'<div class="voxwire-diagram" id="flow-{flow_id}-diagram">\n{svg}\n</div>'

    return _FLOW.sub(flow, _PLACEHOLDER.sub(draw, markdown))
