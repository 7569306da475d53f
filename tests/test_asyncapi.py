"""The AsyncAPI 3 documents (generated/asyncapi/): valid by the official schema and parser, and
saying what the spec says.

The official JSON Schema comes from the ``@asyncapi/specs`` npm package and the parser from
``@asyncapi/parser``, both installed by the test from npm into a gitignored cache (.cache/).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from codegen.asyncapi import ASYNCAPI_VERSION, CHANNEL
from codegen.ir import Protocol
from codegen.jsonschema_export import export_schema
from codegen.loader import load
from codegen.resolver import resolve
from tests.conftest import ROOT

PACKAGES = {"@asyncapi/specs": "6.11.1", "@asyncapi/parser": "3.6.6"}
"""The npm packages the check uses, at the versions it was written against."""
CACHE = ROOT / ".cache" / "npm-asyncapi"
PROTOCOLS = ("brisvox", "ovp")

_PARSE = """
import { Parser, fromFile } from '@asyncapi/parser';
const parser = new Parser();
const out = {};
for (const path of process.argv.slice(2)) {
  const { document, diagnostics } = await fromFile(parser, path).parse();
  out[path] = {
    parsed: document !== undefined,
    diagnostics: diagnostics.map((d) => ({
      severity: d.severity, code: d.code, message: d.message, path: d.path })),
  };
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def npm_packages() -> Path:
    """The cache folder with the packages installed (npm install is a no-op when they are)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node and npm are needed for the official AsyncAPI schema and parser")
    CACHE.mkdir(parents=True, exist_ok=True)
    wanted = [f"{name}@{version}" for name, version in PACKAGES.items()]
    installed = all(
        (CACHE / "node_modules" / name / "package.json").exists()
        and json.loads((CACHE / "node_modules" / name / "package.json").read_text())["version"]
        == version
        for name, version in PACKAGES.items()
    )
    if not installed:
        run = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), *wanted],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert run.returncode == 0, run.stderr[-2000:]
    (CACHE / "parse.mjs").write_text(_PARSE, encoding="utf-8")
    return CACHE


@cache
def _document(protocol: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "generated" / "asyncapi" / f"{protocol}.yaml").read_text())
    assert isinstance(data, dict)
    return data


@cache
def _spec(protocol: str) -> Protocol:
    return resolve(load(ROOT / "spec" / f"{protocol}.yaml"))


def _official_schema(cache: Path) -> dict[str, Any]:
    folder = cache / "node_modules" / "@asyncapi" / "specs" / "schemas"
    schema = json.loads((folder / f"{ASYNCAPI_VERSION}-without-$id.json").read_text())
    assert isinstance(schema, dict)
    return schema


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_valid_by_the_official_json_schema(npm_packages: Path, protocol: str) -> None:
    validator = jsonschema.Draft7Validator(_official_schema(npm_packages))
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
        for e in validator.iter_errors(_document(protocol))
    ]
    assert errors == []


def test_the_official_schema_refuses_a_broken_document(npm_packages: Path) -> None:
    broken = copy.deepcopy(_document("ovp"))
    operation = next(iter(broken["operations"].values()))
    operation["action"] = "publish"  # AsyncAPI 2's word: 3 has send and receive
    validator = jsonschema.Draft7Validator(_official_schema(npm_packages))
    assert not validator.is_valid(broken)


def _parse(cache: Path, paths: list[Path]) -> dict[str, Any]:
    run = subprocess.run(
        ["node", str(cache / "parse.mjs"), *map(str, paths)],
        cwd=cache,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if run.returncode != 0 and "SyntaxError" in run.stderr and "import" in run.stderr:
        pytest.skip(f"this Node cannot run the AsyncAPI parser: {run.stderr[-300:]}")
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert isinstance(out, dict)
    return out


def test_parsed_by_the_asyncapi_parser(npm_packages: Path, tmp_path: Path) -> None:
    broken = copy.deepcopy(_document("ovp"))
    first = next(iter(broken["components"]["messages"].values()))
    first["payload"] = {"$ref": "#/components/schemas/NoSuchSchema"}
    broken_path = tmp_path / "broken.yaml"
    broken_path.write_text(yaml.safe_dump(broken), encoding="utf-8")
    paths = [ROOT / "generated" / "asyncapi" / f"{p}.yaml" for p in PROTOCOLS]
    results = _parse(npm_packages, [*paths, broken_path])
    for path in paths:
        result = results[str(path)]
        # severity 0 is an error, 1 a warning; 2 and 3 are information and hints
        serious = [d for d in result["diagnostics"] if d["severity"] <= 1]
        assert result["parsed"], result["diagnostics"]
        assert serious == [], path.name
    assert not results[str(broken_path)]["parsed"]  # the parser can fail: a dangling $ref


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_each_side_has_an_operation_with_every_message_it_sends(protocol: str) -> None:
    spec, document = _spec(protocol), _document(protocol)
    channel = document["channels"][CHANNEL]
    by_sender = {op["x-sender"]: op for op in document["operations"].values()}
    assert set(by_sender) == {s.id for s in spec.senders}
    assert by_sender[spec.senders[0].id]["action"] == "send"
    frames = [f.name for f in spec.frames]
    for sender in spec.senders:
        operation = by_sender[sender.id]
        assert operation["channel"] == {"$ref": f"#/channels/{CHANNEL}"}
        names = [ref["$ref"].rsplit("/", 1)[1] for ref in operation["messages"]]
        assert names == [m.class_name for m in sender.messages] + frames
        assert all(name in channel["messages"] for name in names)
        assert operation["x-unknown-types"] == ("accept" if sender.accepts_unknown else "reject")
    assert document["info"]["version"] == spec.version


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_payload_is_the_json_schema_exports_own(protocol: str) -> None:
    spec, document = _spec(protocol), _document(protocol)
    exported = json.loads(
        json.dumps(export_schema(spec)["$defs"]).replace("#/$defs/", "#/components/schemas/")
    )
    schemas = document["components"]["schemas"]
    for message in spec.messages:
        entry = document["components"]["messages"][message.class_name]
        assert entry["name"] == message.type
        assert entry["payload"] == {"$ref": f"#/components/schemas/{message.class_name}"}
        assert schemas[message.class_name] == exported[message.class_name]
        assert [e["payload"] for e in entry.get("examples", [])] == [
            e.json for e in message.examples
        ]
    assert {k: v for k, v in schemas.items() if k != "ErrorCode"} == exported


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_error_codes_and_close_codes_are_listed(protocol: str) -> None:
    spec, document = _spec(protocol), _document(protocol)
    assert [e["code"] for e in document["x-error-codes"]] == [e.code for e in spec.errors]
    assert document["components"]["schemas"]["ErrorCode"]["enum"] == [e.code for e in spec.errors]
    assert [(c["name"], c["code"]) for c in document["x-close-codes"]] == [
        (c.name, c.code) for c in spec.close_codes
    ]


def test_the_binary_frame_is_a_documented_extension() -> None:
    spec, document = _spec("ovp"), _document("ovp")
    frame = spec.frames[0]
    message = document["components"]["messages"][frame.name]
    assert message["contentType"] == "application/octet-stream"
    layout = message["x-frame"]
    assert layout["size"] == frame.size == sum(f["size"] for f in layout["fields"])
    assert [(f["name"], f["offset"], f["type"]) for f in layout["fields"]] == [
        (f.name, f.offset, f.kind) for f in frame.fields
    ]
    flags = next(f for f in layout["fields"] if "flags" in f)["flags"]
    assert [(x["bit"], x["name"]) for x in flags] == [
        (bit, name) for f in frame.fields for bit, name, _ in f.flags
    ]


def test_the_ovp_channel_is_the_endpoint_with_its_subprotocol() -> None:
    spec, channel = _spec("ovp"), _document("ovp")["channels"][CHANNEL]
    assert channel["address"] == spec.transport["endpoint"]
    assert set(channel["parameters"]) == {"session_id"}
    header = channel["bindings"]["ws"]["headers"]["properties"]["Sec-WebSocket-Protocol"]
    assert header["examples"] == [spec.transport["subprotocol"]]


def test_the_docs_site_serves_the_same_documents() -> None:
    for protocol in PROTOCOLS:
        served = ROOT / "docs" / "reference" / "asyncapi" / f"{protocol}.yaml"
        assert (
            served.read_text() == (ROOT / "generated" / "asyncapi" / f"{protocol}.yaml").read_text()
        )
