"""Environment step latency per domain, through the real environments and sandbox.

What is measured
----------------
Each measured call is one `env.step` of a real environment on the default sandbox pool (two
cells per CPU), after a warm-up that starts the cells and any sibling pool (the structure
kernel's runtime is built first if it is missing, outside the measurement):

    structure/render   `render` (256 x 256, the iso view) of a task's reference model
    structure/check    `build` of the reference scene: CSG, volume, bodies, holes, watertight
    structure/submit   `submit`: the comparison with the target (exact IoU, image similarity)
    finance/query      `query` of a SELECT over one of the documents' tables (DuckDB, sandbox)
    sql/query          `query` of a SELECT over the task's tables (DuckDB in the sandbox)

Calls run one at a time (latency, not throughput), `--rounds` each over the domain's synthetic
tasks. One line per measurement, with its goal where the domain has one:

    env_latency: <domain>/<call> p50 X ms p99 Y ms (n=N; goal p50 <= G ms: met)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from honing.config import SandboxConfig
from honing.envs import Action, EnvConfig, ToolCall
from honing.envs.base import Environment
from honing.envs.registry import make_env
from honing.sandbox import SandboxPool
from honing.tasks import load_tasks

GOALS = {"structure/render": 1500, "structure/check": 100, "finance/query": 50}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def call(name: str, **arguments: object) -> Action:
    return Action(tool_calls=[ToolCall(id=name, name=name, arguments=arguments)])


async def timed(env: Environment, action: Action) -> float:
    """Milliseconds of one `env.step(action)`."""
    started = time.perf_counter()
    await env.step(action)
    return (time.perf_counter() - started) * 1000


async def structure(pool: SandboxPool, rounds: int) -> dict[str, list[float]]:
    tasks = load_tasks("synthetic-structure").tasks
    out: dict[str, list[float]] = {"structure/render": [], "structure/check": [],
                                   "structure/submit": []}  # fmt: skip
    for i in range(rounds):
        task = tasks[i % len(tasks)]
        env = make_env("structure", pool, EnvConfig(max_steps=10))
        await env.reset(task)
        scene = task.target  # type: ignore[attr-defined]
        out["structure/check"].append(await timed(env, call("build", scene=scene)))
        out["structure/render"].append(await timed(env, call("render", view="iso")))
        out["structure/submit"].append(await timed(env, call("submit")))
        await env.close()
    return out


async def sql(pool: SandboxPool, rounds: int) -> dict[str, list[float]]:
    tasks = load_tasks("synthetic-sql").tasks
    out: dict[str, list[float]] = {"sql/query": []}
    for i in range(rounds):
        task = tasks[i % len(tasks)]
        env = make_env("sql", pool, EnvConfig(max_steps=10))
        await env.reset(task)
        table = next(iter(task.tables))  # type: ignore[attr-defined]
        query = call("query", sql=f"SELECT COUNT(*) FROM {table}")
        out["sql/query"].append(await timed(env, query))
        await env.close()
    return out


async def finance(pool: SandboxPool, rounds: int) -> dict[str, list[float]]:
    from honing.domains.finance.docs import parse_documents

    tasks = load_tasks("synthetic-finance").tasks
    out: dict[str, list[float]] = {"finance/query": []}
    for i in range(rounds):
        task = tasks[i % len(tasks)]
        documents = parse_documents(task.documents)  # type: ignore[attr-defined]
        table = next(t for d in documents.values() for t in d.tables)
        env = make_env("finance", pool, EnvConfig(max_steps=10))
        await env.reset(task)
        query = call("query", sql=f"SELECT * FROM {table.name} LIMIT 5")
        out["finance/query"].append(await timed(env, query))
        await env.close()
    return out


async def main(rounds: int) -> None:
    async with SandboxPool(SandboxConfig()) as pool:
        await structure(pool, 2)  # warm-up: cells, the kernel's sibling pool, DuckDB's
        await sql(pool, 2)
        await finance(pool, 2)
        found = {**await structure(pool, rounds), **await finance(pool, rounds),
                 **await sql(pool, rounds)}  # fmt: skip
    for name, values in found.items():
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        goal = GOALS.get(name)
        said = (
            "" if goal is None else f"; goal p50 <= {goal} ms: {'met' if p50 <= goal else 'MISSED'}"
        )
        print(f"env_latency: {name} p50 {p50:.0f} ms p99 {p99:.0f} ms (n={len(values)}{said})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="measured calls per kind")
    asyncio.run(main(parser.parse_args().rounds))
