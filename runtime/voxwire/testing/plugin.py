"""The pytest plugin of voxwire's fakes: pytest loads it by itself once voxwire is installed.

Its fixtures hand each test a fake of a role (:mod:`voxwire.testing`); every fake is used inside
the test's own event loop (``asyncio.run``, or any async test runner), and a failing test shows
what each of its fakes saw, both ways, with what they refused.

- ``fake_gateway``: a :class:`~voxwire.testing.gateway.FakeGateway` (``voxwire[gateway]``):
  ``async with fake_gateway:``, then point the client under test at ``fake_gateway.url``;
- ``fake_agent``: a :class:`~voxwire.testing.agent.FakeAgent`: ``async with fake_agent:``,
  then point the engine under test at ``fake_agent.url``;
- ``fake_ovp_client``: makes :class:`~voxwire.testing.client.FakeOVPClient` s:
  ``async with fake_ovp_client(gateway_url, session_id, token) as client:``;
- ``fake_engine``: opens :class:`~voxwire.testing.engine.AgentCall` calls:
  ``async with fake_engine(agent_url, token=...) as call:``.

Set a fixture's fake up before entering it (``fake_agent.decision = Reject(...)``,
``fake_gateway.starts = False``...); a maker passes its keyword arguments on to the fake.
``--voxwire-wait=SECONDS`` (or the ini option ``voxwire_wait``) sets how long the fakes wait
for what a test expects, 5 s unless set.

The plugin imports no fake until a test asks for one, and pytest only when pytest loads it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from voxwire.ovp.client import TokenSource
    from voxwire.testing.agent import FakeAgent
    from voxwire.testing.client import FakeOVPClient
    from voxwire.testing.engine import AgentCall
    from voxwire.testing.gateway import FakeGateway

__all__ = [
    "AgentCallMaker",
    "FakeOVPClientMaker",
    "fake_agent",
    "fake_engine",
    "fake_gateway",
    "fake_ovp_client",
]


class FakeOVPClientMaker(Protocol):
    """What ``fake_ovp_client`` gives: makes a fake client of the gateway at ``url``."""

    def __call__(
        self, url: str, session_id: str, token: TokenSource, **options: Any
    ) -> FakeOVPClient: ...


class AgentCallMaker(Protocol):
    """What ``fake_engine`` gives: opens a call to the agent at ``url`` (``AgentCall.open``)."""

    def __call__(self, url: str, **options: Any) -> AbstractAsyncContextManager[AgentCall]: ...


class _Shown(Protocol):
    def transcript(self) -> str: ...


_FAKES = pytest.StashKey[list[tuple[str, _Shown]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    help = "real seconds voxwire's fakes wait for what a test expects (default 5)"
    parser.addini("voxwire_wait", help, default=None)
    parser.getgroup("voxwire").addoption(
        "--voxwire-wait", type=float, default=None, metavar="SECONDS", help=help
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test's report shows what each of its fakes saw."""
    report = yield
    if report.failed:
        for name, fake in item.stash.get(_FAKES, []):
            report.sections.append((f"voxwire {name}", fake.transcript()))
    return report


@pytest.fixture
def fake_gateway(request: pytest.FixtureRequest) -> Iterator[FakeGateway]:
    """A fake OVP gateway for a test of a client: ``async with fake_gateway:`` inside the
    test's event loop, then ``fake_gateway.url`` and ``fake_gateway.token(session_id)``."""
    try:
        from voxwire.testing.gateway import FakeGateway
    except ImportError as exc:
        pytest.fail(f"fake_gateway needs voxwire's gateway extra: {exc}", pytrace=False)
    fake = FakeGateway(wait=_wait(request.config))
    _show(request, "fake_gateway", fake)
    yield fake


@pytest.fixture
def fake_agent(request: pytest.FixtureRequest) -> Iterator[FakeAgent]:
    """A fake Brisvox agent for a test of an engine: ``async with fake_agent:`` inside the
    test's event loop, then point the engine at ``fake_agent.url``."""
    from voxwire.testing.agent import FakeAgent

    fake = FakeAgent(wait=_wait(request.config))
    _show(request, "fake_agent", fake)
    yield fake


@pytest.fixture
def fake_ovp_client(request: pytest.FixtureRequest) -> FakeOVPClientMaker:
    """Makes fake OVP clients for a test of a gateway:
    ``async with fake_ovp_client(url, session_id, token) as client:``."""
    from voxwire.testing.client import FakeOVPClient

    def make(url: str, session_id: str, token: TokenSource, **options: Any) -> FakeOVPClient:
        options.setdefault("wait", _wait(request.config))
        fake = FakeOVPClient(url, session_id, token, **options)
        _show(request, f"fake_ovp_client {session_id}", fake)
        return fake

    return make


@pytest.fixture
def fake_engine(request: pytest.FixtureRequest) -> AgentCallMaker:
    """Opens calls to an agent for a test of the agent, through voxwire's engine side:
    ``async with fake_engine(url, token=...) as call:`` (``AgentCall.open``'s options)."""
    from voxwire.testing.engine import AgentCall

    @contextlib.asynccontextmanager
    async def play(url: str, **options: Any) -> AsyncIterator[AgentCall]:
        options.setdefault("wait", _wait(request.config))
        async with AgentCall.open(url, **options) as call:
            _show(request, f"fake_engine {options.get('session_id', 'test-call')}", call)
            yield call

    return play


def _show(request: pytest.FixtureRequest, name: str, fake: _Shown) -> None:
    request.node.stash.setdefault(_FAKES, []).append((name, fake))


def _wait(config: pytest.Config) -> float | None:
    chosen: Any = config.getoption("--voxwire-wait")
    if chosen is None:
        chosen = config.getini("voxwire_wait")
    return None if chosen in (None, "") else float(chosen)
