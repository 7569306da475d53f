"""voxwire._depth.deeper_than: how deep a text nests, counted without a parser."""

from __future__ import annotations

import sys

import pytest

from voxwire import brisvox
from voxwire._depth import deeper_than


@pytest.mark.parametrize("form", [str, lambda text: text.encode()])
@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("[]", 1),
        ("{}", 1),
        ('{"a":[{"b":[]}]}', 4),
        ('["[[[[", "]]"]', 1),  # brackets in strings do not count
        (
            r'["\"[[[", {"k\\": [[]]}]',
            4,
        ),  # nor after an escaped quote; an escaped backslash ends none
        ('{"a":"}}}}"}', 1),
    ],
)
def test_deeper_than_counts_brackets_outside_strings(text: str, depth: int, form: object) -> None:
    data = form(text)  # type: ignore[operator]
    assert not deeper_than(data, depth)
    assert deeper_than(data, depth - 1)


def test_deeper_than_at_the_read_depth_and_one_past() -> None:
    bound = brisvox.MAX_READ_DEPTH
    assert not deeper_than("[" * bound + "]" * bound, bound)
    assert deeper_than("[" * (bound + 1) + "]" * (bound + 1), bound)


def test_deeper_than_reads_any_depth_without_recursing() -> None:
    depth = 30 * sys.getrecursionlimit()
    assert deeper_than("[" * depth, depth - 1)
    assert not deeper_than("[" * depth, depth)


def test_deeper_than_takes_a_text_with_a_lone_surrogate() -> None:
    assert deeper_than('[["\ud800"]]', 1)
