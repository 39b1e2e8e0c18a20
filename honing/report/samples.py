"""The report's sample episodes: whole conversations as the model saw them (the prompt, each model
turn with the tool calls parsed from it, each observation with the step's reward, the risk events
it caused as badges, and the images its tools drew, embedded as data URLs), for the newest
success, the newest failure and the newest episode (and the newest with images, the newest risky
success and risky episode when none of those is one). `pick_samples` says which, `sample_id` where
each is on the page. A team episode (honing.rollout.team) is one sample: its executor's
trajectory, with its other roles' folded under it, each role a badge (`team_episodes`).
Everything taken from the run is escaped; an image is embedded only if it is a PNG inside the
store's images folder.

Not covered: any other episode (query the trajectory store for those), the other sections
(honing.report.page).
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from honing.errors import StoreError
from honing.records import team_of
from honing.report.data import RunData
from honing.report.markup import duration, esc, missing_html, num, section_html
from honing.risk import RiskEvent
from honing.store import Trajectory, read_image

MAX_IMAGES = 8  # per turn
MAX_IMAGE_BYTES = 1_000_000


def team_episodes(
    data: RunData,
) -> tuple[list[tuple[int, Trajectory]], dict[int, list[Trajectory]]]:
    """The episodes the samples are picked from, in store order, as (update step, trajectory):
    a single agent's trajectory, and a team episode's lead (its executor's, the one with
    `team_rounds`); and each lead's other roles, in store order, under `id(lead)`. A team
    episode's roles share the update, the sample and the group id before `:<role>`
    (honing.records.by_role, `team_of`)."""
    teams: dict[tuple[int, str, int], list[Trajectory]] = defaultdict(list)
    for step, t in data.trajectories:
        if t.role:
            teams[(step, *team_of(t))].append(t)
    leads: list[tuple[int, Trajectory]] = []
    partners: dict[int, list[Trajectory]] = {}
    for step, t in data.trajectories:
        if not t.role:
            leads.append((step, t))
            continue
        team = teams[(step, *team_of(t))]
        lead = next((m for m in team if "team_rounds" in m.components), None)
        lead = lead or next((m for m in team if m.role == "executor"), team[0])
        if t is lead:
            leads.append((step, t))
            partners[id(t)] = [m for m in team if m is not lead]
    return leads, partners


def pick_samples(data: RunData) -> list[tuple[str, int, Trajectory]]:
    """(why shown, update step, trajectory): the newest success, the newest failure (one with a
    failure reason if any) and the newest episode, each shown once; then, when none of those is
    one, the newest with images, the newest success that took a risky action and the newest
    episode that did. A team episode is picked as its lead (`team_episodes`)."""
    newest = list(reversed(team_episodes(data)[0]))
    picks = [
        ("a success", next((x for x in newest if x[1].success), None)),
        (
            "a failure",
            next((x for x in newest if not x[1].success and x[1].failure), None)
            or next((x for x in newest if not x[1].success), None),
        ),
    ]
    found = [(why, *x) for why, x in picks if x is not None]
    if newest:
        latest = newest[0]
        for i, (why, step, t) in enumerate(found):
            if t is latest[1]:
                found[i] = (f"{why} (also the latest episode)", step, t)
                break
        else:
            found.append(("the latest episode", *latest))
    if not any(_has_images(t) for _, _, t in found):
        drawn = next((x for x in newest if _has_images(x[1])), None)
        if drawn is not None:
            found.append(("an episode with images", *drawn))
    risky: list[tuple[str, Callable[[Trajectory], bool]]] = [
        ("a success that took a risky action", lambda t: t.success and bool(t.risks)),
        ("an episode that took a risky action", lambda t: bool(t.risks)),
    ]
    for why, wanted in risky:
        if not any(wanted(t) for _, _, t in found):
            pick = next((x for x in newest if wanted(x[1])), None)
            if pick is not None:
                found.append((why, *pick))
    return found


def sample_id(index: int) -> str:
    """The page id of the `index`th of `pick_samples` (links from other sections)."""
    return f"sample-{index}"


def _has_images(t: Trajectory) -> bool:
    return any(turn.images for turn in t.turns)


def _images_html(run_dir: Path, names: list[str]) -> str:
    """The turn's images as data URLs (the page is one file), each captioned with its file; one
    that cannot be shown says why."""
    shown = []
    for name in names[:MAX_IMAGES]:
        try:
            data = read_image(run_dir, name)
        except StoreError as exc:
            shown.append(f'<div class="detail">image not shown: {esc(exc)}</div>')
            continue
        if len(data) > MAX_IMAGE_BYTES:
            shown.append(f'<div class="detail">image not shown: {esc(name)} has {len(data)} '
                         f"bytes (over {MAX_IMAGE_BYTES})</div>")  # fmt: skip
            continue
        url = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        caption = esc(Path(name).name)
        shown.append(f'<figure class="image"><img src="{url}" alt="{caption}">'
                     f"<figcaption>{caption}</figcaption></figure>")  # fmt: skip
    if len(names) > MAX_IMAGES:
        shown.append(f'<div class="detail">{len(names) - MAX_IMAGES} more images</div>')
    return f'<div class="images">{"".join(shown)}</div>'


def _clip(text: str, most: int = 6000) -> str:
    return text if len(text) <= most else f"{text[:most]}\n… ({len(text) - most} more characters)"


def _text_html(text: str, lines: int = 6) -> str:
    """Escaped text; past its first `lines` lines, the rest folds away (a click shows it)."""
    rows = text.splitlines()
    if len(rows) <= lines + 2:
        return f'<pre class="text">{esc(_clip(text))}</pre>'
    head, rest = "\n".join(rows[:lines]), "\n".join(rows[lines:])
    return (
        f'<pre class="text">{esc(head)}</pre><details class="more"><summary>'
        f'{len(rows) - lines} more lines</summary><pre class="text">{esc(_clip(rest))}</pre>'
        "</details>"
    )


def risk_badge(event: RiskEvent) -> str:
    """A risk event as a badge (its name and severity, coloured by severity)."""
    severity = esc(event.severity.value)
    return f'<span class="badge risk-{severity}">{esc(event.name)} · {severity}</span>'


def _risks_html(events: list[RiskEvent]) -> str:
    """The step's risk events: a badge each, with the detector and what it saw."""
    rows = "".join(
        f'<div class="risk">{risk_badge(e)} <small>{esc(e.source)}'
        f"{': ' + esc(e.detail) if e.detail else ''}</small></div>"
        for e in events
    )
    return f'<div class="risks">{rows}</div>' if rows else ""


def _tool_call_html(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    name = str(function.get("name") or call.get("name") or "?")
    arguments = function.get("arguments", call.get("arguments", ""))
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    pretty = arguments if isinstance(arguments, str) else json.dumps(arguments, indent=2)
    return (
        f'<div class="toolcall"><span class="tag">tool call</span> <b>{esc(name)}</b>'
        f"<pre>{esc(pretty)}</pre></div>"
    )


def _turn_html(turn: Any, run_dir: Path) -> str:
    images = _images_html(run_dir, list(turn.images)) if turn.images else ""
    role = turn.role
    if role == "assistant":
        meta = f"model · {duration(turn.generation_s)}"
        if turn.finish_reason and turn.finish_reason != "stop":
            meta += f" · finish: {esc(turn.finish_reason)}"
        calls = "".join(_tool_call_html(c) for c in turn.tool_calls)
        return (
            f'<div class="turn assistant"><div class="who">{meta}</div>'
            f"{_text_html(turn.text)}{calls}{images}</div>"
        )
    if role == "tool":
        bits = [f"reward {num(turn.reward)}"]
        bits += [f"{esc(k)} {num(v)}" for k, v in sorted(turn.components.items())]
        if turn.failure:
            bits.append(f'<span class="bad">failure: {esc(turn.failure)}</span>')
        if turn.risk:
            bits.append(f'<span class="bad">risk cost {num(turn.risk)}</span>')
        tools = ", ".join(f"{esc(k)} {duration(v)}" for k, v in turn.tool_s.items())
        detail = f'<div class="detail">{esc(turn.detail)}</div>' if turn.detail else ""
        return (
            f'<div class="turn tool"><div class="who">observation · step '
            f"{duration(turn.step_s)}{' · ' + tools if tools else ''}</div>"
            f"{_text_html(turn.text)}{images}{detail}{_risks_html(turn.risks)}"
            f'<div class="step">{" · ".join(bits)}</div></div>'
        )
    return (
        f'<div class="turn prompt"><div class="who">{esc(role)} (prompt)</div>'
        f"{_text_html(turn.text)}{images}</div>"
    )


def role_badge(role: str) -> str:
    """A team role as a badge."""
    return f'<span class="badge role">{esc(role)}</span>'


def _risk_words(t: Trajectory) -> str:
    events = len(t.risks)
    if not t.risk and not events:
        return ""
    return (f'<span class="bad">risk cost {num(t.risk)} ({events} event'
            f'{"s" if events != 1 else ""})</span> · ')  # fmt: skip


def _body_html(t: Trajectory, run_dir: Path) -> str:
    """The trajectory under its summary line: what it was, its turns, how it ended."""
    ending = t.ending.value + (f" ({t.failure})" if t.failure else "")
    tags = ", ".join(t.tags) or "none"
    retries = "".join(f"<li>{esc(r.stage)}: {esc(r.cause)}</li>" for r in t.retries)
    return (
        f'<div class="meta">domain {esc(t.domain)} · tags {esc(tags)} · {t.steps} steps · '
        f"{t.model_tokens} model tokens · {duration(t.total_s)} · policy version "
        f"{t.policy_version}</div>"
        + "".join(_turn_html(turn, run_dir) for turn in t.turns)
        + f'<div class="ending">ended: {esc(ending)}{" — " + esc(t.detail) if t.detail else ""}'
        f" · components "
        f"{esc(', '.join(f'{k} {num(v)}' for k, v in sorted(t.components.items())) or 'none')}"
        f"</div>" + (f'<ul class="retries">{retries}</ul>' if retries else "")
    )


ROLE_COMPONENTS = ("verdict_value", "verdict_correct", "plan_followed")  # a role's own part


def _partner_html(t: Trajectory, run_dir: Path) -> str:
    """Another role of a team episode, folded (a click shows its conversation)."""
    own = "".join(
        f"{name} {num(t.components[name])} · " for name in ROLE_COMPONENTS if name in t.components
    )
    return (
        f'<details class="traj partner"><summary>{role_badge(t.role)} reward {num(t.reward)} · '
        f"{own}{_risk_words(t)}{t.steps} steps · {t.model_tokens} model tokens</summary>"
        f"{_body_html(t, run_dir)}</details>"
    )


def trajectory_html(
    why: str,
    step: int,
    t: Trajectory,
    run_dir: Path,
    key: str = "",
    partners: Sequence[Trajectory] = (),
) -> str:
    """One sample episode, open; a team episode's other roles (`partners`) folded under it."""
    verdict = '<span class="ok">success</span>' if t.success else '<span class="bad">failed</span>'
    anchor = f' id="{esc(key)}"' if key else ""
    role = f"{role_badge(t.role)} " if t.role else ""
    team = (
        f'<div class="team"><div class="who">the team\'s other roles</div>'
        f"{''.join(_partner_html(p, run_dir) for p in partners)}</div>"
        if partners
        else ""
    )
    return (
        f'<details class="traj"{anchor} open><summary>{esc(why)}: {role}'
        f"<code>{esc(t.task_id)}</code> sample {t.sample} · {verdict} · reward {num(t.reward)} · "
        f"{_risk_words(t)}{'update ' + str(step) if step else 'update not recorded'}</summary>"
        f"{_body_html(t, run_dir)}{team}</details>"
    )


def samples_section(data: RunData) -> str:
    samples = pick_samples(data)
    if not samples:
        return section_html(
            "samples",
            "Sample episodes",
            missing_html("Sample episodes", "no trajectory store (trajectories/) in the run"),
        )
    intro = (
        '<p class="note">Whole conversations as the model saw them: the prompt, each model '
        "turn (its text and the tool calls parsed from it), and each observation with the "
        "step's reward, the risky actions it caused (a badge each: kind and severity) and the "
        "images its tools drew.</p>"
    )
    partners = team_episodes(data)[1]
    if any(partners.values()):
        intro += (
            '<p class="note">A team episode is shown as its executor\'s conversation, its role '
            "as a badge, with the other roles' (the analyst's plan, the validator's reviews) "
            "folded under it: a click shows each.</p>"
        )
    shown = "".join(
        trajectory_html(*s, data.run_dir, key=sample_id(i), partners=partners.get(id(s[2]), ()))
        for i, s in enumerate(samples)
    )
    return section_html("samples", "Sample episodes", intro + shown)
