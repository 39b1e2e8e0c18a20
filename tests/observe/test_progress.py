"""Live progress: drawn on a terminal, silent on a pipe and with quiet=True."""

from __future__ import annotations

import io

from rich.console import Console

from honing.observe.progress import EpisodeProgress, RunProgress


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=160, color_system=None), out


def test_run_progress_draws_step_phase_activity_and_stats_on_a_terminal() -> None:
    con, out = console(True)
    with RunProgress(con) as progress:
        assert progress.live
        progress.start(total=4, done=1, name="quickstart")
        progress.phase("math")
        progress.activity("rollout")
        progress.step(2, success=0.5, reward=0.25, tokens_per_s=120.0, episodes_per_s=1.5)
        progress._progress.refresh()  # type: ignore[union-attr]
        drawn = out.getvalue()
    assert "quickstart · math" in drawn
    assert "2/4" in drawn
    assert "rollout | success 50% (infra failures 0) reward 0.250 | 120 tok/s 1.50 ep/s" in drawn
    assert "ETA" in drawn


def test_episode_progress_counts_success_and_reward() -> None:
    con, out = console(True)
    with EpisodeProgress("eval add · scripted", total=4, console=con) as progress:
        progress.add(True, 1.0)
        progress.add(False, 0.0, count=2)
        progress._progress.refresh()  # type: ignore[union-attr]
        drawn = out.getvalue()
    assert progress.success_rate == 1 / 3
    assert "eval add · scripted" in drawn and "3/4" in drawn
    assert "success 1/3 (33%; infra failures 0) | reward 0.333" in drawn


def test_episode_progress_leaves_infrastructure_failures_out_of_the_rate() -> None:
    con, out = console(True)
    with EpisodeProgress("eval", total=4, console=con) as progress:
        progress.add(True, 1.0)
        progress.add(False, 0.0)
        progress.add(False, 0.0, count=2, infra=True)
        progress._progress.refresh()  # type: ignore[union-attr]
        drawn = out.getvalue()
    assert progress.success_rate == 1 / 2  # 1 of the 2 judged; the 2 infra failures left out
    assert "success 1/2 (50%; infra failures 2) | reward 0.500" in drawn  # (1.0 + 0.0) / 2


def test_run_progress_says_n_a_when_the_infrastructure_failed_every_episode() -> None:
    con, out = console(True)
    with RunProgress(con) as progress:
        progress.start(total=4)
        progress.step(1, success=None, reward=None, infra=8, tokens_per_s=0.0, episodes_per_s=1.0)
        progress._progress.refresh()  # type: ignore[union-attr]
        drawn = out.getvalue()
    assert "success n/a (infra failures 8) reward n/a | 0 tok/s 1.00 ep/s" in drawn


def test_no_live_display_on_a_pipe_or_when_quiet() -> None:
    for terminal, quiet in ((False, False), (True, True)):
        con, out = console(terminal)
        with RunProgress(con, quiet=quiet) as run:
            run.start(total=3)
            run.activity("rollout")
            run.step(1, success=1.0, reward=1.0, tokens_per_s=1.0, episodes_per_s=1.0)
        with EpisodeProgress("eval", total=2, console=con, quiet=quiet) as episodes:
            episodes.add(True)
        assert not run.live and not episodes.live
        assert out.getvalue() == "", (terminal, quiet)
        assert episodes.success_rate == 1.0  # still counted
