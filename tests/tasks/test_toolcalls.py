"""Tool-call parsing and BFCL-style matching, on hand-written cases."""

from __future__ import annotations

import pytest

from honing.tasks.toolcalls import match_calls, parse_python_calls, reference_calls

AREA = {"area": {"base": [10], "height": [5], "unit": ["units", ""]}}
PRIME = {"primes": {"count": [5]}}


def test_parse_python_calls() -> None:
    assert parse_python_calls("area(base=10, height=5)") == [
        {"name": "area", "arguments": {"base": 10, "height": 5}}
    ]
    assert parse_python_calls("[math.hypot(x=4, y=5), f(s='a b', l=[1, 2])]") == [
        {"name": "math.hypot", "arguments": {"x": 4, "y": 5}},
        {"name": "f", "arguments": {"s": "a b", "l": [1, 2]}},
    ]
    for bad in ("area(10, 5)", "area(base=x)", "1 + 2", "area(base="):
        with pytest.raises(ValueError):
            parse_python_calls(bad)


def test_match_accepts_equivalent_values() -> None:
    assert match_calls([{"name": "area", "arguments": {"base": 10, "height": 5}}], [AREA]) is None
    # An int stands for a float; "" makes "unit" optional; strings ignore case and punctuation.
    given = {"name": "area", "arguments": {"base": 10.0, "height": 5, "unit": "Units."}}
    assert match_calls([given], [AREA]) is None


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"base": 10}, "missing argument 'height'"),
        ({"base": 10, "height": 6}, "height=6 is not accepted"),
        ({"base": 10, "height": 5, "colour": "red"}, "unexpected argument 'colour'"),
        ({"base": True, "height": 5}, "base=true is not accepted"),  # a bool is not a number
    ],
)
def test_match_rejects_wrong_arguments(arguments: dict[str, object], reason: str) -> None:
    mismatch = match_calls([{"name": "area", "arguments": arguments}], [AREA])
    assert mismatch is not None and reason in mismatch


def test_match_pairs_parallel_calls_in_any_order() -> None:
    calls = [
        {"name": "primes", "arguments": {"count": 5}},
        {"name": "area", "arguments": {"base": 10, "height": 5}},
    ]
    assert match_calls(calls, [AREA, PRIME]) is None
    assert match_calls(calls[:1], [AREA, PRIME]) == "expected 2 call(s), got 1"
    assert "called 'primes'" in (match_calls(calls[:1], [AREA]) or "")
    assert match_calls([], []) is None  # irrelevance: calling nothing is right


def test_nested_dict_options_and_reference() -> None:
    expected = [
        {
            "order": {
                "items": [[{"item": ["burger"], "qty": [5]}, {"item": ["fries"], "qty": [1, ""]}]],
                "note": [],  # nothing acceptable to give: may only be left out
            }
        }
    ]
    (reference,) = reference_calls(expected)
    assert reference == {
        "name": "order",
        "arguments": {"items": [{"item": "burger", "qty": 5}, {"item": "fries", "qty": 1}]},
    }
    assert match_calls([reference], expected) is None
    wrong = {
        "name": "order",
        "arguments": {"items": [{"item": "burger", "qty": 4}, {"item": "fries"}]},
    }
    assert match_calls([wrong], expected) is not None
    without_optional = {
        "name": "order",
        "arguments": {"items": [{"item": "burger", "qty": 5}, {"item": "fries"}]},
    }
    assert match_calls([without_optional], expected) is None
