"""The implementations voxwire is measured against, each built once before timing.

- the published ``brisvox-agent`` SDK's parser (its ``protocol.py`` is stdlib-only: loaded by
  path from the wheel, so its ``websockets < 16`` pin does not matter here);
- a pydantic v2 discriminated union of the same messages, generated from voxwire's exported JSON
  Schema by datamodel-code-generator (no hand-written models to flatter or handicap);
- ``json.loads`` plus a prebuilt jsonschema validator of the sender's union;
- ``orjson.loads``: the floor for JSON to Python objects, without validation;
- a bare msgspec union of the generated Structs, without voxwire's extra checks.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, Union

import msgspec

__all__ = ["bare_union", "jsonschema_decoder", "orjson_loads", "pydantic_decoder", "sdk_protocol"]

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "benchmarks"
SDK_VERSION = "0.1.2"


def _load_by_path(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@cache
def sdk_protocol() -> ModuleType:
    """``brisvox_agent.protocol`` of the published SDK, fetched once into .cache/."""
    target = CACHE / f"brisvox_agent-{SDK_VERSION}"
    source = target / "brisvox_agent" / "protocol.py"
    if not source.exists():
        wheels = CACHE / "wheels"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "-d",
                str(wheels),
                f"brisvox-agent=={SDK_VERSION}",
            ],
            check=True,
        )
        [wheel] = wheels.glob(f"brisvox_agent-{SDK_VERSION}-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extract("brisvox_agent/protocol.py", target)
    return _load_by_path("brisvox_sdk_protocol", source)


def orjson_loads() -> Callable[[str], Any]:
    import orjson

    return orjson.loads


def bare_union(union: Any) -> Callable[[str], Any]:
    """msgspec decoding into the generated Structs, nothing else (their checks run inside it:
    each message class runs its check as msgspec builds it)."""
    return msgspec.json.Decoder(union).decode


def unchecked_union(union: Any) -> Callable[[str], Any]:
    """msgspec decoding into copies of the generated message Structs without their checks
    (their fields, names, defaults and constraints; no ``__post_init__``): the cost of the
    types alone."""
    copies = []
    for cls in union.__args__:
        config = cls.__struct_config__
        fields = [(f.name, f.type, _field_default(f)) for f in msgspec.structs.fields(cls)]
        copies.append(
            msgspec.defstruct(
                cls.__name__,
                fields,
                tag_field=config.tag_field,
                tag=config.tag,
                omit_defaults=config.omit_defaults,
                forbid_unknown_fields=config.forbid_unknown_fields,
                kw_only=True,
            )
        )
    return msgspec.json.Decoder(Union[tuple(copies)]).decode  # noqa: UP007


def _field_default(f: msgspec.structs.FieldInfo) -> Any:
    if f.default is not msgspec.NODEFAULT:
        return msgspec.field(default=f.default, name=f.encode_name)
    if f.default_factory is not msgspec.NODEFAULT:
        return msgspec.field(default_factory=f.default_factory, name=f.encode_name)
    return msgspec.field(name=f.encode_name)


def jsonschema_decoder(protocol: str, union_name: str) -> Callable[[str], Any]:
    """``json.loads`` then a prebuilt validator of the union (raises on an invalid message)."""
    import json

    import jsonschema

    document = json.loads((ROOT / "generated" / "voxwire" / protocol / "schema.json").read_text())
    validator = jsonschema.Draft202012Validator(
        {"$ref": f"#/$defs/{union_name}", "$defs": document["$defs"]}
    )

    def decode(data: str) -> Any:
        value = json.loads(data)
        validator.validate(value)
        return value

    return decode


@cache
def _pydantic_module(protocol: str) -> ModuleType:
    out = CACHE / f"{protocol}_pydantic.py"
    schema = ROOT / "generated" / "voxwire" / protocol / "schema.json"
    if not out.exists() or out.stat().st_mtime < schema.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        # Its warnings (dropped constraints, formatter defaults) would bury the tables: kept
        # unless it fails.
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "datamodel_code_generator",
                "--input",
                str(schema),
                "--input-file-type",
                "jsonschema",
                "--output",
                str(out),
                "--output-model-type",
                "pydantic_v2.BaseModel",
                "--enum-field-as-literal",
                "all",
                "--use-annotated",
                "--field-constraints",
                "--disable-timestamp",
            ],
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            raise RuntimeError(f"datamodel-codegen failed on {schema}:\n{run.stderr}")
    return _load_by_path(f"bench_{protocol}_pydantic", out)


def pydantic_decoder(protocol: str, class_names: list[str]) -> Callable[[str], Any]:
    """A pydantic v2 TypeAdapter of the discriminated union of ``class_names``."""
    from typing import Annotated, Union

    import pydantic

    module = _pydantic_module(protocol)
    members = tuple(getattr(module, name) for name in class_names)
    # A union of classes known only at run time: no static type to give it.
    union = Annotated[Union[members], pydantic.Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007
    return pydantic.TypeAdapter(union).validate_json
