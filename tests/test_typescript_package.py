"""The npm package as registries and users judge it: ``attw`` and ``publint`` pass on the packed
tarball, a consumer compiles strict under every ``moduleResolution``, CommonJS ``require()``s it,
no bin is installed, and the tarball carries the repository's LICENSE and pyproject's metadata.

One ``npm pack`` and one install serve every test (``tests/node.py`` caches both per process).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from codegen.typescript import ROOT_DIR
from tests.conftest import ROOT
from tests.node import STRICT, consumer, node, packed, run, tool
from voxwire import ovp

TESTS = ROOT / "tests" / "typescript"
ENTRY_POINTS = {".", "./brisvox", "./ovp", "./ovp/client", "./audio"}
ATTW_ACCEPTED, ATTW_IGNORED = "CJSResolvesToESM", "cjs-resolves-to-esm"
"""attw's one finding we accept (its name in the report, and as a rule): attw models Node 16,
where ``require()`` cannot load ES modules; the package needs Node 20.19, where it can
(docs/typescript.md, "CommonJS")."""
RESOLUTIONS = {
    "node10": {"module": "commonjs", "moduleResolution": "node10"},
    "node16": {"module": "node16", "moduleResolution": "node16"},
    "bundler": {"module": "esnext", "moduleResolution": "bundler"},
}


def _project(name: str, source: Path, options: dict[str, Any], package_type: str) -> Path:
    """A folder of the installed consumer with its own package type, tsconfig and source."""
    folder = consumer().root / name
    folder.mkdir(exist_ok=True)
    (folder / "package.json").write_text(json.dumps({"private": True, "type": package_type}))
    shutil.copy(source, folder / source.name)
    compiler = {**STRICT, "outDir": "out", "rootDir": ".", **options}
    config = {"compilerOptions": compiler, "files": [source.name]}
    (folder / "tsconfig.json").write_text(json.dumps(config, indent=2))
    return folder


def _tsc(folder: Path) -> tuple[int, str]:
    done = subprocess.run(
        [tool("tsc"), "-p", "tsconfig.json"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_attw_finds_every_entry_point_typed_under_every_resolution() -> None:
    command = [tool("attw"), str(packed()), "--format", "json", "--ignore-rules", ATTW_IGNORED]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    report = json.loads(done.stdout)
    problems = [p for found in report["problems"].values() for p in found]
    found = {(p["kind"], p["entrypoint"], p["resolutionKind"]) for p in problems}
    assert {(kind, kind_of) for kind, _, kind_of in found} <= {(ATTW_ACCEPTED, "node16-cjs")}, found
    assert done.returncode == 0, done.stderr
    entrypoints = report["analysis"]["entrypoints"]
    assert set(entrypoints) == ENTRY_POINTS
    for name, entry in entrypoints.items():
        for kind, resolved in entry["resolutions"].items():
            file = (resolved.get("resolution") or {}).get("fileName", "")
            assert file.endswith(".d.ts"), f"{name} under {kind}: {resolved}"


def test_publint_finds_nothing_to_say_about_the_tarball() -> None:
    done = run([tool("publint"), "run", "--strict", str(packed())], ROOT)
    assert "All good!" in done.stdout, done.stdout


@pytest.mark.parametrize("resolution", sorted(RESOLUTIONS))
def test_a_consumer_compiles_strict_under_each_module_resolution(resolution: str) -> None:
    folder = _project(
        f"resolution-{resolution}", TESTS / "package_app.ts", RESOLUTIONS[resolution], "module"
    )
    status, output = _tsc(folder)
    assert status == 0, output


def test_a_commonjs_consumer_requires_the_package() -> None:
    folder = _project("commonjs", TESTS / "package_app.cts", {"module": "node20"}, "commonjs")
    status, output = _tsc(folder)
    assert status == 0, output
    compiled = (folder / "out" / "package_app.cjs").read_text()
    assert 'require("voxwire/ovp")' in compiled and "import " not in compiled
    done = run([node(), str(folder / "out" / "package_app.cjs")], folder, timeout=60)
    with pytest.raises(ovp.ProtocolError) as refused:
        ovp.decode(b"{}", sender="client")
    assert json.loads(done.stdout) == {
        "module": "object",  # CommonJS: `module` exists
        "type": "say",
        "refused": refused.value.code,
    }


def test_a_node_program_without_the_dom_library_uses_the_audio_helpers() -> None:
    options = {"lib": ["ES2022"], "types": ["node"], "module": "nodenext"}
    folder = _project("node-audio", TESTS / "node_audio.ts", options, "module")
    status, output = _tsc(folder)
    assert status == 0, output
    done = run([node(), str(folder / "out" / "node_audio.js")], folder, timeout=60)
    # One second at 16 kHz is 50 frames; the buffer holds its bound and drops the oldest.
    assert json.loads(done.stdout) == {
        "frames": 50,
        "bytes": ovp.PCM_BYTES_PER_FRAME,
        "played": ovp.PLAYBACK_MAX_FRAMES,
        "overflowed": 50 - ovp.PLAYBACK_MAX_FRAMES,
    }


def test_typescript_under_node16_refuses_commonjs_naming_the_import_to_write() -> None:
    folder = _project(
        "commonjs-node16", TESTS / "package_app.cts", {"module": "node16"}, "commonjs"
    )
    status, output = _tsc(folder)
    assert status != 0
    assert "error TS1479" in output and """dynamic 'import("voxwire/ovp")' call""" in output


def test_the_consumer_gets_no_bin_and_keeps_the_testee_at_its_path() -> None:
    installed = consumer().package
    assert "bin" not in json.loads((installed / "package.json").read_text())
    bin_folder = consumer().root / "node_modules" / ".bin"
    assert not bin_folder.exists() or not list(bin_folder.iterdir())
    # The conformance runner starts it as `node .../dist/conformance/testee.js` (test_typescript.py).
    assert (installed / "dist" / "conformance" / "testee.js").is_file()


def test_the_tarball_carries_the_license_and_the_metadata_of_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    with tarfile.open(packed()) as tar:
        license_file = tar.extractfile("package/LICENSE")
        manifest_file = tar.extractfile("package/package.json")
        assert license_file is not None and manifest_file is not None
        license_text = license_file.read().decode()
        manifest = json.load(manifest_file)
    assert license_text == (ROOT / "LICENSE").read_text()
    assert manifest["license"] == project["license"]
    assert manifest["homepage"] == project["urls"]["Homepage"]
    assert manifest["bugs"] == {"url": project["urls"]["Issues"]}
    assert manifest["repository"]["url"] == "git+" + project["urls"]["Repository"]
    assert manifest["repository"]["directory"] == ROOT_DIR
