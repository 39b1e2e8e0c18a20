"""`honing report` shows the images of sample episodes: a real structure episode (the environment
in the sandbox, a scripted chat engine with images on) that built, rendered and submitted, stored
with TrajectoryWriter; the page embeds the render as a data URL and headless Chromium draws it.
An image path that leads out of the store is not followed."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_report import Opened, run_async

from honing.config import SandboxConfig
from honing.envs import EnvConfig
from honing.envs.registry import make_env
from honing.records import Trajectory, Turn
from honing.report import build_report
from honing.rollout.agent import AgentConfig, run_episode
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.sandbox import SandboxPool
from honing.store import Group, TrajectoryWriter, read_image, read_trajectories
from honing.tasks.load import load_tasks


async def _structure_episode() -> Trajectory:
    """build (the table's reference scene) → render → submit, as a chat engine would call them."""
    [task] = [t for t in load_tasks("examples-structure").tasks if t.id.endswith("table")]
    async with SandboxPool(SandboxConfig(pool_size=1, timeout_s=20.0)) as pool:
        env = make_env("structure", pool, EnvConfig(max_steps=4))
        [build, _] = env.reference_actions(task)[0].tool_calls
        calls = [("build", build.arguments), ("render", {"view": "iso"}), ("submit", {})]

        def respond(_prompt: Prompt, index: int) -> str:
            name, arguments = calls[index]
            return json.dumps({"name": name, "arguments": arguments})

        config = AgentConfig(sampling=SamplingParams(max_new_tokens=4096), images=True,
                             max_total_tokens=100_000)  # fmt: skip
        return await run_episode(task, env, ScriptedEngine(respond), config)


async def _store(run: Path, *trajectories: Trajectory) -> None:
    async with TrajectoryWriter(run, flush_s=None) as writer:
        await writer.add_group(Group("t", "g0", list(trajectories)))


def test_the_sample_episode_shows_the_render_and_chromium_draws_it(
    tmp_path: Path, browser: Any
) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    run = tmp_path / "run"
    episode = run_async(_structure_episode())
    assert episode.success, episode.detail
    run_async(_store(run, episode))
    [stored] = read_trajectories(run)
    [render] = [t for t in stored.turns if t.images]
    png = read_image(run, render.images[0])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")

    out = build_report(run)
    page = out.read_text()
    assert f'src="data:image/png;base64,{base64.b64encode(png).decode()}"' in page
    opened = Opened(browser, out)
    opened.check_clean(out)  # no request for the image: it is in the page
    [image] = opened.page.query_selector_all("#samples .turn.tool img")
    assert image.evaluate("i => [i.complete, i.naturalWidth, i.naturalHeight]") == [True, 256, 256]
    box = image.bounding_box()
    assert box is not None and box["width"] == 256 and box["height"] == 256
    assert "silhouette (iso)" in opened.page.inner_text("#samples")
    opened.page.close()


def test_an_image_path_out_of_the_store_is_not_followed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    outside = tmp_path / "secret.png"
    outside.write_bytes(b"\x89PNG\r\n\x1a\nnot for the page")
    turns = [Turn(role="user", text="Goal"), Turn(role="assistant", text="render"),
             Turn(role="tool", text="drawn", images=["../secret.png"])]  # fmt: skip
    run_async(_store(run, Trajectory(task_id="t", domain="structure", id="x", turns=turns)))
    page = build_report(run).read_text()
    assert (
        "<img" not in page and "image not shown: ../secret.png: not an image of the store" in page
    )
