"""Real servers a test starts for itself, on loopback: Redis (or Valkey), HAProxy, and peer
processes of our own (several gateways or agents).

Each is Debian's package, installed with apt-get where it is missing (CI runs as root); a
machine that can neither find nor install one skips the tests that need it, saying why. A server
runs in a temporary directory on a free port, and is stopped, and waited for, by the fixture.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "HAPROXY_CFG",
    "HAProxy",
    "PeerProcess",
    "RedisServer",
    "debian_program",
    "free_port",
    "shipped_haproxy_cfg",
    "start_haproxy",
    "start_redis",
]

START_TIMEOUT_S = 20


def debian_program(program: str, package: str) -> str:
    """The path of ``program``, installing Debian's ``package`` where it is missing."""
    for candidate in (program, f"/usr/sbin/{program}", f"/usr/bin/{program}"):
        found = shutil.which(candidate)
        if found:
            return found
    if shutil.which("apt-get") is None:
        pytest.skip(f"{program} is not installed and this machine has no apt-get to install it")
    if os.geteuid() != 0:
        pytest.skip(f"{program} is not installed and apt-get needs root: apt-get install {package}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", package]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
        assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}"
    for candidate in (program, f"/usr/sbin/{program}"):
        found = shutil.which(candidate)
        if found:
            return found
    raise AssertionError(f"apt-get installed {package}, but {program} is not on PATH")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_listening(port: int, process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{what} exited with {process.returncode}:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} did not listen on port {port} within {START_TIMEOUT_S} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@dataclass
class RedisServer:
    """One redis-server on 127.0.0.1, its data in ``folder``; :meth:`restart` keeps the port."""

    program: str
    folder: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = self.folder / "redis.log"
        self.process = subprocess.Popen(
            [
                self.program,
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--dir", str(self.folder),
                "--save", "",
                "--appendonly", "no",
                "--protected-mode", "yes",
                "--logfile", str(log),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        _wait_listening(self.port, self.process, "redis-server", log)

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)
            self.process = None

    def flush(self) -> None:
        """Empty every database: what an earlier test left (directory entries, histories)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(b"FLUSHALL\r\n")
            assert sock.recv(64).startswith(b"+OK"), "redis-server refused FLUSHALL"

    def restart(self) -> None:
        """Stop and start again on the same port, with nothing kept (no persistence)."""
        self.stop()
        self.start()


def start_redis(folder: Path) -> Iterator[RedisServer]:
    """A generator for a fixture: a running redis-server, stopped afterwards."""
    server = RedisServer(debian_program("redis-server", "redis-server"), folder, free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class HAProxy:
    """One haproxy on 127.0.0.1 running the shipped ``deploy/haproxy.cfg``: the OVP gateways
    behind :attr:`port` (hashing the path), the Brisvox agents behind :attr:`agent_port`."""

    port: int
    agent_port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def agent_url(self) -> str:
        return f"ws://127.0.0.1:{self.agent_port}"


HAPROXY_CFG = Path(__file__).resolve().parent.parent / "deploy" / "haproxy.cfg"
"""The HAProxy configuration the deployment guide ships."""

_ADDRESS = re.compile(r"^(\s*(?:bind|server \S+) )(\S+)(.*)$")


def shipped_haproxy_cfg(ports: dict[str, list[int]]) -> str:
    """``deploy/haproxy.cfg`` with its addresses on loopback: the n-th ``bind`` takes the n-th
    of ``ports["bind"]``, and the servers of a backend the ports of ``ports[backend]`` in order
    (the lines past them are left out). Nothing else of the file changes."""
    lines, backend, used = [], "", {name: 0 for name in ports}
    for line in HAPROXY_CFG.read_text(encoding="utf-8").splitlines():
        if line.startswith("backend "):
            backend = line.split()[1]
        found = _ADDRESS.match(line)
        if found is not None:
            key = "bind" if found.group(1).strip() == "bind" else backend
            if used[key] >= len(ports[key]):
                continue  # a server the test does not run
            line = f"{found.group(1)}127.0.0.1:{ports[key][used[key]]}{found.group(3)}"
            used[key] += 1
        lines.append(line)
    return "\n".join(lines) + "\n"


def start_haproxy(
    folder: Path, gateways: Sequence[int], agents: Sequence[int] = ()
) -> Iterator[HAProxy]:
    """A generator for a fixture: haproxy running the shipped configuration in front of
    ``gateways`` and ``agents`` (ports on 127.0.0.1), stopped afterwards."""
    program = debian_program("haproxy", "haproxy")
    port, agent_port = free_port(), free_port()
    config = folder / "haproxy.cfg"
    config.write_text(
        shipped_haproxy_cfg(
            {"bind": [port, agent_port], "gateways": list(gateways), "agents": list(agents)}
        ),
        encoding="utf-8",
    )
    log = folder / "haproxy.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [program, "-db", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    _wait_listening(port, process, "haproxy", log)
    try:
        yield HAProxy(port, agent_port, process)
    finally:
        _stop(process)


class PeerProcess:
    """A peer process a test starts (``python -m tests.peers.NAME ...``): it prints one JSON line
    per thing it does, read by a thread into :attr:`lines`; its standard error is kept in a file.
    """

    def __init__(self, name: str, module: str, *args: str, folder: Path) -> None:
        from tests.conftest import ROOT

        self.name = name
        self.stderr_path = folder / f"{name}.stderr"
        self.lines: list[dict[str, object]] = []
        self._changed = threading.Condition()
        with self.stderr_path.open("wb") as stderr:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        threading.Thread(target=self._read, name=f"read {name}", daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for text in self.popen.stdout:
            with self._changed:
                self.lines.append(json.loads(text))
                self._changed.notify_all()

    def wait_for(
        self, predicate: Callable[[dict[str, object]], bool], timeout: float = 10.0
    ) -> dict[str, object]:
        """The first printed line that satisfies ``predicate``, waiting up to ``timeout`` s."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: next((line for line in self.lines if predicate(line)), None), timeout
            )
        if not found:
            raise AssertionError(
                f"{self.name}: no such line within {timeout} s; printed {self.lines}; "
                f"stderr:\n{self.stderr()[-3000:]}"
            )
        return found

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def terminate(self) -> None:
        """SIGTERM: what an orchestrator sends to stop the process (a voxwire server drains)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, as in a crash."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)
