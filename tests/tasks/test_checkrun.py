"""How a checker's run ended, on real sandbox runs: the input's doing, or not a run at all."""

from __future__ import annotations

import pytest

from honing.sandbox import ExecRequest, SandboxPool
from honing.tasks.checkrun import RunEnd, checker_limits, cpu_limited, run_end

CPU_S, WALL_S = checker_limits(1.0)


def test_the_wall_clock_is_a_multiple_of_the_whole_cpu_seconds() -> None:
    assert checker_limits(1.0) == (1.0, 3.0)
    assert checker_limits(2.3) == (3.0, 9.0)  # RLIMIT_CPU counts whole seconds
    assert checker_limits(0.1) == (1.0, 3.0)


@pytest.mark.parametrize(
    ("code", "limits", "end", "said"),
    [
        ("print('[]')", (CPU_S, WALL_S), RunEnd.REPLIED, ""),
        # busy on its input: the CPU-time limit comes first
        ("while True:\n    pass\n", (CPU_S, WALL_S), RunEnd.INPUT, "CPU-time limit"),
        ("x = bytearray(512 * 1024 * 1024)\n", (CPU_S, WALL_S), RunEnd.INPUT, "memory limit"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", (CPU_S, WALL_S),
         RunEnd.INPUT, "crashed (killed by signal SIGSEGV)"),
        # not let run: the wall clock without the CPU time, an import, an outside SIGKILL
        ("import time\ntime.sleep(30)\n", (10.0, 0.5), RunEnd.NOT_RUN, "wall-clock limit"),
        ("import math_verify\n", (CPU_S, WALL_S), RunEnd.NOT_RUN,
         "ModuleNotFoundError: No module named 'math_verify'"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", (CPU_S, WALL_S),
         RunEnd.NOT_RUN, "SIGKILL"),
    ],
)  # fmt: skip
async def test_runs_are_classified_by_whose_doing_the_end_was(
    pool: SandboxPool, code: str, limits: tuple[float, float], end: RunEnd, said: str
) -> None:
    cpu_s, wall_s = limits
    result = await pool.run(ExecRequest(code=code, cpu_s=cpu_s, timeout_s=wall_s, memory_mb=64))
    found, reason = run_end(result)
    assert found is end, (result.status, result.error, result.stderr[-300:])
    assert said in reason
    assert cpu_limited(result) == (said == "CPU-time limit")
