"""The npm package's own files: ``package.json``, ``tsconfig.json``, the README and the LICENSE.

Every fact about the project (its license, authors, keywords and addresses) is read from the
``[project]`` table of ``pyproject.toml`` and the LICENSE is the repository's, copied whole, so
the wheel, the sdist and the npm tarball say the same thing from one source.

The exports resolve under every TypeScript ``moduleResolution``: ``types`` then ``default`` per
subpath for ``node16``/``nodenext`` and ``bundler``, and ``typesVersions`` naming each subpath's
declarations for ``node10`` (which reads no ``exports``). The package is ESM only; CommonJS loads
it with ``require()`` through Node's require(esm), which is why ``engines`` asks for 20.19.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import jinja2

from codegen.ir import Protocol
from codegen.render import ROOT
from codegen.typescript import names as ts

__all__ = [
    "CLIENT_MODULE",
    "NODE_ENGINES",
    "PACKAGE_VERSION",
    "ROOT_DIR",
    "TYPESCRIPT_VERSION",
    "TYPES_NODE_VERSION",
    "package_files",
]

ROOT_DIR = "generated/typescript"
"""Where the package is written, relative to the repository root; every file in it is generated."""
PACKAGE_VERSION = "0.1.0"
"""The npm package's version: the Python package's (tests/test_typescript.py holds them equal)."""
TYPESCRIPT_VERSION = "5.9.3"
"""The compiler the package is built and checked with (pinned: the tests install it)."""
TYPES_NODE_VERSION = "20.19.43"
NODE_ENGINES = ">=20.19"
"""The first Node 20 whose ``require()`` loads ES modules, so CommonJS consumers need no flag."""
CLIENT_MODULE = "ovp/client"
"""The one module beside the protocols' that is an entry point (``voxwire/ovp/client``)."""


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
        "LICENSE": (root / "LICENSE").read_text(encoding="utf-8"),
    }


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _subpath(module: str) -> str:
    return module.removesuffix("/index")


def _package_json(
    protocols: list[Protocol], version: str, project: dict[str, Any]
) -> dict[str, Any]:
    urls = project["urls"]
    modules = [f"{p.id}/index" for p in protocols] + [CLIENT_MODULE]
    exports: dict[str, Any] = {".": {"types": "./dist/index.d.ts", "default": "./dist/index.js"}}
    for module in modules:
        exports[f"./{_subpath(module)}"] = {
            "types": f"./dist/{module}.d.ts",
            "default": f"./dist/{module}.js",
        }
    return {
        "name": ts.PACKAGE,
        "version": version,
        "description": "Typed messages, exact checks, the frame codec and an OVP client for the "
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
