"""The one exception every decoder and encoder of voxwire raises for bad input."""

from __future__ import annotations

__all__ = ["ProtocolError"]


class ProtocolError(Exception):
    """A message or frame that breaks its protocol.

    Each protocol has its own subclass (``voxwire.brisvox.ProtocolError``,
    ``voxwire.ovp.ProtocolError``) whose ``code`` is one of that protocol's error codes.

    Attributes:
        code: The protocol's own error code (``bad_message``, ``OVP_EVENT_SCHEMA_INVALID``, ...).
        detail: What was wrong, in one sentence.
        path: Where: a JSON path such as ``$.context[3].text``, or ``None`` for the whole input.
        message_type: The message's wire ``type`` when it was known, else ``None``.
    """

    code: str

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        path: str | None = None,
        message_type: str | None = None,
    ) -> None:
        self.code = code
        self.detail = detail
        self.path = path
        self.message_type = message_type
        where = " ".join(part for part in (message_type, path) if part)
        super().__init__(f"{code}: {where}: {detail}" if where else f"{code}: {detail}")

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.code, self.detail, self.path, self.message_type))


def _rebuild(
    cls: type[ProtocolError], code: str, detail: str, path: str | None, message_type: str | None
) -> ProtocolError:
    return cls(code, detail, path=path, message_type=message_type)
