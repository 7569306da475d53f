"""The resolver's ledger: what every phase of :func:`~codegen.resolver.resolve` shares.

It holds the spec being resolved, the problems found so far (all are reported at once), the
decisions read wherever they stand, and the lookup tables the early phases fill for the later
ones (constants, enums, type names, error codes, field sets). Its methods report problems and
read decisions; the phases (``items``, ``fields``, ``messages``, ``frames``) build on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codegen.ir import Acceptance, Constant, Decision, Enum, FieldSet
from codegen.loader import PathT, Problem, RawSpec

__all__ = ["Ledger"]


@dataclass
class Ledger:
    raw: RawSpec
    problems: list[Problem] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    decision_lines: dict[str, int] = field(default_factory=dict)
    decision_sites: list[tuple[int, str, PathT]] = field(default_factory=list)
    """(line, id, path of the id) of every decision, to report duplicates in file order."""
    moves: list[tuple[PathT, str]] = field(default_factory=list)
    """(path, target) of every acceptance's ``moved_to``, checked once close codes are known."""
    constants: dict[str, Constant] = field(default_factory=dict)
    enums: dict[str, Enum] = field(default_factory=dict)
    struct_names: set[str] = field(default_factory=set)
    error_codes: set[str] = field(default_factory=set)
    field_sets: dict[str, FieldSet] = field(default_factory=dict)

    def fail(self, path: PathT, message: str) -> None:
        self.problems.append(self.raw.problem(path, message))

    def _decisions(self, item: dict[str, Any], path: PathT, subject: str) -> tuple[Decision, ...]:
        out = []
        for i, d in enumerate(item.get("decisions", [])):
            where = (*path, "decisions", i)
            self.decision_sites.append((self.raw.line(where), d["id"], (*where, "id")))
            if d["id"] in self.decision_lines:
                continue  # a duplicate, reported by run() in file order
            self.decision_lines[d["id"]] = self.raw.line(where)
            for j, a in enumerate(d.get("accepts", [])):
                if "moved_to" in a:
                    self.moves.append(((*where, "accepts", j, "moved_to"), a["moved_to"]))
            accepts = tuple(
                Acceptance(
                    a["rule"],
                    a.get("message"),
                    a.get("field"),
                    a.get("old"),
                    a.get("new"),
                    a.get("moved_to"),
                )
                for a in d.get("accepts", [])
            )
            decision = Decision(
                d["id"], d["quote"].strip(), d["source"], d["decision"].strip(), subject, accepts
            )
            self.decisions.append(decision)
            out.append(decision)
        return tuple(out)

    def _unique(
        self,
        values: list[str],
        path: PathT,
        what: str,
        key: str | None,
        paths: list[PathT] | None = None,
    ) -> None:
        """Report every repeated value: at ``paths[index]`` when given, else at ``key`` of
        ``path[index]``."""
        seen: dict[str, int] = {}
        for index, value in enumerate(values):
            if value in seen:
                where: PathT = (*path, index, key) if key is not None else path
                first = self.raw.line((*path, seen[value])) if key is not None else None
                if paths is not None:
                    where, first = paths[index], self.raw.line(paths[seen[value]])
                suffix = f" (first at line {first})" if first else ""
                self.fail(where, f"duplicate {what} {value!r}{suffix}")
            else:
                seen[value] = index

    def _code(self, code: str | None, path: PathT) -> None:
        if code is not None and code not in self.error_codes:
            self.fail(path, f"unknown error code {code!r}")
