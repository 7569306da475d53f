"""/metrics on a live gateway and a live agent server: Prometheus' text format, every metric of
docs/observability.md present, the figures those of the calls that passed."""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

from tests.test_endpoints import http_get
from tests.test_ovp_support import AGENT, CALL, PCM, SESSION, eventually, ovp_client, run, serving
from voxwire import ovp
from voxwire.brisvox.agent import AgentServer, AgentSession
from voxwire.brisvox.engine import AgentTarget, EngineLink
from voxwire.hosts import check_url
from voxwire.observe.metrics import CONTENT_TYPE, METRICS
from voxwire.ovp.client import SessionFailed
from voxwire.ovp.gateway import GatewaySession

DOCS = Path(__file__).resolve().parents[1] / "docs" / "observability.md"
SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def samples(body: bytes) -> dict[str, dict[str, float]]:
    """Each sample line's value, by metric name and label text."""
    found: dict[str, dict[str, float]] = {}
    for line in body.decode().splitlines():
        if line.startswith("#"):
            assert re.fullmatch(r"# (HELP|TYPE) [a-z_]+ .+", line), line
            continue
        match = SAMPLE.match(line)
        assert match is not None, line
        found.setdefault(match["name"], {})[match["labels"]] = float(match["value"])
    return found


def served(found: dict[str, dict[str, float]]) -> set[str]:
    """The metrics the samples belong to (a histogram's by its buckets, sum and count)."""
    return {re.sub(r"_(bucket|sum|count)$", "", name) for name in found}


def one(found: dict[str, dict[str, float]], name: str, **labels: str) -> float:
    values = [
        value
        for text, value in found[name].items()
        if all(f'{k}="{v}"' in text for k, v in labels.items())
    ]
    assert len(values) == 1, (name, labels, found[name])
    return values[0]


def test_every_documented_metric_is_served_and_every_served_one_documented() -> None:
    documented = set(re.findall(r"`(voxwire_[a-z_]+)`", DOCS.read_text()))
    assert documented == {name for name, _, _ in METRICS}


def test_a_live_gateway_serves_its_metrics() -> None:
    async def handler(session: GatewaySession) -> None:
        session.start(CALL, AGENT)
        async for item in session:
            if isinstance(item, ovp.AudioFrame):
                session.send_audio(PCM)

    async def main() -> tuple[bytes, str]:
        async with serving(handler) as gateway:
            client = ovp_client(gateway.url)
            await client.connect()
            for _ in range(3):
                assert client.send_audio(PCM)
            await eventually(lambda: client.stats.directions["server"].frames == 3)
            status, _, _ = await http_get(gateway.port, f"/voice/ws/{SESSION}")  # no upgrade
            assert status in (400, 426)
            refused = ovp_client(gateway.url, tok="not-a-token", session_id="ovps_other")
            with contextlib.suppress(SessionFailed):
                await refused.connect()
            status, body, fields = await http_get(gateway.port, "/metrics")
            assert status == 200
            await client.close()
            return body, fields["content-type"]

    body, content_type = run(main(), timeout=20)
    assert content_type == CONTENT_TYPE
    found = samples(body)
    assert {name for name, _, _ in METRICS} <= {
        n.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for n in found
    }
    assert one(found, "voxwire_sessions_active", role="gateway") == 1
    assert one(found, "voxwire_sessions_total") == 1
    assert one(found, "voxwire_frames_total", direction="received") == 3
    assert one(found, "voxwire_frames_total", direction="sent") == 3
    assert one(found, "voxwire_messages_total", direction="sent") == 1  # session.start
    assert one(found, "voxwire_refusals_total", code="OVP_AUTH_FAILED") == 1
    assert one(found, "voxwire_turn_latency_seconds_bucket", le="+Inf") == 0


def test_a_live_agent_server_serves_its_metrics() -> None:
    token = "metrics-token"
    done = asyncio.Event()

    async def handler(session: AgentSession) -> None:
        async for _ in session:
            pass
        done.set()

    async def main() -> bytes:
        async with AgentServer(handler, token=token) as server:
            target = AgentTarget(check_url(f"ws://127.0.0.1:{server.port}"), token)
            link = EngineLink(target, session_id="call-m", agent="a")
            assert await link.start()
            link.send_turn_user_ended(epoch=1)
            await link.end()
            await asyncio.wait_for(done.wait(), 10)
            assert (await http_get(server.port, "/"))[0] == 401  # no bearer token: refused
            status, body, _ = await http_get(server.port, "/metrics")
            assert status == 200
            return body

    found = samples(run(main(), timeout=20))
    assert {name for name, _, _ in METRICS} <= {
        n.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for n in found
    }
    assert one(found, "voxwire_sessions_active", protocol="brisvox", role="agent") == 0
    assert one(found, "voxwire_sessions_total") == 1
    assert one(found, "voxwire_turns_total") == 1
    assert one(found, "voxwire_refusals_total", code="unauthorized") == 1
    assert one(found, "voxwire_messages_total", direction="received") >= 3  # start, turn, end
