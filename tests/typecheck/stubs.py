"""Minimal adapters that inherit the generated role mixins, for the type-check samples.

They record what the typed API passes to the hooks; the real adapters (voxwire.ovp,
voxwire.brisvox) implement the same hooks on their cores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from voxwire import brisvox, ovp
from voxwire.brisvox.roles import AgentReceives, AgentSends, EngineReceives, EngineSends
from voxwire.ovp.roles import ClientReceives, ClientSends, GatewayReceives, GatewaySends

__all__ = ["Agent", "Client", "Engine", "Gateway"]


class _Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[type[Any], dict[str, Any]]] = []
        self.handlers: dict[str, Callable[[Any], object]] = {}

    def _on(self, message_type: str, handler: Callable[[Any], object]) -> None:
        self.handlers[message_type] = handler


class Client(_Recorder, ClientSends[None], ClientReceives):
    def _send(self, kind: type[ovp.ClientMessage], fields: dict[str, Any]) -> None:
        self.sent.append((kind, fields))


class Gateway(_Recorder, GatewaySends[int], GatewayReceives):
    def _send(self, kind: type[ovp.ServerMessage], fields: dict[str, Any]) -> int:
        self.sent.append((kind, fields))
        return len(self.sent)


class Agent(_Recorder, AgentSends[None], AgentReceives):
    def _send(self, kind: type[brisvox.AgentMessage], fields: dict[str, Any]) -> None:
        self.sent.append((kind, fields))


class Engine(_Recorder, EngineSends[None], EngineReceives):
    def _send(self, kind: type[brisvox.ServerMessage], fields: dict[str, Any]) -> None:
        self.sent.append((kind, fields))
