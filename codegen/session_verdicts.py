"""The verdicts a session case expects of its steps, as JSON (docs/conformance.md, "Sessions").

Shared by the session cases (:mod:`codegen.sessions`) and those that take the rest of each role's
table (:mod:`codegen.session_coverage`).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["ACCEPTED", "DONE", "IGNORED", "REFUSED", "SENT", "close", "error", "rejected", "replay"]

ACCEPTED: Final = {"verdict": "accepted"}
SENT: Final = {"verdict": "sent"}
IGNORED: Final = {"verdict": "ignored"}
DONE: Final = {"verdict": "done"}
"""A link event, a call or a wait taken, with nothing written or closed."""
REFUSED: Final = {"verdict": "refused"}
"""The side would not do it now: no such message from it here, no connection after its end."""


def error(code: str, close: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"verdict": "error", "code": code}
    if close is not None:
        out["close"] = close
    return out


def replay(seqs: list[int]) -> dict[str, Any]:
    return {"verdict": "replay", "seqs": seqs}


def close(code: int) -> dict[str, Any]:
    return {"verdict": "close", "close": code}


def rejected(code: str, close: int) -> dict[str, Any]:
    return {"verdict": "rejected", "code": code, "close": close}
