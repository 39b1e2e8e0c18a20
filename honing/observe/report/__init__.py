"""`honing report RUN_DIR`: one self-contained HTML page that explains a training run at a glance.

    path = build_report(Path("runs/quickstart-20261129-212514"))   # -> RUN_DIR/report.html

The page opens with a headline in plain words (held-out success before -> after, what the warm
start and the updates each contributed, how long it took), then one section per question a
newcomer asks: did reward and success go up (per domain, per tag, per reward component)? what
did the held-out evaluations say? why did episodes fail? where did the time go (generation, env,
update, sync)? how stale were the trajectories? what did the learner see (loss, entropy, KL,
grad norm, clip fractions)? which tasks are slow or keep failing? what does an episode look
like (a success, a failure, the latest one, with tool calls and observations)?

Sources, best first: `events.jsonl` (the run's event log, see honing.observe), then the files every
run has had since the closed loop: `metrics.jsonl` (one line per update), `evals.jsonl`,
`result.json`, `config.yaml`, `warm_start/done.json` and the trajectory store (per-episode
timings, failures, policy versions and the conversations). A piece that was not recorded is shown
as "not recorded" with the reason; it never stops the page. A directory that holds none of these
files raises `ConfigError` saying what was expected.

Self-contained: inline CSS, charts as inline SVG drawn here (no JavaScript, no fonts or scripts
from a network). Everything taken from the run (model output above all) is HTML-escaped.

    data      the records (RunData, UpdatePoint, EpisodePoint, EvalRow, RunInfo) and load_run
    charts    SVG line, stacked-bar and share charts (Chart, Series)
    markup    escaping, numbers and durations in words, sections and tables
    samples   the sample episodes: whole conversations, escaped
    page      the headline, the sections, the CSS, render and build_report

Imports point one way: page uses samples, charts, data and markup; samples uses data and markup;
charts uses markup; data and markup import nothing from this package.

Not covered: live updating (the page is a snapshot; run the command again), comparing runs.
"""

from honing.observe.report.data import (
    EpisodePoint,
    EvalRow,
    RunData,
    RunInfo,
    UpdatePoint,
    load_run,
)
from honing.observe.report.page import REPORT_FILE, build_report, headline, render

__all__ = [
    "REPORT_FILE",
    "EpisodePoint",
    "EvalRow",
    "RunData",
    "RunInfo",
    "UpdatePoint",
    "build_report",
    "headline",
    "load_run",
    "render",
]
