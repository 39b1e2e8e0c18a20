"""Whose doing it was when a checker's sandbox run gave no reply: its input's or the host's.

A checker is honing's own program (math-verify's comparison, the sql rule queries) run in the
sandbox on what a model produced. `run_end(result)` classifies how its run ended: REPLIED,
INPUT (the checker failed on this input: a wrong answer), SANDBOX, or NOT_RUN (not the input's
doing); docs/tasks.md ("The modules in detail") gives the rules. Not covered: an input that
makes a checker wait rather than work (none of honing's checkers reads, sleeps or locks on its
input), and the model's own programs (code tests, sql queries), whose time limits stay the
model's (docs/envs.md, "Verdicts").
"""

from __future__ import annotations

import enum
import math
import signal

from honing.sandbox import ExecResult, ExecStatus

WALL_FACTOR = 3  # a checker's wall-clock limit, in multiples of its CPU-time limit


class RunEnd(enum.StrEnum):
    REPLIED = "replied"
    INPUT = "input"
    SANDBOX = "sandbox"
    NOT_RUN = "not_run"


def checker_limits(cpu_s: float) -> tuple[float, float]:
    """(CPU-time limit, wall-clock limit) of a checker's run that may spend `cpu_s` of CPU: whole
    seconds, as the kernel counts them, and `WALL_FACTOR` times that, so that a run its input
    keeps busy meets the CPU limit first and only a run the host starves meets the wall clock."""
    cpu = float(max(1, math.ceil(cpu_s)))
    return cpu, WALL_FACTOR * cpu


def cpu_limited(result: ExecResult) -> bool:
    """Whether a run that timed out had spent its CPU-time limit (the sandbox's "CPU-time limit
    reached": SIGXCPU, or SIGKILL at the hard limit) rather than reached the wall clock's."""
    return result.status is ExecStatus.TIMEOUT and (
        result.signal == signal.SIGXCPU or result.error.startswith("CPU-time")
    )


def run_end(result: ExecResult) -> tuple[RunEnd, str]:
    """How a checker's run ended, and the reason in words ('' when it replied)."""
    status = result.status
    if status is ExecStatus.OK:
        return RunEnd.REPLIED, ""
    if status is ExecStatus.SANDBOX_ERROR:
        return RunEnd.SANDBOX, f"the sandbox failed: {result.error}"
    if status is ExecStatus.ERROR:
        tail = (result.stderr.strip().splitlines() or ["(no error output)"])[-1]
        return RunEnd.NOT_RUN, f"the checker exited with an error before replying: {tail[:300]}"
    if status is ExecStatus.TIMEOUT:
        if cpu_limited(result):
            return RunEnd.INPUT, f"the checker spent its CPU-time limit ({result.cpu_s:.0f} s)"
        return RunEnd.NOT_RUN, (
            f"the checker reached its wall-clock limit ({result.wall_s:.0f} s) having had "
            f"{result.cpu_s:.1f} s of CPU, under its CPU-time limit: the host did not run it"
        )
    if status is ExecStatus.MEMORY_LIMIT:
        return RunEnd.INPUT, f"the checker exceeded its memory limit ({result.error})"
    if status is ExecStatus.OUTPUT_LIMIT:
        return RunEnd.INPUT, "the checker's output went past its byte limit"
    if result.signal == signal.SIGKILL:
        return RunEnd.NOT_RUN, "the checker was killed (SIGKILL) outside its limits: the host"
    return RunEnd.INPUT, f"the checker crashed ({result.error})"
