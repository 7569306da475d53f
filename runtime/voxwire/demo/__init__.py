"""``voxwire demo``: one scripted call per protocol, on loopback, printed as a timeline; with
``--browser``, a softphone to talk to a demo agent from a browser.

| module | what |
|---|---|
| ``voxwire.demo.luigi`` | a sample Brisvox agent, example code for ``voxwire.brisvox.agent`` |
| ``voxwire.demo.brisvox_call`` | the engine side (``EngineLink``) playing a call to it |
| ``voxwire.demo.ovp_call`` | a gateway emulating the OVP worked examples, and a client |
| ``voxwire.demo.timeline`` | prints every message as it passes, then a summary |
| ``voxwire.demo.softphone`` | ``voxwire demo --browser``: a softphone page and a gateway |
| ``voxwire.demo.voice_agent`` | its agent, which answers each utterance of the caller |
| ``voxwire.demo.speech`` | that agent's end of speech, by energy |

Each call records itself through its adapter's ``record`` option: into the timeline, and into
``DIR/brisvox.jsonl`` or ``DIR/ovp.jsonl`` with ``--record DIR``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from importlib import import_module
from pathlib import Path
from typing import TextIO

from voxwire.capture import CaptureWriter
from voxwire.demo.timeline import Style, Timeline
from voxwire.errors import VoxwireError

__all__ = ["CALL_TIMEOUT", "DemoFailed", "run"]

CALL_TIMEOUT = 15.0
"""Real seconds one call may take before the demo gives up."""

# Which side of each call records it (the side the demo drives).
_RECORDED_BY = {"brisvox": "server", "ovp": "client"}


class DemoFailed(VoxwireError):
    """A call did not go as scripted."""


def run(protocols: Sequence[str], *, out: TextIO, style: Style, record: Path | None) -> None:
    """Play one call per protocol in ``protocols``, printing each; raise :class:`DemoFailed`."""
    asyncio.run(_run(protocols, out=out, style=style, record=record))


async def _run(protocols: Sequence[str], *, out: TextIO, style: Style, record: Path | None) -> None:
    for index, protocol in enumerate(protocols):
        try:
            call = import_module(f"voxwire.demo.{protocol}_call")
        except ModuleNotFoundError as exc:
            if exc.name != "jwt":
                raise
            raise DemoFailed(
                f"the {protocol} call runs a gateway, which needs PyJWT: "
                "pip install 'voxwire[gateway]'"
            ) from None
        path = None if record is None else record / f"{protocol}.jsonl"
        capture = None
        if path is not None:
            capture = CaptureWriter(path, protocol=protocol, recorded_by=_RECORDED_BY[protocol])
        timeline = Timeline(
            protocol, out=out, style=style, round_trips=call.ROUND_TRIPS, capture=capture
        )
        if index:
            print(file=out)
        timeline.legend()
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                handshake: float = await call.play(timeline)
        except TimeoutError:
            raise DemoFailed(f"the {protocol} call took more than {CALL_TIMEOUT:g} s") from None
        finally:
            if capture is not None:
                capture.close()
        timeline.summary(handshake, call.HANDSHAKE)
        if path is not None:
            print(f"  {'recorded':<20} {path}", file=out)
