"""A message's ``__post_init__`` tests its values inline and calls its check only when a test
fails: the inline tests must never pass a value the check refuses.

Each decodable example of a message whose check has inline tests gets, field by field, values at
and past every bound the tests stand in for (blank and non-ASCII text, text of limit/4 and
limit characters of 1 to 4 UTF-8 bytes, absent and null values, free-form values at and past
the nesting bound); ``__post_init__`` and the check, run on the same message, must agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from tests.conftest import ROOT
from voxwire import brisvox, ovp

PROTOCOLS = {"brisvox": brisvox, "ovp": ovp}


def _texts(limit: int) -> list[str]:
    quarter = limit // 4
    texts = ["", " ", "\t\n", "\xa0", "\u3000x", "a", " a", "é", "\U0001f600"]
    for char in ("a", "é", "€", "\U0001f600"):
        for count in (quarter, quarter + 1, limit // len(char.encode()), limit + 1):
            texts.append(char * count)
    return texts


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def _free_form(max_depth: int) -> list[Any]:
    """Free-form values; a field's value is nested 2 deep in its message (the message is 1)."""
    deep = [_nested(max_depth - 2), _nested(max_depth - 1), _nested(max_depth)]
    return [{}, {"a": 1, "b": "x"}, {1: 2}, [1], "x", 1.5, float("nan"), *deep]


def _examples(protocol: str) -> Iterator[tuple[Any, Any]]:
    """(message class, decoded message) of each example whose class has inline tests."""
    module = PROTOCOLS[protocol]
    seen: dict[type, int] = {}
    path = ROOT / "generated" / "voxwire" / protocol / "vectors.jsonl"
    for line in path.read_text().splitlines()[1:]:
        case = json.loads(line)
        if case["kind"] != "decode" or "text" not in case["input"]:
            continue
        try:
            message = module.decode(case["input"]["text"], sender=case["sender"])
        except module.ProtocolError:
            continue
        cls = type(message)
        names = cls.__post_init__.__code__.co_names if "__post_init__" in vars(cls) else ()
        if not any(name.startswith("check_") for name in names) or seen.get(cls, 0) >= 2:
            continue
        seen[cls] = seen.get(cls, 0) + 1
        yield cls, message


def _verdict(run: Any, *args: Any) -> str | None:
    try:
        run(*args)
    except (TypeError, AttributeError):
        return "not typed"
    except (brisvox.ProtocolError, ovp.ProtocolError) as exc:
        return exc.code
    return None


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_inline_tests_never_pass_what_the_check_refuses(protocol: str) -> None:
    module = PROTOCOLS[protocol]
    checks = module.checks
    examples = list(_examples(protocol))
    assert len({cls for cls, _ in examples}) >= 5, "too few messages with inline tests"
    compared = refused = 0
    for cls, message in examples:
        [check_name] = [n for n in cls.__post_init__.__code__.co_names if n.startswith("check_")]
        check = getattr(checks, check_name)
        for field in msgspec.structs.fields(cls):
            if field.name == "type":
                continue
            values: list[Any] = [msgspec.UNSET, None, *_free_form(module.MAX_NESTING_DEPTH)]
            values += [*_texts(64), *_texts(512)]
            values += _texts(4096)
            for value in values:
                copy = msgspec.structs.replace(message)
                setattr(copy, field.name, value)
                checked = _verdict(check, copy)
                if checked == "not typed":
                    continue
                assert _verdict(copy.__post_init__) == checked, (cls.__name__, field.name, value)
                compared += 1
                refused += checked is not None
    assert compared > 1000 and refused > 100, (compared, refused)
