"""The codegen pipeline: load and check every spec, resolve, render, and write or compare."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from codegen.asyncapi import (
    ASYNCAPI_VERSION,
    asyncapi_document,
    asyncapi_outputs,
    render_asyncapi,
)
from codegen.examples import check_examples
from codegen.flows import load_flows
from codegen.ir import Protocol
from codegen.loader import Problem, SpecError, load
from codegen.reference import asyncapi_page, diagram_pages
from codegen.render import ROOT, Output, package_stub, render
from codegen.resolver import resolve
from codegen.sessions import build_sessions, session_outputs
from codegen.typescript import render_package

__all__ = ["SPEC_DIR", "Drift", "check", "generate", "load_protocols", "outputs"]

SPEC_DIR = ROOT / "spec"
GENERATED_ROOTS = (
    "generated/voxwire",
    "generated/typescript",
    "generated/asyncapi",
    "docs/reference",
)
"""Folders every file of which is generated: a file there that the spec does not produce is an
orphan."""


def spec_files(root: Path = ROOT) -> list[Path]:
    """The protocol specs, in a stable order (the format schema is not one)."""
    return sorted(p for p in (root / "spec").glob("*.yaml"))


def load_protocols(root: Path = ROOT) -> list[Protocol]:
    """Load, check and resolve every spec; raise :class:`SpecError` with all problems of all."""
    problems: list[Problem] = []
    protocols = []
    for path in spec_files(root):
        try:
            raw = load(path, str(path.relative_to(root)))
            protocol = resolve(raw)
        except SpecError as exc:
            problems += exc.problems
            continue
        problems += check_examples(protocol, raw)
        try:
            load_flows(protocol, root)
            build_sessions(protocol)  # its cases need decisions, codes, constants of the spec
        except SpecError as exc:
            problems += exc.problems
        protocols.append(protocol)
    if problems:
        raise SpecError(problems)
    return protocols


def outputs(root: Path = ROOT) -> list[Output]:
    """Everything the specs produce, in a stable order."""
    found = []
    protocols = load_protocols(root)
    for protocol in protocols:
        found += render(protocol)
        found += asyncapi_outputs(protocol)
        path, page = asyncapi_page(
            protocol, asyncapi_document(protocol), render_asyncapi(protocol), ASYNCAPI_VERSION
        )
        found.append(Output(path, page))
        found += session_outputs(protocol)
        pages = diagram_pages(protocol, load_flows(protocol, root))
        found += [Output(path, text) for path, text in pages]
    found.append(package_stub())
    found += [Output(f.path, f.text) for f in render_package(protocols)]
    return sorted(found, key=lambda o: o.path)


def generate(root: Path = ROOT) -> list[str]:
    """Write every generated file and remove orphans; return the paths that changed."""
    wanted = {o.path: o.text for o in outputs(root)}
    changed = []
    for path, text in wanted.items():
        target = root / path
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            changed.append(path)
    for orphan in _orphans(root, wanted):
        (root / orphan).unlink()
        changed.append(orphan)
    return changed


@dataclass(frozen=True)
class Drift:
    """A generated file that differs from what the spec produces."""

    path: str
    kind: str
    """stale (its text differs), missing, or orphan (nothing produces it)."""
    diff: str


def check(root: Path = ROOT) -> list[Drift]:
    """Compare the committed generated files with what the specs produce now."""
    wanted = {o.path: o.text for o in outputs(root)}
    drifts = []
    for path, text in wanted.items():
        target = root / path
        if not target.exists():
            drifts.append(Drift(path, "missing", ""))
            continue
        current = target.read_text(encoding="utf-8")
        if current != text:
            diff = "".join(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    f"{path} (committed)",
                    f"{path} (from the spec)",
                    n=2,
                )
            )
            drifts.append(Drift(path, "stale", diff))
    drifts += [Drift(path, "orphan", "") for path in _orphans(root, wanted)]
    return drifts


BUILD_OUTPUTS = frozenset({"__pycache__", "node_modules", "dist"})
"""Folders that building a generated package creates inside it (Python's bytecode; npm's install
and the TypeScript build): never orphans, never removed (.gitignore keeps them out of git)."""


def _build_output(path: Path) -> bool:
    if path.name == "package-lock.json" or path.suffix == ".tgz":  # npm install, npm pack
        return True
    return bool(BUILD_OUTPUTS.intersection(path.parts))


def _orphans(root: Path, wanted: dict[str, str]) -> list[str]:
    found = []
    for folder in GENERATED_ROOTS:
        base = root / folder
        if not base.exists():
            continue
        for path in sorted(base.rglob("*")):
            rel = str(path.relative_to(root))
            if path.is_file() and rel not in wanted and not _build_output(path):
                found.append(rel)
    return found
