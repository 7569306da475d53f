"""Session cases for the rest of each role's table, and the check that every transition has one.

The cases of :mod:`codegen.sessions` pin the rules of the wire (seq, resume, the handshake); the
ones here take the transitions those leave out: the application's calls (hang up, end the call,
reject), the timers (the handshake budget, the resume window, the reconnect give-up), a link that
fails, drops or stays half-open at each point of the session. Each case claims the transitions
it takes, in order (``covers``); :func:`check_coverage` fails the spec check when a transition
of a machine has no case that claims it, or a case's claims are no walk through its machine (a
transition it does not have, or one that now leads elsewhere), and the conformance runner fails
a case whose claim the side's core does not take.

Like every session case they name no message: each is the one with its session role, or (OVP's
``error``) the one that carries the error code the case needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from codegen.ir import Protocol
from codegen.loader import Problem, SpecError, format_path
from codegen.machines import MachineTransition
from codegen.session_verdicts import (
    ACCEPTED,
    IGNORED,
    REFUSED,
    SENT,
    close,
    error,
    rejected,
    replay,
)

if TYPE_CHECKING:
    from codegen.sessions import _OVP, _Brisvox, _Case

__all__ = ["brisvox_table_cases", "check_coverage", "ovp_table_cases"]

Case = dict[str, Any]


def check_coverage(protocol: Protocol, cases: list[Case]) -> None:
    """Raise :class:`SpecError` naming, at its line of the spec, each transition no case
    covers, and for each case whose claims the machines do not follow, where they part."""
    problems = list(_uncovered(protocol, cases))
    for case in cases:
        problems += _walk(protocol, case)
    if problems:
        raise SpecError(problems)


def _uncovered(protocol: Protocol, cases: list[Case]) -> Iterator[Problem]:
    claimed = {claim for case in cases for claim in case["covers"]}
    for index, machine in enumerate(protocol.machines):
        for t in machine.transitions:
            if f"{machine.role} {t.source}.{t.input}" not in claimed:
                message = _in_codegen("no session case covers this transition")
                yield Problem(protocol.spec_file, t.line, _path(index, t.source, t.input), message)


def _walk(protocol: Protocol, case: Case) -> list[Problem]:
    """The problem with a case's claims, in order, through its roles' machines, if any: each is
    a transition of its role's machine, taken in the state the role's claim before it led to, or
    in the initial state (the machine taken afresh: the agent's next connection)."""
    machines = {m.role: (n, m) for n, m in enumerate(protocol.machines)}
    last: dict[str, MachineTransition] = {}
    for claim in case["covers"]:
        role, _, transition = claim.partition(" ")
        source, _, event = transition.partition(".")
        if role not in machines:
            text = f"the session case {case['id']} claims {claim!r}: no machine has that role"
            return [Problem(protocol.spec_file, 1, "sessions", _in_codegen(text))]
        index, machine = machines[role]
        taken = next(
            (t for t in machine.transitions if (t.source, t.input) == (source, event)), None
        )
        before = last.get(role)
        if taken is None:
            text = f"the session case {case['id']} claims this transition, which the machine lacks"
            where = _path(index, source, event)
            return [Problem(protocol.spec_file, machine.line, where, _in_codegen(text))]
        if source != machine.initial and (before is None or before.target != source):
            if before is None:
                text = (
                    f"the session case {case['id']} begins with this transition, but the "
                    f"{role} begins in {machine.initial}"
                )
                where, line = _path(index, source, event), taken.line
            else:
                text = (
                    f"the session case {case['id']} takes {transition} after this transition, "
                    f"which leads to {before.target}"
                )
                where, line = _path(index, before.source, before.input), before.line
            return [Problem(protocol.spec_file, line, where, _in_codegen(text))]
        last[role] = taken
    return []


def _path(index: int, state: str, event: str) -> str:
    return format_path(("sessions", index, "transitions", state, event))


def _in_codegen(text: str) -> str:
    return f"{text} (codegen/sessions.py)"


# -- OVP ---------------------------------------------------------------------------------------


def ovp_table_cases(b: _OVP) -> Iterator[Case]:
    """The OVP cases: the gateway's and the client's, each where the spec has its roles."""
    resume, end = b.role("resume"), b.role("end")
    yield from _gateway_windows(b, end)
    if resume is not None:
        yield from _gateway_resumes(b, resume)
        if end is not None:
            yield from _gateway_ends(b, resume, end)
    yield from _client(b, resume, end)


def _refused(b: _OVP) -> dict[str, Any]:
    """What a resume the gateway cannot honour gets (and any connection to a session over)."""
    return error(b.code("OVP_RESUME_EXPIRED"), b.close("policy"))


def _ending(b: _OVP, end: str, name: str, source: str) -> _Case:
    """A gateway case: one event, the client's first, then session.end at 0.5 (seq 2)."""
    assert b.server is not None
    case = b.started(name, source, events=1)
    b.input(case, 0, 0.2, ACCEPTED)
    return case.step(b.message(b.server, end, 2, 0.5), SENT)


def _gateway_windows(b: _OVP, end: str | None) -> Iterator[Case]:
    """The resume window is a timer: 1 ms after its end it has passed (a link still waiting
    for its session.resume is refused then), and every later connection is refused."""
    window, refused = b.constant("resume_window_ms") / 1000, _refused(b)
    source = b.cite("resume-window-boundary")

    case = b.started("the-window-passes", source, events=3)
    b.input(case, 0, 0.2, ACCEPTED)
    case.link(1.0, "lost").wait(1.0 + window + 0.001)
    case.step({"t": 1.0 + window + 0.001, "link": "open"}, refused)
    yield case.covers("new.start", "live.link_lost", "dropped.window_passed").done()

    case = b.started("the-window-passes-a-waiting-link", source)
    b.input(case, 0, 0.2, ACCEPTED)
    case.link(1.0, "lost").link(2.0, "open").wait(1.0 + window + 0.001, refused)
    yield case.covers("new.start", "live.link_lost", "dropped.fail").done()

    if end is not None:  # the window of the drop of the link that carried session.end
        case = _ending(
            b, end, "end-undelivered-past-the-window", b.cite("resume-after-session-end")
        )
        case.link(1.0, "lost").wait(1.0 + window + 0.001)
        case.step({"t": 1.0 + window + 0.001, "link": "open"}, refused)
        yield case.covers(
            "new.start", "live.end", "ending.link_lost", "end_undelivered.window_passed"
        ).done()


def _gateway_resumes(b: _OVP, resume: str) -> Iterator[Case]:
    window, refused = b.constant("resume_window_ms") / 1000, _refused(b)

    # A restarted gateway (or one that has not started the session) gets session.resume.
    case = b.case("resume-of-a-session-not-held", "gateway", b.cite("resume-of-a-session-not-held"))
    b.send(case, resume, 3, 0.0, refused, last_server_seq=5)
    yield case.covers("new.fail").done()

    # A half-open link: the client resumes on a new connection while the old one never dropped.
    case = b.started("resume-on-a-half-open-link", b.cite("resume-handshake"), events=3)
    b.input(case, 0, 0.2, ACCEPTED)
    case.link(1.0, "open")
    b.send(case, resume, 1, 1.0, replay([2, 3]), last_server_seq=1)
    b.input(case, 2, 1.1, ACCEPTED)
    yield case.covers("new.start", "live.resume").done()

    case = b.started("refused-resume-on-a-half-open-link", b.cite("resume-fails-closed"), events=3)
    b.input(case, 0, 0.2, ACCEPTED)
    case.link(1.0, "open")
    b.send(case, resume, 1, 1.0, refused, last_server_seq=4)
    yield case.covers("new.start", "live.fail").done()

    # At the window's end the timer has not fired: the resume is still taken.
    case = b.started("the-window-at-its-end", b.cite("resume-window-boundary"), events=3)
    b.input(case, 0, 0.2, ACCEPTED)
    case.link(1.0, "lost").wait(1.0 + window).link(1.0 + window, "open")
    b.send(case, resume, 1, 1.0 + window, replay([2, 3]), last_server_seq=1)
    yield case.covers("new.start", "live.link_lost", "dropped.resume").done()


def _gateway_ends(b: _OVP, resume: str, end: str) -> Iterator[Case]:
    """session.end the client has not read: sent while it was away, or on a link that dropped
    (or was half-open) before the client answered the close: a resume within the window gets
    it, with what it missed before it."""
    assert b.server is not None and b.server_event is not None
    window, refused = b.constant("resume_window_ms") / 1000, _refused(b)
    source = b.cite("resume-after-session-end")

    case = b.started("end-while-dropped", source, events=1)
    b.input(case, 0, 0.2, ACCEPTED)
    case.link(1.0, "lost")
    case.step(b.message(b.server, b.server_event, 2, 1.5), SENT)  # kept for the resume
    case.step(b.message(b.server, end, 3, 2.0), SENT)
    case.link(3.0, "open")
    b.send(case, resume, 1, 3.0, replay([2, 3]), last_server_seq=1)
    case.link(3.1, "closed").step({"t": 4.0, "link": "open"}, refused)
    yield case.covers(
        "new.start",
        "live.link_lost",
        "dropped.end",
        "end_undelivered.resume",
        "ending.end_delivered",
    ).done()

    case = _ending(b, end, "end-undelivered-resumed-at-the-window", source)
    case.link(1.0, "lost").wait(1.0 + window).link(1.0 + window, "open")
    b.send(case, resume, 1, 1.0 + window, replay([2]), last_server_seq=1)
    case.link(1.1 + window, "closed")
    yield case.covers(
        "new.start",
        "live.end",
        "ending.link_lost",
        "end_undelivered.resume",
        "ending.end_delivered",
    ).done()

    case = _ending(b, end, "end-undelivered-refused-resume", b.cite("resume-fails-closed"))
    case.link(1.0, "lost").link(2.0, "open")
    b.send(case, resume, 1, 2.0, refused, last_server_seq=3)
    yield case.covers("new.start", "live.end", "ending.link_lost", "end_undelivered.fail").done()

    case = _ending(b, end, "resume-after-the-end-on-a-half-open-link", source)
    case.link(1.0, "open")
    b.send(case, resume, 1, 1.0, replay([2]), last_server_seq=1)
    case.link(1.1, "lost").link(2.0, "open")
    b.send(case, resume, 2, 2.0, replay([2]), last_server_seq=1)
    case.link(2.1, "closed").step({"t": 3.0, "link": "open"}, refused)
    yield case.covers(
        "new.start",
        "live.end",
        "ending.resume",
        "ending.link_lost",
        "end_undelivered.resume",
        "ending.end_delivered",
    ).done()

    name = "refused-resume-after-the-end-on-a-half-open-link"
    case = _ending(b, end, name, b.cite("resume-fails-closed")).link(1.0, "open")
    b.send(case, resume, 1, 1.0, refused, last_server_seq=5)
    yield case.covers("new.start", "live.end", "ending.fail").done()


def _client(b: _OVP, resume: str | None, end: str | None) -> Iterator[Case]:
    assert b.server is not None and b.start is not None and b.server_event is not None
    server, start, event = b.server, b.start, b.server_event
    normal, expired = b.close("normal"), b.code("OVP_RESUME_EXPIRED")
    auth = b.code("OVP_AUTH_FAILED")
    window = b.constant("resume_window_ms") / 1000
    max_seq = b.constant("max_seq")
    carrier = next(c for c in b.p.errors if c.code == expired).carried_by[0]

    def new(name: str, transition: str) -> _Case:
        return b.case(name, "client", b.cite_table("client", transition))

    def hear(case: _Case, kind: str, seq: int, t: float, verdict: dict[str, Any], **f: Any) -> None:
        case.step(b.message(server, kind, seq, t, **f), verdict)

    def started(name: str, transition: str) -> _Case:
        """session.start at 0, the client's first event at 0.1, a server event at 0.2."""
        case = new(name, transition)
        hear(case, start, 0, 0.0, ACCEPTED)
        b.input(case, 0, 0.1, SENT)
        hear(case, event, 1, 0.2, ACCEPTED)
        return case

    def failing(name: str, transition: str) -> _Case:
        """session.start, then an unrecoverable error (the spec's example): session.end follows."""
        case = new(name, transition)
        hear(case, start, 0, 0.0, ACCEPTED)
        case.step(b.message(server, carrier, 1, 0.1, recoverable=False), ACCEPTED)
        return case

    # Before the start: the application hangs up, the link drops, the token is refused.
    yield (
        new("hang-up-before-connecting", "idle.hang_up")
        .call(0.0, "hang_up")
        .step({"t": 0.1, "link": "open"}, REFUSED)
        .covers("idle.hang_up")
        .done()
    )
    case = new("hang-up-before-the-start", "starting.hang_up").link(0.0, "open")
    yield case.call(0.1, "hang_up", close(normal)).covers("idle.connect", "starting.hang_up").done()
    case = new("link-lost-before-the-start", "starting.link_lost").link(0.0, "open")
    case.link(0.1, "lost").step({"t": 0.2, "link": "open"}, REFUSED)
    yield case.covers("idle.connect", "starting.link_lost").done()
    case = b.case("refused-token", "client", b.cite("bad-token-after-handshake"))
    case.step(b.message(server, carrier, 0, 0.0, code=auth, recoverable=False), ACCEPTED)
    yield case.link(0.1, "closed").covers("idle.connect", "starting.refused").done()

    # A live session ends: the application hangs up, the gateway ends it, or refuses a resume.
    case = started("hang-up", "live.hang_up").call(0.3, "hang_up", close(normal))
    hear(case, event, 2, 0.4, IGNORED)
    yield case.covers("idle.connect", "starting.start", "live.hang_up").done()
    if end is not None:
        case = started("session-end", "live.end")
        hear(case, end, 2, 0.3, ACCEPTED)
        hear(case, event, 3, 0.4, IGNORED)
        yield case.covers("idle.connect", "starting.start", "live.end").done()
    if resume is not None:
        case = started("refused-resume", "live.refused")
        case.link(1.0, "lost").link(2.0, "open")
        b.send(case, resume, 1, 2.0, SENT, last_server_seq=1)
        hear(case, carrier, 2, 2.1, ACCEPTED, code=expired, recoverable=False)
        yield (
            case.link(2.2, "closed")
            .covers(
                "idle.connect",
                "starting.start",
                "live.link_lost",
                "dropped.connect",
                "live.refused",
            )
            .done()
        )
        case = started("start-on-a-resumed-link", "live.broken")
        case.link(1.0, "lost").link(2.0, "open")
        b.send(case, resume, 1, 2.0, SENT, last_server_seq=1)
        hear(case, start, 0, 2.1, error(expired, normal))
        yield case.covers(
            "idle.connect", "starting.start", "live.link_lost", "dropped.connect", "live.broken"
        ).done()

    # A dropped session: the reconnects give up at the end of the window, or the app hangs up.
    case = b.case("reconnect-gives-up", "client", b.cite("resume-window-boundary"))
    hear(case, start, 0, 0.0, ACCEPTED)
    case.link(1.0, "lost").wait(1.0 + window - 0.001).wait(1.0 + window, error(expired))
    case.step({"t": 2.0 + window, "link": "open"}, REFUSED)
    yield case.covers("idle.connect", "starting.start", "live.link_lost", "dropped.give_up").done()
    case = started("hang-up-while-dropped", "dropped.hang_up").link(1.0, "lost")
    case.call(2.0, "hang_up").step({"t": 3.0, "link": "open"}, REFUSED)
    yield case.covers("idle.connect", "starting.start", "live.link_lost", "dropped.hang_up").done()

    # After an unrecoverable error, until session.end: every way out of failing.
    if end is not None:
        case = failing("fatal-error-then-end", "live.fatal_error")
        b.input(case, 0, 0.2, SENT)
        hear(case, end, 2, 0.3, ACCEPTED)
        yield case.covers(
            "idle.connect", "starting.start", "live.fatal_error", "failing.end"
        ).done()
    case = failing("fatal-error-then-refusal", "failing.refused")
    hear(case, carrier, 2, 0.3, ACCEPTED, code=expired, recoverable=False)
    yield case.covers(
        "idle.connect", "starting.start", "live.fatal_error", "failing.refused"
    ).done()
    case = failing("fatal-error-then-start", "failing.broken")
    hear(case, start, 0, 0.3, error(expired, normal))
    yield case.covers("idle.connect", "starting.start", "live.fatal_error", "failing.broken").done()
    case = failing("fatal-error-then-link-lost", "failing.link_lost")
    case.link(0.3, "lost").step({"t": 0.4, "link": "open"}, REFUSED)
    yield case.covers(
        "idle.connect", "starting.start", "live.fatal_error", "failing.link_lost"
    ).done()
    case = failing("fatal-error-then-hang-up", "failing.hang_up")
    case.call(0.3, "hang_up", close(normal))
    yield case.covers(
        "idle.connect", "starting.start", "live.fatal_error", "failing.hang_up"
    ).done()

    # The client's seq bound: its last seq is sent, the next event closes the link. (The step
    # shows that event with the last seq: no message can carry one past it.)
    case = b.case("seq-at-its-bound", "client", b.cite("seq-upper-bound"))
    hear(case, start, 0, 0.0, ACCEPTED)
    case.next_seq(0.1, max_seq)
    b.input(case, max_seq, 0.2, SENT)
    b.input(case, max_seq, 0.3, close(normal))
    yield case.covers("idle.connect", "starting.start", "live.seq_exhausted").done()
    case = failing("seq-at-its-bound-after-a-fatal-error", "failing.seq_exhausted")
    case.next_seq(0.2, max_seq)
    b.input(case, max_seq, 0.3, SENT)
    b.input(case, max_seq, 0.4, close(normal))
    yield case.covers(
        "idle.connect", "starting.start", "live.fatal_error", "failing.seq_exhausted"
    ).done()


# -- Brisvox -----------------------------------------------------------------------------------


def brisvox_table_cases(b: _Brisvox) -> Iterator[Case]:
    """The Brisvox cases: the agent's and the engine's."""
    assert b.start and b.accept and b.server_event
    reject = b.role("reject")
    if reject is not None:
        yield from _agent(b, b.start, b.accept, reject, b.server_event)
    end = b.role("end")
    if end is not None:
        yield from _engine(b, b.start, b.accept, b.server_event, end)


def _agent(b: _Brisvox, start: str, accept: str, reject: str, event: str) -> Iterator[Case]:
    budget = b.constant("sdk_handshake_timeout_ms") / 1000
    normal, policy = b.close("normal"), b.close("policy")
    unavailable = b.code("unavailable")

    def new(name: str, source: str) -> _Case:
        return b.case(name, "agent", source)

    # The handshake budget runs from the connection: no start by then is a policy close; a
    # start the application has not answered is rejected as unavailable.
    case = new("no-start-within-the-budget", b.cite("handshake-budget")).link(0.0, "open")
    case.wait(budget - 0.001).wait(budget, close(policy)).link(budget + 0.1, "closed")
    yield case.covers("awaiting_start.no_start", "closed.closed").done()
    case = new("start-undecided-within-the-budget", b.cite("handshake-budget"))
    b.server(case, start, 1, ACCEPTED)
    case.wait(budget - 0.001).wait(budget, rejected(unavailable, normal))
    yield (
        case.link(budget + 0.1, "closed")
        .covers("awaiting_start.start", "deciding.undecided", "closed.closed")
        .done()
    )

    case = new("reject", b.cite_table("agent", "deciding.reject"))
    b.server(case, start, 1, ACCEPTED)
    b.agent(case, reject, 0.01, SENT, code=unavailable, message="busy")
    yield (
        case.link(0.02, "closed")
        .covers("awaiting_start.start", "deciding.reject", "closed.closed")
        .done()
    )

    # The link closes at each point of the handshake.
    case = new("closed-before-the-start", b.cite_table("agent", "awaiting_start.closed"))
    yield case.link(0.0, "open").link(0.5, "closed").covers("awaiting_start.closed").done()
    case = new("closed-before-the-answer", b.cite_table("agent", "deciding.closed"))
    b.server(case, start, 1, ACCEPTED)
    yield case.link(0.5, "lost").covers("awaiting_start.start", "deciding.closed").done()
    case = new("closed-after-the-handshake", b.cite_table("agent", "open.closed"))
    b.server(case, start, 1, ACCEPTED)
    b.agent(case, accept, 0.01, SENT)
    b.server(case, event, 2, ACCEPTED)
    yield (
        case.link(0.5, "closed")
        .covers("awaiting_start.start", "deciding.accept", "open.closed")
        .done()
    )


def _engine(b: _Brisvox, start: str, accept: str, event: str, end: str) -> Iterator[Case]:
    normal, protocol_error = b.close("normal"), b.close("protocol_error")
    handshake = b.constant("handshake_timeout_ms") / 1000
    attempts = b.constant("reconnect_attempts")

    def new(name: str, transition: str) -> _Case:
        return b.case(name, "engine", b.cite_table("engine", transition))

    def linked(name: str, transition: str, *, resume: bool) -> _Case:
        """session.start, the agent's accept (with ``resume``), an event (seq 2)."""
        case = new(name, transition)
        b.server(case, start, 1, SENT)
        b.agent(case, accept, 0.01, ACCEPTED, resume=resume)
        b.server(case, event, 2, SENT)
        return case

    # Before a link is up: the first connection fails, or the call ends first.
    case = new("connect-failed", "idle.give_up").link(0.0, "failed").call(0.1, "end_call")
    yield case.covers("idle.give_up", "gone.end_call").done()
    case = new("call-ended-before-connecting", "idle.end_call").call(0.0, "end_call")
    yield case.step({"t": 0.1, "link": "open"}, REFUSED).covers("idle.end_call").done()
    case = new("call-ended-in-the-handshake", "handshaking.end_call")
    b.server(case, start, 1, SENT)
    case.call(0.005, "end_call", close(normal))
    b.agent(case, accept, 0.01, IGNORED)
    yield case.covers("idle.connected", "handshaking.end_call").done()

    # The call ends: session.end, the adapter's end_call again as it closes, the link closes.
    case = linked("call-end", "open.end_call", resume=False)
    b.server(case, end, 3, SENT, 0.05)
    case.call(0.06, "end_call").link(0.1, "closed").call(0.2, "end_call")
    yield case.covers(
        "idle.connected",
        "handshaking.accepted",
        "open.end_call",
        "ending.end_call",
        "ending.give_up",
        "gone.end_call",
    ).done()

    # A lost link: without resume, the agent is gone for the call.
    case = linked("link-lost-without-resume", "open.give_up", resume=False).link(1.0, "lost")
    yield (
        case.step({"t": 1.5, "link": "open"}, REFUSED)
        .covers("idle.connected", "handshaking.accepted", "open.give_up")
        .done()
    )

    # With resume: each failed attempt is retried until the series' last one.
    if attempts >= 1:
        case = linked("reconnect-attempts-run-out", "down.give_up", resume=True)
        case.link(1.0, "lost")
        for attempt in range(1, attempts + 1):
            case.link(1.0 + attempt / 2, "failed")
        case.step({"t": 1.5 + attempts / 2, "link": "open"}, REFUSED)
        retried = ("down.retry",) * (attempts - 1)
        yield case.covers(
            "idle.connected", "handshaking.accepted", "open.retry", *retried, "down.give_up"
        ).done()

    # A resumption's handshake gets no answer within the handshake timeout: a retry follows,
    # unless the call ends first.
    case = linked("resumption-unanswered", "handshaking.retry", resume=True)
    case.link(1.0, "lost").link(1.5, "open")
    b.server(case, start, 3, SENT, 1.5, resume={"attempt": 1, "previous_seq": 2, "down_ms": 500})
    case.wait(1.5 + handshake - 0.001).wait(1.5 + handshake, close(protocol_error))
    yield (
        case.call(2.0 + handshake, "end_call")
        .covers(
            "idle.connected",
            "handshaking.accepted",
            "open.retry",
            "down.connected",
            "handshaking.retry",
            "down.end_call",
        )
        .done()
    )
