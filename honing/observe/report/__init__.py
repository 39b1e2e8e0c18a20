"""`honing report RUN_DIR`: the self-contained HTML report of a run directory (the module moved to
honing.observe.report.page; the next commit splits it by concern)."""

from honing.observe.report.page import build_report, headline, load_run, render

__all__ = ["build_report", "headline", "load_run", "render"]
