"""The session cases of issue 24's faults: the gateway's replay at its buffer's bound, and on the
client's side a gateway restart under a resume, a refusal on a resumed link, a black hole and the
largest replay. Written as :mod:`codegen.sessions` writes its cases (messages by their session
role, times and bounds from the spec's constants, each citing its decision), over its builder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from codegen.session_verdicts import ACCEPTED, IGNORED, SENT, error, replay

if TYPE_CHECKING:
    from codegen.sessions import _OVP, _Case

__all__ = ["client_loss_cases", "refusal", "replay_bound_cases"]

_RESUMED = ("idle.connect", "starting.start", "live.link_lost", "dropped.connect")
"""The client's transitions up to a resumed link."""


def refusal(b: _OVP, code: str, seq: int, t: float, text: str) -> dict[str, Any] | None:
    """The server's refusal with ``code`` (an error it closes after: the message whose
    example carries such a code), or ``None`` when the spec has none."""
    assert b.server is not None
    refusals = {e.code for e in b.p.errors if e.close_code is not None}
    found = next(
        (
            (m.type, e.json)
            for m in b.p.messages
            if b.server in m.senders
            for e in m.examples
            if e.json.get("code") in refusals
        ),
        None,
    )
    if found is None or code not in refusals:
        return None
    kind, example = found
    step = b.message(b.server, kind, seq, t, code=code, message=text)
    body = json.loads(step["text"])  # the example's fields only, not the first example's
    step["text"] = json.dumps({k: v for k, v in body.items() if k in example})
    return step


def replay_bound_cases(b: _OVP) -> Iterator[dict[str, Any]]:
    """The gateway replays everything its buffer holds, and refuses a resume that needs one
    event more (replay_buffer_max_events, at the bound and one past it)."""
    resume = b.role("resume")
    if resume is None:
        return
    bound = b.constant("replay_buffer_max_events")
    expired, policy = b.code("OVP_RESUME_EXPIRED"), b.close("policy")
    # session.start (seq 0) is kept too: events 2..bound+1 are the last `bound` kept.
    for name, events, verdict in (
        ("replay-of-the-whole-buffer", bound + 1, replay(list(range(2, bound + 2)))),
        ("replay-past-the-buffer", bound + 2, error(expired, policy)),
    ):
        case = b.started(name, b.cite("replay-buffer-bounds"), events=events)
        case.link(1.0, "lost").link(2.0, "open")
        b.send(case, resume, 0, 2.0, verdict, last_server_seq=1)
        taken = "dropped.resume" if verdict["verdict"] == "replay" else "dropped.fail"
        yield case.covers("new.start", "live.link_lost", taken).done()


def client_loss_cases(b: _OVP) -> Iterator[dict[str, Any]]:
    """What the client does when a resume meets a session lost, a refusal, a silent link or
    the largest replay."""
    resume = b.role("resume")
    if resume is None:
        return
    assert b.server and b.start and b.server_event
    start, event, sender = b.start, b.server_event, b.server
    expired, normal = b.code("OVP_RESUME_EXPIRED"), b.close("normal")

    def server(case: _Case, kind: str, seq: int, t: float, verdict: dict[str, Any]) -> None:
        case.step(b.message(sender, kind, seq, t), verdict)

    def resumed(name: str, source: str) -> _Case:
        """Events up to seq 2 seen, the link lost and reopened, session.resume sent."""
        case = b.case(name, "client", source)
        server(case, start, 0, 0.0, ACCEPTED)
        server(case, event, 1, 0.1, ACCEPTED)
        server(case, event, 2, 0.2, ACCEPTED)
        case.link(1.0, "lost").link(2.0, "open")
        b.send(case, resume, 0, 2.0, SENT, last_server_seq=2)
        return case.covers(*_RESUMED)

    # A restarted gateway starts the session anew on the resumed link: its seq 0 is no
    # replayed duplicate, the loss is the application's to know, nothing new is delivered.
    case = resumed("gateway-restart", b.cite("resume-of-a-session-not-held"))
    server(case, start, 0, 2.1, error(expired, normal))
    server(case, event, 1, 2.2, IGNORED)
    server(case, event, 3, 2.3, IGNORED)
    yield case.covers("live.broken").done()

    # A refusal answers the resumed link whatever its seq: the session is over.
    for name, code, why in (
        ("gateway-restart-refused", expired, "resume refused: no such session"),
        ("refused-token-on-resume", b.code("OVP_AUTH_FAILED"), "token expired"),
    ):
        refused = refusal(b, code, 0, 2.1, why)
        if refused is None:
            continue
        case = resumed(name, b.cite("refusal-outside-the-stream"))
        case.step(refused, ACCEPTED)  # handed to the application; the gateway closes
        server(case, event, 3, 2.2, IGNORED)
        yield case.covers("live.refused").done()

    # A black hole: a message at the idle bound is in time; the link is down the bound
    # after the last, and the session resumes on a new one.
    idle = b.constant("client_idle_timeout_ms") / 1000
    case = b.case("black-hole", "client", b.cite("client-idle-bound"))
    server(case, start, 0, 0.0, ACCEPTED)
    server(case, event, 1, 0.1, ACCEPTED)
    server(case, event, 2, 0.1 + idle, ACCEPTED)
    b.input(case, 0, 0.2 + idle, SENT)  # into the hole
    case.link(0.1 + 2 * idle, "lost").link(1.1 + 2 * idle, "open")
    b.send(case, resume, 1, 1.1 + 2 * idle, SENT, last_server_seq=2)
    server(case, event, 3, 1.2 + 2 * idle, ACCEPTED)
    yield case.covers(*_RESUMED).done()

    # The largest replay a gateway keeps, delivered whole and once.
    bound = b.constant("replay_buffer_max_events")
    case = b.case("replay-of-the-whole-buffer", "client", b.cite("replay-buffer-bounds"))
    server(case, start, 0, 0.0, ACCEPTED)
    server(case, event, 1, 0.1, ACCEPTED)
    case.link(1.0, "lost").link(2.0, "open")
    b.send(case, resume, 0, 2.0, SENT, last_server_seq=1)
    for seq in range(2, bound + 2):
        server(case, event, seq, 2.1, ACCEPTED)
    server(case, event, bound + 1, 2.2, IGNORED)
    server(case, event, bound + 2, 2.3, ACCEPTED)
    yield case.covers(*_RESUMED).done()
