"""The tools domain's executable tools, described as a task declares them (`TOOL_FUNCTIONS`): the
environment offers them as OpenAI tools, and the synthetic generator declares them in its tasks.
Not covered: running them (`env`).
"""

from __future__ import annotations

from typing import Any


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


# The executable tools of the tools domain, described as a task declares them (the environment
# offers them as OpenAI tools; the synthetic generator declares them in its tasks).
TOOL_FUNCTIONS: dict[str, dict[str, Any]] = {
    "calculator": _function("calculator", "Evaluate arithmetic exactly, e.g. 12*(3+4).",
                            {"expression": {"type": "string"}}, ["expression"]),
    "convert_units": _function(
        "convert_units", "Convert a quantity between units (m, km, mi, ft, kg, lb, h, l, C, F…).",
        {"value": {"type": "number"}, "from_unit": {"type": "string"},
         "to_unit": {"type": "string"}}, ["value", "from_unit", "to_unit"]),
    "lookup": _function("lookup", "Look up a fact by key.", {"key": {"type": "string"}}, ["key"]),
    "pop_record": _function("pop_record", "Read a record and remove it from the store.",
                            {"key": {"type": "string"}}, ["key"]),
    "calendar": _function(
        "calendar", "Dates (YYYY-MM-DD): weekday of `date`; `date` plus `days`; days between "
        "`date` and `other`.",
        {"operation": {"type": "string", "enum": ["weekday", "add_days", "days_between"]},
         "date": {"type": "string"}, "days": {"type": "integer"}, "other": {"type": "string"}},
        ["operation", "date"]),
}  # fmt: skip
