"""Live terminal progress (rich) for the long commands: train, eval, rollout.

    progress = RunProgress(console, quiet=False)         # honing train
    await train(config, progress=progress)                # the loop calls start/phase/activity/step

    with EpisodeProgress("eval math · model:x", total=64, console=console) as progress:
        ... progress.add(success=True, reward=1.0)        # once per finished episode

Both draw one live line, only on an interactive terminal and not with `quiet=True`; the ETA
ignores units done before a resume (docs/observability.md, "The modules in detail").
Not covered: log lines (the commands log through `logging`), the event log (`events.py`).
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


def live_on(console: Console, quiet: bool) -> bool:
    """Whether a live display may be drawn: an interactive terminal, and not quiet."""
    return not quiet and console.is_terminal and not console.is_dumb_terminal


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class _EtaColumn(ProgressColumn):
    """Time left: time per unit done in this process, times the units left."""

    def render(self, task: Task) -> Text:
        base = int(task.fields.get("base", 0))
        done = task.completed - base
        elapsed = task.elapsed
        if task.total is None or done <= 0 or not elapsed:
            return Text("ETA --:--", style="progress.remaining")
        left = max(0.0, task.total - task.completed)
        return Text(f"ETA {_duration(elapsed / done * left)}", style="progress.remaining")


class _Live:
    """A rich Progress with one task (description, bar, N/M, status, elapsed, ETA), drawn only
    where `live_on` allows."""

    def __init__(self, console: Console, quiet: bool) -> None:
        self.console = console
        self.live = live_on(console, quiet)
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._columns = (
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}", markup=False),
            TimeElapsedColumn(),
            _EtaColumn(),
        )

    def _open(self, description: str, total: int, done: int, status: str) -> None:
        if not self.live or self._progress is not None:
            return
        self._progress = Progress(*self._columns, console=self.console, transient=True)
        self._task = self._progress.add_task(
            description, total=total, completed=done, base=done, status=status
        )
        self._progress.start()

    def _update(self, **fields: object) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, **fields)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class RunProgress(_Live):
    """`honing train`: step N/M, training phase and what is running now, success, reward,
    throughput (model tokens/s, episodes/s), elapsed and ETA. The trainer loop drives it."""

    def __init__(self, console: Console, *, quiet: bool = False) -> None:
        super().__init__(console, quiet)
        self.name = "train"
        self.total = 0
        self.step_done = 0
        self.phase_name = ""
        self.doing = ""
        self.stats = ""

    def start(self, total: int, done: int = 0, *, name: str = "train") -> None:
        """The run has `total` updates, `done` of them before this process (a resume)."""
        self.name, self.total, self.step_done = name, total, done
        self._open(self._description(), total, done, self._status())

    def phase(self, name: str) -> None:
        """A training phase (curriculum stage) begins."""
        self.phase_name = name
        self._update(description=self._description())

    def activity(self, text: str) -> None:
        """What the run is doing now (rollout, update, sync, eval SET 3/16, checkpoint)."""
        self.doing = text
        self._update(status=self._status())

    def step(
        self, step: int, *, success: float | None, reward: float | None, tokens_per_s: float,
        episodes_per_s: float, infra: int = 0,
    ) -> None:  # fmt: skip
        """Update `step` is done: `success` and mean `reward` over its episodes but the `infra`
        ones the infrastructure failed (None when it failed them all)."""
        self.step_done = step
        rate = "n/a" if success is None else f"{100 * success:.0f}%"
        shown = "n/a" if reward is None else f"{reward:.3f}"
        self.stats = (
            f"success {rate} (infra failures {infra}) reward {shown} | "
            f"{tokens_per_s:.0f} tok/s {episodes_per_s:.2f} ep/s"
        )
        self._update(completed=step, status=self._status())

    def _description(self) -> str:
        return f"{self.name} · {self.phase_name}" if self.phase_name else self.name

    def _status(self) -> str:
        return " | ".join(part for part in (self.doing, self.stats) if part)

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()


class EpisodeProgress(_Live):
    """`honing eval` / `honing rollout`: episodes done/total, success so far (over the episodes
    the infrastructure did not fail, which are counted apart), mean reward, episodes/s, elapsed
    and ETA. Call `add` once per finished episode (or group: count=n)."""

    def __init__(
        self, description: str, total: int, console: Console, *, quiet: bool = False
    ) -> None:
        super().__init__(console, quiet)
        self.description = description
        self.total = total
        self.done = 0
        self.passed = 0
        self.infra = 0  # episodes the infrastructure failed: left out of success and reward
        self.rewards = 0.0
        self.rewarded = 0  # judged episodes that reported a reward
        self.started = time.monotonic()

    def start(self) -> None:
        self.started = time.monotonic()
        self._open(self.description, self.total, 0, self._status())

    def add(
        self, success: bool, reward: float | None = None, *, count: int = 1, infra: bool = False
    ) -> None:
        """`count` episodes finished, `success` for each; `reward`: their mean, if known;
        `infra`: the infrastructure failed them (left out of the success rate and the reward)."""
        left_out = infra and not success
        self.done += count
        self.passed += count * int(success)
        self.infra += count * int(left_out)
        if reward is not None and not left_out:
            self.rewards += reward * count
            self.rewarded += count
        self._update(completed=self.done, status=self._status())

    @property
    def success_rate(self) -> float | None:
        judged = self.done - self.infra
        return self.passed / judged if judged else None

    def _status(self) -> str:
        if not self.done:
            return ""
        rate = self.success_rate
        shown = "n/a" if rate is None else f"{100 * rate:.0f}%"
        judged = self.done - self.infra
        parts = [f"success {self.passed}/{judged} ({shown}; infra failures {self.infra})"]
        if self.rewarded:
            parts.append(f"reward {self.rewards / self.rewarded:.3f}")
        elapsed = time.monotonic() - self.started
        if elapsed > 0:
            parts.append(f"{self.done / elapsed:.2f} ep/s")
        return " | ".join(parts)

    def __enter__(self) -> EpisodeProgress:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()
