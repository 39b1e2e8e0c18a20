"""`honing train` with `backend: ray` on a real local Ray cluster (started by this file): a tiny
random model's engine in two engine actors and the sandboxes in two sandbox actors; one engine
actor and one sandbox actor are killed while the second update's episodes play. The run
finishes, every group of every update is stored exactly once, the replacement engine serves the
learner's latest weights, and the events name the retries the kills cost."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from ray.exceptions import RayError  # noqa: E402

from honing.config import validate_model  # noqa: E402
from honing.errors import ConfigError  # noqa: E402
from honing.rollout.ray import RayConfig, connect  # noqa: E402
from honing.store import read_trajectories  # noqa: E402
from honing.trainer.loop import train  # noqa: E402
from honing.trainer.run_config import TrainConfig  # noqa: E402
from honing.trainer.run_dir import UpdateRecord  # noqa: E402

WORKERS = {"count": 2, "num_cpus": 0.5, "start_timeout_s": 180}


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    connect(RayConfig(num_cpus=4))
    yield
    ray.shutdown()


async def kill_when_busy(prefix: str, probe: str, start: asyncio.Event) -> str:
    """Once `start` is set, kill the first actor named `prefix*` whose `probe()` (calls or
    episodes in flight) is positive; its name."""
    await start.wait()
    while True:
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if not entry["name"].startswith(prefix):
                continue
            try:
                actor = ray.get_actor(entry["name"], namespace=entry["namespace"])
                busy = await getattr(actor, probe).remote()
            except (ValueError, RayError):
                continue  # gone or starting meanwhile
            if busy:
                ray.kill(actor)
                return str(entry["name"])
        await asyncio.sleep(0.005)


async def test_a_run_survives_killed_engine_and_sandbox_actors(
    tiny_model_dir: Path,
    math_tasks: Callable[[Path, int], Path],
    tiny_run_config: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    tasks = math_tasks(tmp_path, 6)  # 4 trained on, 2 held out
    raw = tiny_run_config("ray-run", tiny_model_dir, tasks, out=str(tmp_path / "run"),
                          groups_per_step=4, n=3,
                          agent={"max_turns": 2, "max_new_tokens": 24, "system_prompt": ""},
                          engine={"slots": 2},  # episodes queue in the engine: calls in flight
                          backend="ray", ray={"engine": WORKERS, "env": WORKERS})  # fmt: skip
    config = validate_model(TrainConfig, raw, source="test")

    second = asyncio.Event()

    def on_step(record: UpdateRecord) -> None:
        if record.step == 1:
            second.set()  # the second update's episodes start now

    killers = [
        asyncio.create_task(kill_when_busy("honing-engine-", "in_flight", second)),
        asyncio.create_task(kill_when_busy("honing-sandbox-", "episodes", second)),
    ]
    try:
        result = await train(config, on_step=on_step)
        done, _ = await asyncio.wait(killers, timeout=0)
        assert len(done) == 2, "the second update ended before both kills"
    finally:
        for killer in killers:
            killer.cancel()
    assert result.steps == 2

    # every update's groups, each exactly once, with its n samples
    rows = read_trajectories(config.out)
    assert len(rows) == 2 * 4 * 3
    assert len({row.id for row in rows}) == len(rows)
    per_task = Counter((row.task_id, row.sample) for row in rows)
    assert set(per_task.values()) == {2}  # each update draws the 4 training tasks
    # the second update played on the weights of the first (a replacement actor caught up)
    events = [json.loads(line) for line in (config.out / "events.jsonl").read_text().splitlines()]
    second_update = [e for e in events if e["kind"] == "episode" and e["step"] == 2
                     and e.get("split") == "train"]  # fmt: skip
    assert len(second_update) == 4 * 3
    assert {e["policy_version"] for e in second_update} == {1}

    # the kills cost retries, named in the events, on both kinds of worker
    retries = [e for e in events if e["kind"] == "retry"]
    assert retries and all("WorkerLost" in e["cause"] for e in retries)
    assert any(e["stage"] == "generate" for e in retries)
    assert any(e["stage"] != "generate" for e in retries)
    assert all(e["step"] == 2 for e in retries)
    # the sandbox figures came from the actors
    sandbox = [e for e in events if e["kind"] == "sandbox"]
    assert len(sandbox) == 2 and all(e["cells"] >= 1 for e in sandbox)


def test_the_ray_section_without_backend_ray_is_refused(tmp_path: Path) -> None:
    raw = {"out": str(tmp_path), "steps": 1, "train": {"m": {"tasks": "synthetic-math"}},
           "ray": {"engine": {"count": 2}}}  # fmt: skip
    with pytest.raises(ConfigError, match="backend: ray"):
        validate_model(TrainConfig, raw, source="test")
    raw.update(backend="ray", engine={"url": "http://localhost:8000/v1"})
    with pytest.raises(ConfigError, match=r"engine\.url"):
        validate_model(TrainConfig, raw, source="test")


def test_ray_address_on_the_command_line_is_backend_ray(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(
        f"out: {tmp_path / 'run'}\nsteps: 1\ntrain: {{m: {{tasks: synthetic-math}}}}\n"
        "engine: {url: 'http://localhost:8000/v1'}\n"
    )
    honing = [sys.executable, "-m", "honing"]
    done = subprocess.run([*honing, "train", str(config), "--ray-address", "auto"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode != 0
    assert "backend: ray runs the engines as Ray actors" in done.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written
