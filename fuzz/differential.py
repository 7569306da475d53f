"""Differential fuzzing: the same mutated inputs to the Python and the TypeScript binding.

Each input goes to the Python decoder in this process and, in batches, to one long-running node
process (``fuzz/driver.mjs``) that runs the compiled TypeScript package. Both must give the same
answer: accepted or refused, the same error code when refused, and, when accepted, the same
text (or frame) from their ``encode`` of the decoded message: byte for byte, but for the order of
an object's keys (spec decision ``numbers-written-one-way``: every number is spelled alike). A
difference is a disagreement; anything but the protocol's error thrown by either side is an
escape.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import IO, Any

from codegen.typescript.package import assemble
from fuzz.mutate import FrameMutator, MessageMutator
from fuzz.seeds import ROOT, load_seeds
from fuzz.targets import Target
from voxwire.errors import ProtocolError

__all__ = [
    "DifferentialReport",
    "Disagreement",
    "Node",
    "answer",
    "main",
    "run_differential",
    "table",
]

Answer = dict[str, Any]
"""``{"valid": True, "type": t, "text": encoded}``, ``{"valid": True, "encode_code": c}``,
``{"valid": False, "code": c}`` or ``{"escape": what}`` (frames: ``hex`` for ``text``); a
refusal also carries the error's text as ``detail``, shown but not compared."""

DRIVER = Path(__file__).with_name("driver.mjs")
TOOLS = ROOT / ".cache" / "node-tools" / "node_modules"
BATCH = 200
BATCH_SECONDS = 300.0
"""The longest node may take over one batch before it is stopped (a hang is a failure)."""


@dataclass
class Disagreement:
    """One class of input on which the bindings answer differently, with its first input."""

    kind: str
    python: Answer
    typescript: Answer
    data: bytes
    count: int = 1


@dataclass
class DifferentialReport:
    """What one decoder did with its inputs in both bindings."""

    name: str
    inputs: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    disagreements: dict[str, Disagreement] = field(default_factory=dict)
    escapes: dict[str, Disagreement] = field(default_factory=dict)
    reordered: int = 0
    """Inputs both accepted and wrote alike but for the order of an object's keys."""
    seconds: float = 0.0

    @property
    def disagreeing(self) -> int:
        return sum(d.count for d in self.disagreements.values())

    @property
    def escaped(self) -> int:
        return sum(d.count for d in self.escapes.values())

    def add(self, data: bytes, python: Answer, typescript: Answer) -> None:
        """Count one input and what the two bindings made of it."""
        self.inputs += 1
        self.verdicts["accepted" if python.get("valid") else str(python.get("code"))] += 1
        for side, got in (("python", python), ("typescript", typescript)):
            if "escape" in got:
                _keep(self.escapes, f"{side}: {got['escape'][:160]}", python, typescript, data)
        ours, theirs = _compared(python), _compared(typescript)
        if ours == theirs or "escape" in ours or "escape" in theirs:
            return
        both = "text" in ours and "text" in theirs and ours["type"] == theirs["type"]
        if both and _as_written(ours["text"]) == _as_written(theirs["text"]):
            self.reordered += 1
            return
        _keep(self.disagreements, _kind(python, typescript), python, typescript, data)


def _keep(
    found: dict[str, Disagreement], kind: str, python: Answer, typescript: Answer, data: bytes
) -> None:
    known = found.get(kind)
    if known is None:
        found[kind] = Disagreement(kind, python, typescript, data)
    else:
        known.count += 1


def _compared(got: Answer) -> Answer:
    """An answer without the error's text, which the bindings word each their own way."""
    return {k: v for k, v in got.items() if k != "detail"}


def _as_written(text: str) -> Any:
    """A JSON text as a value whose objects compare whatever the order of their keys, and whose
    numbers compare as written (``1.0`` is not ``1``, ``1e16`` is not ``10000000000000000``):
    the bindings write a message's fields in their own order (Python the spec's, TypeScript the
    order received), and every number alike."""
    return json.loads(text, parse_int=_Number, parse_float=_Number, parse_constant=_Number)


@dataclass(frozen=True)
class _Number:
    """A number as written."""

    literal: str


def _kind(python: Answer, typescript: Answer) -> str:
    """A disagreement's class: what each side said, without the values that vary."""

    def said(got: Answer) -> str:
        if not got["valid"]:
            return f"refused {got['code']}"
        if "encode_code" in got:
            return f"accepted, encode refused {got['encode_code']}"
        return "accepted"

    left, right = said(python), said(typescript)
    if left == right == "accepted":
        return "accepted, written differently"
    return f"python {left}; typescript {right}"


def answer(decode: Callable[[bytes], Any], encode: Callable[[Any], bytes], data: bytes) -> Answer:
    """The Python binding's answer to one text input, as the node driver words its own."""
    try:
        message = decode(data)
    except ProtocolError as exc:
        return {"valid": False, "code": _code(exc), "detail": str(exc)}
    except Exception as exc:  # an escape: the report shows it
        return {"escape": f"decode: {type(exc).__name__}: {exc}"}
    try:
        written = encode(message)
    except ProtocolError as exc:
        return {"valid": True, "type": message.type, "encode_code": _code(exc), "detail": str(exc)}
    except Exception as exc:
        return {"escape": f"encode: {type(exc).__name__}: {exc}"}
    return {"valid": True, "type": message.type, "text": written.decode("utf-8")}


def _frame_answer(module: Any, data: bytes) -> Answer:
    try:
        frame = module.decode_frame(data)
    except ProtocolError as exc:
        return {"valid": False, "code": _code(exc), "detail": str(exc)}
    except Exception as exc:
        return {"escape": f"decode_frame: {type(exc).__name__}: {exc}"}
    try:
        return {"valid": True, "hex": module.encode_frame(frame).hex()}
    except ProtocolError as exc:
        return {"valid": True, "encode_code": _code(exc), "detail": str(exc)}
    except Exception as exc:
        return {"escape": f"encode_frame: {type(exc).__name__}: {exc}"}


def _code(exc: ProtocolError) -> str:
    return str(getattr(exc.code, "value", exc.code))


class Node:
    """The TypeScript binding in one node process, asked in batches (``fuzz/driver.mjs``)."""

    def __init__(self, dist: Path) -> None:
        self._process = subprocess.Popen(
            [_node(), str(DRIVER), str(dist)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
        )

    def ask(self, target: str, inputs: Sequence[bytes]) -> list[Answer]:
        """The TypeScript answers to ``inputs``, in order."""
        stdin, stdout = self._pipes()
        for data in inputs:
            line = json.dumps({"target": target, "b64": base64.b64encode(data).decode()})
            stdin.write(line + "\n")
        stdin.write("\n")
        stdin.flush()
        answers = []
        watchdog = threading.Timer(BATCH_SECONDS, self._process.kill)
        watchdog.start()
        try:
            for _ in inputs:
                line = stdout.readline()
                if not line:
                    status = self._process.wait()
                    raise RuntimeError(f"the node driver stopped (status {status})")
                answers.append(json.loads(line))
        finally:
            watchdog.cancel()
        return answers

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        return stdin, stdout

    def close(self) -> None:
        stdin, _ = self._pipes()
        stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _node() -> str:
    found = shutil.which("node")
    if found is None:
        raise RuntimeError("differential fuzzing needs node (20 or later) on the PATH")
    return found


@contextmanager
def compiled_package() -> Iterator[Path]:
    """The TypeScript package compiled into a scratch folder: its ``dist``."""
    tsc = TOOLS / ".bin" / "tsc"
    if not tsc.exists():
        raise RuntimeError(
            f"no TypeScript compiler at {tsc}: run the TypeScript tests once "
            "(pytest tests/test_typescript.py), which install it from npm"
        )
    with tempfile.TemporaryDirectory(prefix="voxwire-fuzz-ts-") as scratch:
        work = assemble(Path(scratch) / "package", ROOT)
        os.symlink(TOOLS, work / "node_modules")
        subprocess.run([str(tsc), "-p", "tsconfig.json"], cwd=work, check=True, timeout=600)
        yield work / "dist"


def run_differential(
    targets: Sequence[Target],
    inputs: int,
    *,
    seed: int = 0,
    seconds: float | None = None,
    progress: Callable[[DifferentialReport], None] | None = None,
) -> list[DifferentialReport]:
    """Feed ``inputs`` mutated inputs to each target in both bindings and compare answers."""
    reports = []
    with compiled_package() as dist:
        node = Node(dist)
        try:
            for target in targets:
                reports.append(_one(target, node, inputs, seed, seconds, progress))
        finally:
            node.close()
    return reports


def _one(
    target: Target,
    node: Node,
    inputs: int,
    seed: int,
    seconds: float | None,
    progress: Callable[[DifferentialReport], None] | None,
) -> DifferentialReport:
    module = import_module(f"voxwire.{target.protocol}")
    seeds = load_seeds(target.protocol)
    rng = random.Random(f"{seed}/{target.name}/inputs")  # the inputs `python -m fuzz` makes
    make: Callable[[], bytes]
    judge: Callable[[bytes], Answer]
    if target.sender is None:
        make = FrameMutator(rng, seeds.frames)
        judge = lambda data: _frame_answer(module, data)  # noqa: E731
    else:
        every_type = sorted({t for types in seeds.types.values() for t in types})
        make = MessageMutator(
            rng, seeds.messages[target.sender], every_type, module.MAX_MESSAGE_BYTES
        )
        decode, encode = module.decoder(target.sender), module.encode
        judge = lambda data: answer(decode, encode, data)  # noqa: E731
    report = DifferentialReport(target.name)
    started = time.perf_counter()
    while report.inputs < inputs:
        batch = [make() for _ in range(min(BATCH, inputs - report.inputs))]
        for data, theirs in zip(batch, node.ask(target.name, batch), strict=True):
            report.add(data, judge(data), theirs)
        report.seconds = time.perf_counter() - started
        if progress is not None and report.inputs % 100_000 < BATCH:
            progress(report)
        if seconds is not None and report.seconds > seconds:
            break
    if progress is not None:
        progress(report)
    return report


def table(reports: Sequence[DifferentialReport]) -> str:
    """A run as a Markdown table (what docs/fuzzing.md shows)."""
    lines = [
        "| decoder | inputs | accepted | refused | disagreements | escapes | the same but "
        "for key order | run time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        accepted = r.verdicts["accepted"]
        lines.append(
            f"| {r.name} | {r.inputs:,} | {accepted:,} | {r.inputs - accepted:,} | "
            f"{r.disagreeing:,} | {r.escaped:,} | {r.reordered:,} | {r.seconds / 60:.1f} min |"
        )
    return "\n".join(lines)


def _as_json(seed: int, reports: Sequence[DifferentialReport]) -> dict[str, Any]:
    def found(kept: dict[str, Disagreement]) -> list[dict[str, Any]]:
        return [
            {
                "kind": d.kind,
                "count": d.count,
                "python": d.python,
                "typescript": d.typescript,
                "input": d.data.hex(),
            }
            for d in kept.values()
        ]

    return {
        "seed": seed,
        "targets": [
            {
                "name": r.name,
                "inputs": r.inputs,
                "seconds": round(r.seconds, 1),
                "verdicts": dict(r.verdicts.most_common()),
                "reordered": r.reordered,
                "disagreements": found(r.disagreements),
                "escapes": found(r.escapes),
            }
            for r in reports
        ],
    }


def main(
    targets: Sequence[Target],
    inputs: int,
    seed: int,
    seconds: float | None,
    json_path: Path | None,
) -> int:
    """``python -m fuzz --differential``: print the table and every disagreement, exit 1 on
    any (``json_path`` is rewritten as the run goes, so a long run can be read before it ends)."""
    seen: dict[str, DifferentialReport] = {}  # the reports so far, in order

    def progress(report: DifferentialReport) -> None:
        seen[report.name] = report
        print(
            f"{report.name}: {report.inputs:,} inputs, {report.disagreeing} disagreements, "
            f"{report.escaped} escapes, {report.seconds:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        if json_path is not None:
            json_path.write_text(json.dumps(_as_json(seed, list(seen.values())), indent=2) + "\n")

    done = run_differential(targets, inputs, seed=seed, seconds=seconds, progress=progress)
    print(table(done))
    for report in done:
        for d in [*report.disagreements.values(), *report.escapes.values()]:
            print(f"\n{report.name}: {d.kind} x{d.count}")
            print(f"  python:     {d.python}\n  typescript: {d.typescript}")
            print(f"  input ({len(d.data)} bytes): {d.data[:300]!r}")
    ok = not any(r.disagreements or r.escapes for r in done)
    return 0 if ok else 1
