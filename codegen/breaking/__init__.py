"""``python -m codegen breaking``: what a spec change breaks, judged on the resolved specs.

Modelled on ``buf breaking``: every finding has a stable rule id (:data:`.findings.RULES`), names
the message (or frame) and the field, and says which side it breaks:

- ``old_senders``: peers built from the old spec send messages that receivers built from the new
  one refuse (or read differently);
- ``old_receivers``: peers built from the old spec refuse (or misread) what new senders write;
- ``both``;
- ``users``: the wire is unchanged but the generated Python API is not (a class or attribute
  renamed, a constant removed). Those findings are of kind ``api``; all others are ``wire``.

A decision in the new spec accepts findings by naming them (``accepts: [{rule, message, field}]``);
an accepted finding is reported but does not fail the check. docs/evolution.md lists the rules.

This module is the command: :func:`compare` walks the kinds of change, one module each
(:mod:`.messages`, :mod:`.fields` with :mod:`.enums`, :mod:`.items`, :mod:`.frames`), and
:func:`report` compares today's specs with older ones (a git ref or a folder).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from codegen.breaking.findings import RULES, Finding, plain
from codegen.breaking.frames import compare_frames
from codegen.breaking.items import (
    compare_close_codes,
    compare_constants,
    compare_errors,
    compare_transport,
)
from codegen.breaking.messages import compare_messages
from codegen.ir import Protocol
from codegen.loader import Problem, SpecError, load
from codegen.pipeline import load_protocols, spec_files
from codegen.render import ROOT
from codegen.resolver import resolve

__all__ = ["Report", "compare", "load_against", "report"]


def compare(old: Protocol, new: Protocol) -> list[Finding]:
    """Every breaking change from ``old`` to ``new``, accepted ones marked, in a stable order."""
    found = list(_compare(old, new))
    wire = [f for f in found if f.kind == "wire"]
    if old.version == new.version and any(not _accepted_by(new, f) for f in wire):
        found.append(
            Finding(
                "PROTOCOL_VERSION_NOT_BUMPED",
                "both",
                new.id,
                None,
                None,
                f"{len(wire)} wire-breaking change(s) and protocol.version is still "
                f"{new.version!r}",
                values=(old.version, new.version),
            )
        )
    return [replace(f, accepted_by=_accepted_by(new, f)) for f in found]


def _accepted_by(new: Protocol, finding: Finding) -> str | None:
    """The decision that accepts ``finding``: it names its rule, its item and both values."""
    for decision in new.decisions:
        for a in decision.accepts:
            if (
                a.rule == finding.rule
                and a.message in (None, finding.message)
                and a.field in (None, finding.field)
                and (plain(a.old), plain(a.new)) == (finding.old, finding.new)
            ):
                return decision.id
    return None


def _compare(old: Protocol, new: Protocol) -> Iterator[Finding]:
    yield from compare_messages(old, new)
    yield from compare_errors(old, new)
    yield from compare_close_codes(old, new)
    yield from compare_constants(old, new)
    yield from compare_frames(old, new)
    yield from compare_transport(old, new)


@dataclass(frozen=True)
class Report:
    """What ``breaking`` found for each protocol."""

    against: str
    findings: tuple[Finding, ...]

    @property
    def failing(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.accepted_by is None)

    def to_json(self) -> dict[str, Any]:
        return {
            "against": self.against,
            "breaking": len(self.failing),
            "accepted": len(self.findings) - len(self.failing),
            "findings": [f.to_json() for f in self.findings],
        }

    def lines(self) -> Iterator[str]:
        yield from (str(f) for f in self.findings)
        accepted = len(self.findings) - len(self.failing)
        yield (
            f"{len(self.failing)} breaking change(s) against {self.against}"
            + (f", {accepted} accepted by decisions" if accepted else "")
        )


def load_against(ref: str, root: Path = ROOT) -> list[Protocol]:
    """The older specs: a path (a spec file, or a folder of them), else a git ref of ``root``."""
    given = Path(ref)
    if given.is_dir():
        return [_resolve(p, str(p)) for p in sorted(given.glob("*.yaml"))]
    if given.is_file():
        return [_resolve(given, ref)]
    known = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if known.returncode != 0:
        raise SpecError([Problem(ref, 1, "", f"neither a spec path nor a git ref of {root}")])
    with tempfile.TemporaryDirectory() as tmp:
        out = []
        for path in spec_files(root):
            rel = path.relative_to(root).as_posix()
            shown = subprocess.run(
                ["git", "-C", str(root), "show", f"{ref}:{rel}"],
                capture_output=True,
                check=False,
            )
            if shown.returncode != 0:
                reason = shown.stderr.decode(errors="replace").strip()
                if "exists on disk, but not in" in reason or "does not exist in" in reason:
                    continue  # a protocol the older version did not have
                raise SpecError([Problem(f"{ref}:{rel}", 1, "", f"cannot read it: {reason}")])
            copy = Path(tmp) / path.name
            copy.write_bytes(shown.stdout)
            out.append(_resolve(copy, f"{ref}:{rel}"))
        return out


def _resolve(path: Path, shown: str) -> Protocol:
    return resolve(load(path, shown))


def report(against: str, root: Path = ROOT, current: Iterable[Protocol] | None = None) -> Report:
    """Compare the specs of ``root`` (or ``current``) with those of ``against``."""
    new = {p.id: p for p in (load_protocols(root) if current is None else current)}
    _check_acceptances(new.values())
    findings: list[Finding] = []
    for old in load_against(against, root):
        now = new.get(old.id)
        if now is None:
            findings.append(
                Finding(
                    "PROTOCOL_REMOVED",
                    "both",
                    old.id,
                    None,
                    None,
                    f"{old.id} has no spec now",
                    values=(old.id, None),
                )
            )
            continue
        findings += compare(old, now)
    return Report(against, tuple(findings))


def _check_acceptances(protocols: Iterable[Protocol]) -> None:
    """Refuse a decision that accepts a rule id that does not exist (a typo accepts nothing)."""
    problems = [
        Problem(p.spec_file, 1, f"decision {d.id}", f"accepts unknown rule {a.rule!r}")
        for p in protocols
        for d in p.decisions
        for a in d.accepts
        if a.rule not in RULES
    ]
    if problems:
        raise SpecError(problems)
