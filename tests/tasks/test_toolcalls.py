"""Tool-call parsing and matching by BFCL's rules, on hand-written cases (the differential against
bfcl-eval's own checker is tests/tasks/test_bfcl_differential.py)."""

from __future__ import annotations

import pytest

from honing.domains.tools.judge import Expected, match_calls, parse_python_calls, reference_calls

AREA: Expected = {"area": {"base": [10], "height": [5], "unit": ["units", ""]}}
PRIME: Expected = {"primes": {"count": [5]}}


def function(name: str, required: list[str], **types: str | dict[str, object]) -> dict[str, object]:
    properties = {k: v if isinstance(v, dict) else {"type": v} for k, v in types.items()}
    return {"name": name, "parameters": {"type": "dict", "properties": properties,
                                         "required": required}}  # fmt: skip


FUNCTIONS = [
    function("area", ["base", "height"], base="integer", height="float", unit="string"),
    function("primes", ["count"], count="integer"),
]


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
    given = {"name": "area", "arguments": {"base": 10, "height": 5}}
    assert match_calls([given], [AREA], FUNCTIONS) is None
    # An int stands for a float; "" makes "unit" optional; strings ignore case and punctuation.
    given = {"name": "area", "arguments": {"base": 10, "height": 5.0, "unit": "Units."}}
    assert match_calls([given], [AREA], FUNCTIONS) is None


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"base": 10}, "missing required argument 'height'"),
        ({"base": 10, "height": 6}, "height=6 is not accepted"),
        ({"base": 10, "height": 5, "colour": "red"}, "unexpected argument 'colour'"),
        ({"base": True, "height": 5}, "base=true is a bool, not integer"),
        ({"base": 10.0, "height": 5}, "base=10.0 is a float, not integer"),  # by the schema
        ({"base": "10", "height": 5}, 'base="10" is a str, not integer'),
    ],
)
def test_match_rejects_wrong_arguments(arguments: dict[str, object], reason: str) -> None:
    mismatch = match_calls([{"name": "area", "arguments": arguments}], [AREA], FUNCTIONS)
    assert mismatch is not None and reason in mismatch


def test_required_by_the_schema_even_when_the_answer_allows_leaving_out() -> None:
    expected: list[Expected] = [{"area": {"base": [10], "height": [5, ""]}}]
    given = {"name": "area", "arguments": {"base": 10}}
    assert match_calls([given], expected, FUNCTIONS) == "area: missing required argument 'height'"
    optional = [function("area", ["base"], base="integer", height="float")]
    assert match_calls([given], expected, optional) is None


def test_a_value_of_the_accepted_values_type_stands_as_a_variable() -> None:
    # The schema says integer, the accepted value is a name: a string is then taken, compared
    # as it is (not lower-cased), as BFCL does.
    expected: list[Expected] = [{"primes": {"count": ["n"]}}]
    assert (
        match_calls([{"name": "primes", "arguments": {"count": "n"}}], expected, FUNCTIONS) is None
    )
    assert match_calls([{"name": "primes", "arguments": {"count": "N"}}], expected, FUNCTIONS)


def test_strings_are_standardised_as_bfcl_does() -> None:
    expected: list[Expected] = [{"area": {"base": [10], "height": [5], "unit": ["sq. 'ft'"]}}]
    for unit in ('SQ "FT"', "sq 'ft'", "s-q_'f*t^/'"):
        given = {"name": "area", "arguments": {"base": 10, "height": 5, "unit": unit}}
        assert match_calls([given], expected, FUNCTIONS) is None, unit
    given = {"name": "area", "arguments": {"base": 10, "height": 5, "unit": "sq ft!"}}
    assert match_calls([given], expected, FUNCTIONS) is not None


def test_list_elements_have_the_item_type() -> None:
    stats = [function("mean", ["xs"], xs={"type": "array", "items": {"type": "integer"}})]
    expected: list[Expected] = [{"mean": {"xs": [[1, 2, 3]]}}]
    assert match_calls([{"name": "mean", "arguments": {"xs": [1, 2, 3]}}], expected, stats) is None
    floats = match_calls([{"name": "mean", "arguments": {"xs": [1.0, 2.0, 3.0]}}], expected, stats)
    assert floats is not None and "is a list, not array" in floats
    assert match_calls([{"name": "mean", "arguments": {"xs": [3, 2, 1]}}], expected, stats)


def test_match_pairs_parallel_calls_in_any_order() -> None:
    calls = [
        {"name": "primes", "arguments": {"count": 5}},
        {"name": "area", "arguments": {"base": 10, "height": 5}},
    ]
    assert match_calls(calls, [AREA, PRIME], FUNCTIONS) is None
    assert match_calls(calls[:1], [AREA, PRIME], FUNCTIONS) == "expected 2 call(s), got 1"
    assert "called 'primes'" in (match_calls(calls[:1], [AREA], FUNCTIONS) or "")
    assert match_calls([], [], FUNCTIONS) is None  # irrelevance: calling nothing is right


def test_parallel_calls_are_paired_by_a_perfect_matching() -> None:
    # The first call fits both expected calls, the second only the first one: pairing each
    # expected call with the first call that fits (BFCL's greedy way) fails; a matching does not.
    expected: list[Expected] = [{"primes": {"count": [5, 6]}}, {"primes": {"count": [6]}}]
    calls = [{"name": "primes", "arguments": {"count": c}} for c in (6, 5)]
    assert match_calls(calls, expected, FUNCTIONS) is None
    twice = [{"name": "primes", "arguments": {"count": 6}}] * 2
    assert match_calls(twice, [{"primes": {"count": [5]}}, *expected[1:]], FUNCTIONS) is not None


def test_nested_dict_options_and_reference() -> None:
    order = function(
        "order", ["items"], items={"type": "array", "items": {"type": "dict"}}, note="string"
    )
    expected: list[Expected] = [
        {
            "order": {
                "items": [[{"item": ["burger"], "qty": [5]}, {"item": ["fries"], "qty": [1, ""]}]],
                "note": [""],
            }
        }
    ]
    (reference,) = reference_calls(expected)
    assert reference == {
        "name": "order",
        "arguments": {"items": [{"item": "burger", "qty": 5}, {"item": "fries", "qty": 1}]},
    }
    assert match_calls([reference], expected, [order]) is None
    wrong = {
        "name": "order",
        "arguments": {"items": [{"item": "burger", "qty": 4}, {"item": "fries"}]},
    }
    assert match_calls([wrong], expected, [order]) is not None
    without_optional = {
        "name": "order",
        "arguments": {"items": [{"item": "Burger", "qty": 5}, {"item": "fries"}]},
    }
    assert match_calls([without_optional], expected, [order]) is None
