"""The report's sample episodes: whole conversations as the model saw them (the prompt, each model
turn with the tool calls parsed from it, each observation with the step's reward), for the newest
success, the newest failure and the newest episode. Everything taken from the run is escaped.

Not covered: any other episode (query the trajectory store for those), the other sections
(honing.report.page).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from honing.report.data import RunData
from honing.report.markup import duration, esc, missing_html, num, section_html
from honing.store import Trajectory


def _pick_samples(data: RunData) -> list[tuple[str, int, Trajectory]]:
    """The newest success, the newest failure (one with a failure reason if any) and the newest
    episode, each shown once."""
    newest = list(reversed(data.trajectories))
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
    return found


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


def _turn_html(turn: Any) -> str:
    role = turn.role
    if role == "assistant":
        meta = f"model · {duration(turn.generation_s)}"
        if turn.finish_reason and turn.finish_reason != "stop":
            meta += f" · finish: {esc(turn.finish_reason)}"
        calls = "".join(_tool_call_html(c) for c in turn.tool_calls)
        return (
            f'<div class="turn assistant"><div class="who">{meta}</div>'
            f"{_text_html(turn.text)}{calls}</div>"
        )
    if role == "tool":
        bits = [f"reward {num(turn.reward)}"]
        bits += [f"{esc(k)} {num(v)}" for k, v in sorted(turn.components.items())]
        if turn.failure:
            bits.append(f'<span class="bad">failure: {esc(turn.failure)}</span>')
        tools = ", ".join(f"{esc(k)} {duration(v)}" for k, v in turn.tool_s.items())
        detail = f'<div class="detail">{esc(turn.detail)}</div>' if turn.detail else ""
        return (
            f'<div class="turn tool"><div class="who">observation · step '
            f"{duration(turn.step_s)}{' · ' + tools if tools else ''}</div>"
            f"{_text_html(turn.text)}{detail}"
            f'<div class="step">{" · ".join(bits)}</div></div>'
        )
    return (
        f'<div class="turn prompt"><div class="who">{esc(role)} (prompt)</div>'
        f"{_text_html(turn.text)}</div>"
    )


def trajectory_html(why: str, step: int, t: Trajectory) -> str:
    verdict = '<span class="ok">success</span>' if t.success else '<span class="bad">failed</span>'
    ending = t.ending.value + (f" ({t.failure})" if t.failure else "")
    tags = ", ".join(t.tags) or "none"
    retries = "".join(f"<li>{esc(r.stage)}: {esc(r.cause)}</li>" for r in t.retries)
    return (
        f'<details class="traj" open><summary>{esc(why)}: <code>{esc(t.task_id)}</code> '
        f"sample {t.sample} · {verdict} · reward {num(t.reward)} · "
        f"{'update ' + str(step) if step else 'update not recorded'}</summary>"
        f'<div class="meta">domain {esc(t.domain)} · tags {esc(tags)} · {t.steps} steps · '
        f"{t.model_tokens} model tokens · {duration(t.total_s)} · policy version "
        f"{t.policy_version}</div>"
        + "".join(_turn_html(turn) for turn in t.turns)
        + f'<div class="ending">ended: {esc(ending)}{" — " + esc(t.detail) if t.detail else ""}'
        f" · components "
        f"{esc(', '.join(f'{k} {num(v)}' for k, v in sorted(t.components.items())) or 'none')}"
        f"</div>" + (f'<ul class="retries">{retries}</ul>' if retries else "") + "</details>"
    )


def samples_section(data: RunData) -> str:
    samples = _pick_samples(data)
    if not samples:
        return section_html(
            "samples",
            "Sample episodes",
            missing_html("Sample episodes", "no trajectory store (trajectories/) in the run"),
        )
    intro = (
        '<p class="note">Whole conversations as the model saw them: the prompt, each model '
        "turn (its text and the tool calls parsed from it), and each observation with the "
        "step's reward.</p>"
    )
    return section_html(
        "samples", "Sample episodes", intro + "".join(trajectory_html(*s) for s in samples)
    )
