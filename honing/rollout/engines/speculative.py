"""Speculative decoding for the `hf` engine: cheap drafts that the model verifies in one forward.

    config = SpeculativeConfig(method="ngram", tokens=4)    # or method="draft", draft_model=DIR
    drafter = make_drafter(config, model, tokenizer, slots=32, max_len=4096)
    drafts = drafter.propose([prompt + tokens, ...], [k, ...])  # up to k tokens per row
    n = accepted_length(drafts[0], targets)  # the model's own argmax at each verified position

Covered: prompt lookup (`prompt_lookup`: the tokens that followed the latest earlier occurrence
of the context's last n tokens, no extra model), a draft model (a small Llama-family directory
with the same tokenizer, proposing greedily over its own KV cache), and the greedy acceptance
rule (output token for token that of plain decoding). The engine (`hf.py`) verifies the drafts
with `LlamaDecoder.score`; docs/rollout.md ("Speculative decoding") says when it speculates.
Not covered: sampled rows (temperature > 0 decode plainly, so their seeded draws are unchanged),
the generic decoder (no multi-position step), updating the draft model's weights with the target's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic import Field, model_validator

from honing.config import StrictModel
from honing.errors import ConfigError
from honing.rollout.engines.llama_decode import LlamaDecoder, common_prefix_len, fast_path_reason


class SpeculativeConfig(StrictModel):
    """Speculative decoding of the hf engine (off when the engine has none)."""

    method: Literal["ngram", "draft"] = Field(
        description="ngram: drafts copied from the prompt and the tokens so far (prompt "
        "lookup); draft: a small model with the same tokenizer proposes them."
    )
    tokens: int = Field(4, ge=1, le=32, description="Draft tokens verified per step at most.")
    draft_model: str | None = Field(
        None, description="method draft: the draft model's directory (or a built-in name)."
    )
    ngram_max: int = Field(3, ge=1, description="ngram: the longest suffix looked up.")
    ngram_min: int = Field(1, ge=1, description="ngram: the shortest suffix looked up.")
    max_batch: int = Field(
        1,
        ge=1,
        description="Speculate only while at most this many sequences decode together: a "
        "larger batch already uses the weights it reads, and verifying k+1 positions a row "
        "then costs more than the accepted tokens save (docs/rollout.md).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        if self.method == "draft" and self.draft_model is None:
            raise ValueError("method 'draft' needs draft_model (a model directory)")
        if self.method == "ngram" and self.draft_model is not None:
            raise ValueError("draft_model is for method 'draft'; method 'ngram' uses no model")
        if self.ngram_min > self.ngram_max:
            raise ValueError(f"ngram_min {self.ngram_min} > ngram_max {self.ngram_max}")
        return self


def prompt_lookup(tokens: Sequence[int], k: int, max_n: int = 3, min_n: int = 1) -> list[int]:
    """Up to `k` tokens that followed the latest earlier occurrence of the last n tokens of
    `tokens`, trying n = max_n, max_n - 1, .., min_n; [] when no suffix recurs."""
    length = len(tokens)
    if k <= 0:
        return []
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = list(tokens[length - n :])
        last = suffix[-1]
        # i: where an earlier occurrence starts; it must leave at least one token after it
        # before the suffix itself (i + n <= length - 1).
        for i in range(length - n - 1, -1, -1):
            if tokens[i + n - 1] == last and list(tokens[i : i + n]) == suffix:
                return list(tokens[i + n : i + n + k])
    return []


def accepted_length(drafts: Sequence[int], targets: Sequence[int]) -> int:
    """How many of `targets` (the model's token after the last context token and after each
    draft token: len(drafts) + 1 of them) greedy decoding keeps: the drafts' longest prefix
    equal to the targets, and the target after it."""
    n = 0
    while n < len(drafts) and drafts[n] == targets[n]:
        n += 1
    return n + 1


class Drafter(Protocol):
    """Proposes draft tokens for rows of a decode step."""

    def propose(self, contexts: list[list[int]], limits: list[int]) -> list[list[int]]:
        """At most `limits[i]` (>= 1) tokens to follow `contexts[i]` (prompt + tokens so far)."""
        ...


class NgramDrafter:
    """Prompt lookup over each row's own context."""

    def __init__(self, max_n: int, min_n: int) -> None:
        self.max_n, self.min_n = max_n, min_n

    def propose(self, contexts: list[list[int]], limits: list[int]) -> list[list[int]]:
        return [
            prompt_lookup(c, k, self.max_n, self.min_n)
            for c, k in zip(contexts, limits, strict=True)
        ]


class ModelDrafter:
    """A draft model decoding greedily in its own `LlamaDecoder`: row i of a call uses draft slot
    i, and keeps there the KV of what it was last fed, so that a row which stays in its slot
    (always, at batch 1) prefills only the tokens accepted since. A row that moved recomputes."""

    def __init__(self, model: Any, *, slots: int, max_len: int) -> None:
        self.decoder = LlamaDecoder(model, slots=slots, max_len=max_len)
        self.held: list[list[int]] = [[] for _ in range(slots)]

    def propose(self, contexts: list[list[int]], limits: list[int]) -> list[list[int]]:
        starts = [
            min(common_prefix_len(self.held[i], c), len(c) - 1) for i, c in enumerate(contexts)
        ]
        steps = max(limits)
        logits = self.decoder.prefill(0, contexts, starts)
        proposed: list[list[int]] = [[] for _ in contexts]
        for step in range(steps):
            tokens = logits.argmax(-1).tolist()
            for row, token in zip(proposed, tokens, strict=True):
                row.append(token)
            if step == steps - 1:
                break
            positions = [len(c) + step for c in contexts]
            logits = self.decoder.decode(tokens, positions)
        for i, (context, row) in enumerate(zip(contexts, proposed, strict=True)):
            self.held[i] = context + row[:-1]  # the last proposal was never fed
        return [row[:k] for row, k in zip(proposed, limits, strict=True)]


def make_drafter(
    config: SpeculativeConfig, model: Any, tokenizer: Any, *, slots: int, max_len: int
) -> Drafter:
    """The drafter `config` names, for the target `model` and its `tokenizer`; ConfigError when
    the draft model cannot serve it (another vocabulary, or no fast path)."""
    if config.method == "ngram":
        return NgramDrafter(config.ngram_max, config.ngram_min)
    from honing.rollout.models import load_model, load_tokenizer, resolve_model

    assert config.draft_model is not None  # the validator's
    path = resolve_model(config.draft_model)
    theirs = load_tokenizer(path).get_vocab()
    ours = tokenizer.get_vocab()
    if theirs != ours:
        differ = sorted(set(theirs.items()) ^ set(ours.items()), key=lambda kv: kv[1])[:3]
        raise ConfigError(
            f"draft model {config.draft_model}: its tokenizer's vocabulary differs from the "
            f"model's ({len(theirs)} vs {len(ours)} entries; e.g. {differ}); a draft model "
            "must share the tokenizer"
        )
    dtype = str(model.dtype).removeprefix("torch.")
    draft = load_model(path, dtype)
    device = next(model.parameters()).device
    draft.to(device)
    rows = draft.get_input_embeddings().weight.shape[0]
    if rows < len(ours):
        raise ConfigError(
            f"draft model {config.draft_model}: {rows} embedding rows for a vocabulary of "
            f"{len(ours)} tokens"
        )
    why = fast_path_reason(draft)
    if why is not None:
        raise ConfigError(
            f"draft model {config.draft_model}: not a Llama-family model the fast decoder runs "
            f"({why})"
        )
    # Rows of one call draft as many steps as the one allowed most: room past max_len for them.
    return ModelDrafter(draft, slots=slots, max_len=max_len + config.tokens)
