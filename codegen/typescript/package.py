"""The npm package's own files (``package.json``, ``tsconfig.json``, the README) and its assembly.

Every fact about the project (its license, authors, keywords and addresses) is read from the
``[project]`` table of ``pyproject.toml``, and the tarball's LICENSE is the repository's, added
whole when the package is assembled, so the wheel, the sdist and the npm tarball say the same
thing from one source.

The package is one folder made from two, as the Python package is (docs/architecture.md, "One
package from two folders"): ``generated/typescript`` holds what the generator writes (the
protocols' modules, ``src/index.ts`` and the metadata), ``runtime/typescript`` the hand-written
source (the codec, the step function, the OVP client, the testee), laid out as under ``src/``.
:func:`assemble` copies both, and the LICENSE, into the folder that ``npm pack`` builds;
neither folder holds a copy of the other's files.

The exports resolve under every TypeScript ``moduleResolution``: ``types`` then ``default`` per
subpath for ``node16``/``nodenext`` and ``bundler``, and ``typesVersions`` naming each subpath's
declarations for ``node10`` (which reads no ``exports``). The package is ESM only; CommonJS loads
it with ``require()`` through Node's require(esm), which is why ``engines`` asks for 20.19.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import jinja2

from codegen.ir import Protocol
from codegen.render import ROOT
from codegen.typescript import names as ts

__all__ = [
    "AUDIO_MODULE",
    "CLIENT_MODULE",
    "NODE_ENGINES",
    "PACKAGE_VERSION",
    "ROOT_DIR",
    "RUNTIME_DIR",
    "TYPESCRIPT_VERSION",
    "TYPES_NODE_VERSION",
    "AssemblyError",
    "assemble",
    "package_files",
]

ROOT_DIR = "generated/typescript"
"""Where the package's generated half is written, relative to the repository root; every file in
it is generated."""
RUNTIME_DIR = "runtime/typescript"
"""The package's hand-written half, relative to the repository root: source laid out as under
``src/`` (``runtime/typescript/ovp/client.ts`` is the package's ``src/ovp/client.ts``)."""
_LEFT_OUT = ("node_modules", "dist", "*.tgz", "package-lock.json")
"""What the assembly leaves out of either half: the outputs of a local ``npm install``, ``tsc``
or ``npm pack``. Of the runtime's files it takes the TypeScript sources only."""
PACKAGE_VERSION = "0.1.0"
"""The npm package's version: the Python package's (tests/test_typescript.py holds them equal)."""
TYPESCRIPT_VERSION = "5.9.3"
"""The compiler the package is built and checked with (pinned: the tests install it)."""
TYPES_NODE_VERSION = "20.19.43"
NODE_ENGINES = ">=20.19"
"""The first Node 20 whose ``require()`` loads ES modules, so CommonJS consumers need no flag."""
CLIENT_MODULE = "ovp/client"
"""The OVP client's entry point (``voxwire/ovp/client``), beside the protocols'."""
AUDIO_MODULE = "audio/index"
"""The audio helpers' entry point (``voxwire/audio``): capture, playback, the resampler."""


def package_files(
    protocols: list[Protocol],
    version: str,
    generated: str,
    readme: jinja2.Template,
    root: Path = ROOT,
) -> dict[str, str]:
    """The package's metadata files by their path in the package; ``generated`` says from what."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {
        "package.json": _json({"//": generated, **_package_json(protocols, version, project)}),
        "tsconfig.json": f"// {generated}\n" + _json(_tsconfig()),
        "README.md": readme.render(
            protocols=protocols,
            package=ts.PACKAGE,
            version=version,
            generated=generated,
            engines=NODE_ENGINES,
            license=project["license"],
            homepage=project["urls"]["Homepage"],
        ),
    }


class AssemblyError(Exception):
    """The two halves of the package do not fit together (a file in both)."""


def assemble(target: Path, root: Path = ROOT) -> Path:
    """Write the npm package into ``target``: ``generated/typescript``, then the hand-written
    sources of ``runtime/typescript`` under ``src/``, then the repository's LICENSE; returns
    ``target``. What ``target`` held is replaced, but its ``node_modules``. Raises
    :class:`AssemblyError` when a file of the runtime is also generated (neither may hide the
    other)."""
    generated, runtime = root / ROOT_DIR, root / RUNTIME_DIR
    if not (generated / "package.json").is_file():
        raise AssemblyError(f"{ROOT_DIR} holds no package.json: run `python -m codegen generate`")
    target.mkdir(parents=True, exist_ok=True)
    for old in target.iterdir():
        if old.name == "node_modules":
            continue
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()
    left_out = shutil.ignore_patterns(*_LEFT_OUT)
    shutil.copytree(generated, target, ignore=left_out, dirs_exist_ok=True)
    sources = sorted(
        p
        for p in runtime.rglob("*.ts")
        if p.is_file() and not set(p.relative_to(runtime).parts) & {"node_modules", "dist"}
    )
    for source in sources:
        rel = source.relative_to(runtime)
        destination = target / "src" / rel
        if destination.exists():
            raise AssemblyError(
                f"{RUNTIME_DIR}/{rel.as_posix()} and {ROOT_DIR}/src/{rel.as_posix()} are one file"
                " of the package: a hand-written module may not have a generated one's path"
            )
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)
    shutil.copyfile(root / "LICENSE", target / "LICENSE")
    return target


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _subpath(module: str) -> str:
    return module.removesuffix("/index")


def _package_json(
    protocols: list[Protocol], version: str, project: dict[str, Any]
) -> dict[str, Any]:
    urls = project["urls"]
    modules = [f"{p.id}/index" for p in protocols] + [CLIENT_MODULE, AUDIO_MODULE]
    exports: dict[str, Any] = {".": {"types": "./dist/index.d.ts", "default": "./dist/index.js"}}
    for module in modules:
        exports[f"./{_subpath(module)}"] = {
            "types": f"./dist/{module}.d.ts",
            "default": f"./dist/{module}.js",
        }
    return {
        "name": ts.PACKAGE,
        "version": version,
        "description": "Typed messages, exact checks, the frame codec, an OVP client and its audio"
        " helpers for the "
        + " and ".join(p.title for p in protocols)
        + ", generated from one spec.",
        "keywords": project["keywords"],
        "homepage": urls["Homepage"],
        "bugs": {"url": urls["Issues"]},
        "repository": {
            "type": "git",
            "url": "git+" + urls["Repository"],
            "directory": ROOT_DIR,
        },
        "license": project["license"],
        "author": ", ".join(a["name"] for a in project["authors"]),
        "type": "module",
        "sideEffects": False,
        "engines": {"node": NODE_ENGINES},
        "exports": exports,
        "types": "./dist/index.d.ts",
        # node10 reads no `exports`: this maps `voxwire/ovp` to its declarations the same way.
        "typesVersions": {"*": {_subpath(module): [f"./dist/{module}.d.ts"] for module in modules}},
        "files": ["dist", "src", "README.md", "LICENSE"],
        "scripts": {"build": "tsc -p tsconfig.json", "prepack": "tsc -p tsconfig.json"},
        "devDependencies": {"typescript": TYPESCRIPT_VERSION, "@types/node": TYPES_NODE_VERSION},
    }


def _tsconfig() -> dict[str, Any]:
    return {
        "compilerOptions": {
            "target": "ES2022",
            "module": "NodeNext",
            "moduleResolution": "NodeNext",
            "lib": ["ES2022", "DOM"],
            "types": ["node"],
            "strict": True,
            "exactOptionalPropertyTypes": True,
            "noUncheckedIndexedAccess": True,
            "noImplicitOverride": True,
            "declaration": True,
            "sourceMap": False,
            "rootDir": "src",
            "outDir": "dist",
        },
        "include": ["src"],
    }
