"""`honing report RUN_DIR`: one self-contained HTML page that explains a training run at a glance.

    path = build_report(Path("runs/quickstart-20261129-212514"))   # -> RUN_DIR/report.html

    data      load_run -> RunData (with honing.trainer.run_dir's UpdateRecord and EvalPoint,
              and EpisodePoint, RunInfo, RiskPlan)
    charts    SVG line, stacked-bar and share charts (Chart, Series)
    markup    escaping, numbers and durations in words, sections and tables
    samples   the sample episodes: whole conversations, escaped, risk events and team roles as
              badges, a team episode's roles together
    page      the headline, the sections, the CSS, render and build_report

Sources: the run's event log, else the files every run has (metrics, evals, result, config, the
trajectory store); a piece not recorded is shown as such. docs/report.md has the sections.

Not covered: live updating (the page is a snapshot; run the command again), comparing runs.
"""

from honing.report.data import EpisodePoint, RiskPlan, RunData, RunInfo, load_run
from honing.report.page import build_report, headline, render
from honing.trainer.run_dir import REPORT_FILE

__all__ = [
    "REPORT_FILE",
    "EpisodePoint",
    "RiskPlan",
    "RunData",
    "RunInfo",
    "build_report",
    "headline",
    "load_run",
    "render",
]
