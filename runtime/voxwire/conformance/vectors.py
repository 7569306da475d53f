"""The conformance vectors and expected-failures files: reading them, checking their form.

The format is specified in docs/conformance.md; the files shipped with voxwire are found in
every folder of each protocol package (one in a wheel, two in an editable install).
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

from voxwire.conformance.sessions import LINK_STEPS
from voxwire.errors import VoxwireError

__all__ = [
    "DEFAULT_EXPECTED_FAILURES",
    "KINDS",
    "PROTOCOLS",
    "VECTOR_FILES",
    "Case",
    "VectorError",
    "default_expected_failures",
    "input_bytes",
    "load_cases",
    "load_expected_failures",
    "read_vectors",
]

PROTOCOLS: Final = ("brisvox", "ovp")
"""The protocols whose vectors ship with voxwire."""
KINDS: Final = ("decode", "frame", "session")
"""The kinds of case the format defines."""
VECTOR_FILES: Final = ("vectors.jsonl", "vectors_handwritten.jsonl", "sessions.jsonl")
DEFAULT_EXPECTED_FAILURES: Final = "expected_failures.txt"
"""voxwire's own list, beside this module: applied when no testee is named."""


class VectorError(VoxwireError, ValueError):
    """A vectors or expected-failures file that does not follow the format."""


@dataclass(frozen=True)
class Case:
    """One conformance case, as read from a vectors file."""

    id: str
    protocol: str
    kind: str
    data: dict[str, Any]
    """The whole case object."""
    where: str
    """file:line it was read from."""

    @property
    def expect(self) -> dict[str, Any]:
        expect: dict[str, Any] = self.data["expect"]
        return expect


def _packaged_files() -> list[tuple[str, str]]:
    """(name, text) of every vectors file shipped in the package, in a stable order.

    A protocol package is one folder in a wheel but two in an editable install (the generated
    and the hand-written halves), so every folder of its ``__path__`` is searched.
    """
    found: list[tuple[str, str]] = []
    for protocol in PROTOCOLS:
        package = importlib.import_module(f"voxwire.{protocol}")
        roots: list[Any] = [resources.files(package)]
        roots += [Path(entry) for entry in getattr(package, "__path__", [])]
        seen: set[str] = set()
        for name in VECTOR_FILES:
            for root in roots:
                resource = root.joinpath(name)
                key = str(resource)
                if key in seen or not resource.is_file():
                    continue
                seen.add(key)
                found.append((f"voxwire/{protocol}/{name}", resource.read_text(encoding="utf-8")))
                break
    return found


def read_vectors(text: str, name: str) -> list[Case]:
    """The cases of one vectors file; a header line (no ``id``) is skipped."""
    cases = []
    # Lines end at "\n" only: a raw U+2028 inside a JSON string is no line break here.
    for number, line in enumerate(text.split("\n"), 1):
        where = f"{name}:{number}"
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise VectorError(f"{where}: not a JSON line: {exc}") from None
        if not isinstance(data, dict):
            raise VectorError(f"{where}: a line must be a JSON object")
        if "id" not in data:
            if number == 1 and "generated_by" in data:
                continue  # the header of a generated file
            raise VectorError(f"{where}: a case needs an id")
        cases.append(_case(data, where))
    return cases


def _case(data: dict[str, Any], where: str) -> Case:
    def need(key: str, kind: type | tuple[type, ...]) -> Any:
        if not isinstance(data.get(key), kind):
            what = (
                kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            )
            raise VectorError(f"{where}: {data.get('id')!r}: `{key}` is missing or not a {what}")
        return data[key]

    case_id = need("id", str)
    protocol = need("protocol", str)
    kind = need("kind", str)
    if kind not in KINDS:
        raise VectorError(f"{where}: {case_id}: unknown kind {kind!r}")
    need("expect", dict)
    need("source", str)
    if kind != "session":
        data_in = need("input", dict)
        if len(data_in) != 1 or next(iter(data_in)) not in ("text", "base64", "hex"):
            raise VectorError(f"{where}: {case_id}: input is one of text, base64 or hex")
        input_bytes(data_in, where)
    if kind == "decode":
        need("sender", str)
    if kind == "session":
        need("side", str)
        steps = need("steps", list)
        verdicts = data["expect"].get("steps")
        if not isinstance(verdicts, list) or len(verdicts) != len(steps):
            raise VectorError(f"{where}: {case_id}: expect.steps has one verdict per step")
        _check_steps_form(steps, f"{where}: {case_id}")
        _check_covers(data.get("covers", []), f"{where}: {case_id}")
    return Case(case_id, protocol, kind, data, where)


def _check_steps_form(steps: list[Any], where: str) -> None:
    """Every step is a message (``from``, ``text``), a link event, an application's call, a
    wait or the side's next seq, at a time never going back."""
    last = 0.0
    for index, step in enumerate(steps):
        t = step.get("t") if isinstance(step, dict) else None
        if not isinstance(t, (int, float)) or isinstance(t, bool) or t < last:
            raise VectorError(f"{where}: step {index} has no time `t` at or after {last}")
        last = t
        if not _step_form(step):
            raise VectorError(
                f"{where}: step {index} is neither a message, a link event, a call, a wait "
                "nor a next seq"
            )


def _step_form(step: dict[str, Any]) -> bool:
    """Whether ``step`` has one of the forms of docs/conformance.md, "Sessions"."""
    if isinstance(step.get("from"), str) and isinstance(step.get("text"), str):
        return True
    seq = step.get("next_seq")
    return (
        step.get("link") in LINK_STEPS
        or isinstance(step.get("call"), str)
        or step.get("wait") is True
        or (type(seq) is int and seq >= 0)
    )


def _check_covers(covers: Any, where: str) -> None:
    """A session case's ``covers``: ``"<role> <state>.<input>"`` strings."""
    if not isinstance(covers, list) or not all(
        isinstance(c, str) and re.fullmatch(r"\w+ \w+\.\w+", c) for c in covers
    ):
        raise VectorError(f'{where}: covers is a list of "<role> <state>.<input>" strings')


def input_bytes(data_in: dict[str, Any], where: str = "") -> bytes:
    """The bytes of a case's ``input`` (``text``, ``base64`` or ``hex``)."""
    (key, value), *_ = data_in.items()
    if not isinstance(value, str):
        raise VectorError(f"{where}: input.{key} is not a string")
    try:
        if key == "text":
            return value.encode("utf-8")
        if key == "base64":
            return base64.b64decode(value, validate=True)
        return bytes.fromhex(value)
    except (UnicodeEncodeError, binascii.Error, ValueError) as exc:
        raise VectorError(f"{where}: input.{key}: {exc}") from None


def load_cases(paths: Sequence[str | Path] | None = None) -> list[Case]:
    """The cases of ``paths`` (files), or of every vectors file shipped with voxwire."""
    files = (
        [(str(p), Path(p).read_text(encoding="utf-8")) for p in paths]
        if paths
        else _packaged_files()
    )
    cases: list[Case] = []
    seen: dict[str, str] = {}
    for name, text in files:
        for case in read_vectors(text, name):
            if case.id in seen:
                raise VectorError(
                    f"{case.where}: duplicate id {case.id} (first at {seen[case.id]})"
                )
            seen[case.id] = case.where
            cases.append(case)
    return cases


def load_expected_failures(text: str, name: str) -> dict[str, str]:
    """Case id -> its note, from an expected-failures file.

    One id a line; ``#`` starts a comment. The comment lines above a group of ids are their note,
    unless an id's own line carries one after a ``#``.
    """
    out: dict[str, str] = {}
    comment: list[str] = []
    after_id = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            comment, after_id = [], False
            continue
        if stripped.startswith("#"):
            if after_id:
                comment, after_id = [], False
            comment.append(stripped.lstrip("#").strip())
            continue
        after_id = True
        case_id, _, note = stripped.partition("#")
        case_id = case_id.strip()
        if " " in case_id:
            raise VectorError(f"{name}:{number}: one case id a line, not {case_id!r}")
        out[case_id] = note.strip() or " ".join(comment)
    return out


def default_expected_failures() -> dict[str, str]:
    """voxwire's own expected failures (the list shipped beside this package)."""
    resource = resources.files("voxwire.conformance").joinpath(DEFAULT_EXPECTED_FAILURES)
    return load_expected_failures(resource.read_text(encoding="utf-8"), DEFAULT_EXPECTED_FAILURES)
