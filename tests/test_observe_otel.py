"""OpenTelemetry (voxwire.observe.otel) with the SDK's in-memory exporters: a span tree per call
(session > turn > tool call) under the tracer the test set up, the metrics on its meter; and
without the extra, nothing of OpenTelemetry imported."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.test_ovp_support import run
from voxwire import brisvox
from voxwire.brisvox.agent import AgentServer, AgentSession, Tool, ToolContext
from voxwire.brisvox.engine import AgentTarget, EngineLink
from voxwire.hosts import check_url
from voxwire.observe.otel import instrument

TOKEN = "otel-token-never-in-an-attribute"


def lookup_tool(done: asyncio.Event) -> Tool:
    async def lookup(ctx: ToolContext) -> object:
        await done.wait()
        return {"open": True}

    declaration = brisvox.ToolDeclaration(
        name="lookup",
        description="Opening hours.",
        parameters={"type": "object", "properties": {}},
        kind=brisvox.ToolKind.READ_ONLY,
    )
    return Tool(declaration, lookup)


async def one_call(
    server: AgentServer, sessions: list[AgentSession], tool_done: asyncio.Event
) -> None:
    target = AgentTarget(check_url(f"ws://127.0.0.1:{server.port}"), TOKEN)
    link = EngineLink(target, session_id="call-otel", agent="luigi")
    link.on("say", lambda say: None)  # answered ok once the handler returned
    assert await link.start()
    link.send_turn_user_ended(epoch=1)  # the turn ends
    async with asyncio.timeout(10):  # (an event: the engine writes its tool call before it)
        while not (sessions and sessions[0].stats.turns == 1):
            await asyncio.sleep(0.01)
    pending = link.call_tool("lookup", {}, call_id="k1", epoch=1)  # a tool call during it
    await asyncio.sleep(0.05)
    tool_done.set()
    await pending
    await sessions[0].send_say(text="We open at noon.")  # the turn's answer
    await link.end()
    async with asyncio.timeout(10):
        while not sessions[0].ended:
            await asyncio.sleep(0.01)


def test_a_call_is_a_span_tree_and_metrics_on_the_application_s_providers() -> None:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    tool_done = asyncio.Event()
    sessions: list[AgentSession] = []

    async def handler(session: AgentSession) -> None:
        sessions.append(session)
        async for _ in session:
            pass

    async def main() -> None:
        async with AgentServer(handler, token=TOKEN, tools=[lookup_tool(tool_done)]) as server:
            instrument(
                server,
                tracer=tracer_provider.get_tracer("test"),
                meter=meter_provider.get_meter("test"),
            )
            await one_call(server, sessions, tool_done)

    run(main(), timeout=20)
    finished = {span.name: span for span in spans.get_finished_spans()}
    session, turn, tool = (
        finished[n] for n in ("voxwire.session", "voxwire.turn", "voxwire.tool_call")
    )
    assert session.parent is None
    assert turn.parent is not None and turn.parent.span_id == session.context.span_id
    assert tool.parent is not None and tool.parent.span_id == turn.context.span_id
    assert {s.context.trace_id for s in (session, turn, tool)} == {session.context.trace_id}
    assert tool.attributes is not None and tool.attributes["voxwire.outcome"] == "ok"
    for span in finished.values():
        assert _attributes_are_clean(span)
        assert span.attributes is not None
        assert span.attributes["voxwire.session_id"] == "call-otel"
        assert span.attributes["voxwire.role"] == "agent"
    data = reader.get_metrics_data()
    assert data is not None
    names = {
        metric.name: metric
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert {"voxwire.sessions", "voxwire.messages", "voxwire.turn.latency"} <= set(names)
    points = names["voxwire.sessions"].data.data_points
    assert [p.value for p in points if isinstance(p, NumberDataPoint)] == [1]
    latency = names["voxwire.turn.latency"].data.data_points
    assert [p.count for p in latency if isinstance(p, HistogramDataPoint)] == [1]


def _attributes_are_clean(span: ReadableSpan) -> bool:
    values = [str(v) for v in (span.attributes or {}).values()]
    values += [str(v) for e in span.events for v in (e.attributes or {}).values()]
    return not any(TOKEN in v or "ws://" in v or "?" in v for v in values)


def test_without_the_extra_nothing_of_opentelemetry_is_imported() -> None:
    program = textwrap.dedent(
        """
        import asyncio, importlib.abc, sys, traceback

        tried = []

        class Absent(importlib.abc.MetaPathFinder):
            # As if the extra were not installed; who asked is kept.
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    tried.append([f.name for f in traceback.extract_stack()])
                    raise ModuleNotFoundError(name)
                return None

        sys.meta_path.insert(0, Absent())
        import voxwire
        from voxwire.brisvox.agent import AgentServer
        from voxwire.brisvox.engine import AgentTarget, EngineLink
        from voxwire.hosts import check_url

        async def main():
            async def handler(session):
                async for _ in session:
                    pass
            async with AgentServer(handler, token="t") as server:
                link = EngineLink(
                    AgentTarget(check_url(f"ws://127.0.0.1:{server.port}"), "t"),
                    session_id="c", agent="a",
                )
                assert await link.start()
                link.send_turn_user_ended(epoch=1)
                await link.end()
                assert server.metrics.totals().sessions_total == 1

        asyncio.run(asyncio.wait_for(main(), 20))
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
        assert not loaded, loaded
        # Others may look for it (redis does): never voxwire's own code.
        assert not any("voxwire" in f for stack in tried for f in stack), tried
        print("clean")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"
