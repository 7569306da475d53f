"""``voxwire demo --browser``: a softphone page and an OVP gateway with the demo agent, on one
loopback port.

:class:`Softphone` runs a :class:`~voxwire.ovp.gateway.Gateway` whose handler is the
:class:`~voxwire.demo.voice_agent.DemoAgent`, and answers beside the gateway's own paths (on
the same port, before any upgrade: :class:`SoftphoneSite`):

- ``/``: the page (``index.html`` of this folder);
- ``/softphone.js``: its script, ``softphone.ts`` bundled with the npm package by
  ``python -m codegen softphone`` (generated, never edited);
- ``/session``: a new session, as the OVP document's "session-start response" hands it to a
  browser softphone: ``{"url", "sessionId", "token"}``;
- ``/token?session=ID``: a fresh token for a session this server issued (the page asks for one
  at each later connection; a token lives 300 s);
- ``/voice/ws/{session_id}``: the gateway; ``/healthz``, ``/readyz``, ``/metrics`` as on every
  gateway.

The tokens are minted here with a secret made at start and never sent anywhere; the page only
ever holds a token. The two token paths answer only a request addressed to a loopback name
(``Host: 127.0.0.1``, ``localhost``, ``[::1]``), so a web page that rebinds its own name to
this machine cannot have one minted. The page loads nothing from the network: its policy
(``Content-Security-Policy``) allows only this origin, and ``blob:`` scripts for the audio
module's worklets.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import OrderedDict
from http import HTTPStatus
from importlib import resources
from typing import Final, TextIO
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from voxwire.capture import Record
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.demo.voice_agent import DemoAgent
from voxwire.observe.endpoints import Endpoints, MetricsText
from voxwire.ovp.gateway import Gateway, mint_token

__all__ = [
    "PAGE_FILES",
    "SESSION_PATH",
    "TENANT",
    "TOKEN_PATH",
    "Softphone",
    "SoftphoneSite",
    "serve",
]

SESSION_PATH: Final = "/session"
TOKEN_PATH: Final = "/token"
TENANT: Final = "tenant_softphone_demo"
PAGE_FILES: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/softphone.js": ("softphone.js", "text/javascript; charset=utf-8"),
}
"""The page's paths: the file of this folder each serves, and its type."""
_POLICY: Final = (
    "default-src 'none'; script-src 'self' blob:; connect-src 'self'; style-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "::1"})
_ISSUED_MAX: Final = 256
"""Sessions whose ids :data:`TOKEN_PATH` still mints tokens for (the newest ones)."""


def _response(
    connection: ServerConnection,
    body: bytes,
    content_type: str,
    status: HTTPStatus = HTTPStatus.OK,
) -> Response:
    response = connection.respond(status, "")
    response.body = body
    for name in ("Content-Type", "Content-Length"):
        del response.headers[name]
    response.headers["Content-Type"] = content_type
    response.headers["Content-Length"] = str(len(body))
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def _host_name(request: Request) -> str | None:
    """The host name a request was addressed to (its ``Host`` header: a name and an optional
    port, nothing else), lower case; None for anything else."""
    header = request.headers.get("Host", "")
    try:
        split = urlsplit(f"//{header}")
        _ = split.port  # a port that is no number raises
    except ValueError:
        return None
    if split.netloc != header or split.username is not None:
        return None
    return split.hostname


class SoftphoneSite(Endpoints):
    """The page, its script and the session paths, then a gateway's health paths.

    Args:
        secret: The gateway's token secret.
        metrics: What ``/metrics`` serves (the gateway's).
    """

    def __init__(self, secret: str, *, metrics: MetricsText | None = None) -> None:
        super().__init__(metrics=metrics)
        self._secret = secret
        self._issued: OrderedDict[str, None] = OrderedDict()
        folder = resources.files(__name__)
        self._files = {
            path: (folder.joinpath(name).read_bytes(), kind)
            for path, (name, kind) in PAGE_FILES.items()
        }

    def answer(self, connection: ServerConnection, request: Request) -> Response | None:
        """The response to one of the site's paths (see the module), else the health paths'."""
        target = urlsplit(request.path)
        page = self._files.get(target.path)
        if page is not None:
            response = _response(connection, *page)
            if target.path == "/":
                response.headers["Content-Security-Policy"] = _POLICY
            return response
        if target.path not in (SESSION_PATH, TOKEN_PATH):
            return super().answer(connection, request)
        if _host_name(request) not in _LOOPBACK_NAMES:
            return connection.respond(HTTPStatus.FORBIDDEN, "tokens go to loopback pages only\n")
        # The gateway is this very origin, under the name the page used (so its policy allows it).
        origin = f"ws://{request.headers['Host']}"
        if target.path == SESSION_PATH:
            session_id = f"ovps_demo_{secrets.token_hex(8)}"
            self._issued[session_id] = None
            if len(self._issued) > _ISSUED_MAX:
                self._issued.popitem(last=False)
            answer = {"url": origin, "sessionId": session_id}
        else:
            session_id = parse_qs(target.query).get("session", [""])[0]
            if session_id not in self._issued:
                return connection.respond(HTTPStatus.NOT_FOUND, "no such session here\n")
            answer = {}
        answer["token"] = mint_token(self._secret, session_id=session_id, tenant_id=TENANT)
        return _response(connection, json.dumps(answer).encode(), "application/json")


class Softphone:
    """The softphone page and a gateway with the demo agent, on one port (see the module).

    Args:
        host: Where to listen; loopback unless told otherwise.
        port: The port; 0 picks a free one.
        clock: The gateway's and the agent's clock.
        record: Record each session (``Gateway(record=...)``).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Clock = SYSTEM_CLOCK,
        record: Record = None,
    ) -> None:
        secret = secrets.token_urlsafe(32)
        self.gateway = Gateway(
            DemoAgent(clock), secret=secret, host=host, port=port, clock=clock, record=record
        )
        self.site = SoftphoneSite(secret, metrics=self.gateway.endpoints.metrics)
        self.gateway.endpoints = self.site

    @property
    def url(self) -> str:
        """The page's address (``http://127.0.0.1:PORT/``)."""
        return f"http{self.gateway.url.removeprefix('ws')}/"

    async def start(self) -> None:
        """Listen."""
        await self.gateway.start()

    async def close(self) -> None:
        """Stop listening and end every session."""
        await self.gateway.close()

    async def __aenter__(self) -> Softphone:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def serve(*, host: str, port: int, out: TextIO, record: Record = None) -> None:
    """Serve until interrupted (Ctrl-C raises ``KeyboardInterrupt`` here, once all is closed);
    the page's address is the first line on ``out``."""

    async def forever() -> None:
        async with Softphone(host=host, port=port, record=record) as softphone:
            print(f"voxwire softphone: open {softphone.url} in a browser", file=out, flush=True)
            print(
                "  the page and an OVP gateway with the demo agent, on one port; Ctrl-C stops it",
                file=out,
                flush=True,
            )
            await asyncio.Event().wait()

    asyncio.run(forever())
