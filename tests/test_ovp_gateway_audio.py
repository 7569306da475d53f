"""The gateway's audio path over loopback: frames judged as they are parsed, in arrival order
with everything else, and a failure there taking the link down visibly."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import struct
import weakref
from collections.abc import AsyncIterator

import pytest
from websockets.asyncio.client import ClientConnection

from tests.test_ovp_support import (
    AGENT,
    CALL,
    PCM,
    collecting,
    endpoint,
    event,
    eventually,
    next_event,
    raw_connect,
    run,
    serving,
)
from voxwire import ovp
from voxwire.ovp.gateway import GatewaySession
from voxwire.ovp.gateway_core import GatewayOutput

Item = ovp.ClientMessage | ovp.AudioFrame
Message = tuple[str, str | bytes]


def frame(frame_seq: int, pcm: bytes = PCM) -> bytes:
    return struct.pack("<BBHII", 1, 0, 0, frame_seq, frame_seq * 320) + pcm


def write_at_once(ws: ClientConnection, messages: list[Message]) -> None:
    """Every message in one socket write, so the gateway parses them in one go: ``("text",
    data)``, ``("binary", data)``, or ``("fragments", data)`` for a binary message in two frames."""
    protocol = ws.protocol
    for kind, data in messages:
        if kind == "text":
            assert isinstance(data, str)
            protocol.send_text(data.encode())
        elif kind == "binary":
            assert isinstance(data, bytes)
            protocol.send_binary(data)
        else:
            assert isinstance(data, bytes)
            protocol.send_binary(data[:100], fin=False)
            protocol.send_continuation(data[100:], fin=True)
    ws.transport.write(b"".join(protocol.data_to_send()))


def kinds(items: list[Item]) -> list[tuple[str, int]]:
    return [
        ("frame", i.frame_seq) if isinstance(i, ovp.AudioFrame) else (i.type, i.seq) for i in items
    ]


def test_frames_events_and_fragments_parsed_together_reach_the_application_in_order() -> None:
    got: list[Item] = []

    async def main() -> None:
        async with serving(collecting(got)) as gateway:
            ws = await raw_connect(endpoint(gateway))
            assert (await next_event(ws))["type"] == "session.start"
            write_at_once(
                ws,
                [
                    ("binary", frame(0)),
                    ("text", event("dtmf.send", 0, digits="1")),
                    ("binary", frame(1)),  # behind an event: it must not overtake it
                    ("binary", frame(2)),
                    ("fragments", frame(3)),  # a fragmented frame is a frame too
                    ("binary", frame(4)),  # behind the fragments
                    ("text", event("dtmf.send", 1, digits="2")),
                    ("binary", frame(5)),
                    ("binary", frame(6)),
                ],
            )
            await eventually(lambda: len(got) == 9)
            write_at_once(ws, [("binary", frame(n)) for n in range(7, 57)])  # 50 frames at once
            await eventually(lambda: len(got) == 59)
            await ws.close()

    run(main())
    assert kinds(got) == [
        ("frame", 0),
        ("dtmf.send", 0),
        ("frame", 1),
        ("frame", 2),
        ("frame", 3),
        ("frame", 4),
        ("dtmf.send", 1),
        ("frame", 5),
        *(("frame", n) for n in range(6, 57)),
    ]
    assert all(bytes(i.pcm) == PCM for i in got if isinstance(i, ovp.AudioFrame))


def test_bad_frames_parsed_together_with_good_ones_are_refused_and_counted() -> None:
    got: list[Item] = []

    async def main() -> list[dict[str, object]]:
        async with serving(collecting(got)) as gateway:
            ws = await raw_connect(endpoint(gateway))
            assert (await next_event(ws))["type"] == "session.start"
            write_at_once(
                ws,
                [
                    ("binary", frame(0)),
                    ("binary", frame(1)[:-1]),  # 651 bytes
                    ("binary", frame(1)),
                    ("binary", frame(1)),  # frame_seq does not advance
                ],
            )
            answers = [await next_event(ws), await next_event(ws)]
            await ws.close()
            return answers

    answers = run(main())
    assert [(a["code"], a["details"]) for a in answers] == [
        ("OVP_AUDIO_FRAME_INVALID", {"dropped_frames": 1}),
        ("OVP_SEQ_REGRESSION", {"dropped_frames": 1}),
    ]
    assert kinds(got) == [("frame", 0), ("frame", 1)]


@contextlib.asynccontextmanager
async def a_session_past_its_first_frame() -> AsyncIterator[
    tuple[ClientConnection, GatewaySession]
]:
    """A client and its session on a gateway whose application collects all it gets (waiting on
    its iteration all along), once the session's first frame was delivered."""
    sessions: list[GatewaySession] = []
    got: list[Item] = []

    async def handler(session: GatewaySession) -> None:
        sessions.append(session)
        await collecting(got)(session)

    async with serving(handler) as gateway:
        ws = await raw_connect(endpoint(gateway))
        assert (await next_event(ws))["type"] == "session.start"
        await ws.send(frame(0))
        await eventually(lambda: len(got) == 1)
        yield ws, sessions[0]


def test_a_failure_on_the_audio_path_takes_the_link_down_visibly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with a_session_past_its_first_frame() as (ws, session):

            def broken(link: int, data: object, now: float) -> list[GatewayOutput]:
                raise RuntimeError("injected")

            session._core.receive_binary = broken  # type: ignore[method-assign]
            await ws.send(frame(1))
            await ws.wait_closed()
            assert ws.close_code == 1006  # aborted: no close frame
            await eventually(lambda: not session.connected)
            assert session.over is None  # dropped, so resumable: the session goes on

    with caplog.at_level(logging.WARNING, logger="voxwire"):
        run(main())
    failed = [r for r in caplog.records if "an audio frame failed" in r.getMessage()]
    assert failed and failed[0].exc_info is not None
    downs = [r for r in caplog.records if r.name == "voxwire.link.adapter"]
    assert any("link down: an audio frame failed" in r.getMessage() for r in downs)


def test_what_the_application_sends_for_a_frame_leaves_in_one_write_as_it_waits_again() -> None:
    sessions: list[GatewaySession] = []

    async def handler(session: GatewaySession) -> None:
        sessions.append(session)
        session.start(CALL, AGENT)
        async for item in session:
            if isinstance(item, ovp.AudioFrame):
                session.send_audio(item.pcm)
                session.send_transcript_partial(
                    utterance_id="u", speaker=ovp.Speaker.CALLER, text=f"frame {item.frame_seq}"
                )

    async def main() -> tuple[int, int]:
        async with serving(handler) as gateway:
            ws = await raw_connect(endpoint(gateway))
            assert (await next_event(ws))["type"] == "session.start"
            for n in range(5):
                await ws.send(frame(n))
                echoed, partial = await ws.recv(), json.loads(await ws.recv())
                assert isinstance(echoed, bytes) and len(echoed) == ovp.AUDIO_FRAME_SIZE
                assert partial["text"] == f"frame {n}"
            [link] = sessions[0]._links.values()
            counts = (link.drains, link.frames)
            await ws.close()
            return counts

    drains, frames = run(main())
    assert frames == 1 + 5 * 2  # session.start, then a frame and a partial per frame
    assert drains == 1 + 5  # each frame's answer in one write


def test_a_dropped_connection_is_let_go_while_the_session_waits_for_its_resume() -> None:
    async def main() -> None:
        async with a_session_past_its_first_frame() as (ws, session):
            [link] = session._links.values()
            gone = weakref.ref(link), weakref.ref(link.ws)
            del link
            await ws.close()
            await eventually(lambda: not session.connected)
            await asyncio.sleep(0.05)  # the link's tasks end
            assert session.over is None  # resumable: the session and its handler go on
            # Nothing holds the old connection, not even a cycle (which would wait for a full
            # collection, and make that collection longer): freed with no collection at all.
            assert [ref() for ref in gone] == [None, None]

    gc.collect()
    gc.disable()
    try:
        run(main())
    finally:
        gc.enable()
