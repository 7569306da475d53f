"""The token-form subprotocol alias browsers offer (decision subprotocol-token-alias), over loopback."""

from __future__ import annotations

import json

import pytest
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from tests.test_ovp_handshake import nothing, raw_upgrade
from tests.test_ovp_support import (
    PCM,
    SESSION,
    collecting,
    endpoint,
    eventually,
    next_event,
    run,
    serving,
    token,
)
from voxwire import ovp
from voxwire.ovp.gateway import select_subprotocol

ALIAS = ovp.SUBPROTOCOL_ALIAS


def test_the_alias_is_a_token_as_rfc_6455_requires() -> None:
    separators = set('()<>@,;:\\"/[]?={} \t')
    assert ALIAS and all(0x21 <= ord(c) <= 0x7E and c not in separators for c in ALIAS)
    assert "/" in ovp.SUBPROTOCOL, "the document's value is the one a browser cannot offer"


@pytest.mark.parametrize(
    ("offered", "selected"),
    [
        ([ALIAS], ALIAS),
        (["chat", ALIAS], ALIAS),
        ([ovp.SUBPROTOCOL, ALIAS], ovp.SUBPROTOCOL),
        ([ALIAS, ovp.SUBPROTOCOL], ovp.SUBPROTOCOL),
        ([ovp.SUBPROTOCOL], ovp.SUBPROTOCOL),
        ([ALIAS.upper()], None),
        (["orbit-voice.1.0", "voxwire.orbit-voice.2.0"], None),
        ([], None),
    ],
)
def test_the_document_value_wins_and_the_alias_is_compared_exactly(
    offered: list[str], selected: str | None
) -> None:
    assert select_subprotocol(offered) == selected


@pytest.mark.parametrize(
    ("offered", "echoed"),
    [
        (ALIAS, ALIAS),
        (f"chat, {ALIAS}", ALIAS),
        (f"{ALIAS}, {ovp.SUBPROTOCOL}", ovp.SUBPROTOCOL),
        (ovp.SUBPROTOCOL, ovp.SUBPROTOCOL),
    ],
)
def test_the_gateway_echoes_the_subprotocol_it_selected(offered: str, echoed: str) -> None:
    async def main() -> tuple[int, dict[str, str], bytes]:
        async with serving(collecting([])) as gateway:
            return await raw_upgrade(gateway.port, f"/voice/ws/{SESSION}?token={token()}", offered)

    status, headers, _ = run(main())
    assert status == 101 and headers["sec-websocket-protocol"] == echoed


@pytest.mark.parametrize("offered", [ALIAS.upper(), "voxwire.orbit-voice.1", "orbit-voice.1.0"])
def test_a_near_miss_of_the_alias_gets_http_400_naming_both_values(offered: str) -> None:
    async def main() -> tuple[int, dict[str, str], bytes]:
        async with serving(nothing) as gateway:
            return await raw_upgrade(gateway.port, f"/voice/ws/{SESSION}?token=x", offered)

    status, _, body = run(main())
    answer = json.loads(body)
    assert status == 400 and answer["code"] == "OVP_SUBPROTOCOL_MISMATCH"
    assert ovp.SUBPROTOCOL in answer["message"] and ALIAS in answer["message"]


def test_a_strict_client_offering_only_the_alias_gets_a_whole_session() -> None:
    """websockets' own client, unpatched, validates tokens as a browser does."""
    received: list[ovp.ClientMessage | ovp.AudioFrame] = []

    async def main() -> tuple[str | None, dict[str, object]]:
        async with (
            serving(collecting(received)) as gateway,
            connect(endpoint(gateway), subprotocols=[Subprotocol(ALIAS)], open_timeout=5) as ws,
        ):
            start = await next_event(ws)
            frame = ovp.AudioFrame(direction=0, frame_seq=0, rtp_timestamp=0, pcm=PCM)
            await ws.send(ovp.encode_frame(frame))
            await eventually(lambda: bool(received))
            return ws.subprotocol, start

    subprotocol, start = run(main())
    assert subprotocol == ALIAS
    assert start["type"] == "session.start" and start["seq"] == 0
    assert isinstance(received[0], ovp.AudioFrame) and bytes(received[0].pcm) == PCM
