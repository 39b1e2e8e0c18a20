"""Does RL learn in every domain? Each built-in recipe trained from its own warm start and judged
on its held-out set, one line per recipe, then the matrix's line.

    .venv/bin/python benchmarks/learning_matrix.py                    # every recipe, in turn
    .venv/bin/python benchmarks/learning_matrix.py --recipes sql,tools
    .venv/bin/python benchmarks/learning_matrix.py --from-runs runs/   # the latest run of each

Each recipe is `honing train examples/<file>` with `out=runs/<recipe>-<timestamp>` (its run
directory named after it, so a recipe's runs are found and compared), run as a user runs it, one
at a time (each takes the cores). Read back from the run's result.json (honing.trainer.result):

    learning <recipe>: warm start W% → RL Y% (RL +Z pts, 95% CI a..b; n=N) in M min
      (with `; criteria met A% → B%` after N where the judge gives criteria: structure)
      <recipe> after the warm start: entropy E per token; groups with reward variance G/N
    learning_matrix: K/7 recipes gain (CI low > 0); median RL +X pts; slowest M min

The second line is what the warm start left RL to learn from, read from the run's first update
(metrics.jsonl): the policy's mean entropy per sampled token and the groups dynamic sampling
kept (those whose rewards differ). A recipe gains when its paired 95% interval's low end is above
0. A recipe whose file is missing or whose run failed is a line saying so and does not gain.
`--from-runs DIR` trains nothing: it reads the latest `DIR/<recipe>-*/result.json` of each recipe
(a matrix assembled from runs made one by one, or on another host). Not covered: choosing each
recipe's settings (that is done on its validation split, docs/training.md), and a recipe's own
evaluation (its run does that).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# recipe (its run directories' prefix) -> its config under examples/
RECIPES = {
    "quickstart": "quickstart.yaml",  # math
    "code-repair": "code_repair.yaml",
    "tools": "tools.yaml",
    "sql": "sql.yaml",
    "finance": "finance.yaml",
    "structure": "structure.yaml",
    "code-repair-team": "code_repair_team.yaml",
}


@dataclass(frozen=True)
class Outcome:
    """One recipe's figures from its result.json (None: it has none, with `why`)."""

    recipe: str
    warm: float | None = None  # held-out success where RL started: the warm start's, or the base's
    start: str = "warm start"  # which of the two
    rl: float | None = None
    gain: float | None = None
    low: float | None = None
    high: float | None = None
    n: int = 0
    minutes: float = 0.0
    why: str = ""
    # where the judge gives criteria (structure): the share met at the start and after RL
    criteria: tuple[float, float] | None = None

    @property
    def gains(self) -> bool:
        return self.low is not None and self.low > 0

    def line(self) -> str:
        if self.gain is None or self.rl is None or self.low is None or self.high is None:
            return f"learning {self.recipe}: {self.why or 'no held-out gain measured'}"
        warm = self.warm if self.warm is not None else self.rl - self.gain
        ci = f"{100 * self.low:+.0f}..{100 * self.high:+.0f}"
        graded = ""
        if self.criteria is not None:
            before, after = self.criteria
            graded = f"; criteria met {100 * before:.0f}% → {100 * after:.0f}%"
        return (
            f"learning {self.recipe}: {self.start} {100 * warm:.0f}% → RL {100 * self.rl:.0f}% "
            f"(RL {100 * self.gain:+.0f} pts, 95% CI {ci}; n={self.n}{graded}) in "
            f"{self.minutes:.0f} min"
        )


def outcome(recipe: str, result: dict[str, Any]) -> Outcome:
    """A recipe's `Outcome` from its run's result.json (its `gains` and `elapsed_s`)."""
    gains = result.get("gains") or {}
    rl, warm = gains.get("rl"), gains.get("warm_start")
    start = "warm start" if warm is not None else "base"
    warm = warm if warm is not None else gains.get("base")
    minutes = float(result.get("elapsed_s", 0.0)) / 60
    if rl is None or gains.get("rl_gain") is None or gains.get("ci95") is None:
        return Outcome(recipe, minutes=minutes, why="the run measured no RL gain on held-out")
    low, high = gains["ci95"]
    met = [stage.get("criteria_met") if stage else None for stage in (warm, rl)]
    return Outcome(
        recipe,
        warm=None if warm is None else float(warm["success"]),
        start=start,
        rl=float(rl["success"]),
        gain=float(gains["rl_gain"]),
        low=float(low),
        high=float(high),
        n=int(gains.get("n", rl.get("total", 0))),
        minutes=minutes,
        criteria=None if None in met else (float(met[0]), float(met[1])),
    )


def exploration(recipe: str, updates: list[dict[str, Any]]) -> str | None:
    """What the warm start left to learn from, by the run's first update (metrics.jsonl's
    lines): its sampled tokens' entropy per token (the learner's, in runs from before that was
    recorded) and its groups with reward variance; None without one."""
    if not updates:
        return None
    learner = updates[0].get("learner") or {}
    groups = int(learner.get("groups", 0))
    varied = groups - int(learner.get("dropped_groups", 0))
    # the sampled tokens' entropy (every group); the learner's covers only the groups it kept
    entropy = (updates[0].get("signal") or {}).get("sampled_entropy", learner.get("entropy"))
    shown = "n/a" if entropy is None else f"{float(entropy):.3f}"
    return (
        f"  {recipe} after the warm start: entropy {shown} per token; groups with reward "
        f"variance {varied}/{groups}"
    )


def metrics_of(run: Path) -> list[dict[str, Any]]:
    """The run's metrics.jsonl lines (none when it has no such file)."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summary(outcomes: list[Outcome]) -> str:
    """The matrix's last line over every recipe asked for (a missing one does not gain)."""
    measured = [o for o in outcomes if o.gain is not None]
    gains = [o.gain for o in measured if o.gain is not None]
    median = statistics.median(gains) if gains else None
    slowest = max((o.minutes for o in outcomes), default=0.0)
    med = "n/a" if median is None else f"{100 * median:+.0f} pts"
    gaining = sum(o.gains for o in outcomes)
    return (
        f"learning_matrix: {gaining}/{len(outcomes)} recipes gain (CI low > 0); median RL {med}; "
        f"slowest {slowest:.0f} min"
    )


def latest_run(runs: Path, recipe: str) -> Path | None:
    """The newest `runs/<recipe>-<timestamp>` with a result.json (a longer recipe's runs, such
    as code-repair-team's beside code-repair's, are not taken for the shorter one's)."""
    found = [
        d
        for d in runs.glob(f"{recipe}-*")
        if (d / "result.json").is_file() and d.name[len(recipe) + 1 :][:1].isdigit()
    ]
    return max(found, key=lambda d: d.name) if found else None


def train(recipe: str, config: Path, runs: Path) -> tuple[Outcome, Path]:
    """Run the recipe as a user does (`honing train`); its outcome from the run's result.json,
    and the run's directory."""
    out = runs / f"{recipe}-{time.strftime('%Y%m%d-%H%M%S')}"
    honing = Path(sys.executable).with_name("honing")
    command = [str(honing), "train", str(config), f"out={out}"]
    print(f"# {recipe}: {' '.join(command)}", flush=True)
    done = subprocess.run(command, cwd=ROOT, check=False)
    result = out / "result.json"
    if done.returncode != 0 or not result.is_file():
        return Outcome(recipe, why=f"the run failed (exit {done.returncode}; see {out})"), out
    return outcome(recipe, json.loads(result.read_text())), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated names")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs", help="where runs are made")
    parser.add_argument("--from-runs", type=Path, help="read the latest run of each; train none")
    args = parser.parse_args()
    names = [r.strip() for r in args.recipes.split(",") if r.strip()]
    unknown = [r for r in names if r not in RECIPES]
    if unknown:
        parser.error(f"unknown recipe(s) {', '.join(unknown)}; known: {', '.join(RECIPES)}")
    outcomes = []
    for recipe in names:
        config = ROOT / "examples" / RECIPES[recipe]
        run: Path | None = None
        if args.from_runs is not None:
            run = latest_run(args.from_runs, recipe)
            if run is None:
                got = Outcome(recipe, why=f"no run with a result in {args.from_runs}/{recipe}-*")
            else:
                got = outcome(recipe, json.loads((run / "result.json").read_text()))
        elif not config.is_file():
            got = Outcome(recipe, why=f"no recipe yet (examples/{RECIPES[recipe]} is missing)")
        else:
            got, run = train(recipe, config, args.runs)
        outcomes.append(got)
        print(got.line(), flush=True)
        explored = None if run is None else exploration(recipe, metrics_of(run))
        if explored is not None:
            print(explored, flush=True)
    print(summary(outcomes))


if __name__ == "__main__":
    main()
