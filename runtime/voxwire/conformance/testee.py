"""Another implementation as the testee, over its stdin and stdout (one JSON line each way), and
voxwire as one (:func:`serve`, ``python -m voxwire.conformance --serve``).
"""

from __future__ import annotations

import collections
import json
import queue
import shlex
import subprocess
import threading
from collections.abc import Sequence
from typing import IO, Any, Final

from voxwire.conformance.answers import answer, request
from voxwire.conformance.vectors import Case, VectorError

__all__ = ["Testee", "serve"]

_GIVE_UP: Final = 5
"""Crashes or timeouts in a row after which the testee is not started again."""


class Testee:
    """Another implementation, spoken to over its stdin and stdout, one JSON line each way.

    A testee that crashes, hangs past the timeout or answers out of turn is restarted for the
    next case; its answer to the case it failed on says what happened.
    """

    def __init__(self, command: Sequence[str], timeout: float, startup: float = 30.0) -> None:
        self.command = list(command)
        self.timeout = timeout
        self.startup = startup
        self.process: subprocess.Popen[bytes] | None = None
        self.answers: queue.Queue[bytes | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)
        self.fresh = True
        self.failures_in_a_row = 0

    def start(self) -> None:
        try:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise VectorError(
                f"cannot start the testee {shlex.join(self.command)}: {exc}"
            ) from None
        self.answers = queue.Queue()
        self.stderr.clear()
        self.fresh = True
        process = self.process
        threading.Thread(target=self._read, args=(process,), daemon=True).start()
        threading.Thread(target=self._read_stderr, args=(process,), daemon=True).start()

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.answers.put(line)
        self.answers.put(None)

    def _read_stderr(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.stderr.append(line.decode("utf-8", "replace").rstrip())

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        for stream in (process.stdin,):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _crash(self) -> str:
        assert self.process is not None
        code = self.process.poll()
        if code is None:
            try:
                code = self.process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                code = None
        tail = " | ".join(list(self.stderr)[-5:])
        status = f"exited with status {code}" if code is not None else "closed its stdout"
        return f"the testee {status}" + (f"; its stderr ends: {tail}" if tail else "")

    def ask(self, case: Case) -> dict[str, Any]:
        """The testee's answer to ``case``, or an ``error`` answer saying what went wrong."""
        if self.failures_in_a_row >= _GIVE_UP:
            return {"error": f"not run: the testee failed {_GIVE_UP} cases in a row"}
        if self.process is None or self.process.poll() is not None:
            if self.process is not None:
                self.stop()
            self.start()
        assert self.process is not None and self.process.stdin is not None
        line = json.dumps(request(case)).encode("ascii") + b"\n"  # ASCII: \u escapes
        writer = threading.Thread(target=self._write, args=(self.process, line), daemon=True)
        writer.start()
        wait = self.timeout + (self.startup if self.fresh else 0.0)
        try:
            raw = self.answers.get(timeout=wait)
        except queue.Empty:
            self._restart()
            return self._failed(f"no answer within {wait:g} s (the testee was restarted)")
        if raw is None:
            problem = self._crash()
            self._restart()
            return self._failed(problem)
        self.fresh = False
        text = raw.decode("utf-8", "replace").strip()
        self.failures_in_a_row = 0
        try:
            got = json.loads(text)
        except (ValueError, RecursionError):
            return {"error": f"the testee answered garbage: {text[:200]!r}"}
        if not isinstance(got, dict):
            return {"error": f"the testee answered garbage: {text[:200]!r}"}
        if got.get("id") != case.id:
            self._restart()
            return self._failed(
                f"the testee answered for id {got.get('id')!r} (out of turn; restarted it)"
            )
        return got

    def _write(self, process: subprocess.Popen[bytes], line: bytes) -> None:
        try:
            assert process.stdin is not None
            process.stdin.write(line)
            process.stdin.flush()
        except (OSError, ValueError):
            pass  # the process died: the reader reports it

    def _failed(self, problem: str) -> dict[str, Any]:
        self.failures_in_a_row += 1
        return {"error": problem}

    def _restart(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()


# -- voxwire as a testee -----------------------------------------------------------------------


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """Answer requests, one JSON line each way, until stdin ends (voxwire as a testee)."""
    for raw in stdin:
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            continue
        try:
            req = json.loads(text)
        except (ValueError, RecursionError) as exc:
            got: dict[str, Any] = {"id": None, "error": f"not a JSON request: {exc}"}
        else:
            got = answer(req) if isinstance(req, dict) else {"id": None, "error": "not an object"}
        stdout.write(_answer_line(got))
        stdout.flush()
    return 0


def _answer_line(got: dict[str, Any]) -> bytes:
    try:
        return json.dumps(got, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n"
    except (ValueError, RecursionError) as exc:
        fallback = {"id": got.get("id"), "error": f"the answer cannot be written as JSON: {exc}"}
        return json.dumps(fallback).encode("utf-8") + b"\n"
