"""The code judge on honest solutions, in the real sandbox: what crosses between the tests'
process and the solution's (plain data, exceptions, changes to arguments), what the tests can
name, and the verdicts of what cannot cross. The reward-hacking battery is
tests/envs/test_reward_hacking.py."""

from __future__ import annotations

import pytest

from honing.domains.code.codejudge import decode, encode
from honing.domains.code.judge import CodeVerdict, judged_run, run_files, units
from honing.domains.code.task import CodeTask
from honing.sandbox import ExecStatus, SandboxPool

MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool


async def judge(pool: SandboxPool, tests: str, source: str, **task: object) -> CodeVerdict:
    fields: dict[str, object] = {"id": "t", "prompt": "def f(x):\n    ...\n", "entry_point": "f"}
    fields.update(task)
    code_task = CodeTask(tests=tests, **fields)  # type: ignore[arg-type]
    run = judged_run(code_task, run_files(code_task, {"solution.py": source}))
    result = await pool.run(run.request)
    assert result.status is ExecStatus.OK, result
    verdict = run.verdict(result)
    assert verdict is not None, result
    return verdict


def test_plain_data_round_trips_with_its_types() -> None:
    value = [None, True, 1, -2**70, 1.5, float("inf"), 2j, "é", b"\x00", bytearray(b"a"),
             (1, (2,)), {1: "a", (2, 3): [4]}, {5}, frozenset({6})]  # fmt: skip
    back = decode(encode(value))
    assert back == value
    assert [type(v) for v in back] == [type(v) for v in value]


def test_what_stands_for_plain_data_crosses_as_it_and_the_rest_does_not() -> None:
    class Name(str):
        pass

    assert type(decode(encode(Name("x"), lenient=True))) is str
    assert list(decode(encode(iter([1, 2]), lenient=True))) == [1, 2]
    assert decode(encode({"a": 1}.keys(), lenient=True)) == ["a"]
    with pytest.raises(TypeError, match="object"):
        encode(object(), lenient=True)
    with pytest.raises(TypeError):
        encode(Name("x"))  # the judge's side is strict
    with pytest.raises(ValueError):
        decode(["s", [["l", []]]])  # a set of lists


@MODULE_LOOP
async def test_exceptions_cross_as_their_builtin_class(pool: SandboxPool) -> None:
    tests = (
        "def _raises(x):\n    try:\n        f(x)\n    except ValueError:\n        return True\n"
        "    return False\n\nassert _raises(-1)\nassert not _raises(1)\nassert f(0) == 1\n"
    )
    source = (
        "class Negative(ValueError):\n    pass\n\n"
        "def f(x):\n    if x < 0:\n        raise Negative('no negatives')\n    return 1 / x\n"
    )
    verdict = await judge(pool, tests, source)
    assert (verdict.passed, verdict.total, verdict.tampering) == (2, 3, [])
    assert verdict.errors == ["assert f(0) == 1 -> ZeroDivisionError: division by zero"]


@MODULE_LOOP
async def test_a_changed_argument_iterators_and_views_reach_the_tests(pool: SandboxPool) -> None:
    tests = (
        "def check(candidate):\n    xs = [3, 1, 2]\n    assert candidate(xs) is None\n"
        "    assert xs == [1, 2, 3]\n    assert list(evens(5)) == [0, 2, 4]\n"
        "    assert sorted(keys({'b': 1, 'a': 2})) == ['a', 'b']\n"
    )
    source = (
        "def f(xs):\n    xs.sort()\n\ndef evens(n):\n    yield from range(0, n, 2)\n\n"
        "def keys(d):\n    return d.keys()\n"
    )
    verdict = await judge(pool, tests, source)
    assert verdict.passed_all, verdict


@MODULE_LOOP
async def test_the_tests_reach_the_solutions_names_modules_and_constants(
    pool: SandboxPool,
) -> None:
    tests = (
        "from solution import f as g\nimport solution\n\nassert g(2) == LIMIT\n"
        "assert solution.f(3) == 6\nassert math.isclose(f(0.5), 1.0)\n"
    )
    source = "import math\n\nLIMIT = 4\n\ndef f(x):\n    return 2 * x\n"
    verdict = await judge(pool, tests, source)
    assert verdict.passed_all, verdict


@MODULE_LOOP
async def test_a_helper_the_prompt_gives_is_the_tasks_not_the_solutions(
    pool: SandboxPool,
) -> None:
    prompt = "def double(x):\n    return 2 * x\n\n\ndef f(x):\n    '''Half of x.'''\n"
    tests = "assert double(f(6)) == 6\n"
    honest = await judge(pool, tests, prompt + "    return x / 2\n", prompt=prompt)
    assert honest.passed_all, honest
    cheat = await judge(pool, tests, "def double(x):\n    return 6\n\ndef f(x):\n    return 0\n",
                        prompt=prompt)  # fmt: skip
    assert not cheat.passed_all
    repair = await judge(pool, tests, "def double(x):\n    return 6\n\ndef f(x):\n    return 0\n",
                         prompt="Fix solution.py.", files={"solution.py": "x = 1\n"})  # fmt: skip
    assert repair.passed_all  # a repair task gives no code: every name is the solution's


@MODULE_LOOP
async def test_tests_may_call_the_solution_from_threads(pool: SandboxPool) -> None:
    tests = (
        "from concurrent.futures import ThreadPoolExecutor\n\ndef check(candidate):\n"
        "    with ThreadPoolExecutor(4) as threads:\n"
        "        assert list(threads.map(candidate, range(50))) == [2 * x for x in range(50)]\n"
    )
    verdict = await judge(pool, tests, "def f(x):\n    return 2 * x\n")
    assert verdict.passed_all, verdict


@MODULE_LOOP
async def test_what_cannot_cross_fails_its_test_with_the_reason(pool: SandboxPool) -> None:
    tests = "assert f(lambda: 1) == 1\nassert f(2) == 2\n"
    verdict = await judge(pool, tests, "class Box:\n    pass\n\ndef f(x):\n    return Box()\n")
    assert verdict.passed == 0 and verdict.tampering == []
    assert "the tests passed a builtins.function object to f()" in verdict.errors[0]
    assert "f() returned a solution.Box object, which is not plain data" in verdict.errors[1]


@MODULE_LOOP
async def test_a_test_that_swallows_every_exception_cannot_hide_a_failed_call(
    pool: SandboxPool,
) -> None:
    tests = "try:\n    f(1)\nexcept BaseException:\n    pass\n"
    verdict = await judge(pool, tests, "def f(x):\n    return object()\n")
    assert not verdict.passed_all
    assert "not plain data" in verdict.errors[0]


@MODULE_LOOP
async def test_syntax_errors_and_import_errors_are_reported(pool: SandboxPool) -> None:
    broken = await judge(pool, "assert f(1) == 1\n", "def f(x:\n")
    assert not broken.compiled and broken.errors[0].startswith("File")
    failing = await judge(pool, "assert f(1) == 1\n", "import nowhere\n")
    assert failing.compiled and failing.passed == 0
    assert failing.errors == ["solution.py: ModuleNotFoundError: No module named 'nowhere'"]


def test_units_count_statements_or_one_check() -> None:
    task = CodeTask(id="u", prompt="p", entry_point="f",
                    tests="import math\nassert f(1) == 1\nf(2)\n")  # fmt: skip
    assert units(task) == ["import math\nassert f(1) == 1\n", "import math\nf(2)\n"]
    checked = task.model_copy(update={"tests": "def check(candidate):\n    pass\n"})
    assert units(checked) == ["def check(candidate):\n    pass\n\ncheck(f)"]


def test_a_run_sees_the_models_python_files_and_the_tasks_files_as_shipped() -> None:
    task = CodeTask(id="f", prompt="p", entry_point="f", tests="assert f()\n",
                    files={"data.json": "{}", "solution.py": "starter"})  # fmt: skip
    written = {"solution.py": b"mine", "helper.py": b"x = 1", "data.json": b"edited",
               "out.txt": b"written in advance"}  # fmt: skip
    assert run_files(task, written) == {"solution.py": b"mine", "helper.py": b"x = 1",
                                        "data.json": "{}"}  # fmt: skip
