"""The TypeScript OVP client against the Python Gateway on loopback, from headless Chromium and
from Node: a tone streamed as 20 ms frames, events and echoed frames back, a dropped link (a
reset by the fault proxy) survived with a resume whose replay arrives exactly once and in order,
and the session's end."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from typing import Any

from tests.browser import chromium_page, serve_folder
from tests.conftest import ROOT
from tests.node import consumer, node
from tests.test_ovp_support import AGENT, CALL, SESSION, run, serving, token
from voxwire import ovp
from voxwire.ovp.gateway import GatewaySession
from voxwire.testing._faultproxy import FaultProxy

FRAMES = 25
"""Frames the scenario streams (tests/typescript/scenario.ts): the drop follows the last one."""
DELTAS = ["before the drop", "during the drop 1", "during the drop 2"]
TESTS = ROOT / "tests" / "typescript"


def gateway_handler(proxy: FaultProxy, seen: dict[str, Any]) -> Any:
    """Echo every frame; after the last one, an event, the drop, two more events; end on input."""

    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        frames = 0
        async for item in session:
            if isinstance(item, ovp.AudioFrame):
                frames += 1
                session.send_audio(item.pcm)
                if frames == FRAMES:
                    session.send_agent_thinking(turn_id="t1", delta=DELTAS[0])
                    proxy.reset()  # every open connection gets an RST: the link is gone
                    seen["connections_before_drop"] = proxy.accepted
                    for delta in DELTAS[1:]:
                        session.send_agent_thinking(turn_id="t1", delta=delta)
            elif isinstance(item, ovp.AgentInput):
                seen["input"] = item.text
                seen["frames"] = frames
                session.end()
                return

    return handler


def check(result: dict[str, Any], seen: dict[str, Any], proxy: FaultProxy) -> None:
    assert "error" not in result, result
    assert result["startSeq"] == 0 and result["protocolVersion"] == "1.0"
    assert seen["frames"] == FRAMES, "every tone frame reached the gateway"
    assert result["framesIn"] >= 1 and result["firstEchoIsTheTone"], result
    # The replay: every event exactly once, in order, with increasing seq across the resume.
    assert result["deltas"] == DELTAS, result
    assert result["seqs"] == sorted(set(result["seqs"])), result
    assert proxy.accepted >= 2, "the client connected again after the drop"
    assert seen["input"] == "done"
    assert result["outcome"]["reason"] == "agent_ended" and result["outcome"]["code"] is None
    assert result["problems"] == []


async def scenario(drive: Any) -> tuple[dict[str, Any], dict[str, Any], FaultProxy]:
    seen: dict[str, Any] = {}
    proxy = FaultProxy(0)
    async with serving(gateway_handler(proxy, seen)) as gateway:
        proxy.target_port = gateway.port
        async with proxy:
            result = await drive(proxy.url, SESSION, token())
    return result, seen, proxy


def test_the_typescript_client_in_node_survives_a_drop() -> None:
    project = consumer()
    out = project.compile(TESTS / "scenario.ts", TESTS / "node_client.ts")

    async def drive(url: str, session_id: str, tok: str) -> dict[str, Any]:
        child = await asyncio.create_subprocess_exec(
            node(),
            str(out / "node_client.js"),
            url,
            session_id,
            tok,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await child.communicate()
        assert child.returncode == 0, stderr.decode()[-3000:]
        answer: dict[str, Any] = json.loads(stdout)
        return answer

    result, seen, proxy = run(scenario(drive), timeout=60)
    check(result, seen, proxy)


PAGE = """<!doctype html>
<html><head><meta charset="utf-8">
<script type="importmap">{"imports": {
  "voxwire/ovp": "/node_modules/voxwire/dist/ovp/index.js",
  "voxwire/ovp/client": "/node_modules/voxwire/dist/ovp/client.js"
}}</script></head>
<body><script type="module">
import { runScenario } from "/out/scenario.js";
const query = new URLSearchParams(location.search);
runScenario({ url: query.get("url"), sessionId: query.get("session"), token: query.get("token") })
  .then((result) => { window.result = result; }, (error) => { window.result = { error: String(error) }; });
</script></body></html>
"""


def test_the_typescript_client_in_chromium_survives_a_drop() -> None:
    project = consumer()
    project.compile(TESTS / "scenario.ts")
    (project.root / "scenario.html").write_text(PAGE)

    async def drive(url: str, session_id: str, tok: str) -> dict[str, Any]:
        with serve_folder(project.root) as site:
            async with chromium_page() as page:
                query = urllib.parse.urlencode({"url": url, "session": session_id, "token": tok})
                await page.goto(f"{site}/scenario.html?{query}")
                # The premise of the alias: the browser refuses the document's value outright.
                refusal = await page.evaluate(
                    "() => { try { new WebSocket('ws://127.0.0.1:9', ['orbit-voice/1.0']); "
                    "return 'accepted'; } catch (error) { return error.name; } }"
                )
                assert refusal == "SyntaxError"
                await page.wait_for_function("window.result !== undefined", timeout=40_000)
                answer: dict[str, Any] = await page.evaluate("window.result")
                assert "error" not in answer, (answer, page.console_lines)
                return answer

    result, seen, proxy = run(scenario(drive), timeout=90)
    check(result, seen, proxy)
