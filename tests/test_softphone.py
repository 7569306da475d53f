"""``voxwire demo --browser`` as a user meets it: the command started as a process, its page
driven in headless Chromium with a fake microphone playing a tone then silence, one full turn
(speech in, the transcripts shown, the agent's audio played, the link's state shown, no console
error), then the hang-up and Ctrl-C; the page's shipped script is what its sources build, and
the TypeScript guide shows the page as shipped."""

from __future__ import annotations

import asyncio
import math
import os
import re
import select
import signal
import struct
import subprocess
import sys
import wave
from pathlib import Path
from typing import Any

from codegen.softphone import BUNDLE, bundle
from tests.browser import chromium_page
from tests.conftest import ROOT
from tests.node import node, packed
from tests.test_ovp_support import run
from voxwire.validate import Tally, check_capture

DEVICE_RATE = 48000
SPEECH_S = 1.0
SILENCE_S = 4.0
"""The fake microphone: a tone long enough to be an utterance, then enough silence to end it and
hear the whole answer without speaking over it (the file is played once, not looped)."""


def write_microphone(path: Path) -> None:
    """A mono PCM16 WAV: a 220 Hz voice-like tone (its octave too, its level swinging as
    syllables do, never under the agent's threshold), then silence."""
    samples = []
    for n in range(round(SPEECH_S * DEVICE_RATE)):
        t = n / DEVICE_RATE
        syllables = 0.65 + 0.35 * math.sin(2 * math.pi * 4 * t)
        value = math.sin(2 * math.pi * 220 * t) + 0.4 * math.sin(2 * math.pi * 440 * t)
        samples.append(round(9000 * syllables * value))
    samples += [0] * round(SILENCE_S * DEVICE_RATE)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(DEVICE_RATE)
        out.writeframes(struct.pack(f"<{len(samples)}h", *samples))


def stat(name: str) -> str:
    """The page's shown count of frames ``name`` (its public stats, as a user reads them)."""
    return f"Number(document.querySelector('dd[data-stat=\"frames {name}\"]')?.textContent)"


async def until(page: Any, expression: str, timeout: float) -> None:
    """Wait until ``expression`` is true in the page. (Playwright's ``wait_for_function`` runs
    its predicate through ``eval``, which the page's policy refuses, as it should.)"""
    async with asyncio.timeout(timeout):
        while not await page.evaluate(expression):
            await asyncio.sleep(0.1)


async def browser_call(url: str, microphone: Path) -> dict[str, object]:
    flags = [
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone}%noloop",
    ]
    async with chromium_page(*flags) as page:
        await page.goto(url)
        await page.click("#call")
        # One turn: the caller's transcript, the agent's answer and audio, the turn's end.
        await until(
            page,
            "document.querySelector('#transcript li.final')?.textContent.startsWith('caller: [')"
            " && document.querySelector('#events').textContent.includes('agent.latency.breakdown')"
            f" && {stat('played')} > 25",
            timeout=30,
        )
        sent, received, played = (stat(name) for name in ("sent", "received", "played"))
        seen: dict[str, object] = await page.evaluate(
            f"""() => ({{
                state: document.querySelector('#state').textContent,
                transcript: [...document.querySelectorAll('#transcript li')].map(
                    (li) => [li.className, li.textContent]),
                events: [...document.querySelectorAll('#events li')].map((li) => li.textContent),
                sent: {sent}, received: {received}, played: {played},
            }})"""
        )
        await page.click("#hangup")
        await until(
            page,
            "document.querySelector('#state').textContent === 'over'"
            " && !document.querySelector('#call').disabled",
            timeout=10,
        )
        seen["console"] = list(page.console_lines)
        return seen


def test_a_browser_call_through_voxwire_demo_browser(tmp_path: Path) -> None:
    microphone = tmp_path / "microphone.wav"
    write_microphone(microphone)
    command = [sys.executable, "-m", "voxwire", "demo", "--browser", "--record", str(tmp_path)]
    server = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 30)
        assert ready, "voxwire demo --browser printed no address within 30 s"
        first = server.stdout.readline()
        assert first.startswith("voxwire softphone: open http://127.0.0.1:"), first
        url = first.split()[3]
        seen = run(browser_call(url, microphone), timeout=60)
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=20)
    assert server.returncode == 130 and "Traceback" not in err, err
    errors = [line for line in seen["console"] if line.startswith(("error", "pageerror"))]
    assert errors == [], seen["console"]
    assert seen["state"] == "live"
    transcript = seen["transcript"]
    assert ["final", transcript[0][1]] == transcript[0] and transcript[0][1].startswith("caller: [")
    assert transcript[1][1].startswith("agent: You spoke for "), transcript
    events = " ".join(seen["events"])
    for kind in ("transcript.final", "agent.output", "audio.egress", "agent.latency.breakdown"):
        assert kind in events, seen["events"]
    assert seen["sent"] >= 50 * SPEECH_S and seen["received"] >= seen["played"] > 25
    [capture] = tmp_path.glob("softphone-*.jsonl")
    tally = Tally()
    with capture.open("rb") as lines:
        _, findings = check_capture(lines, tally)
        assert [f.text for f in findings if hasattr(f, "code")] == []
    assert tally.violations == 0 and tally.frames >= seen["sent"]


def test_the_typescript_guide_shows_the_shipped_page() -> None:
    guide = (ROOT / "docs" / "typescript.md").read_text(encoding="utf-8")
    section = guide.split("\n## Browser softphone\n", 1)[1].split("\n## ", 1)[0]
    folder = ROOT / "runtime" / "voxwire" / "demo" / "softphone"
    for language, name in (("html", "index.html"), ("ts", "softphone.ts")):
        [block] = re.findall(rf"^```{language}\n(.*?)^```", section, re.S | re.M)
        assert block == (folder / name).read_text(encoding="utf-8"), (
            f"{name} differs from the guide"
        )


def test_the_shipped_bundle_is_what_its_sources_build() -> None:
    node()
    built = bundle(ROOT, tarball=packed())
    assert built == (ROOT / BUNDLE).read_text(encoding="utf-8"), (
        f"{BUNDLE} is not what its sources build: run `python -m codegen softphone` and commit it"
    )
