"""`honing eval` on the newer domains' bundled examples, as a user runs it (a real process, the
real sandbox and kernels): the reference policy solves every example, noop none, and the three
tiers are reported for the domain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]


def honing_eval(tasks: str, policy: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "honing", "eval", "--tasks", tasks, "--policy", policy, "--json"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize(("domain", "examples"), [("structure", 7), ("finance", 8)])
def test_reference_solves_every_example_and_noop_none(domain: str, examples: int) -> None:
    solved = honing_eval(f"examples-{domain}", "reference")
    assert set(solved["by_domain"]) == {domain}
    assert set(solved["by_domain"][domain]) == {"end_to_end", "single_step", "trajectory"}
    e2e = solved["end_to_end"]
    assert (e2e["passed"], e2e["total"], e2e["infra_failed"]) == (examples, examples, 0)
    none = honing_eval(f"examples-{domain}", "noop")["end_to_end"]
    assert (none["passed"], none["total"], none["infra_failed"]) == (0, examples, 0)
