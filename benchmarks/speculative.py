"""Speculative decoding at batch 1: the hf engine with prompt-lookup drafts against without.

What is compared
----------------
The embedded default model (SmolLM2-135M-Instruct; `--model` for another directory) in float32
(`--dtype`: see below), one request at a time, greedy, on two kinds of agent turns whose answers
repeat what their prompts hold:

* tool-call turns: honing's tool-use system prompt with three tool schemas, an earlier turn of
  the same conversation that called a tool, then a request whose call repeats argument names and
  values from the prompt (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`);
* code-edit turns: a Python function in the user message and a small change to make to it (a
  rename, a guard, a docstring); the answer rewrites the function.

Both sides are `HFEngine(model, tokenizer, prefix_cache=False)` (every turn prefilled in full on
both sides), one made afresh per run, with `speculative=SpeculativeConfig(method="ngram",
tokens=--tokens)` on the speculative side (`--draft-model DIR`: method "draft" instead). Each
turn ends on EOS or after `--max-new-tokens`. Throughput is the tokens of all turns over the
wall time of the turns, prefill included; the best of `--repeat` runs is kept and every run is
printed. Acceptance is the share of draft tokens the model's own greedy choice confirmed. The
greedy outputs of the two sides are compared turn by turn in the same run: speculative decoding
must not change them. Hence float32 by default: in bfloat16 the verify step (several positions
in one forward) rounds differently from a one-token step, as a batch of two does, and a near-tie
can then go the other way and the turn continue differently (`--dtype bfloat16` shows how often).

Usage: python benchmarks/speculative.py [--model default] [--dtype float32] [--tokens 4]
       [--max-new-tokens 128] [--repeat 3] [--turns N] [--draft-model DIR] [--threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import torch

from honing.precision import auto_dtype
from honing.rollout.chat import system_message
from honing.rollout.engines.base import Generation, Prompt, SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.rollout.engines.speculative import SpeculativeConfig
from honing.rollout.models import load_model, load_tokenizer, resolve_model

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "search_flights",
        "description": "Find flights between two airports on a date.",
        "parameters": {"type": "object", "properties": {
            "origin": {"type": "string", "description": "IATA code of the departure airport"},
            "destination": {"type": "string", "description": "IATA code of the arrival airport"},
            "date": {"type": "string", "description": "YYYY-MM-DD"},
            "passengers": {"type": "integer"}},
            "required": ["origin", "destination", "date"]}}},
    {"type": "function", "function": {
        "name": "create_event",
        "description": "Add an event to the user's calendar.",
        "parameters": {"type": "object", "properties": {
            "title": {"type": "string"}, "start": {"type": "string", "description": "ISO time"},
            "duration_minutes": {"type": "integer"},
            "attendees": {"type": "array", "items": {"type": "string"}}},
            "required": ["title", "start"]}}},
    {"type": "function", "function": {
        "name": "send_email",
        "description": "Send an email.",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "subject", "body"]}}},
]  # fmt: skip
EARLIER = (
    "Find me flights from LHR to JFK on 2026-12-18 for 2 passengers.",
    {"name": "search_flights",
     "arguments": {"origin": "LHR", "destination": "JFK", "date": "2026-12-18", "passengers": 2}},
    '{"flights": [{"id": "BA117", "departs": "2026-12-18T08:25"}, {"id": "VS3", '
    '"departs": "2026-12-18T11:40"}]}',
)  # fmt: skip
TOOL_ASKS = [
    "Now the same search for the way back: from JFK to LHR on 2026-12-27, 2 passengers.",
    'Put the BA117 flight in my calendar: title "Flight BA117 LHR to JFK", starting '
    "2026-12-18T08:25, 480 minutes, with attendees anna@example.com and ben@example.com.",
    'Email anna@example.com with the subject "Flights for 2026-12-18" and a body listing '
    "BA117 departing 2026-12-18T08:25 and VS3 departing 2026-12-18T11:40.",
    "Search flights from LHR to JFK on 2026-12-19 instead, for 3 passengers.",
]
FUNCTIONS = [
    '''def moving_average(xs, window):
    """The mean of each run of `window` consecutive items of xs."""
    if window <= 0:
        raise ValueError("window must be positive")
    out = []
    total = sum(xs[:window])
    out.append(total / window)
    for i in range(window, len(xs)):
        total += xs[i] - xs[i - window]
        out.append(total / window)
    return out''',
    """def parse_config(path):
    settings = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings""",
]
EDITS = [
    "Rename the parameter `xs` to `values` everywhere.",
    "Make it skip lines that have no `=` instead of failing on them.",
    "Add a type hint to every parameter and to the return value.",
    'Make it accept an `encoding` parameter (default "utf-8") passed to `open`.',
]


def render(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def tool_call_turns(tokenizer: Any) -> list[list[int]]:
    """A request after an earlier tool call (its result in the same message), for each of
    TOOL_ASKS."""
    asked, call, result = EARLIER
    history = [
        {"role": "system", "content": system_message(TOOLS, None, describe=True)},
        {"role": "user", "content": asked},
        {"role": "assistant", "content": f"<tool_call>{json.dumps(call)}</tool_call>"},
    ]
    observation = f"<tool_response>{result}</tool_response>\n\n"
    return [
        render(tokenizer, [*history, {"role": "user", "content": observation + ask}])
        for ask in TOOL_ASKS
    ]


def code_edit_turns(tokenizer: Any) -> list[list[int]]:
    """A function and a change to make to it, for each of EDITS (functions taken in turn)."""
    asks = [
        f"Here is a Python function:\n```python\n{FUNCTIONS[i % len(FUNCTIONS)]}\n```\n"
        f"{edit} Reply with the whole rewritten function in a python code block."
        for i, edit in enumerate(EDITS)
    ]
    return [render(tokenizer, [{"role": "user", "content": ask}]) for ask in asks]


@dataclass
class Run:
    seconds: float
    tokens: int
    gens: list[Generation]
    drafted: int = 0
    accepted: int = 0

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


async def run_side(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    sampling: SamplingParams,
    speculative: SpeculativeConfig | None,
) -> Run:
    """Every turn once, one at a time, on a fresh engine (warmed up on the first turn)."""
    async with HFEngine(model, tokenizer, prefix_cache=False, speculative=speculative) as engine:
        warm = SamplingParams(temperature=0, max_new_tokens=4)
        await engine.generate([Prompt(token_ids=prompts[0])], warm)
        drafted, accepted = engine.stats.draft_tokens, engine.stats.accepted_tokens
        gens = []
        start = time.perf_counter()
        for ids in prompts:
            [gen] = await engine.generate([Prompt(token_ids=ids)], sampling)
            gens.append(gen)
        seconds = time.perf_counter() - start
        stats = engine.stats
        tokens = sum(len(g.token_ids) for g in gens)
        return Run(seconds, tokens, gens, stats.draft_tokens - drafted,
                   stats.accepted_tokens - accepted)  # fmt: skip


def last_line(plain: float, fast: float, acceptance: float) -> str:
    return (
        f"speculative: plain {plain:.1f} tok/s; speculative {fast:.1f} tok/s; speedup "
        f"{fast / plain:.1f}x; acceptance {acceptance:.0%}"
    )


def first_difference(a: list[int], b: list[int]) -> int:
    same = (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    return next(same, min(len(a), len(b)))


async def run(args: argparse.Namespace) -> None:
    path = resolve_model(args.model)
    dtype = auto_dtype(torch.device("cpu")) if args.dtype == "auto" else args.dtype
    tokenizer = load_tokenizer(path)
    model = load_model(path, dtype)
    kinds = {"tool-call": tool_call_turns(tokenizer), "code-edit": code_edit_turns(tokenizer)}
    if args.turns:
        kinds = {k: v[: args.turns] for k, v in kinds.items()}
    prompts = [p for turns in kinds.values() for p in turns]
    if args.draft_model:
        config = SpeculativeConfig(method="draft", tokens=args.tokens, draft_model=args.draft_model)
    else:
        config = SpeculativeConfig(method="ngram", tokens=args.tokens)
    sampling = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)
    print(
        f"{args.model} in {dtype}, {torch.get_num_threads()} threads, batch 1, greedy; "
        + "; ".join(f"{len(v)} {k} turns" for k, v in kinds.items())
        + f" of {min(map(len, prompts))}-{max(map(len, prompts))} prompt tokens, up to "
        f"{args.max_new_tokens} new; speculative: {config.method}, {config.tokens} draft tokens",
        flush=True,
    )
    runs: dict[str, list[Run]] = {"plain": [], "speculative": []}
    for r in range(args.repeat):
        for side, spec in (("plain", None), ("speculative", config)):
            done = await run_side(model, tokenizer, prompts, sampling, spec)
            runs[side].append(done)
            extra = f", acceptance {done.accepted / max(done.drafted, 1):.0%}" if spec else ""
            print(
                f"[{r + 1}/{args.repeat}] {side:<11} {done.tokens} tokens in "
                f"{done.seconds:.2f}s ({done.rate:.1f} tok/s{extra})",
                flush=True,
            )
    plain = max(runs["plain"], key=lambda x: x.rate)
    fast = max(runs["speculative"], key=lambda x: x.rate)
    at = 0
    for kind, turns in kinds.items():
        n = len(turns)
        rates = []
        for side in (plain, fast):
            gens = side.gens[at : at + n]
            rates.append(sum(len(g.token_ids) for g in gens) / sum(g.seconds for g in gens))
        print(f"{kind}: plain {rates[0]:.1f} tok/s; speculative {rates[1]:.1f} tok/s; "
              f"speedup {rates[1] / rates[0]:.1f}x", flush=True)  # fmt: skip
        at += n
    differ = [
        (i, first_difference(a.token_ids, b.token_ids))
        for i, (a, b) in enumerate(zip(plain.gens, fast.gens, strict=True))
        if a.token_ids != b.token_ids
    ]
    where = "".join(f"; turn {i} differs from token {t}" for i, t in differ)
    print(f"greedy outputs identical: {len(prompts) - len(differ)}/{len(prompts)} turns{where}",
          flush=True)  # fmt: skip
    drafted = sum(x.drafted for x in runs["speculative"])
    accepted = sum(x.accepted for x in runs["speculative"])
    print(last_line(plain.rate, fast.rate, accepted / max(drafted, 1)), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default", help="a model directory or 'default'")
    parser.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--tokens", type=int, default=4, help="draft tokens per step at most")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="per turn at most")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per side (best kept)")
    parser.add_argument("--turns", type=int, default=0, help="turns of each kind (0: all)")
    parser.add_argument("--draft-model", default=None, help="a draft model instead of n-grams")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args(argv)
    if args.threads and args.threads != torch.get_num_threads():
        torch.set_num_threads(args.threads)  # only then: it slows attention (docs/rollout.md)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
