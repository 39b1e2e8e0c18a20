"""`honing store rescore` on a run scored by a deliberately lax judge: real episodes (a scripted
token engine, the real agent loop, the real sandbox) stored by `honing rollout`'s own code, then
re-scored by the command as a user runs it (a real process) with today's math verifier."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from honing.domains.math.env import MathEnv
from honing.domains.math.task import MathTask
from honing.envs.base import CallOutcome, ToolCall
from honing.envs.kits.calculator import calculate
from honing.envs.verifiers import verifier_version
from honing.records import Ending
from honing.rollout.agent import AgentConfig
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.rollout.offline import rollout
from honing.sandbox import SandboxConfig, SandboxPool
from honing.store import TrajectoryWriter, read_trajectories
from honing.store.rescore import RescoreStatus, read_rescores, rescore_dirs
from honing.tasks import domains
from honing.tasks.load import load_tasks
from honing.trainer.rescore import plan_rescore

HONING = [sys.executable, "-m", "honing"]


def call(name: str, **arguments: str) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


# The tasks, and what the scripted model answers (a list: one text per model turn).
TASKS = {
    "formula": ("Multiply 483 by 446.", "215418", [call("answer", value="483*446")]),
    "boxed-formula": ("What is 6 times 7?", "42", ["The product is \\boxed{6*7}."]),
    "separators": ("Multiply 482 by 447.", "215454", [call("answer", value="215,454")]),
    "right": ("What is 17 + 25?", "42", [call("answer", value="42")]),
    "wrong": ("What is 30 + 11?", "41", [call("answer", value="40")]),
    "two-turns": (
        "Multiply 17 by 3.",
        "51",
        [call("calculator", expression="17*3"), call("answer", value="51")],
    ),
}
# then (the lax judge) -> now (math-verify behind the formula gate)
EXPECTED = {
    "formula": (True, False),
    "boxed-formula": (True, False),
    "separators": (False, True),
    "right": (True, True),
    "wrong": (False, False),
    "two-turns": (True, True),
}


class LaxMathEnv(MathEnv):
    """The judge of an older honing, deliberately lax: it evaluates the answer with the calculator
    and compares the value as text, so a formula that evaluates to the answer (483*446) passes,
    and a number written with thousands separators (215,454) fails."""

    async def _call(self, call: ToolCall) -> CallOutcome:
        if call.name != "answer":
            return await super()._call(call)
        assert isinstance(self.task, MathTask)
        self.done = True
        evaluated = await calculate(self.pool, str(call.arguments.get("value")))
        right = evaluated.ok and evaluated.text.rsplit(" = ", 1)[-1] == self.task.answer
        return CallOutcome(right, "correct" if right else "incorrect",
                           components={"outcome": float(right)})  # fmt: skip


def honing(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HONING, *map(str, args)], capture_output=True, text=True, timeout=300)


def write_tasks(path: Path, names: list[str]) -> Path:
    rows = [
        {"id": f"lax/{name}", "domain": "math", "prompt": TASKS[name][0], "answer": TASKS[name][1]}
        for name in names
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def digest(run: Path) -> dict[str, str]:
    """Every file of the store, by content."""
    files = [run / "store.json", *sorted((run / "trajectories").glob("*.parquet"))]
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.fixture(scope="module")
def lax_run(tmp_path_factory: pytest.TempPathFactory, smol_dir: Path) -> Iterator[Path]:
    """A run of `honing rollout`'s code whose rewards came from `LaxMathEnv`, plus two stored
    episodes that cannot be re-scored as they are: one the infrastructure failed, one that went on
    after its answer (as an older environment let it)."""
    root = tmp_path_factory.mktemp("lax")
    tasks = write_tasks(root / "tasks.jsonl", list(TASKS))
    run = root / "run"
    tokenizer = load_tokenizer(smol_dir)

    def respond(prompt: Prompt, _index: int) -> str:
        text = tokenizer.decode(prompt.token_ids or [])
        name = next(n for n, (question, _, _) in TASKS.items() if question in text)
        script = TASKS[name][2]
        return script[min(text.count("Tool result"), len(script) - 1)]

    async def play() -> None:
        engine = ScriptedEngine(respond, tokenizer=tokenizer)
        agent = AgentConfig(sampling=SamplingParams(max_new_tokens=64), max_turns=3)
        with domains.replaced("math", env=LaxMathEnv):  # the run's math domain: the lax judge
            async with SandboxPool(SandboxConfig(pool_size=2)) as pool:
                await rollout(load_tasks(str(tasks)), engine, pool, out=run, n=2, agent=agent)
        stored = read_trajectories(run)
        crashed = next(t for t in stored if t.task_id == "lax/right")
        crashed.id, crashed.ending, crashed.failure = "crashed", Ending.INFRA_ERROR, "setup"
        went_on = next(t for t in stored if t.task_id == "lax/wrong")
        went_on.id = "went-on"
        went_on.turns += [went_on.turns[1], went_on.turns[2]]  # answered again, after its answer
        async with TrajectoryWriter(run) as writer:
            await writer.add(crashed)
            await writer.add(went_on)

    asyncio.run(play())
    yield run


def test_rescore_reports_and_writes_the_verdicts_the_lax_judge_got_wrong(lax_run: Path) -> None:
    stored = {t.id: t for t in read_trajectories(lax_run)}
    for t in stored.values():  # the lax judge's verdicts, as stored
        if t.id not in ("crashed", "went-on"):
            assert t.success is EXPECTED[t.task_id.removeprefix("lax/")][0], t.task_id
    before = digest(lax_run)

    proc = honing("store", "rescore", lax_run, "--quiet")

    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last == (
        "rescore: 14 trajectories; 6 verdicts changed (4 true→false, 2 false→true); "
        "1 diverged; 0 infra errors; 1 skipped (no stored verdict)"
    )
    for name in ("formula", "boxed-formula", "separators"):  # listed with their task
        assert f"lax/{name}" in proc.stdout
    changed = proc.stdout.split("verdicts that changed")[1].split("diverged (")[0]
    assert "lax/formula" in changed and "lax/right" not in changed and "lax/wrong" not in changed
    assert digest(lax_run) == before  # the original trajectories are untouched

    [written] = rescore_dirs(lax_run)
    assert str(written) in proc.stderr
    rows = {r.id: r for r in read_rescores(written)}
    assert set(rows) == set(stored)
    for r in rows.values():
        if r.id in ("crashed", "went-on"):
            continue
        then, now = EXPECTED[r.task_id.removeprefix("lax/")]
        assert (r.old_success, r.new_success) == (then, now), r.task_id
        assert r.status is (RescoreStatus.CHANGED if then != now else RescoreStatus.SAME)
        assert r.old_reward == stored[r.id].reward == float(then)
        assert r.new_reward == float(now) and r.new_components is not None
        assert r.new_components["outcome"] == float(now)
        assert r.new_ending == "done" and r.verifier_version == verifier_version("math")
        assert len(r.new_step_rewards) == len(TASKS[r.task_id.removeprefix("lax/")][2])
    assert rows["crashed"].status is RescoreStatus.SKIPPED and rows["crashed"].new_reward is None
    went_on = rows["went-on"]
    assert went_on.status is RescoreStatus.DIVERGED and went_on.turn == 1
    assert "ends the episode after model turn 1" in went_on.detail
    assert went_on.new_success is False and went_on.new_step_rewards == [0.0]

    meta = json.loads((written / "rescore.json").read_text())
    assert meta["verifiers"] == {"math": verifier_version("math")}
    assert meta["counts"] == {"same": 6, "changed": 6, "diverged": 1, "skipped": 1}
    assert meta["settings"]["env"]["max_steps"] == 3  # the run's agent.max_turns
    assert str(lax_run.parent / "tasks.jsonl") in meta["tasks"]  # from rollout.json

    # A second re-score writes beside the first, never over it.
    proc = honing("store", "rescore", lax_run, "--quiet")
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == last
    assert len(rescore_dirs(lax_run)) == 2 and digest(lax_run) == before


def test_a_training_runs_config_gives_the_tasks_and_the_env(lax_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "train-run"
    run.mkdir()
    for name in ("store.json", "trajectories"):
        (run / name).symlink_to(lax_run / name)
    tasks = next(lax_run.parent.glob("tasks.jsonl"))
    config = {"out": str(run), "steps": 1, "train": {"lax": {"tasks": str(tasks)}},
              "agent": {"max_turns": 3}, "env": {"max_steps": 8, "reward_weights":
                                                  {"well_formed": 0.5}}}  # fmt: skip
    (run / "config.yaml").write_text(yaml.safe_dump(config))

    plan = plan_rescore(run)

    assert set(plan.tasks) == {f"lax/{name}" for name in TASKS}
    assert plan.env.max_steps == 3  # as the loop plays: agent.max_turns
    assert plan.env.reward_weights == {"well_formed": 0.5}
    assert plan.total == 14 and plan.domains == ["math"]
    assert "train.lax" in plan.source


def test_missing_tasks_and_a_bad_run_are_clear_errors(lax_run: Path, tmp_path: Path) -> None:
    written = rescore_dirs(lax_run)
    partial = write_tasks(tmp_path / "partial.jsonl", ["right", "wrong"])
    proc = honing("store", "rescore", lax_run, "--tasks", partial)
    assert proc.returncode == 2
    message = " ".join(proc.stderr.split())
    assert re.search(r"8 of 14 stored trajectories are of 4 task\(s\) not in --tasks", message)
    assert "'lax/formula'" in message and "--tasks SPEC" in message

    proc = honing("store", "rescore", lax_run, "--tasks", tmp_path / "gone.jsonl")
    assert proc.returncode == 2
    assert "cannot load the tasks" in proc.stderr and "gone.jsonl" in proc.stderr

    proc = honing("store", "rescore", tmp_path / "nowhere")
    assert proc.returncode == 2
    assert "nowhere" in proc.stderr and "no such run directory" in " ".join(proc.stderr.split())

    bare = tmp_path / "bare"  # a store with no record of its tasks
    bare.mkdir()
    for name in ("store.json", "trajectories"):
        (bare / name).symlink_to(lax_run / name)
    proc = honing("store", "rescore", bare)
    assert proc.returncode == 2
    assert "--tasks SPEC" in proc.stderr and "rollout.json" in proc.stderr
    assert not (bare / "rescores").exists() and rescore_dirs(lax_run) == written
