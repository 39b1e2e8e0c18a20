"""`LlamaDecoder`'s shared-prefix read ("cascade attention") on a tiny random Llama (fp32): decode
logits equal those of a decoder that reads every row's own KV (`cascade=False`) through prefills
of several batches, moves and swaps, and a weight update (rows in flight keep the old buffer, new
prompts never read it, a later prefill takes a new one); and equal transformers' own forward. The
engine, driven with a long system prompt, still matches transformers' greedy generate."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hf_helpers import hf_greedy

from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.rollout.engines.llama_decode import MIN_SHARED_READ, LlamaDecoder

SYSTEM = 40  # tokens every prompt starts with
assert SYSTEM >= MIN_SHARED_READ


def random_ids(n: int, seed: int) -> list[int]:
    ids = torch.randint(1, 40000, (n,), generator=torch.Generator().manual_seed(seed))
    return [int(t) for t in ids]


SYSTEM_IDS = random_ids(SYSTEM, 0)


def prompt(seed: int, own: int) -> list[int]:
    """The shared system prefix, then `own` tokens of its own (the first one differs per seed)."""
    return [*SYSTEM_IDS, 1 + seed, *random_ids(own - 1, seed)]


class Pair:
    """A decoder with the shared read and one without, driven through the same calls, and the
    token ids each slot holds (for transformers' forward)."""

    def __init__(self, model: Any, slots: int = 8) -> None:
        self.fast = LlamaDecoder(model, slots=slots, max_len=256)
        self.plain = LlamaDecoder(model, slots=slots, max_len=256, cascade=False)
        self.held: list[list[int]] = [[] for _ in range(slots)]
        self.model = model

    def prefill(self, first: int, prompts: list[list[int]]) -> None:
        for d in (self.fast, self.plain):
            d.prefill(first, prompts)
        for i, p in enumerate(prompts):
            self.held[first + i] = list(p)

    def decode(self, n: int, seed: int) -> torch.Tensor:
        """One step for slots 0..n-1 with random tokens; checks the two decoders agree."""
        tokens = random_ids(n, 1000 + seed)
        positions = [len(self.held[i]) for i in range(n)]
        fast = self.fast.decode(tokens, positions)
        plain = self.plain.decode(tokens, positions)
        torch.testing.assert_close(fast, plain, atol=1e-5, rtol=1e-5)
        for i, t in enumerate(tokens):
            self.held[i].append(t)
        return fast

    def move(self, src: int, dst: int) -> None:
        for d in (self.fast, self.plain):
            d.move(src, dst, len(self.held[src]))
        self.held[dst] = list(self.held[src])

    def swap(self, a: int, b: int) -> None:
        for d in (self.fast, self.plain):
            d.copy([(a, b, len(self.held[a])), (b, a, len(self.held[b]))])
        self.held[a], self.held[b] = self.held[b], self.held[a]

    def assert_matches_transformers(self, logits: torch.Tensor) -> None:
        """The logits of the last decode step are transformers' for each slot's whole sequence."""
        with torch.inference_mode():
            for i in range(logits.shape[0]):
                ids = torch.tensor([self.held[i]])
                expected = self.model(input_ids=ids).logits[0, -1].float()
                torch.testing.assert_close(logits[i], expected, atol=1e-4, rtol=1e-4)


def test_shared_read_equals_each_rows_own_kv(model: Any) -> None:
    pair = Pair(model)
    with torch.inference_mode():
        pair.prefill(0, [prompt(1, 3), prompt(2, 17), prompt(3, 1)])
        pair.prefill(3, [prompt(4, 9), prompt(5, 30)])  # a later batch matches the buffer
        assert pair.fast.shared_length(5) == SYSTEM and pair.plain.shared_length(5) == 0
        for step in range(3):
            logits = pair.decode(5, step)
    pair.assert_matches_transformers(logits)


def test_a_single_prompt_then_a_group_share_the_system_prompt(model: Any) -> None:
    pair = Pair(model)
    with torch.inference_mode():
        pair.prefill(0, [prompt(1, 12)])  # the buffer: all of this prompt
        assert pair.fast.shared_length(1) == SYSTEM + 12
        pair.decode(1, 0)
        pair.prefill(1, [prompt(2, 5)] * 3)  # the n samples of one task
        assert pair.fast.shared_length(4) == SYSTEM
        for step in range(2):
            logits = pair.decode(4, 10 + step)
    pair.assert_matches_transformers(logits)


def test_moves_and_swaps_carry_the_shared_prefix(model: Any) -> None:
    pair = Pair(model)
    with torch.inference_mode():
        pair.prefill(0, [prompt(i, 2 + 5 * i) for i in range(1, 6)])
        pair.decode(5, 0)
        pair.move(4, 1)  # slot 1 finished: the last row fills its hole
        pair.swap(0, 3)  # the engine's swap with a cached slot, as two copies
        assert pair.fast.shared_length(4) == SYSTEM
        pair.decode(4, 1)
        pair.move(3, 2)  # slot 2 finished too
        pair.swap(3, 5)  # a cached slot's KV kept out of the way
        pair.prefill(3, [prompt(7, 4)])
        logits = pair.decode(4, 2)
        assert pair.fast.shared_length(4) == SYSTEM
    pair.assert_matches_transformers(logits)


def test_a_prompt_rewritten_inside_the_prefix_stops_sharing_it(model: Any) -> None:
    pair = Pair(model)
    with torch.inference_mode():
        pair.prefill(0, [prompt(1, 4), prompt(2, 6)])
        other = list(prompt(3, 5))
        other[10] += 1  # diverges from the buffer at position 10
        pair.prefill(2, [other])
        assert pair.fast.shared_length(3) == 0  # too short a common prefix to read it once
        pair.decode(3, 0)


def test_a_step_that_rewrites_a_shared_position_reads_the_buffer_only_before_it(model: Any) -> None:
    pair = Pair(model)
    with torch.inference_mode():
        pair.prefill(0, [prompt(1, 4), prompt(2, 6)])
        pair.held[1] = pair.held[1][: SYSTEM - 5]  # slot 1 rewinds into the system prompt
        pair.decode(2, 0)
        assert pair.fast.shared[1] == SYSTEM - 5 and pair.fast.shared_length(2) == SYSTEM - 5


def test_after_a_weight_update_new_prompts_do_not_read_the_old_buffer(model: Any) -> None:
    pair = Pair(model)
    with torch.inference_mode():
        pair.prefill(0, [prompt(1, 3), prompt(2, 8)])
        pair.decode(2, 0)
        torch.manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
        for d in (pair.fast, pair.plain):
            d.refresh()
        # Rows in flight keep reading the old buffer: their own KV is of the old weights too.
        assert pair.fast.shared_length(2) == SYSTEM
        pair.decode(2, 1)
        pair.prefill(2, [prompt(3, 5), prompt(4, 2)])  # same tokens, new weights: no match
        assert pair.fast.shared[2:4] == [0, 0] and pair.fast.shared_length(4) == 0
        pair.decode(4, 2)
        pair.move(2, 0)  # the old rows finish
        pair.move(3, 1)
        pair.prefill(2, [prompt(5, 7)])  # all active rows are new: a new buffer
        assert pair.fast.shared_length(3) == SYSTEM
        for step in range(2):
            logits = pair.decode(3, 3 + step)
    pair.assert_matches_transformers(logits)  # all three rows hold new-weight KV only


async def test_engine_with_a_long_system_prompt_matches_transformers(
    model: Any, tokenizer: Any
) -> None:
    system = tokenizer.apply_chat_template(
        [{"role": "system", "content": "You solve problems step by step. " * 6}], tokenize=False
    )
    turn = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    ids = [
        list(tokenizer.encode(system + turn.format(q), add_special_tokens=False))
        for q in ("What is 17*23?", "Name a prime.", "hi")
    ]
    sampling = SamplingParams(temperature=0, max_new_tokens=10)
    async with HFEngine(model, tokenizer) as engine:
        decoder = engine._decoder
        assert isinstance(decoder, LlamaDecoder)
        reads: list[int] = []
        decode = decoder.decode

        def spy(tokens: list[int], positions: list[int]) -> torch.Tensor:
            reads.append(decoder.shared_length(len(tokens)))
            return decode(tokens, positions)

        decoder.decode = spy  # type: ignore[method-assign]
        gens = await engine.generate([Prompt(token_ids=p) for p in ids], sampling)
    assert max(reads) >= MIN_SHARED_READ
    for p, gen in zip(ids, gens, strict=True):
        assert gen.token_ids == hf_greedy(model, p, sampling.max_new_tokens)
    with torch.inference_mode():
        for p, gen in zip(ids, gens, strict=True):
            logits = model(input_ids=torch.tensor([p + gen.token_ids])).logits[0].float()
            logp = torch.log_softmax(logits[len(p) - 1 : -1], -1)
            expected = logp.gather(1, torch.tensor(gen.token_ids)[:, None])[:, 0].tolist()
            assert gen.logprobs == pytest.approx(expected, abs=1e-4)
