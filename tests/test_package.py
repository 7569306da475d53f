"""The package as users get it: a built wheel in a fresh venv imports like the editable install,
and the wheel and the sdist pass ``twine check --strict`` with the LICENSE inside."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.node import node

# What both installs must show: every module, the data files, and a working decode.
PROBE = r"""
import json, os, pkgutil, sys
from importlib import resources
import voxwire
from voxwire import brisvox, ovp
modules = sorted(m.name for m in pkgutil.walk_packages(voxwire.__path__, "voxwire."))
data = sorted(
    f"{package.__name__}/{name}"
    for package in (voxwire, brisvox, ovp)
    for name in ("py.typed", "schema.json")
    if any(os.path.isfile(os.path.join(folder, name)) for folder in package.__path__)
)
message = brisvox.decode(b'{"type":"say","text":"hi"}', sender="agent")
softphone = resources.files("voxwire.demo").joinpath("softphone")
json.dump({
    "modules": modules,
    "data": data,
    "softphone": sorted(f.name for f in softphone.iterdir() if not f.name.startswith("__")),
    "say": message.text,
    "base": issubclass(ovp.ProtocolError, voxwire.ProtocolError),
    "version": voxwire.__version__,
}, sys.stdout)
"""


def _probe(python: str | Path) -> dict[str, object]:
    done = subprocess.run(
        [str(python), "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built once for the module, from the checkout."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--sdist",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    [built] = dist.glob("voxwire-*.whl")
    return built


@pytest.fixture(scope="module")
def sdist(dist: Path) -> Path:
    [built] = dist.glob("voxwire-*.tar.gz")
    return built


def test_wheel_in_a_fresh_venv_imports_like_the_editable_install(
    wheel: Path, tmp_path: Path
) -> None:
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    from_wheel = _probe(python)
    editable = _probe(sys.executable)
    assert from_wheel == editable
    assert "voxwire.brisvox.codec" in from_wheel["modules"]  # type: ignore[operator]
    assert "voxwire._codec" in from_wheel["modules"]  # type: ignore[operator]
    assert from_wheel["data"] == [
        "voxwire.brisvox/py.typed",
        "voxwire.brisvox/schema.json",
        "voxwire.ovp/py.typed",
        "voxwire.ovp/schema.json",
        "voxwire/py.typed",
    ]
    assert from_wheel["say"] == "hi" and from_wheel["base"] is True
    # voxwire demo --browser serves its page from the package: no network, no Node.
    assert from_wheel["softphone"] == ["index.html", "softphone.js", "softphone.ts"]


def test_wheel_holds_one_package_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    declared = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[pytest11]\nvoxwire = voxwire.testing.plugin\n" in declared  # the fakes' fixtures
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"voxwire"}
    assert "voxwire/brisvox/schema.json" in names and "voxwire/_codec.py" in names
    assert not [n for n in names if "__pycache__" in n or n.startswith(("codegen/", "tests/"))]


def test_twine_passes_both_and_both_carry_the_license(wheel: Path, sdist: Path) -> None:
    command = [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout
    license_text = (ROOT / "LICENSE").read_bytes()
    with zipfile.ZipFile(wheel) as archive:
        [info] = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(info) == license_text
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        assert "License-File: LICENSE" in archive.read(metadata).decode()
    with tarfile.open(sdist) as archive:
        member = archive.extractfile(f"{sdist.name.removesuffix('.tar.gz')}/LICENSE")
        assert member is not None and member.read() == license_text


# What a user writes from the README and the guides: the generated names, the runtime's
# modules, decode narrowed by sender and by match. Both checkers must see it as it runs.
USER_PROGRAM = """
import voxwire
from voxwire import brisvox, ovp
from voxwire.brisvox.agent import AgentServer
from voxwire.brisvox.engine import EngineLink
from voxwire.brisvox.messages import Say
from voxwire.ovp.client import OVPClient
from voxwire.ovp.frames import AudioFrame
from voxwire.ovp.gateway import Gateway


def spoken(data: bytes) -> str | None:
    match brisvox.decode(data, sender="agent"):
        case brisvox.Say(text=text):
            return text
        case _:
            return None


def thinking(data: bytes) -> str:
    event = ovp.decode(data, sender="server")
    assert isinstance(event, ovp.AgentThinking)
    return event.delta


say: Say = voxwire.brisvox.Say(id="c1", text="Hello.")
wire: bytes = brisvox.encode(say)
pcm = bytes(ovp.PCM_BYTES_PER_FRAME)
up = ovp.FrameDirection.CLIENT_TO_SERVER
frame: AudioFrame = ovp.decode_frame(
    ovp.encode_frame(ovp.AudioFrame(direction=up, frame_seq=7, rtp_timestamp=320, pcm=pcm))
)
error: type[voxwire.ProtocolError] = ovp.ProtocolError
roles: tuple[type, ...] = (AgentServer, EngineLink, OVPClient, Gateway)
print(spoken(wire), voxwire.__version__, brisvox.PROTOCOL_VERSION, frame.frame_seq, error, roles)
"""


def _type_check(python: Path, folder: Path) -> None:
    program = folder / "user.py"
    program.write_text(USER_PROGRAM)
    checks = {
        "mypy": [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                 "--python-executable", str(python), "--cache-dir", str(folder / ".mypy"), str(program)],
        "pyright": [sys.executable, "-m", "pyright", "--pythonpath", str(python), str(program)],
    }  # fmt: skip
    for name, command in checks.items():
        done = subprocess.run(
            command, cwd=folder, capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, f"{name} after {python}:\n{done.stdout}{done.stderr}"
    assert "0 errors" in done.stdout


def _fresh_venv(folder: Path, *install: str) -> Path:
    venv.create(folder, with_pip=True)
    python = folder / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *install],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return python


def test_the_readme_install_and_the_wheel_type_check_a_user_program_alike(
    wheel: Path, tmp_path: Path
) -> None:
    node()  # pyright runs on it (the PyPI package carries pyright itself)
    editable = _fresh_venv(tmp_path / "editable", "-e", f"{ROOT}[gateway]")
    from_wheel = _fresh_venv(tmp_path / "wheel", f"{wheel}[gateway]")
    for python in (editable, from_wheel):
        folder = python.parent.parent / "user"
        folder.mkdir()
        _type_check(python, folder)
        done = subprocess.run(
            [str(python), str(folder / "user.py")], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Hello. ")
