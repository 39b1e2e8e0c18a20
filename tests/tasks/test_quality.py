"""The quality filter: each reference runs through its verifier; failures are quarantined."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, cast

import pytest

from honing.domains.code.judge import code_program
from honing.domains.math.judge import (
    PROGRAM,
    checker_pool,
    final_value,
    integer_verdict,
    math_equal_many,
    number_kind,
)
from honing.errors import ConfigError
from honing.sandbox import ExecRequest, ExecResult, ExecStatus, SandboxPool
from honing.tasks import apply_quality_filter, domains, load_tasks, verify_references
from honing.tasks.schema import TaskBase

BAD_CODE = {
    "id": "code/add-wrong",
    "domain": "code",
    "prompt": "def add(a, b):\n    '''Return a + b.'''\n",
    "entry_point": "add",
    "tests": "def check(candidate):\n    assert candidate(2, 3) == 5, 'add(2, 3) should be 5'\n",
    "reference": "def add(a, b):\n    return a - b\n",
}
BAD_CODE_PLAIN = {
    "id": "code/sq-wrong",
    "domain": "code",
    "prompt": "def sq(x): ...",
    "entry_point": "sq",
    "tests": "assert sq(3) == 9\n",
    "reference": "def sq(x):\n    raise ValueError('not implemented')\n",
}
BAD_MATH = {
    "id": "math/wrong",
    "domain": "math",
    "prompt": "What is 2 + 2?",
    "answer": "4",
    "reference": "5",
}
GOOD_PLAIN = {
    "id": "code/sq",
    "domain": "code",
    "prompt": "def sq(x):\n    '''x squared'''\n",
    "entry_point": "sq",
    "tests": "assert sq(3) == 9\nassert sq(-2) == 4\n",
    "reference": "def sq(x):\n    return x * x\n",
}


MATH_CASES = [
    ("391", "17*23 = 391", True),
    ("391", "391", True),
    ("\\frac{1}{2}", "0.5", True),
    ("0.5", "\\frac{1}{2}", True),
    ("391", "so the answer is \\boxed{391}", True),
    ("(x+1)^2", "x^2 + 2x + 1", True),
    ("4", "5", False),
    ("5", "4", False),
    ("391", "17*23 = 390", False),
    ("\\frac{1}{2}", "0.25", False),
    # parsed inside the sandbox: text that would run code on a host parser is only unequal
    ("1", "__import__('os').system('touch /tmp/honing-pwned')", False),
    # an expected number needs a stated number: a formula is not evaluated for the model
    ("215418", "483*446", False),
    ("215418", "483 \\times 446", False),
    ("215418", "215000 + 418", False),
    ("4", "8/2", False),  # a division where an integer is asked
    ("215418", "215,418", True),
    ("0.75", "3/4", True),  # a fraction where a decimal is asked is a value
    ("\\frac{3}{4}", "\\dfrac{3}{4}", True),
    ("2\\sqrt{2}", "\\sqrt{8}", True),  # an expected expression: compared symbolically
    ("7", "9" * 5000, False),  # past int()'s 4300 digits: still a verdict
]

INTEGER_PAIRS = [
    ("391", "391"),
    ("391", "17*23 = 391"),
    ("215418", "215,418"),
    ("-1024", "\\boxed{-1,024}"),
    ("7", "007"),
    ("7", "+7"),
    ("0", "-0"),
    ("-5", "5"),
    ("25", "25\\%"),
    ("100", "1000"),
    ("12345678901234567890", "12345678901234567891"),
]


async def test_integers_compared_on_the_host_as_math_verify_does(pool: SandboxPool) -> None:
    """The host's digit comparison gives math-verify's verdict on every pair of integers."""
    checker = await checker_pool(pool)
    comparable = [(e, final_value(g).replace(",", "")) for e, g in INTEGER_PAIRS]
    spec = {"budget_s": 5.0, "pairs": comparable}
    result = await checker.run(ExecRequest(code=PROGRAM, stdin=json.dumps(spec)))
    assert result.stdout, result
    checked = [item["equal"] for item in json.loads(result.stdout)]
    assert [integer_verdict(e, g) for e, g in INTEGER_PAIRS] == checked
    assert integer_verdict("391", "17*23") is None  # not an integer: the sandbox decides
    assert integer_verdict("0.5", "1/2") is None


async def test_math_equal_in_the_sandbox(pool: SandboxPool) -> None:
    found = await math_equal_many(pool, [(e, g) for e, g, _ in MATH_CASES])
    assert [v.equal for v in found] == [equal for _, _, equal in MATH_CASES]
    assert not any(v.rejected or v.problem for v in found)  # verdicts, no checker failure


@pytest.mark.parametrize(
    ("text", "value", "kind"),
    [
        ("17*23 = 391", "391", "integer"),
        ("so the answer is \\boxed{-1,024}.", "-1,024", "integer"),
        ("$\\text{0.5}$", "0.5", "decimal"),
        ("(\\dfrac{3}{4})", "\\frac{3}{4}", "fraction"),
        ("25\\%", "25", "integer"),
        ("483 \\times 446", "483\\times446", None),
        ("\\boxed{2^{10}}", "2^{10}", None),
        ("391 apples", "391apples", None),
    ],
)
def test_the_value_an_answer_states(text: str, value: str, kind: str | None) -> None:
    assert final_value(text) == value
    assert number_kind(text) == kind


def test_code_program_calls_check_only_when_defined() -> None:
    TASK_ADAPTER = domains.task_adapter()

    with_check = TASK_ADAPTER.validate_python(BAD_CODE)
    plain = TASK_ADAPTER.validate_python(GOOD_PLAIN)
    assert code_program(with_check, "S").rstrip().endswith("check(add)")
    assert "check(" not in code_program(plain, "S")
    assert code_program(plain, "SOLUTION").startswith("SOLUTION")


@pytest.fixture
def task_file(tmp_path: Path, rows: list[dict[str, Any]], fmt: SimpleNamespace) -> Path:
    """The fixture set with failing tasks mixed in; ids in file order are returned by `ids`."""
    mixed = [rows[0], BAD_CODE, rows[1], rows[2], BAD_MATH, GOOD_PLAIN, rows[3], BAD_CODE_PLAIN]
    return fmt.write_jsonl(tmp_path / "tasks.jsonl", mixed)


async def test_quality_filter_keeps_passing_and_quarantines_failing(
    pool: SandboxPool, task_file: Path
) -> None:
    taskset = load_tasks(str(task_file))
    assert len(taskset.tasks) == 8 and taskset.quarantined == []

    filtered, found = await apply_quality_filter(taskset, pool)

    kept = ["code/add", "code/neg", "math/product", "code/sq", "math/half"]
    assert [t.id for t in filtered.tasks] == kept  # file order is kept
    assert [t.id for t in found.without_reference] == ["code/neg"]
    assert found.unverified == []
    assert filtered.total == taskset.total == 8
    assert filtered.version != taskset.version

    failed = {q.task_id: q for q in filtered.quarantined}
    assert set(failed) == {"code/add-wrong", "math/wrong", "code/sq-wrong"}
    assert [q.task_id for q in found.failed] == ["code/add-wrong", "math/wrong", "code/sq-wrong"]
    for task_id, line in (("code/add-wrong", 2), ("math/wrong", 5), ("code/sq-wrong", 8)):
        q = failed[task_id]
        assert (q.source, q.line, q.field) == (str(task_file), line, "reference")
        assert q.row is not None and q.row["id"] == task_id
    assert "AssertionError" in failed["code/add-wrong"].reason
    assert "add(2, 3) should be 5" in failed["code/add-wrong"].reason
    assert "error" in failed["code/add-wrong"].reason
    assert "ValueError" in failed["code/sq-wrong"].reason
    assert "'4'" in failed["math/wrong"].reason


async def test_quarantine_keeps_earlier_load_quarantine(
    pool: SandboxPool, tmp_path: Path, fmt: SimpleNamespace
) -> None:
    rows = [GOOD_PLAIN, {"id": "broken", "domain": "math"}, BAD_MATH]
    taskset = load_tasks(str(fmt.write_jsonl(tmp_path / "t.jsonl", rows)))
    filtered, _ = await apply_quality_filter(taskset, pool)
    assert [t.id for t in filtered.tasks] == ["code/sq"]
    assert [(q.task_id, q.line) for q in filtered.quarantined] == [("broken", 2), ("math/wrong", 3)]


async def test_sandbox_error_is_unverified_not_quarantined(
    pool: SandboxPool, task_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sandbox fails on the run of code/add only; the other programs run for real.
    taskset = load_tasks(str(task_file))
    real_run_many = pool.run_many
    sabotaged: list[str] = []

    async def run_many(
        requests: Iterable[ExecRequest], concurrency: int | None = None
    ) -> list[ExecResult]:
        requests = list(requests)
        results = await real_run_many(requests, concurrency)
        for i, req in enumerate(requests):
            solution = str(req.files.get("solution.py", ""))
            if "return a + b" in solution:
                sabotaged.append(solution)
                results[i] = ExecResult(status=ExecStatus.SANDBOX_ERROR, error="cell died")
        return results

    monkeypatch.setattr(pool, "run_many", run_many)
    filtered, found = await apply_quality_filter(taskset, pool)

    assert len(sabotaged) == 1
    assert [(t.id, "cell died" in reason) for t, reason in found.unverified] == [("code/add", True)]
    assert "code/add" not in [t.id for t in found.passed]
    # kept (the sandbox failed, not the task), and not quarantined
    assert filtered.tasks[0].id == "code/add"  # in its place
    quarantined = [q.task_id for q in filtered.quarantined]
    assert "code/add" not in quarantined
    assert sorted(quarantined) == ["code/add-wrong", "code/sq-wrong", "math/wrong"]


async def test_verify_without_origins_still_names_the_task(pool: SandboxPool) -> None:
    TASK_ADAPTER = domains.task_adapter()

    found = await verify_references([TASK_ADAPTER.validate_python(BAD_MATH)], pool)
    (q,) = found.failed
    assert q.task_id == "math/wrong" and q.field == "reference"
    assert found.passed == []


async def test_math_checker_failures_quarantine_and_a_checker_that_cannot_run_does_not(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reference the checker raises on fails; an answer that breaks the checker is the task's
    fault too; a checker that cannot start leaves the task unverified."""
    from honing.domains.math import judge as mathcheck
    from honing.domains.math.task import MathTask

    huge = "1" * 5000  # math-verify raises on it (Python's 4300-digit limit)
    tasks = [
        MathTask(id="m/rejected", prompt="1/2?", answer="\\frac{1}{2}", reference=huge),
        MathTask(id="m/broken", prompt="Big?", answer=huge, reference="1.5"),
    ]
    found = await verify_references(list(tasks), pool)
    reasons = {q.task_id: q.reason for q in found.failed}
    assert reasons["m/rejected"].startswith("reference: math-verify raised SympifyError")
    assert reasons["m/broken"].startswith("the task's answer breaks the checker")
    assert found.unverified == [] and found.passed == []

    async def plain(pool: SandboxPool) -> SandboxPool:
        return pool  # no math-verify in these cells

    monkeypatch.setattr(mathcheck, "checker_pool", plain)
    found = await verify_references(list(tasks), pool)
    assert [(t.id, "No module named 'math_verify'" in why) for t, why in found.unverified] == [
        ("m/rejected", True), ("m/broken", True),
    ]  # fmt: skip
    assert found.failed == []


async def test_a_code_reference_is_judged_as_the_environment_judges_the_model(
    pool: SandboxPool,
) -> None:
    """One judge for the domain: a reference that only exits with status 0 passes no test."""
    from honing.domains.code.task import CodeTask

    exits = CodeTask(
        id="code/exits",
        prompt="def add(a, b): ...",
        entry_point="add",
        tests="assert add(1, 2) == 3\n",
        reference="import sys\nsys.exit(0)\n",
    )
    forged = exits.model_copy(update={"id": "code/forged", "reference": (
        "class Anything:\n    def __eq__(self, other):\n        return True\n\n"
        "def add(a, b):\n    return Anything()\n")})  # fmt: skip
    found = await verify_references([exits, forged], pool)
    assert found.passed == [] and found.unverified == []
    reasons = {q.task_id: q.reason for q in found.failed}
    assert "tampering: the solution ended its process (exit status 0)" in reasons["code/exits"]
    assert "equal to anything" in reasons["code/forged"]


async def test_all_humaneval_references_pass(pool: SandboxPool) -> None:
    taskset = load_tasks("humaneval")
    filtered, found = await apply_quality_filter(taskset, pool)
    assert [q.reason for q in filtered.quarantined] == []
    assert found.unverified == []
    assert len(filtered.tasks) == len(found.passed) == 164
    assert filtered.version == taskset.version


async def test_a_task_of_a_domain_the_filter_cannot_check_is_an_error_not_dropped() -> None:
    class ChessTask(TaskBase):
        domain: Literal["chess"] = "chess"

    class UnusedPool:
        async def run_many(self, *args: Any, **kwargs: Any) -> list[ExecResult]:
            raise AssertionError("nothing runs before the domains are known")

    tasks = [ChessTask(id="chess/mate-in-2", prompt="Mate in two.", reference="Qh7+")]
    with pytest.raises(ConfigError) as caught:
        await verify_references(cast(Any, tasks), cast(SandboxPool, UnusedPool()))
    message = str(caught.value)
    assert "'chess/mate-in-2'" in message and "'chess'" in message
    assert ", ".join(domains.names()) in message  # every registered domain, listed
    assert {"code", "math", "sql", "tools"} <= set(domains.names())
