"""The shared Node and npm helper of the tests: tools from npm, the packed TypeScript package.

Everything the TypeScript side needs comes from npm, installed by the tests themselves into the
gitignored ``.cache/node-tools`` (pinned versions, once per machine, under a file lock so parallel
test processes do not race): the compiler, Node's types, ``ws``, Ajv, the package linters
``attw`` and ``publint``, and ``esbuild``, which measures what an import costs a bundle.
``packed()`` builds the package as a user would get it: assembled from
``generated/typescript`` and ``runtime/typescript`` (``python -m codegen npm-package``), then
``npm pack``, which compiles it; ``consumer()`` installs that tarball into a fresh project, with a ``tsconfig.json`` in strict mode (``strict``,
``exactOptionalPropertyTypes``, ``noUncheckedIndexedAccess``).
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from codegen.softphone import ESBUILD_VERSION
from codegen.typescript import TYPES_NODE_VERSION, TYPESCRIPT_VERSION, assemble
from tests.conftest import ROOT

__all__ = [
    "TOOLS",
    "TOOL_VERSIONS",
    "Consumer",
    "consumer",
    "node",
    "packed",
    "run",
    "tool",
    "tools",
]

TOOLS = ROOT / ".cache" / "node-tools"
TOOL_VERSIONS = {
    "typescript": TYPESCRIPT_VERSION,
    "@types/node": TYPES_NODE_VERSION,
    "ws": "8.23.0",
    "@types/ws": "8.18.2",
    "ajv": "8.20.0",
    "@arethetypeswrong/cli": "0.18.5",
    "publint": "0.3.25",
    "esbuild": ESBUILD_VERSION,
}
"""What the tests install from npm, pinned (the compiler's version is the package's own pin,
esbuild's the softphone's build's)."""
STRICT = {
    "target": "ES2022",
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "lib": ["ES2022", "DOM"],
    "strict": True,
    "exactOptionalPropertyTypes": True,
    "noUncheckedIndexedAccess": True,
    "skipLibCheck": False,
    "outDir": "out",
    "rootDir": ".",
}


def run(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a command; fail the test with its output when it fails."""
    done = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited with {done.returncode} in {cwd}:\n"
            f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    return done


def node() -> str:
    """The node binary (Node 20.19 or later: the package's ``engines``), or skip."""
    found = shutil.which("node")
    if found is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed (apt-get install nodejs npm)")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, check=True)
    major, minor = (int(part) for part in version.stdout.strip().lstrip("v").split(".")[:2])
    if (major, minor) < (20, 19):
        pytest.skip(f"node {version.stdout.strip()} is older than 20.19 (the package's engines)")
    return found


@functools.cache
def tools() -> Path:
    """``.cache/node-tools/node_modules`` with every pinned tool installed."""
    node()
    TOOLS.mkdir(parents=True, exist_ok=True)
    wanted = json.dumps({"private": True, "dependencies": TOOL_VERSIONS}, indent=2) + "\n"
    with (TOOLS / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = TOOLS / "package.json"
        stamp = TOOLS / "node_modules" / ".voxwire-installed"
        if not stamp.exists() or stamp.read_text() != wanted:
            manifest.write_text(wanted)
            run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], TOOLS)
            stamp.write_text(wanted)
    return TOOLS / "node_modules"


def tool(name: str) -> str:
    """An installed tool's command (``tsc``)."""
    return str(tools() / ".bin" / name)


@functools.cache
def packed() -> Path:
    """The tarball ``npm pack`` makes of the assembled package (it compiles it first)."""
    work = Path(tempfile.mkdtemp(prefix="voxwire-ts-pack-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    package = assemble(work / "package", ROOT)
    (package / "node_modules").symlink_to(tools())
    done = run(["npm", "pack", "--json", "--pack-destination", str(work)], package)
    listing = json.loads(done.stdout)
    return work / listing[0]["filename"]


@dataclass(frozen=True)
class Consumer:
    """A fresh project with the packed package installed from its tarball."""

    root: Path

    @property
    def package(self) -> Path:
        return self.root / "node_modules" / "voxwire"

    def compile(self, *sources: Path) -> Path:
        """Copy TypeScript sources in and compile them in strict mode; the output folder."""
        for source in sources:
            shutil.copy(source, self.root / source.name)
        config = {"compilerOptions": STRICT, "files": [source.name for source in sources]}
        (self.root / "tsconfig.json").write_text(json.dumps(config, indent=2))
        run([tool("tsc"), "-p", "tsconfig.json"], self.root)
        return self.root / "out"


@functools.cache
def consumer() -> Consumer:
    """A project that installed the packed tarball, as a user's would (no registry needed)."""
    tarball = packed()
    root = Path(tempfile.mkdtemp(prefix="voxwire-ts-consumer-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    (root / "package.json").write_text(
        json.dumps({"name": "consumer", "private": True, "type": "module"})
    )
    run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", str(tarball)], root)
    # The consumer's own tools (types, ws) come from the shared cache, not from the registry.
    modules = root / "node_modules"
    for name in ("@types", "ws"):
        target = modules / name
        if not target.exists():
            target.symlink_to(tools() / name)
    os.utime(root)
    return Consumer(root)
