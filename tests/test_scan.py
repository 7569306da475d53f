"""The error path's iterative JSON reader (voxwire._scan) against msgspec, which it stands in
for on a text too deep for msgspec's stack."""

from __future__ import annotations

import random
import sys

import msgspec
import pytest

from fuzz.mutate import MessageMutator
from fuzz.seeds import load_seeds
from voxwire._scan import scan

_SYNTAX = msgspec.json.Decoder(msgspec.Raw).decode
_VALUE = msgspec.json.Decoder().decode

TEXTS = [
    "[]",
    "{}",
    "[[],{}]",
    '{"a":[1,{"b":null}],"c":"\\u00e9"}',
    '{"a":1,"a":2}',
    "-0",
    "1E+2",
    "2.5E-3",
    '"\\/"',
    '"\x7f"',
    '["\\u0000"]',
    '"\\ud800\\udc00"',
    "[1]\n",
    "\n[1]\r\n ",
    "1e400",
    "1" * 400,
    "1e-400",
    "",
    " ",
    "nul",
    "truex",
    "NaN",
    "Infinity",
    "\ufeff1",
    "1 \x0b",
    "01",
    "-01",
    "-",
    "1.",
    ".5",
    "1e",
    "1e+",
    '"\\x"',
    '"\\ud800"',
    '"\\udc00"',
    '"\\ud800x"',
    '{"\\ud800":1}',
    '"\x1f"',
    '"a\tb"',
    "[1,]",
    '{"a":1,}',
    "[,]",
    "{,}",
    "[1,,2]",
    '{"a":}',
    '{"a"}',
    '{"a" 1}',
    '{"a":1 "b":2}',
    "{1:2}",
    "[1 2]",
    "]",
    "1]",
    '{"a":1}}',
    "[" * 50,
]


@pytest.mark.parametrize("text", TEXTS)
def test_scan_finds_json_where_msgspec_does(text: str) -> None:
    try:
        _SYNTAX(text)
    except msgspec.DecodeError:
        valid = False
    else:
        valid = True
    found = scan(text, 128)
    assert (found.error is None) == valid, found.error
    if valid:
        try:
            _VALUE(text)
        except msgspec.ValidationError:
            assert found.overflow
        else:
            assert not found.overflow
            assert found.shallow == text


def test_scan_agrees_with_msgspec_on_mutated_messages() -> None:
    rng = random.Random(28)
    for protocol in ("brisvox", "ovp"):
        seeds = load_seeds(protocol)
        types = sorted({t for sent in seeds.types.values() for t in sent})
        for messages in seeds.messages.values():
            mutate = MessageMutator(rng, messages, types, 65536)
            for _ in range(300):
                try:  # the error path reads only UTF-8 (decode refuses the rest first)
                    text = mutate().decode("utf-8")
                except UnicodeDecodeError:
                    continue
                try:
                    _SYNTAX(text)
                except msgspec.DecodeError:
                    valid = False
                except RecursionError:
                    continue
                else:
                    valid = True
                assert (scan(text, 128).error is None) == valid, text[:200]


def test_scan_lists_every_top_level_type_in_order() -> None:
    text = (
        '{"type":"a","x":{"type":"nested"},"type":[1,[2]],"t\\u0079pe":"b","type":5,'
        '"type":null,"type":{}}'
    )
    assert [f"{t!r}" for t in scan(text, 128).types] == [
        "'a'",
        "an array",
        "'b'",
        "5",
        "null",
        "an object",
    ]


def test_scan_stops_its_list_at_the_first_error() -> None:
    found = scan('{"type":"a","type":"b",,"type":"c"}', 128)
    assert found.types == ["a", "b"]
    assert found.error == "JSON is malformed: invalid character (byte 23)"


def test_scan_cuts_what_is_nested_deeper_than_the_bound() -> None:
    found = scan('[[[1,[2]],[3]],4,{"a":{"b":{}}}]', 2)
    assert found.depth == 4
    assert found.shallow == '[[[],[]],4,{"a":{}}]'
    assert _VALUE(found.shallow) == [[[], []], 4, {"a": {}}]
    spaced = scan('{"a": [ [ [ [ ] ] ] ] , "b" : { "c" : { } } }', 2)
    assert spaced.shallow == '{"a": [ [] ] , "b" : { "c" : {} } }'


@pytest.mark.parametrize("depth", [sys.getrecursionlimit() * 2, 30_000])
def test_scan_reads_any_depth_without_recursing(depth: int) -> None:
    text = '{"type":"t","deep":' + "[" * depth + '"x"' + "]" * depth + "}"
    found = scan(text, 128)
    assert (found.error, found.depth, found.types) == (None, depth + 1, ["t"])
    assert found.shallow == '{"type":"t","deep":' + "[" * 128 + "]" * 128 + "}"
    broken = scan(text[:-2], 128)
    assert broken.error == "Input data was truncated"
