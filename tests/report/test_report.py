"""`honing report`: the HTML page of a real run (the closed loop on a tiny model with a scripted
engine) opened in headless Chromium — no console errors, no network request, every chart drawn
with one mark per data point, a tool call in the sample episodes — plus the fallbacks (no
events.jsonl, no store, no update), escaping of untrusted model output, and the errors for a
directory that is not a run."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from honing.errors import ConfigError
from honing.observe.events import read_events
from honing.records import Trajectory
from honing.report import build_report, headline, load_run
from honing.risk import RiskEvent, Severity
from honing.store import Ending, Group, TrajectoryWriter, Turn, read_trajectories

T = TypeVar("T")


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` in a fresh thread: Playwright's sync API keeps a loop running in this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")
STEPS = 3


# -- a real run -------------------------------------------------------------------------------


def _tasks(path: Path, start: int, count: int) -> Path:
    rows = [
        {
            "id": f"add{i}",
            "domain": "math",
            "prompt": f"What is {10 + 7 * i} + {3 + i}?",
            "answer": str(13 + 8 * i),
            "tags": ["add", "easy" if i % 2 else "hard"],
        }
        for i in range(start, start + count)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def real_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three updates of the real closed loop: a tiny learner, a scripted engine that uses the
    calculator, answers right or wrong, or writes an HTML tag instead of an action."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    from honing.rollout.engines.base import Prompt
    from honing.rollout.engines.scripted import ScriptedEngine
    from honing.rollout.models import load_tokenizer
    from honing.trainer.loop import train
    from honing.trainer.run_config import TrainConfig

    tmp = tmp_path_factory.mktemp("report-run")
    tokenizer = load_tokenizer(tiny_model_dir)

    def respond(prompt: Prompt, seed: int) -> str:
        text = tokenizer.decode(prompt.token_ids or [])
        a, b = QUESTION.findall(text)[-1]
        if "Tool result (calculator)" not in text and seed % 2 == 0:
            call = {"name": "calculator", "arguments": {"expression": f"{a} + {b}"}}
            return f"<tool_call>{json.dumps(call)}</tool_call>"
        if seed % 5 == 1:
            return "I will not answer <script>alert(1)</script> here."
        value = int(a) + int(b) + (1 if seed % 3 == 0 else 0)
        call = {"name": "answer", "arguments": {"value": str(value)}}
        return f"<tool_call>{json.dumps(call)}</tool_call>"

    config = TrainConfig.model_validate(
        {
            "model": str(tiny_model_dir),
            "out": str(tmp / "run"),
            "seed": 3,
            "train": {"add": {"tasks": str(_tasks(tmp / "train.jsonl", 0, 12))}},
            "heldout": {"add": {"tasks": str(_tasks(tmp / "heldout.jsonl", 50, 4))}},
            "steps": STEPS,
            "groups_per_step": 2,
            "n": 2,
            "learner": {"lr": 1e-3, "micro_batch_tokens": 2048},
            "agent": {"max_turns": 2, "max_new_tokens": 40, "system_prompt": ""},
            "eval": {"every": 2},
            "checkpoint": {"every": 10, "keep": 1},
            "sandbox": {"pool_size": 2, "timeout_s": 20.0},
        }
    )
    engine = ScriptedEngine(respond, tokenizer=tokenizer, by_seed=True)
    run_async(train(config, engine=engine))
    return tmp / "run"


# -- the browser ------------------------------------------------------------------------------


class Opened:
    """A report loaded in a page, with what the page did."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.console: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page = browser.new_page(viewport={"width": 1200, "height": 900})
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

        def dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        self.page.on("dialog", dialog)

        def route(r: Any) -> None:
            self.requests.append(r.request.url)
            if r.request.url == path.resolve().as_uri():
                r.continue_()
            else:
                r.abort()

        self.page.route("**/*", route)
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_load_state("load")

    def charts(self) -> dict[str, tuple[int, int, dict[str, float]]]:
        """chart id -> (marks drawn, marks announced, the SVG's bounding box)."""
        out = {}
        for figure in self.page.query_selector_all("figure.chart"):
            box = figure.query_selector("svg").bounding_box()
            drawn = len(figure.query_selector_all(".mark"))
            out[figure.get_attribute("id")] = (drawn, int(figure.get_attribute("data-marks")), box)
        return out

    def check_clean(self, path: Path) -> None:
        assert not self.errors, self.errors
        assert [m for m in self.console if m[0] == "error"] == []
        assert self.requests == [path.resolve().as_uri()]  # nothing but the file itself
        assert self.dialogs == []


def test_a_real_runs_report_renders_in_chromium(
    real_run: Path, browser: Any, tmp_path: Path
) -> None:
    data = load_run(real_run)  # the loop wrote events.jsonl: the episodes come from it
    assert "events.jsonl" in data.sources
    assert [e.step for e in data.episodes] == [s for s in range(1, STEPS + 1) for _ in range(4)]
    out = build_report(real_run, tmp_path / "report.html")
    assert out == tmp_path / "report.html"
    opened = Opened(browser, out)
    opened.check_clean(out)

    charts = opened.charts()
    for key, (drawn, announced, box) in charts.items():
        assert box["width"] > 100 and box["height"] > 30, key
        assert drawn == announced > 0, key
    evals = [json.loads(line) for line in (real_run / "evals.jsonl").read_text().splitlines()]
    assert charts["chart-success"][0] == STEPS  # one point per update
    assert charts["chart-reward"][0] == STEPS
    assert charts["chart-failures"][0] == STEPS  # one bar per update
    assert charts["chart-time"][0] == STEPS
    assert charts["chart-evals"][0] == len(evals) == 3  # before, update 2, update 3
    assert charts["chart-learner-loss"][0] == STEPS
    assert charts["chart-signal"][0] == 3 * STEPS  # equal rewards, all failed, all solved
    assert charts["chart-signal-spread"][0] == 2 * STEPS  # reward std, entropy
    # risk is recorded whatever risk.mode says (off here): a rate and a mean cost per update
    assert charts["chart-risk-rate"][0] == charts["chart-risk-cost"][0] == STEPS
    assert "Per domain" in opened.page.inner_text("#risk")
    signal = opened.page.inner_text("#signal")
    assert re.search(r"\d+ of \d+ groups \(\d+%\) had equal rewards and taught nothing", signal)
    assert charts["chart-tag"][0] > 0  # tags "easy"/"hard" split the tasks
    stored = read_trajectories(real_run)
    staleness_bars = charts["chart-staleness"][0]
    assert staleness_bars >= 1
    # one bar per episode outcome per update, heights adding up to the episodes
    bars = opened.page.query_selector_all("#chart-failures g.mark")
    assert len(bars) == STEPS

    header = opened.page.inner_text("header")
    assert "Held-out success" in header and f"over {STEPS} updates" in header
    assert " s, float32" in header or " min, float32" in header  # the numerics behind the figures
    summary = opened.page.inner_text("#summary")
    assert "float32 (sampling and learning)" in summary
    # a scripted engine's logprobs are not the model's: the check fails, and the page says so
    assert re.search(
        r"max \|diff\| \d\.\de[-+]\d\d over \d+ tokens \(over the threshold\)", summary
    )
    samples = opened.page.query_selector("#samples")
    calls = samples.query_selector_all(".toolcall")
    assert calls and any("answer" in c.inner_text() for c in calls)
    assert "observation" in samples.inner_text()
    assert len(samples.query_selector_all("details.traj")) >= 2  # a success and a failure
    assert len(stored) == STEPS * 2 * 2

    png = opened.page.screenshot(full_page=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width == 1200 and height > 3000  # every section laid out, not a blank page
    opened.page.close()


def test_the_report_is_the_same_without_events_from_the_fallback_files(
    real_run: Path, tmp_path: Path
) -> None:
    """A run from before honing recorded events: the numbers come from metrics.jsonl and the
    store, and the page says so."""
    copy = tmp_path / "old-run"
    shutil.copytree(real_run, copy, ignore=shutil.ignore_patterns("checkpoints"))
    (copy / "events.jsonl").unlink(missing_ok=True)
    data = load_run(copy)
    assert [u.step for u in data.updates] == list(range(1, STEPS + 1))
    assert [e.step for e in data.episodes] == [s for s in range(1, STEPS + 1) for _ in range(4)]
    assert all(e.staleness == 0 for e in data.episodes)  # on-policy: one version per update
    assert data.info.precision == "float32 (sampling and learning)"  # config.yaml, resolved
    assert data.info.logprob_check == "not recorded"
    page = build_report(copy).read_text()
    assert (copy / "report.html").is_file()
    assert "No events.jsonl" in page
    assert 'id="chart-staleness" data-marks="1"' in page


def _event(kind: str, step: int | None, t: float, **fields: Any) -> str:
    return json.dumps({"t": t, "kind": kind, "step": step, **fields}) + "\n"


def test_events_are_preferred_when_the_run_has_them(real_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "events-run"
    shutil.copytree(real_run, copy, ignore=shutil.ignore_patterns("checkpoints"))
    lines = [_event("run_start", 0, 1.0, name="evented", model="tiny", resumed=False, config={})]
    for step in (1, 2):
        for sample in range(2):
            lines.append(
                _event(
                    "episode",
                    step,
                    10.0 * step + sample,
                    split="train",
                    set="add",
                    task_id=f"t{step}",
                    domain="code",
                    tags=["x"],
                    sample=sample,
                    success=sample == 0,
                    reward=float(sample == 0),
                    components={"outcome": 1.0},
                    ending="done",
                    failure=None if sample == 0 else "tool_error",
                    detail="",
                    retries=[],
                    generation_s=1.0,
                    env_s=3.0,
                    queue_s=0.0,
                    total_s=4.0,
                    policy_version=step - 1,
                    staleness=0,
                )
            )
        lines.append(
            _event(
                "update",
                step,
                10.0 * step + 5,
                phase="main",
                episodes=2,
                success_rate=0.5,
                reward_mean=0.5,
                infra_errors=0,
                rollout_s=4.0,
                update_s=1.0,
                sync_s=0.5,
                staleness={"0": 1, "2": 1},
                learner={"loss": 0.1, "entropy": 1.0},
            )
        )
    lines.append(
        _event("run_end", 2, 40.0, steps=2, elapsed_s=90.0, heldout_before=None, heldout_after=None)
    )
    (copy / "events.jsonl").write_text("".join(lines) + '{"t": 41, "kind": "war')  # torn last
    data = load_run(copy)
    assert data.info.name == "evented" and data.info.elapsed_s == 90.0
    assert [u.step for u in data.updates] == [1, 2]
    assert [(e.step, e.outcome) for e in data.episodes] == [
        (1, "success"),
        (1, "tool_error"),
        (2, "success"),
        (2, "tool_error"),
    ]
    page = build_report(copy).read_text()
    assert "No events.jsonl" not in page
    assert 'id="chart-staleness" data-marks="3"' in page  # lags 0, 1 (empty), 2
    assert "from the update events" in page
    assert 'id="chart-time" data-marks="2"' in page


# -- untrusted text ---------------------------------------------------------------------------

EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def _evil_trajectory() -> Trajectory:
    call = {
        "id": "c0",
        "type": "function",
        "function": {"name": f"run{EVIL}", "arguments": json.dumps({"code": EVIL})},
    }
    return Trajectory(
        task_id=f"task{EVIL}",
        domain="code",
        tags=[EVIL],
        turns=[
            Turn(role="user", text=f"prompt {EVIL}"),
            Turn(role="assistant", text=f"thinking {EVIL}", tool_calls=[call], version=0),
            Turn(
                role="tool",
                text=f"observation {EVIL}",
                failure="tool_error",
                detail=EVIL,
                components={EVIL: 1.0},
                risk=1.0,  # a domain's own kind: its name, source and detail are the run's text
                risks=[RiskEvent(f"kind{EVIL}", Severity.HIGH, f"source{EVIL}", EVIL)],
            ),
        ],
        components={EVIL: 0.0},
        risk=1.0,
        ending=Ending.STEP_LIMIT,
        failure="tool_error",
        detail=EVIL,
        policy_version=0,
    )


async def _store(run: Path, trajectory: Trajectory) -> None:
    async with TrajectoryWriter(run, flush_s=None) as writer:
        await writer.add_group(Group(trajectory.task_id, "g0", [trajectory]))


def test_untrusted_text_is_escaped(tmp_path: Path, browser: Any) -> None:
    run = tmp_path / "evil"
    run_async(_store(run, _evil_trajectory()))
    (run / "metrics.jsonl").write_text(
        json.dumps(
            {
                "step": 1,
                "phase": EVIL,
                "episodes": 1,
                "success_rate": 0.0,
                "reward_mean": 0.0,
                "learner": {"loss": 0.5},
            }
        )
        + "\n"
    )
    (run / "config.yaml").write_text(json.dumps({"name": EVIL, "model": EVIL}))
    out = build_report(run)
    page = out.read_text()
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    opened = Opened(browser, out)
    opened.check_clean(out)
    text = opened.page.inner_text("#samples")
    assert "thinking <script>alert(1)</script>" in text  # shown as text, not run
    assert '"code": "<script>alert(1)</script>' in text
    assert "kind<script>alert(1)</script>" in opened.page.inner_text("#risk")  # the kinds table
    opened.page.close()


# -- missing pieces and wrong directories -----------------------------------------------------


def test_missing_pieces_are_shown_as_not_recorded(tmp_path: Path) -> None:
    run = tmp_path / "fresh"
    run.mkdir()
    (run / "config.yaml").write_text("name: fresh\nmodel: default\nsteps: 5\n")
    page = build_report(run).read_text()
    assert "No update finished and no held-out set was evaluated (unfinished" in page
    for what in (
        "Training progress",
        "Held-out evaluations",
        "Failure reasons",
        "Timings",
        "Staleness",
        "Learner statistics",
        "Per-task tables",
        "Sample episodes",
        "Risk",
    ):
        assert f"<b>{what}: not recorded.</b>" in page, what
    assert "0 of 5" in page  # updates done of planned
    assert load_run(run).info.sandbox == "not recorded"


def test_the_sandbox_limits_come_from_the_runs_event(real_run: Path, tmp_path: Path) -> None:
    """The run's pool said how its limits held (a sandbox_start event); the summary shows it,
    and where a resumed part ran under other limits, both."""
    [start] = [e for e in read_events(real_run / "events.jsonl") if e.kind == "sandbox_start"]
    said = start.data["description"]
    assert start.step == 0 and said.startswith(("memory and processes: cgroup", "memory: "))
    assert start.data["memory"] in ("cgroup_v1", "cgroup_v2", "rlimit_as")
    assert load_run(real_run).info.sandbox == said
    assert f'<div class="k">sandbox limits</div><div class="v">{said}</div>' in (
        build_report(real_run, tmp_path / "r.html").read_text()
    )
    copy = tmp_path / "resumed"
    shutil.copytree(real_run, copy, ignore=shutil.ignore_patterns("checkpoints"))
    fallback = "memory: RLIMIT_AS per process (fallback: …); seccomp: on"
    with (copy / "events.jsonl").open("a") as log:
        log.write(_event("sandbox_start", 2, 9e9, memory="rlimit_as", description=fallback))
    assert load_run(copy).info.sandbox == f"{fallback} (earlier parts of the run: {said})"


def test_a_directory_that_is_not_a_run_is_an_error_saying_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no such directory; pass the run directory"):
        build_report(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"not a run directory: none of config.yaml, events"):
        build_report(tmp_path / "empty")
    assert not (tmp_path / "empty" / "report.html").exists()


def test_a_damaged_log_names_the_line_but_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    good = json.dumps({"step": 1, "episodes": 4, "success_rate": 0.25, "reward_mean": 0.25})
    (run / "metrics.jsonl").write_text(good + "\n" + '{"step": 2, "epi')
    assert [u.step for u in load_run(run).updates] == [1]
    (run / "metrics.jsonl").write_text(good + "\n{oops\n" + good + "\n")
    with pytest.raises(ConfigError, match=r"metrics.jsonl:2: not a JSON line"):
        build_report(run)


def test_the_headline_says_what_the_warm_start_and_rl_each_gave(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    evals = [("before", 0, 0, 0), ("warm start", 0, 18, 0), ("main", 6, 20, 2)]
    (run / "evals.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "step": step,
                    "phase": phase,
                    "set": "math",
                    "success": passed / 32,
                    "passed": passed,
                    "total": 32,
                    "infra_failed": infra,
                    "seconds": 1.0,
                }
            )
            + "\n"
            for phase, step, passed, infra in evals
        )
    )
    metrics = [{"step": s, "episodes": 16, "success_rate": 0.5, "infra_errors": int(s == 3)}
               for s in range(1, 7)]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (run / "result.json").write_text(json.dumps({"steps": 6, "elapsed_s": 516.0}))
    assert headline(load_run(run)) == (
        "Held-out success 0% → 62% over 6 updates in 8.6 min; the warm start gave +56 pts, "
        "RL +6 pts; infra failures 2."  # the episodes left out of the rates shown
    )
    page = build_report(run).read_text()  # every success rate says how many it left out
    assert "62% <small>(20/32; infra failures 2)</small>" in page  # the summary table
    assert '<th class="num">infra failures</th>' in page  # the evaluations table
    assert "Infra failures are left out (1 over the run)" in page  # the training curve


def test_a_judge_with_criteria_gets_a_criteria_column_and_one_without_does_not(
    tmp_path: Path,
) -> None:
    def run_with(criteria: dict[str, list[int]] | None) -> str:
        run = tmp_path / ("graded" if criteria else "plain")
        run.mkdir()
        point = {"step": 0, "phase": "before", "set": "structure", "success": 0.0, "passed": 0,
                 "total": 10, "infra_failed": 0, "seconds": 1.0}  # fmt: skip
        if criteria is not None:
            point["criteria"] = criteria
        (run / "evals.jsonl").write_text(json.dumps(point) + "\n")
        return build_report(run).read_text()

    # (1/10 + 4/10) / 2 = 25%; a malformed entry is left out, not fatal
    page = run_with({"iou": [1, 10], "dims": [4, 10], "bad": "x"})  # type: ignore[dict-item]
    assert '<th class="num">criteria met</th>' in page
    assert '<td class="num">25%</td>' in page
    assert "criteria met" not in run_with(None)


def test_a_headline_from_training_alone_counts_its_infra_failures(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    metrics = [{"step": 1, "episodes": 8, "success_rate": None, "infra_errors": 8},
               {"step": 2, "episodes": 8, "success_rate": 0.25, "infra_errors": 0}]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    assert headline(load_run(run)).startswith(
        "Training success not recorded → 25% (first → last update; infra failures 8) over 2 updates"
    )  # the first update's episodes all failed for the infrastructure: no rate, not 0%


def test_a_finished_runs_headline_gives_its_accounting_with_n_and_interval(
    tmp_path: Path,
) -> None:
    """result.json's gains (honing.trainer.gains): base → warm start → RL, the RL gain from the
    warm start with its 95% interval, n and infrastructure failures, as the last line says."""
    run = tmp_path / "run"
    run.mkdir()
    gains = {
        "base": {"step": 0, "success": 0.0, "passed": 0, "total": 128, "infra_failed": 0},
        "warm_start": {"step": 0, "success": 0.5, "passed": 64, "total": 128, "infra_failed": 0},
        "rl": {"step": 20, "success": 0.8125, "passed": 104, "total": 128, "infra_failed": 1},
        "rl_gain": 0.3125,
        "ci95": [0.2217, 0.3975],
        "n": 128,
        "paired": True,
        "infra_failures": 1,
    }
    (run / "result.json").write_text(json.dumps({"steps": 20, "elapsed_s": 540.0, "gains": gains}))
    assert headline(load_run(run)) == (
        "Held-out success base 0% → warm start 50% → RL 81% over 0 updates in 9.0 min: RL +31 "
        "pts (95% CI +22..+40; n=128; infra failures 1); the warm start gave +50 pts."
    )
    exported = {"step": 12, "validation": 0.703, "last": 20, "start": 0.5}
    (run / "result.json").write_text(
        json.dumps({"steps": 20, "elapsed_s": 540.0, "gains": gains, "exported": exported})
    )
    assert headline(load_run(run)).endswith(
        "the warm start gave +50 pts. The RL figure is update 12's of 20: the best on validation "
        "(70%), the checkpoint `honing export` takes by default."
    )
