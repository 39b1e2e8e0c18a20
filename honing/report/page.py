"""The report page: the headline, one section per question (summary, reward and success, held-out
evaluations, failures, risky actions, the team (only for a run played by teams), time, staleness,
learner, alerts (only for a run that raised some), tasks; the sample episodes come from
honing.report.samples), the CSS, `render(data) -> str` and `build_report`.

Not covered: reading the run directory (honing.report.data), drawing the SVG charts
(honing.report.charts).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from honing.observe.metrics import team_scalars, team_summary
from honing.records import Ending, Trajectory
from honing.report.charts import (
    PALETTE,
    SUCCESS_COLOR,
    Chart,
    Series,
    bar_chart,
    colors,
    line_chart,
    share_bar,
)
from honing.report.data import EpisodePoint, RunData, load_run
from honing.report.markup import (
    duration,
    esc,
    mean,
    missing_html,
    num,
    pairs_html,
    pct,
    pts,
    section_html,
    table_html,
)
from honing.report.samples import pick_samples, risk_badge, sample_id, samples_section
from honing.risk import RiskEvent, Severity
from honing.risk import kind as risk_kind
from honing.trainer.run_dir import BEFORE, REPORT_FILE, WARM_START, EvalPoint, UpdateRecord

INFRA_ENDINGS = ("infra_error", "sandbox_error", "verifier_crash")
LEARNER_STATS = (
    ("loss", "loss"),
    ("entropy", "entropy (nats/token)"),
    ("kl", "KL to the reference"),
    ("approx_kl", "KL proximal → current"),
    ("grad_norm", "grad norm (before clipping)"),
    ("clip_frac_low", "clipped share, low side"),
    ("clip_frac_high", "clipped share, high side"),
    ("advantage_abs_mean", "mean |advantage|"),
)


# -- the headline ----------------------------------------------------------------------------------


def _pooled(rows: Sequence[EvalPoint]) -> float | None:
    total = sum(r.total for r in rows)
    return sum(r.passed for r in rows) / total if total else None


def _judged(passed: int, total: int, infra: int) -> str:
    """The counts beside a success rate: `(passed/judged; infra failures N)`."""
    return f"({passed}/{total}; infra failures {infra})"


def _eval_points(evals: Sequence[EvalPoint]) -> list[tuple[str, list[EvalPoint]]]:
    """The evaluation points in run order (before, warm start, update N...), each with its sets."""
    points: dict[tuple[int, int, str], list[EvalPoint]] = {}
    order = {BEFORE: 0, WARM_START: 1}
    for row in evals:
        key = (row.step, order.get(row.phase, 2) if row.step == 0 else 2, row.label)
        points.setdefault(key, []).append(row)
    return [(key[2], rows) for key, rows in sorted(points.items())]


def _stage_rate(stage: Any) -> float | None:
    value = stage.get("success") if isinstance(stage, dict) else None
    return float(value) if isinstance(value, int | float) else None


def _gains_headline(gains: dict[str, Any], updates: str, took: str) -> str | None:
    """The finished run's accounting: base -> warm start -> RL, the RL gain with its interval,
    n and infrastructure failures (as the last line of `honing train` says it)."""
    rates = {k: _stage_rate(gains.get(k)) for k in ("base", "warm_start", "rl")}
    labels = {"base": "base", "warm_start": "warm start", "rl": "RL"}
    shown = [f"{labels[k]} {pct(v)}" for k, v in rates.items() if v is not None]
    if not shown:
        return None
    text = f"Held-out success {' → '.join(shown)} over {updates}{took}"
    gain, ci = gains.get("rl_gain"), gains.get("ci95")
    if isinstance(gain, int | float) and isinstance(ci, list) and len(ci) == 2:
        low, high = (f"{100 * float(x):+.0f}" for x in ci)
        text += (
            f": RL {pts(float(gain))} (95% CI {low}..{high}; n={gains.get('n')}; infra "
            f"failures {gains.get('infra_failures')})"
        )
    else:
        text += ": no evaluation after RL"
    base, warm = rates["base"], rates["warm_start"]
    if base is not None and warm is not None:
        text += f"; the warm start gave {pts(warm - base)}"
    return text + "."


def _exported_note(exported: dict[str, Any] | None) -> str:
    """checkpoint.keep_best: which update the figure above is of, and why."""
    if exported is None:
        return ""
    step, last, score = exported.get("step"), exported.get("last"), exported.get("validation")
    if not isinstance(score, int | float):
        return ""
    return (
        f" The RL figure is update {step}'s of {last}: the best on validation "
        f"({pct(float(score))}), the checkpoint `honing export` takes by default."
    )


def _numerics(precision: str) -> str:
    """The run's dtypes for the headline: ", float32", ", mixed: engine ..., learner ...", or
    nothing when not recorded."""
    if precision.endswith("(sampling and learning)"):
        return f", {precision.split()[0]}"
    return f", {precision}" if precision.startswith("mixed") else ""


def headline(data: RunData) -> str:
    """The run in one sentence: held-out before -> after, and who gave what; then, when its
    training episodes took risky actions, how often."""
    risk = _risk_headline(data)
    return _outcome_headline(data) + (f" {risk}" if risk else "")


def _outcome_headline(data: RunData) -> str:
    info, n = data.info, len(data.updates)
    updates = f"{n} update{'s' if n != 1 else ''}"
    took = f" in {duration(info.elapsed_s)}" if info.elapsed_s is not None else ""
    took += _numerics(info.precision)
    if info.gains is not None:
        said = _gains_headline(info.gains, updates, took)
        if said is not None:
            return said + _exported_note(info.exported)
    points = _eval_points(data.evals)
    before = next((_pooled(r) for label, r in points if label == BEFORE), None)
    warm = next((_pooled(r) for label, r in points if label == WARM_START), None)
    last_label, last_rows = points[-1] if points else ("", [])
    after = _pooled(last_rows) if last_label not in (BEFORE, WARM_START) else None
    unfinished = "" if info.finished else " (unfinished: no result.json yet)"
    if before is None and after is None and warm is None:
        if not data.updates:
            return f"No update finished and no held-out set was evaluated{unfinished}."
        first, last = data.updates[0], data.updates[-1]
        infra = sum(u.infra_errors for u in data.updates)
        return (
            f"Training success {pct(first.success_rate)} → {pct(last.success_rate)} (first → "
            f"last update; infra failures {infra}) over {updates}{took}; no held-out set was "
            f"evaluated{unfinished}."
        )
    start = before if before is not None else warm
    end = after if after is not None else (warm if warm is not None else before)
    assert start is not None and end is not None
    shown = [rows for label, rows in points if label in (BEFORE, WARM_START)] + (
        [last_rows] if after is not None else []
    )
    infra = sum(r.infra_failed for rows in shown for r in rows)
    text = f"Held-out success {pct(start)} → {pct(end)} over {updates}{took}"
    if warm is not None and before is not None:
        rl = f", RL {pts(after - warm)}" if after is not None else ", no evaluation after RL yet"
        text += f"; the warm start gave {pts(warm - before)}{rl}"
    elif end is not start:
        text += f" ({pts(end - start)})"
    return text + f"; infra failures {infra}" + unfinished + "."


# -- sections --------------------------------------------------------------------------------------


def summary_section(data: RunData) -> str:
    info, updates = data.info, data.updates
    planned = f" of {info.planned_steps}" if info.planned_steps is not None else ""
    shape = (
        f"{info.groups_per_step} tasks × {info.n} samples"
        if info.groups_per_step and info.n
        else "not recorded"
    )
    cards = [
        ("model", info.model),
        ("run", info.name),
        ("updates", f"{len(updates)}{planned}" + ("" if info.finished else " (unfinished)")),
        ("elapsed", duration(info.elapsed_s)),
        ("episodes trained on", str(sum(u.episodes for u in updates))),
        ("per update", shape),
        ("warm start", duration(info.warm_start_s) if info.warm_start_s else "none"),
        ("precision", info.precision),
        ("engine vs learner logprobs", info.logprob_check),
        ("sandbox limits", info.sandbox),
    ]
    if data.risk_recorded:
        cards += [("risky episodes", _risk_count(data)), ("risk in training", _risk_pricing(data))]
    grid = "".join(
        f'<div class="card"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div></div>'
        for k, v in cards
    )
    points = _eval_points(data.evals)
    sets = sorted({r.set for r in data.evals})
    if not sets:
        table = missing_html(
            "Held-out success", "no held-out set was evaluated (no heldout: in the config)"
        )
    else:
        labels = [label for label, _ in points]
        header = ["held-out set", *labels, "change"]
        rows = []
        for name in sets:
            cells, values = [], []
            for _, rows_at in points:
                row = next((r for r in rows_at if r.set == name), None)
                if row is None:
                    cells.append("—")
                    continue
                values.append(row.success)
                counts = _judged(row.passed, row.total, row.infra_failed)
                cells.append(f"{pct(row.success)} <small>{counts}</small>")
            first, last = values[0] if values else None, values[-1] if values else None
            change = pts(last - first) if first is not None and last is not None else "—"
            rows.append([esc(name), *cells, change])
        table = table_html(header, rows, set(range(1, len(header))))
    return section_html("summary", "Summary", f'<div class="cards">{grid}</div>{table}')


def _per_update(
    episodes: Sequence[EpisodePoint],
    key: Callable[[EpisodePoint], Iterable[str]],
    value: Callable[[EpisodePoint], float],
    steps: Sequence[int],
    names: Sequence[str],
) -> list[Series]:
    sums: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in episodes:
        for name in key(e):
            sums[(name, e.step)].append(value(e))
    return [
        Series(
            name,
            [(float(s), mean(sums[(name, s)]) if sums.get((name, s)) else None) for s in steps],
            PALETTE[i % len(PALETTE)],
        )
        for i, name in enumerate(names)
    ]


def _mean_at(episodes: Sequence[EpisodePoint], step: int, component: str) -> float | None:
    values = [e.components[component] for e in episodes
              if e.step == step and component in e.components]  # fmt: skip
    return mean(values) if values else None


def progress_section(data: RunData) -> str:
    updates = data.updates
    episodes = [e for e in data.episodes if e.step > 0 and not e.infra_failed]
    infra = sum(u.infra_errors for u in updates)
    if not updates:
        return section_html(
            "progress",
            "Reward and success during training",
            missing_html("Training progress", "no update finished (metrics.jsonl has no line)"),
        )
    steps = [u.step for u in updates]
    success = line_chart(
        "chart-success",
        "Training success per update",
        "Share of each update's episodes that succeeded: it should trend up; flat at 0% or "
        f"100% gives the learner no signal. Infra failures are left out ({infra} over the run).",
        [Series("success", [(u.step, u.success_rate) for u in updates], SUCCESS_COLOR)],
        percent=True,
    )
    reward = line_chart(
        "chart-reward",
        "Mean reward per update",
        "The weighted sum of the reward components, averaged over the update's episodes "
        "(infra failures left out, as above).",
        [Series("mean reward", [(u.step, u.reward_mean) for u in updates], PALETTE[0])],
    )
    charts = [success.html(), reward.html()]
    notes = []
    domains = sorted({e.domain for e in episodes})
    if len(domains) > 1:
        charts.append(
            line_chart(
                "chart-domain",
                "Success per domain",
                "One line per domain: a domain that stays low (or drops when another is added) "
                "needs attention.",
                _per_update(episodes, lambda e: [e.domain], lambda e: e.success, steps, domains),
                percent=True,
            ).html()
        )
    elif domains:
        notes.append(f"One domain ({esc(domains[0])}): its success is the curve above.")
    tag_counts = Counter(t for e in episodes for t in set(e.tags))
    tags = [t for t, c in tag_counts.most_common() if c < len(episodes)][:6]
    if tags:
        charts.append(
            line_chart(
                "chart-tag",
                "Success per task tag",
                "Success of the episodes carrying each tag (the 6 most common tags that not "
                "every task has): which kinds of task the policy handles.",
                _per_update(
                    episodes,
                    lambda e: [t for t in tags if t in e.tags],
                    lambda e: e.success,
                    steps,
                    tags,
                ),
                percent=True,
            ).html()
        )
    components = sorted({c for e in episodes for c in e.components})
    if components:
        charts.append(
            line_chart(
                "chart-components",
                "Reward components per update",
                "The mean of each named reward component over the episodes that earned one "
                "(outcome = solved; the others are process rewards such as well-formed tool "
                "calls), as TensorBoard's train/reward/component/*.",
                [
                    Series(c, [(float(s), _mean_at(episodes, s, c)) for s in steps], color)
                    for c, color in zip(components, colors(len(components)), strict=True)
                ],
            ).html()
        )
    body = pairs_html(charts)
    if not episodes:
        body += missing_html(
            "Per-domain, per-tag and per-component curves", "no per-episode records"
        )
    body += "".join(f'<p class="note">{n}</p>' for n in notes)
    return section_html("progress", "Reward and success during training", body)


def evals_section(data: RunData) -> str:
    points = _eval_points(data.evals)
    if not points:
        return section_html(
            "evals",
            "Held-out evaluations",
            missing_html("Held-out evaluations", "no evals.jsonl (no held-out set in the config)"),
        )
    labels = [label for label, _ in points]
    sets = sorted({r.set for r in data.evals})
    series = []
    for name, color in zip(sets, colors(len(sets)), strict=True):
        values: list[tuple[float, float | None]] = []
        for i, (_, at) in enumerate(points):
            row = next((r for r in at if r.set == name), None)
            values.append((float(i), row.success if row else None))
        series.append(Series(name, values, color))
    chart = line_chart(
        "chart-evals",
        "Held-out success at each evaluation",
        "Success on tasks never trained on, before training, after the warm start and during "
        "RL: the number that says whether the run worked.",
        series,
        x_label="",
        x_names=labels,
        percent=True,
    )
    graded = any(r.criteria for _, rows_at in points for r in rows_at)
    table_rows = [
        [
            esc(r.label),
            esc(r.set),
            f"{pct(r.success)} <small>({r.passed}/{r.total})</small>",
            *([pct(r.criteria_share)] if graded else []),
            str(r.infra_failed),
            pct(r.well_formed),
            duration(r.seconds),
        ]
        for _, rows_at in points
        for r in rows_at
    ]
    head = ["when", "set", "success", *(["criteria met"] if graded else []), "infra failures",
            "well-formed", "took"]  # fmt: skip
    table = table_html(head, table_rows, set(range(2, len(head)))) + (
        '<p class="note">Success: passed of the judged episodes; infra failures (the '
        "infrastructure failed the episode: sandbox, engine, or a checker that could not run) "
        "are left out of it. Well-formed: the share of model turns that were a valid action (a "
        "tool call the environment could parse)."
        + (
            " Criteria met: the mean over the judge's criteria (its <code>met:*</code> "
            "verdicts) of the share of judged episodes that met each: how close the unsolved "
            "ones came."
            if graded
            else ""
        )
        + "</p>"
    )
    return section_html("evals", "Held-out evaluations", pairs_html([chart.html(), table]))


def failures_section(data: RunData) -> str:
    episodes = [e for e in data.episodes if e.step > 0]
    if not episodes:
        return section_html(
            "failures",
            "Why episodes failed",
            missing_html("Failure reasons", "no per-episode records (no store, no events.jsonl)"),
        )
    counts = Counter(e.outcome for e in episodes)
    reasons = [r for r, _ in counts.most_common() if r != "success"]
    categories = [("success", SUCCESS_COLOR)] + [
        (r, "#7f7f7f" if r in INFRA_ENDINGS or r.startswith("infra:") else c)
        for r, c in zip(reasons, [p for p in PALETTE if p != SUCCESS_COLOR] * 3, strict=False)
    ]
    steps = sorted({e.step for e in episodes})
    bars = []
    for step in steps:
        at = Counter(e.outcome for e in episodes if e.step == step)
        bars.append((str(step), {k: float(v) for k, v in at.items()}))
    chart = bar_chart(
        "chart-failures",
        "Episode outcomes per update",
        "Each bar is one update's episodes: green succeeded, the other colours say why an "
        "episode failed (the environment's failure reason; grey: infrastructure). The green "
        "share should grow.",
        bars,
        categories,
    )
    total = len(episodes)
    rows = [
        [esc(r), str(c), f"{100 * c / total:.0f}%", esc(_REASON_WORDS.get(r, ""))]
        for r, c in counts.most_common()
    ]
    table = table_html(["outcome", "episodes", "share", "meaning"], rows, {1, 2})
    return section_html("failures", "Why episodes failed", pairs_html([chart.html(), table]))


# -- risk ------------------------------------------------------------------------------------------

SEVERITY_ORDER = {Severity.HIGH: 0, Severity.MEDIUM: 1, Severity.LOW: 2}


def _judged_episodes(data: RunData) -> list[EpisodePoint]:
    """The training episodes the risk rate counts: those the infrastructure did not fail."""
    return [e for e in data.episodes if not e.infra_failed]


def _risk_tally(data: RunData) -> tuple[float | None, str, int | None]:
    """The run's risk rate over its judged training episodes, the counts ("3 of 12") and the
    events; from the updates' rates (no event count) when there are no per-episode records."""
    episodes = _judged_episodes(data)
    if episodes:
        risky, events = sum(e.risky for e in episodes), sum(len(e.risks) for e in episodes)
        return risky / len(episodes), f"{risky} of {len(episodes)}", events
    rated = [u for u in data.updates if "rate" in u.risk]
    judged = sum(u.episodes - u.infra_errors for u in rated)
    if not judged:
        return None, "", None
    weighted = sum(u.risk["rate"] * (u.episodes - u.infra_errors) for u in rated)
    return weighted / judged, f"{round(weighted)} of {judged}", None


def _risk_count(data: RunData) -> str:
    """ "25% (3 of 12; 5 events)"."""
    rate, counts, events = _risk_tally(data)
    said = [counts] if counts else []
    if events is not None:
        said.append(f"{events} event{'s' if events != 1 else ''}")
    return pct(rate) + (f" ({'; '.join(said)})" if said else "")


def _risk_pricing(data: RunData) -> str:
    """How training priced risk, from the config (else the weight the updates trained with)."""
    plan = data.info.risk
    multipliers = [u.risk["multiplier"] for u in data.updates if "multiplier" in u.risk]
    if plan is None:
        weights = sorted({u.risk["weight"] for u in data.updates if "weight" in u.risk})
        if not weights:
            return "not recorded"
        return "not priced" if weights == [0.0] else f"priced at {', '.join(map(num, weights))}"
    if plan.mode == "off":
        return "off: measured, not trained on"
    if plan.mode == "penalty":
        weight = num(plan.weight) if plan.weight is not None else "not recorded"
        return f"penalty: outcome − {weight} × cost"
    budget = num(plan.budget) if plan.budget is not None else "not recorded"
    last = f", multiplier {num(multipliers[-1])} at the end" if multipliers else ""
    return f"{plan.mode}: budget {budget}{last}"


def _risk_headline(data: RunData) -> str | None:
    """The risk rate in a sentence, when the run's training episodes took risky actions."""
    rated = [u for u in data.updates if "rate" in u.risk]
    episodes = _judged_episodes(data)
    if not data.risk_recorded or not (
        any(e.risky for e in episodes) or any(u.risk["rate"] > 0 for u in rated)
    ):
        return None
    rate, counts, _ = _risk_tally(data)
    said = [counts] if counts else []
    if len(rated) > 1:
        first, last = rated[0], rated[-1]
        said.append(
            f"update {first.step} → {last.step}: {pct(first.risk['rate'])} → "
            f"{pct(last.risk['rate'])}"
        )
    text = f"Risky actions in {pct(rate)} of training episodes" + (
        f" ({'; '.join(said)})" if said else ""
    )
    plan = data.info.risk
    if plan is not None and plan.mode == "constrained" and plan.budget is not None and rated:
        cost = rated[-1].risk.get("cost")
        if cost is not None:
            text += f"; last mean cost {num(cost)}, budget {num(plan.budget)}"
    return text + "."


def _kinds(episodes: Iterable[EpisodePoint], most: int = 3) -> str:
    counts = Counter(r.name for e in episodes for r in e.risks)
    return ", ".join(f"{esc(n)} ×{c}" for n, c in counts.most_common(most)) or "—"


def _risk_rows(groups: dict[str, list[EpisodePoint]]) -> list[list[str]]:
    rows = []
    for name, eps in groups.items():
        risky = sum(e.risky for e in eps)
        rows.append([esc(name), str(len(eps)), str(risky), pct(risky / len(eps)), _kinds(eps)])
    return rows


RISK_COLUMNS = ["episodes", "risky episodes", "rate", "most frequent kinds"]
MAX_RISK_TAGS = 12


def _risk_tables(episodes: Sequence[EpisodePoint]) -> str:
    """The risk rate per domain and per tag (the riskiest tags first), with their kinds."""
    by_domain: dict[str, list[EpisodePoint]] = defaultdict(list)
    by_tag: dict[str, list[EpisodePoint]] = defaultdict(list)
    for e in episodes:
        by_domain[e.domain].append(e)
        for tag in sorted(set(e.tags)):
            by_tag[tag].append(e)
    domains = dict(sorted(by_domain.items()))
    tags = sorted(
        by_tag.items(), key=lambda kv: (-mean(e.risky for e in kv[1]), -len(kv[1]), kv[0])
    )
    out = "<h3>Per domain</h3>" + table_html(
        ["domain", *RISK_COLUMNS], _risk_rows(domains), {1, 2, 3}
    )
    if tags:
        out += "<h3>Per task tag</h3>" + table_html(
            ["tag", *RISK_COLUMNS], _risk_rows(dict(tags[:MAX_RISK_TAGS])), {1, 2, 3}
        )
        if len(tags) > MAX_RISK_TAGS:
            out += (
                f'<p class="note">The {MAX_RISK_TAGS} riskiest tags of {len(tags)} '
                f"(query the store for the rest).</p>"
            )
    return out


def _events_table(episodes: Sequence[EpisodePoint]) -> str:
    """The events by kind: severity, detector, count, and the newest example of what was seen."""
    by_name: dict[str, list[RiskEvent]] = defaultdict(list)
    for e in episodes:
        for r in e.risks:
            by_name[r.name].append(r)
    if not by_name:
        return '<p class="note">No training episode took a risky action.</p>'

    def order(item: tuple[str, list[RiskEvent]]) -> tuple[int, int, str]:
        name, events = item
        return (min(SEVERITY_ORDER[r.severity] for r in events), -len(events), name)

    rows = []
    for name, events in sorted(by_name.items(), key=order):
        severities = sorted({r.severity for r in events}, key=SEVERITY_ORDER.__getitem__)
        example = next((r.detail for r in reversed(events) if r.detail), "")
        try:
            meaning = f"<br><small>{esc(risk_kind(name).description)}</small>"
        except KeyError:  # a kind this honing does not define (a domain's own)
            meaning = ""
        rows.append(
            [
                f"<code>{esc(name)}</code>{meaning}",
                " ".join(
                    f'<span class="badge risk-{s.value}">{s.value}</span>' for s in severities
                ),
                esc(", ".join(sorted({r.source for r in events}))),
                str(len(events)),
                f"<code>{esc(example)}</code>" if example else "—",
            ]
        )
    return "<h3>Events by kind</h3>" + table_html(
        ["kind", "severity", "detected by", "events", "example (the newest)"], rows, {3}
    )


def _risky_samples(data: RunData) -> str:
    """Links to the sample episodes that took risky actions (shown in full below)."""
    links = [
        f'<li><a href="#{sample_id(i)}">{esc(why)}: <code>{esc(t.task_id)}</code> sample '
        f"{t.sample}{f' (update {step})' if step else ''}</a> "
        + " ".join(risk_badge(r) for r in t.risks)
        + "</li>"
        for i, (why, step, t) in enumerate(pick_samples(data))
        if t.risks
    ]
    if not links:
        return ""
    return (
        "<h3>Risky sample episodes</h3>"
        '<p class="note">Shown in full under Sample episodes, each event as a badge on the step '
        'that caused it. For the others: <code>honing store query RUN "SELECT task_id, sample, '
        'risk FROM trajectories WHERE n_risks &gt; 0"</code>.</p>'
        f'<ul class="risky">{"".join(links)}</ul>'
    )


def risk_section(data: RunData) -> str:
    """How often the training episodes took risky actions (honing.risk), where, which kinds, and
    the price training put on them."""
    title = "Risky actions"
    if not data.risk_recorded:
        return section_html(
            "risk",
            title,
            missing_html(
                "Risk", "a run from before honing detected risky actions (no risk in its logs)"
            ),
        )
    rated = [u for u in data.updates if "rate" in u.risk]
    episodes = _judged_episodes(data)
    words = (
        f"Risky actions (destructive, dangerous or out of bounds, whether or not the task was "
        f"solved) in {_risk_count(data)} of the training episodes; risk in training: "
        f"{_risk_pricing(data)}. The risk "
        "cost (the sum of the events' severities: high 1, medium 0.5, low 0.25) is kept apart "
        "from the reward. Rates are over the judged episodes (infra failures left out)."
    )
    body = f'<p class="note">{esc(words)}</p>'
    if rated:
        steps = [u.step for u in rated]
        rate = line_chart(
            "chart-risk-rate",
            "Risk rate per update",
            "Share of each update's judged episodes with at least one risky action: it should "
            "fall, or stay low, while success rises.",
            [Series("risk rate", [(u.step, u.risk["rate"]) for u in rated], PALETTE[3])],
            percent=True,
        )
        series = [Series("mean cost", [(u.step, u.risk.get("cost")) for u in rated], PALETTE[3])]
        caption = "The update's mean risk cost per episode"
        plan = data.info.risk
        if plan is not None and plan.mode == "constrained" and plan.budget is not None:
            series.append(Series("budget", [(float(s), plan.budget) for s in steps], "#7f7f7f"))
            caption += ": constrained training keeps it under the budget (grey)"
        charts = [
            rate.html(),
            line_chart("chart-risk-cost", "Risk cost per update", caption + ".", series).html(),
        ]
        if any("multiplier" in u.risk for u in rated):
            multiplier = [(float(u.step), u.risk.get("multiplier")) for u in rated]
            charts.append(
                line_chart(
                    "chart-risk-multiplier",
                    "Lagrange multiplier per update",
                    "The price of one unit of risk cost after each update: it grows while the "
                    "mean cost is over the budget and falls back towards 0 once it is under.",
                    [Series("multiplier", multiplier, PALETTE[0])],
                ).html()
            )
        body += pairs_html(charts)
    else:
        body += missing_html("Risk per update", "no update recorded its risk rate")
    if episodes:
        body += _risk_tables(episodes) + _events_table(episodes)
    else:
        body += missing_html("Risk per domain, tag and kind", "no per-episode records")
    body += _risky_samples(data)
    return section_html("risk", title, body)


# -- teams -----------------------------------------------------------------------------------------


def _as_trajectory(e: EpisodePoint) -> Trajectory:
    """An episode record as the `Trajectory` fields `team_summary` reads (role, reward,
    components, and whether the infrastructure failed it)."""
    ending = Ending.INFRA_ERROR if e.ending == Ending.INFRA_ERROR.value else Ending.DONE
    return Trajectory(task_id=e.task_id, domain=e.domain, sample=e.sample, role=e.role,
                      reward=e.reward, components=dict(e.components), success=e.success,
                      ending=ending)  # fmt: skip


def _team_figures(episodes: Sequence[EpisodePoint]) -> tuple[int, dict[str, float]]:
    """The judged team episodes among `episodes` and their figures, named as the update record's
    `team` (`team_scalars` without the `team/` prefix, as the trainer records them)."""
    trajectories = [_as_trajectory(e) for e in episodes]
    summary = team_summary(trajectories)
    figures = {k.removeprefix("team/"): v for k, v in team_scalars(trajectories).items()}
    return (summary.episodes if summary else 0), figures


def _share(figures: dict[str, float], name: str) -> str:
    return pct(figures[name]) if name in figures else "—"


def _team_row(
    label: str, episodes: int | None, figures: dict[str, float], roles: Sequence[str]
) -> list[str]:
    return [
        esc(label),
        "—" if episodes is None else str(episodes),
        str(int(figures["reviews"])) if "reviews" in figures else "—",
        _share(figures, "precision"),
        _share(figures, "recall"),
        _share(figures, "verdict_accuracy"),
        num(figures["rounds"]) if "rounds" in figures else "—",
        _share(figures, "accepted"),
        *[num(figures[f"reward/{r}"]) if f"reward/{r}" in figures else "—" for r in roles],
    ]


TEAM_COLUMNS = ["team episodes", "reviews", "validator precision", "validator recall",
                "verdict accuracy", "rounds to acceptance", "accepted"]  # fmt: skip


def team_section(data: RunData) -> str:
    """How a team's roles did (honing.rollout.team): the validator's verdicts against the
    verifier's, the rounds to an accepted submission, each role's mean reward; per update (the
    update records' `team`, else counted from the episodes) and over the run (the episodes).
    Empty for a run without teams (no section, no link)."""
    episodes = [e for e in data.episodes if e.role]
    recorded = [u for u in data.updates if u.team]
    if not episodes and not recorded:
        return ""
    by_step: dict[int, list[EpisodePoint]] = defaultdict(list)
    for e in episodes:
        by_step[e.step].append(e)
    per_update: list[tuple[int, int | None, dict[str, float]]] = []
    if recorded:
        for u in recorded:
            count = _team_figures(by_step[u.step])[0] if by_step.get(u.step) else None
            per_update.append((u.step, count, u.team))
    else:
        per_update = [(step, *_team_figures(by_step[step])) for step in sorted(by_step) if step]
    roles = sorted(
        {e.role for e in episodes}
        | {
            k.removeprefix("reward/")
            for _, _, f in per_update
            for k in f
            if k.startswith("reward/")
        }
    )
    rows = [_team_row(f"update {step}", count, f, roles) for step, count, f in per_update]
    if episodes:
        rows.append(_team_row("all updates" if per_update else "the run",
                              *_team_figures(episodes), roles))  # fmt: skip
    words = (
        "Each episode played by a team: the analyst's plan, the executor acting, the validator "
        "reviewing each submission (ACCEPT, REJECT or STOP), its verdict scored against the "
        "verifier's on the same submission. Precision: the share of its accepts that were "
        "right; recall: the share of right submissions it accepted; verdict accuracy: the "
        "share of its verdicts that agreed with the verifier. Rounds to acceptance: reviews in "
        "the episodes whose last submission was accepted; accepted: of the episodes with a "
        "review, the share that ended accepted. Over the judged episodes (infra failures left "
        "out); — where there was nothing to measure. Each role is an episode of its own in "
        "the store, the event log and the other sections (success, failures and tasks count a "
        "team episode once per role); here a team episode counts once."
    )
    body = f'<p class="note">{esc(words)}</p>'
    if per_update:
        verdicts = ("precision", "recall", "verdict_accuracy")
        validator = [
            Series(name.replace("_", " "), [(float(s), f.get(name)) for s, _, f in per_update],
                   color)
            for name, color in zip(verdicts, colors(len(verdicts)), strict=True)
        ]  # fmt: skip
        reward = [
            Series(role, [(float(s), f.get(f"reward/{role}")) for s, _, f in per_update], color)
            for role, color in zip(roles, colors(len(roles)), strict=True)
        ]
        body += pairs_html(
            [
                line_chart(
                    "chart-team-validator",
                    "The validator's verdicts per update",
                    "Against the verifier's: precision (its accepts that were right), recall "
                    "(right submissions it accepted) and verdict accuracy should rise together.",
                    validator,
                    percent=True,
                ).html(),
                line_chart(
                    "chart-team-reward",
                    "Mean reward per role per update",
                    "Every role gets the team's reward plus its own part (the validator's "
                    "verdict_value, the analyst's plan_followed).",
                    reward,
                ).html(),
            ]
        )
        body += "<h3>Per update</h3>"
    body += table_html(
        ["", *TEAM_COLUMNS, *(f"reward: {r}" for r in roles)],
        rows,
        set(range(1, len(TEAM_COLUMNS) + len(roles) + 1)),
    )
    if not episodes:
        body += missing_html("The team over the run", "no per-episode records with a role")
    return section_html("team", "Team", body)


_REASON_WORDS = {
    "success": "the outcome reward reached 1",
    "unsolved": "the episode ended normally but the answer or program was wrong",
    "malformed_action": "unparsable tool call or bad arguments",
    "unknown_tool": "called a tool the environment does not have",
    "tool_error": "the tool ran and reported an error",
    "sandbox_timeout": "the model's program ran past its time limit",
    "memory_limit": "the model's program ran out of memory",
    "step_timeout": "one step took longer than env.step_timeout_s",
    "step_limit": "used all its turns (agent.max_turns) without finishing",
    "episode_timeout": "the episode's steps took longer than env.episode_timeout_s",
    "checker_rejected": "the answer checker failed on the model's answer (counted wrong)",
    "tampering": "the action tried to forge its verdict (counted wrong: docs/envs.md)",
    "sandbox_error": "infrastructure: the sandbox failed",
    "verifier_crash": "infrastructure: the answer checker could not run or finish",
    "infra_error": "infrastructure: retries exhausted",
    "stopped": "the model stopped without acting",
    "context_limit": "the context or token budget ran out",
    "stale": "dropped: too many policy versions behind",
    "timeout": "a deadline passed",
}


STAGE_COLORS = {
    "generation": "#4e79a7",
    "environment": "#f28e2b",
    "rollout": "#76b7b2",
    "update (training)": "#e15759",
    "weight sync": "#b07aa1",
    "warm start (SFT)": "#9c755f",
    "held-out evaluation": "#edc948",
    "other (loading, checkpoints)": "#bab0ac",
}


def time_section(data: RunData) -> str:
    updates = data.updates
    if not updates:
        return section_html(
            "time", "Where the time went", missing_html("Timings", "no update finished yet")
        )
    by_step: dict[int, list[EpisodePoint]] = defaultdict(list)
    for e in data.episodes:
        by_step[e.step].append(e)
    bars = []
    totals: dict[str, float] = defaultdict(float)
    for u in updates:
        eps = by_step.get(u.step, [])
        gen, env = sum(e.generation_s for e in eps), sum(e.env_s for e in eps)
        # Episodes overlap: the update's rollout wall time is split by their time shares.
        share = gen / (gen + env) if gen + env > 0 else None
        parts = (
            {"generation": u.rollout_s * share, "environment": u.rollout_s * (1 - share)}
            if share is not None
            else {"rollout": u.rollout_s}
        )
        parts |= {"update (training)": u.update_s, "weight sync": u.sync_s}
        for name, seconds in parts.items():
            totals[name] += seconds
        bars.append((str(u.step), parts))
    categories = [(n, c) for n, c in STAGE_COLORS.items() if totals.get(n)]
    per_update = bar_chart(
        "chart-time",
        "Seconds per update, by stage",
        "Rollout (generation + environment, split by the episodes' own timings), then the "
        "learner update and the weight sync: the tallest block is what to speed up.",
        bars,
        categories,
        unit=" s",
    )
    evals = sum(r.seconds for r in data.evals)
    spent = dict(totals)
    spent["warm start (SFT)"] = data.info.warm_start_s or 0.0
    spent["held-out evaluation"] = evals
    known = sum(spent.values())
    if data.info.elapsed_s and data.info.elapsed_s > known:
        spent["other (loading, checkpoints)"] = data.info.elapsed_s - known
    shares = [(n, spent[n], c) for n, c in STAGE_COLORS.items() if spent.get(n)]
    whole = share_bar(
        "chart-time-total",
        f"The whole run ({duration(data.info.elapsed_s or known)})",
        "Where the run's wall-clock time went, all updates and evaluations together.",
        shares,
    )
    eps = data.episodes
    stages: list[tuple[str, Callable[[EpisodePoint], float]]] = [
        ("generation (model)", lambda e: e.generation_s),
        ("environment (tools, sandbox, scoring)", lambda e: e.env_s),
        ("waiting for a slot", lambda e: e.queue_s),
        ("whole episode", lambda e: e.total_s),
    ]
    per_episode = (
        "<h3>Per episode</h3>"
        + table_html(
            ["", "mean", "slowest"],
            [[esc(n), duration(mean(map(f, eps))), duration(max(map(f, eps)))] for n, f in stages],
            {1, 2},
        )
        + '<p class="note">Episodes run concurrently, so their times add up to more than the '
        "update's rollout time.</p>"
        if eps
        else missing_html("Per-episode timings", "no per-episode records")
    )
    body = whole.html(wide=True) + pairs_html([per_update.html(), per_episode])
    return section_html("time", "Where the time went", body)


def staleness_section(data: RunData) -> str:
    hist: Counter[int] = Counter()
    for u in data.updates:
        hist.update(u.staleness)
    source = "the update events"
    if not hist:
        hist.update(e.staleness for e in data.episodes if e.staleness is not None)
        source = "the store (learner version at the update − the trajectory's policy version)"
    if not hist:
        return section_html(
            "staleness",
            "Staleness",
            missing_html("Staleness", "no policy versions recorded (no store, no events.jsonl)"),
        )
    lags = list(range(min(hist), max(hist) + 1))
    chart = bar_chart(
        "chart-staleness",
        "How many versions behind the trajectories were",
        f"Trajectories per lag, from {source}: 0 means generated by the weights being "
        "trained (on-policy); larger lags are corrected by importance weights.",
        [(str(lag), {"trajectories": float(hist.get(lag, 0))}) for lag in lags],
        [("trajectories", PALETTE[0])],
        x_label="versions behind",
    )
    total = sum(hist.values())
    mean_lag = sum(lag * c for lag, c in hist.items()) / total
    words = (
        f'<p class="note">{hist.get(0, 0)} of {total} trajectories '
        f"({100 * hist.get(0, 0) / total:.0f}%) were generated by the very weights they trained "
        f"(on-policy); mean lag {mean_lag:.2f} versions, at most {max(hist)}.</p>"
    )
    return section_html("staleness", "Staleness", pairs_html([chart.html(), words]))


def learner_section(data: RunData) -> str:
    updates = data.updates
    stats = [(k, label) for k, label in LEARNER_STATS if any(k in u.learner for u in updates)]
    if not stats:
        return section_html(
            "learner", "Learner", missing_html("Learner statistics", "no update finished yet")
        )
    charts = [
        line_chart(
            f"chart-learner-{k}",
            label,
            "",
            [Series(k, [(u.step, u.learner.get(k)) for u in updates], PALETTE[0])],
            small=True,
        ).html(small=True)
        for k, label in stats
    ]
    kept = [u.learner.get("groups", 0) - u.learner.get("dropped_groups", 0) for u in updates]
    process_only = int(sum(u.learner.get("process_only_groups", 0) for u in updates))
    caption = (
        "Loss and entropy should move smoothly; a growing KL or grad norm, or clipped shares "
        "far above 0, mean the policy is changing fast. Groups with equal rewards teach "
        f"nothing and are dropped: {int(sum(kept))} of "
        f"{int(sum(u.learner.get('groups', 0) for u in updates))} groups were kept"
        + (
            f", {process_only} of them with equal outcomes for their process rewards alone."
            if process_only
            else "."
        )
    )
    return section_html(
        "learner",
        "Learner",
        f'<p class="note">{esc(caption)}</p><div class="multiples">{"".join(charts)}</div>',
    )


def signal_section(data: RunData) -> str:
    """How much each update's groups could teach: GRPO learns nothing from a group whose
    rewards are all equal."""
    updates = [u for u in data.updates if "groups" in u.signal]
    if not updates:
        return section_html(
            "signal",
            "Learning signal",
            missing_html("Learning signal", "not recorded (a run from before honing logged it)"),
        )

    def share(u: UpdateRecord, key: str) -> float | None:
        groups = u.signal.get("groups", 0.0)
        return u.signal.get(key, 0.0) / groups if groups else None

    shares = line_chart(
        "chart-signal",
        "Groups that could teach nothing",
        "Per update, the share of groups whose rewards were all equal, and of those the ones "
        "where every sample failed (too hard) or succeeded (too easy). Near 100%: no signal.",
        [
            Series(
                "equal rewards", [(u.step, share(u, "zero_variance")) for u in updates], PALETTE[0]
            ),
            Series("all failed", [(u.step, share(u, "all_failed")) for u in updates], PALETTE[1]),
            Series("all solved", [(u.step, share(u, "all_solved")) for u in updates], PALETTE[2]),
        ],
        percent=True,
    )
    spread = line_chart(
        "chart-signal-spread",
        "Reward spread and entropy",
        "The reward's standard deviation over the update's episodes, and the policy's mean token "
        "entropy: when both fall towards 0, sampling no longer explores.",
        [
            Series(
                "reward std", [(u.step, u.signal.get("reward_std")) for u in updates], PALETTE[0]
            ),
            Series("entropy", [(u.step, u.learner.get("entropy")) for u in updates], PALETTE[3]),
        ],
    )
    zero = sum(u.signal.get("zero_variance", 0.0) for u in updates)
    groups = sum(u.signal.get("groups", 0.0) for u in updates)
    words = (
        f"{int(zero)} of {int(groups)} groups ({100 * zero / max(1.0, groups):.0f}%) had equal "
        "rewards and taught nothing."
    )
    warned = "".join(f'<p class="note">{esc(w)}</p>' for w in data.signal_warnings)
    charts = [shares.html(), spread.html()]
    steered = [u for u in updates if u.curriculum]
    if steered:
        words += " " + curriculum_words(steered)
        charts.append(curriculum_chart(steered).html())
    body = pairs_html(charts)
    return section_html(
        "signal", "Learning signal", f'<p class="note">{esc(words)}</p>{warned}{body}'
    )


CURRICULUM_BANDS = (
    ("learnable", "learnable"),
    ("too_easy", "too easy"),
    ("too_hard", "too hard"),
    ("unseen", "unseen"),
)


def curriculum_chart(updates: Sequence[UpdateRecord]) -> Chart:
    """Per update, the share of its drawn tasks in each curriculum band."""
    return line_chart(
        "chart-curriculum",
        "Curriculum bands of the drawn tasks",
        "Per update, the share of the tasks drawn whose estimated success (before the update) "
        "was within the curriculum's band (learnable), above it (too easy), below it (too "
        "hard), or not yet measured (unseen).",
        [
            Series(label, [(u.step, u.curriculum.get(key)) for u in updates], PALETTE[i])
            for i, (key, label) in enumerate(CURRICULUM_BANDS)
        ],
        percent=True,
    )


def curriculum_words(updates: Sequence[UpdateRecord]) -> str:
    """The curriculum's band occupancy over the run, as a sentence."""
    mean = {
        key: sum(u.curriculum.get(key, 0.0) for u in updates) / len(updates)
        for key, _ in CURRICULUM_BANDS
    }
    shares = ", ".join(f"{100 * mean[key]:.0f}% {label}" for key, label in CURRICULUM_BANDS)
    return f"With the curriculum, the drawn tasks were on average {shares}."


def alerts_section(data: RunData) -> str:
    """The in-process alerts (honing.observe.alerts) as they fired and cleared; left out when
    the run raised none."""
    if not data.alerts:
        return ""
    rows = [[str(a.step), esc(a.name), esc(a.severity), esc(a.state),
             "—" if a.value is None else num(a.value), esc(a.message)]
            for a in data.alerts]  # fmt: skip
    firing = {a.name for a in data.alerts if a.state == "firing"}
    words = (
        f"{len(firing)} alert rule(s) fired during the run ({', '.join(sorted(firing))}); "
        "the rules and their thresholds are in docs/observability.md."
    )
    table = table_html(["step", "alert", "severity", "state", "value", "message"], rows, {0, 4})
    return section_html("alerts", "Alerts", f'<p class="note">{esc(words)}</p>{table}')


SLOW_COLUMNS = ["task", "domain", "episodes", "mean time", "generation", "environment", "success",
                "infra failures"]  # fmt: skip


def tasks_section(data: RunData) -> str:
    episodes = data.episodes
    if not episodes:
        return section_html(
            "tasks", "Tasks", missing_html("Per-task tables", "no per-episode records")
        )
    by_task: dict[str, list[EpisodePoint]] = defaultdict(list)
    for e in episodes:
        by_task[e.task_id].append(e)

    def success(eps: Sequence[EpisodePoint]) -> str:
        judged = [e.success for e in eps if not e.infra_failed]
        return pct(mean(judged)) if judged else "—"

    def infra(eps: Sequence[EpisodePoint]) -> str:
        return str(sum(e.infra_failed for e in eps))

    slow = sorted(by_task.items(), key=lambda kv: -mean(e.total_s for e in kv[1]))[:8]
    slow_rows = [
        [
            f"<code>{esc(task)}</code>",
            esc(eps[0].domain),
            str(len(eps)),
            duration(mean(e.total_s for e in eps)),
            duration(mean(e.generation_s for e in eps)),
            duration(mean(e.env_s for e in eps)),
            success(eps),
            infra(eps),
        ]
        for task, eps in slow
    ]
    failing = sorted(
        ((t, eps) for t, eps in by_task.items() if any(not e.success for e in eps)),
        key=lambda kv: (-sum(not e.success for e in kv[1]), kv[0]),
    )[:8]
    fail_rows = []
    for task, eps in failing:
        reason, count = Counter(e.outcome for e in eps if not e.success).most_common(1)[0]
        fail_rows.append(
            [
                f"<code>{esc(task)}</code>",
                esc(eps[0].domain),
                f"{sum(not e.success for e in eps)} of {len(eps)}",
                success(eps),
                infra(eps),
                f"{esc(reason)} ({count})",
            ]
        )
    body = (
        "<h3>Slowest tasks</h3>"
        '<p class="note">Mean wall time of an episode, and how it splits between the model '
        "(generation) and the environment (tools, sandbox, scoring). Success is over the "
        "episodes the infrastructure did not fail (infra failures: left out).</p>"
        + table_html(
            SLOW_COLUMNS,
            slow_rows,
            {2, 3, 4, 5, 6, 7},
        )
        + "<h3>Most often failing tasks</h3>"
        + (
            table_html(
                ["task", "domain", "failed", "success", "infra failures", "most common reason"],
                fail_rows,
                {2, 3, 4},
            )
            if fail_rows
            else '<p class="note">No training episode failed.</p>'
        )
    )
    return section_html("tasks", "Tasks", body)


# -- the page --------------------------------------------------------------------------------------

CSS = """
:root { --fg:#1d2330; --muted:#5d6675; --line:#e3e6ec; --bg:#f6f7f9; --card:#fff; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans",
       sans-serif; color:var(--fg); background:var(--bg); }
header { background:#1d2330; color:#fff; padding:20px 32px 16px; }
header h1 { margin:0 0 6px; font-size:15px; font-weight:600; color:#aab3c2; }
header .headline { font-size:22px; font-weight:600; margin:0 0 8px; }
header .sub { color:#aab3c2; font-size:13px; }
nav { position:sticky; top:0; z-index:2; background:#fff; border-bottom:1px solid var(--line);
      padding:8px 32px; font-size:13px; }
nav a { color:#3b5b8c; margin-right:14px; text-decoration:none; }
main { max-width:1100px; margin:0 auto; padding:8px 32px 40px; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px;
          padding:16px 20px; margin:18px 0; }
h2 { font-size:18px; margin:0 0 12px; }
h3 { font-size:15px; margin:18px 0 6px; }
.cards { display:grid; grid-template-columns:repeat(auto-fill, minmax(150px, 1fr)); gap:10px;
         margin-bottom:14px; }
.card { border:1px solid var(--line); border-radius:6px; padding:8px 10px; }
.card .k { color:var(--muted); font-size:12px; }
.card .v { font-size:15px; font-weight:600; overflow-wrap:anywhere; }
table { border-collapse:collapse; width:100%; margin:8px 0; font-size:13px; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line);
         vertical-align:top; }
th { color:var(--muted); font-weight:600; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
small { color:var(--muted); }
code { font-size:12px; background:#f0f2f5; padding:1px 4px; border-radius:3px; }
figure.chart { margin:10px 0 18px; }
figure.chart.small { margin:0; border:1px solid var(--line); border-radius:6px; padding:6px; }
.ctitle { font-weight:600; margin-bottom:4px; }
figure.small .ctitle { font-size:12px; font-weight:500; color:var(--muted); }
svg.plot { width:100%; height:auto; display:block; }
figure.chart:not(.small):not(.wide) svg.plot { max-width:620px; }
.pair { display:grid; grid-template-columns:repeat(auto-fit, minmax(420px, 1fr)); gap:8px 24px; }
figure.small svg text { font-size:14px; }
details.more summary { font-size:12px; color:#3b5b8c; cursor:pointer; }
svg .grid { stroke:#e9ecf1; stroke-width:1; }
svg text { font-size:11px; fill:#5d6675; font-family:inherit; }
svg .ytick { text-anchor:end; }
svg .xtick, svg .xlabel, svg .inbar { text-anchor:middle; }
svg .inbar { fill:#fff; font-weight:600; }
svg .line { fill:none; stroke-width:2; }
figcaption { color:var(--muted); font-size:13px; margin-top:4px; }
.legend { display:flex; flex-wrap:wrap; gap:4px 14px; font-size:12px; margin-top:4px; }
.legend .key i { display:inline-block; width:10px; height:10px; border-radius:2px;
                 margin-right:5px; vertical-align:-1px; }
.multiples { display:grid; grid-template-columns:repeat(auto-fill, minmax(240px, 1fr));
             gap:10px; }
.note { color:var(--muted); }
.missing { background:#fff8e6; border:1px solid #f1dfb0; border-radius:6px; padding:8px 10px; }
.notes { background:#fff8e6; border:1px solid #f1dfb0; border-radius:8px; padding:8px 16px;
         margin:18px 0 0; }
details.traj { border:1px solid var(--line); border-radius:6px; margin:12px 0;
               padding:0 12px 10px; }
details.traj summary { cursor:pointer; padding:10px 0; font-weight:600; }
.meta { color:var(--muted); font-size:12px; margin-bottom:8px; }
.turn { border-left:3px solid #c9ced8; padding:4px 10px; margin:8px 0; }
.turn.assistant { border-color:#4e79a7; background:#f3f7fc; }
.turn.tool { border-color:#9c755f; background:#fbf8f5; }
.turn .who { font-size:12px; color:var(--muted); }
pre { white-space:pre-wrap; overflow-wrap:anywhere; margin:4px 0;
      font:12px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }
.toolcall { background:#fff; border:1px solid #cfdcec; border-radius:5px; padding:4px 8px;
            margin:6px 0; }
.toolcall .tag, .step { font-size:12px; color:var(--muted); }
.detail { font-size:12px; color:#8a4b00; }
.images { display:flex; flex-wrap:wrap; gap:10px; margin:6px 0; }
.images figure { margin:0; }
.images img { display:block; max-width:256px; height:auto; border:1px solid var(--line);
              background:#fff; }
.images figcaption { font-size:11px; color:var(--muted); }
.ending { font-size:13px; margin-top:8px; }
.ok { color:#2f7d32; } .bad { color:#c0392b; }
.badge { display:inline-block; font-size:11px; font-weight:600; line-height:1.5; color:#fff;
         padding:0 7px; border-radius:9px; white-space:nowrap; }
.badge.risk-high { background:#c0392b; } .badge.risk-medium { background:#d35400; }
.badge.risk-low { background:#8a6d00; }
.badge.role { background:#3b5b8c; }
.team { margin-top:10px; } .team > .who { font-size:12px; color:var(--muted); }
details.traj.partner { margin:6px 0; background:#fafbfc; }
.risks { margin:6px 0; } .risk { margin:2px 0; }
ul.risky { margin:4px 0; padding-left:20px; } ul.risky li { margin:3px 0; }
footer { color:var(--muted); font-size:12px; text-align:center; padding:0 0 24px; }
"""


SECTIONS = (
    ("summary", "Summary"),
    ("progress", "Reward & success"),
    ("evals", "Held-out"),
    ("failures", "Failures"),
    ("risk", "Risk"),
    ("team", "Team"),
    ("time", "Time"),
    ("staleness", "Staleness"),
    ("learner", "Learner"),
    ("signal", "Learning signal"),
    ("alerts", "Alerts"),
    ("tasks", "Tasks"),
    ("samples", "Episodes"),
)


def render(data: RunData) -> str:
    """The whole page for `data`."""
    info = data.info
    sub = (
        f"run {esc(info.name)} · model {esc(info.model)} · {esc(data.run_dir)} · report written "
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime())}"
    )
    notes = (
        '<div class="notes">' + "".join(f"<p>{esc(n)}</p>" for n in data.notes) + "</div>"
        if data.notes
        else ""
    )
    sections = (
        summary_section,
        progress_section,
        evals_section,
        failures_section,
        risk_section,
        team_section,
        time_section,
        staleness_section,
        learner_section,
        signal_section,
        alerts_section,
        tasks_section,
        samples_section,
    )
    shown = [html for html in (section(data) for section in sections) if html]
    body = "".join(shown)
    # A section a run has nothing for (the team, for a single agent) is left out, link and all.
    nav = "".join(
        f'<a href="#{k}">{esc(label)}</a>'
        for k, label in SECTIONS
        if any(html.startswith(f'<section id="{k}">') for html in shown)
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>honing report: {esc(info.name)}</title><style>{CSS}</style></head><body>"
        f'<header><h1>honing run report</h1><p class="headline">{esc(headline(data))}</p>'
        f'<div class="sub">{sub}</div></header><nav>{nav}</nav><main>{notes}{body}</main>'
        f"<footer>Read from {esc(', '.join(data.sources) or 'nothing')} in "
        f"{esc(data.run_dir)}.</footer></body></html>\n"
    )


def build_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the HTML report of `run_dir` to `out` (default RUN_DIR/report.html); the path.
    `ConfigError` when `run_dir` is not a run directory or one of its logs is damaged."""
    run_dir = Path(run_dir)
    data = load_run(run_dir)
    path = Path(out) if out is not None else run_dir / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render(data), encoding="utf-8")
    tmp.replace(path)
    return path
