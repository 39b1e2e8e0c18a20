"""Decoders for the `hf` engine: prefill and one batched decode step over a per-slot KV cache.

    decoder = make_decoder(model, slots=32, max_len=4096)
    logits = decoder.prefill(first_slot, [prompt_ids, ...])  # [b, vocab]: each prompt's last
    logits = decoder.decode(tokens, positions)               # [n, vocab] for slots 0..n-1
    logits = decoder.score(chunks, positions)                # every chunk token's (LlamaDecoder)
    decoder.move(src, dst, length)                           # compact the batch
    decoder.refresh()                                        # after the weights changed

Covered: `LlamaDecoder`, the fast path for Llama-family models (its own forward, fused
projections, a static KV cache per slot that keeps finished sequences for the prefix cache, shared
prefixes computed and read once, several positions a row in one step for speculative decoding),
and `GenericDecoder`, the HF forward one sequence at a time for any other causal LM
(docs/rollout.md, "The modules in detail"). Not covered: sampling, stopping, scheduling, which KV
a slot holds (the engine, `hf.py`); prefix reuse and `score` on the generic path; sliding-window
attention, biases in the projections, dynamic rope scaling, quantised weights.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from honing.errors import EngineError

INITIAL_CAPACITY = 256  # KV positions reserved per slot at first; doubled on demand
MIN_SHARED_PREFIX = 16  # tokens; a shorter common prefix is not worth a separate pass
MIN_SHARED_READ = 32  # tokens; decode reads a shorter shared prefix from each row's own KV
STATIC_ROPE_TYPES = frozenset({"default", "linear", "llama3", "yarn"})


class Decoder(Protocol):
    """What the engine's decode loop needs of a model."""

    def prefill(
        self, first_slot: int, prompts: list[list[int]], starts: list[int] | None = None
    ) -> torch.Tensor:
        """Fill slots first_slot.. with the prompts; logits of each prompt's last position.
        `starts[i]` (default 0): positions of slot first_slot + i that already hold the KV of
        `prompts[i][:starts[i]]` (less than its length; only `LlamaDecoder` takes nonzero)."""
        ...

    def decode(self, tokens: list[int], positions: list[int]) -> torch.Tensor:
        """One step for slots 0..n-1: `tokens[i]` goes at `positions[i]`; logits [n, vocab],
        float32, which the next call may overwrite."""
        ...

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy slot src's first `length` cached positions to slot dst."""
        ...

    def refresh(self) -> None:
        """Rebuild anything derived from the weights (after an update)."""
        ...


def fast_path_reason(model: Any) -> str | None:
    """None when `LlamaDecoder` supports the model, else why not (the generic path is used)."""
    cfg = model.config
    if getattr(cfg, "quantization_config", None) is not None:
        return "quantised weights (its forward reads plain weight tensors)"
    if getattr(cfg, "model_type", None) != "llama":
        return f"model_type {getattr(cfg, 'model_type', None)!r} is not llama"
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return "projection biases"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r}"
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return "pretraining_tp > 1"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if rope else "default"
    if rope_type not in STATIC_ROPE_TYPES:
        return f"rope_type {rope_type!r} has no static table"
    return None


Linear = Callable[[torch.Tensor], torch.Tensor]


def make_linear(weight: torch.Tensor) -> Linear:
    """`x @ weight.T` as fast as this device does it. On CPU: a oneDNN linear over a weight
    reordered once into its blocked layout (1.3-2x faster than MKL's sgemm at decode shapes here
    (batch 32, AVX2), most on the 49k-row LM head); anywhere else, or if oneDNN is missing,
    `F.linear` on the weight itself."""
    if weight.device.type == "cpu" and torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        try:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)

            def onednn(x: torch.Tensor) -> torch.Tensor:
                out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
                    x, packed, None, "none", [], ""
                )
                return out

            probe = torch.ones((2, weight.shape[1]), dtype=weight.dtype)
            if torch.allclose(onednn(probe), F.linear(probe, weight), rtol=1e-2, atol=1e-2):
                return onednn
        except (RuntimeError, AttributeError):  # an op missing from this torch build
            pass
    return partial(F.linear, weight=weight)


def available_bytes(device: torch.device) -> int | None:
    """Memory a new tensor on `device` can take now: the GPU's free memory, or the host's
    MemAvailable (Linux); None when it cannot be known."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class KVMemoryError(EngineError):
    """The KV cache cannot take the memory it needs (`check_kv_fits`): the engine decodes fewer
    sequences together, or fails the calls with this message when even one cannot go on."""


def check_kv_fits(kv: torch.Tensor, growth: float, slots: int, capacity: int) -> None:
    """KVMemoryError, before the allocation, when the KV cache `kv` cannot grow by `growth` x
    (the new tensor beside the old one while it is copied) in the memory left: the process would
    be killed by the kernel instead, with nothing said and the run lost."""
    need = int(kv.numel() * kv.element_size() * growth)
    free = available_bytes(kv.device)
    if free is None or need <= free:
        return
    raise KVMemoryError(
        f"the KV cache would grow to {capacity} positions for each of {slots} slots: "
        f"{need / 2**30:.1f} GiB more, and {free / 2**30:.1f} GiB are available on "
        f"{kv.device.type}. Decode fewer sequences together (`engine.slots` in a run's config; "
        "`--engine-slots` or `--max-batch` on the command line) "
        "or cap the sequences' length (agent.max_total_tokens)"
    )


def make_decoder(model: Any, *, slots: int, max_len: int) -> Decoder:
    if fast_path_reason(model) is None:
        return LlamaDecoder(model, slots=slots, max_len=max_len)
    return GenericDecoder(model, slots=slots)


class LlamaDecoder:
    """The fast path; see the module docstring."""

    def __init__(self, model: Any, *, slots: int, max_len: int, cascade: bool = True) -> None:
        """`cascade=False`: never read the shared prefix's KV once for all rows (the reference
        the shared read is tested against)."""
        cfg = model.config
        self.model = model
        self.slots = slots
        self.max_len = max_len
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim**-0.5
        weight = model.model.embed_tokens.weight
        self.device, self.dtype = weight.device, weight.dtype
        self.capacity = min(INITIAL_CAPACITY, max_len)
        shape = (cfg.num_hidden_layers, slots, self.n_kv, self.capacity, self.head_dim)
        self._allocate(shape)
        with torch.inference_mode():
            positions = torch.arange(max_len, device=self.device)[None]
            cos, sin = model.model.rotary_emb(weight[:1][None], positions)
        self.cos, self.sin = cos[0], sin[0]  # [max_len, head_dim]
        # What each slot's leading KV positions hold: ids[s] (its prompt's tokens), of which the
        # first fresh[s] were computed with the current weights and the first shared[s] equal the
        # shared-prefix buffer's. All three are lower bounds: too small is only slower.
        self.cascade = cascade
        self.ids: list[list[int]] = [[] for _ in range(slots)]
        self.fresh = [0] * slots
        self.shared = [0] * slots
        self.epoch = 0  # counts refreshes (weights changes)
        self.prefix_ids: list[int] = []  # the shared-prefix buffer: its tokens, its K/V
        self.prefix_k = self.prefix_v = torch.zeros(0, device=self.device)  # [layers, kv, P, dim]
        self.prefix_epoch = -1  # the weights it was computed with; stale when != epoch
        # Decode's output, reused: a fresh [n, vocab] float tensor each step cost 1-7 ms of page
        # faults on a VM host.
        vocab = model.lm_head.weight.shape[0]
        self.logits = torch.empty((slots, vocab), dtype=torch.float32, device=self.device)
        self.refresh()

    def refresh(self) -> None:
        """(Re)build the fused projections from the model's current weights. Cached KV is now
        stale: rows that read the shared-prefix buffer keep reading it (their own KV was computed
        with the same old weights), new prompts no longer match it."""
        self.epoch += 1
        self.fresh = [0] * self.slots
        self.layers = []
        with torch.inference_mode():
            for layer in self.model.model.layers:
                attn, mlp = layer.self_attn, layer.mlp
                qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
                gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
                self.layers.append(
                    (
                        layer.input_layernorm.weight,
                        make_linear(qkv),
                        make_linear(attn.o_proj.weight),
                        layer.post_attention_layernorm.weight,
                        make_linear(gate_up),
                        make_linear(mlp.down_proj.weight),
                    )
                )
            self.lm_head = make_linear(self.model.lm_head.weight)
        self.embed = self.model.model.embed_tokens.weight
        self.final_norm = self.model.model.norm.weight

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # As LlamaRMSNorm: in float32, cast back before the weight (one fused op for the
        # normalisation: a decode step runs 61 of these on [batch, hidden]).
        h = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return weight * h.to(x.dtype)

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _ensure_capacity(self, length: int) -> None:
        if length <= self.capacity:
            return
        capacity = self.capacity
        while capacity < length:
            capacity *= 2
        self.resize(self.slots, min(capacity, self.max_len))

    def resize(self, slots: int, capacity: int | None = None) -> None:
        """The KV cache for `slots` slots of `capacity` positions (default: the current one; never
        fewer), keeping what the first min(old, new) slots hold; the engine shrinks it when the
        host cannot hold the cache it needs (KVMemoryError, before the allocation, when it
        cannot hold this one). `restart` empties it at the initial capacity."""
        capacity = capacity or self.capacity
        old_slots, old_capacity = self.slots, self.capacity
        if capacity < old_capacity:
            raise ValueError(f"capacity {capacity} below the cache's {old_capacity}: restart()")
        if (slots, capacity) == (old_slots, old_capacity):
            return
        grows = slots * capacity / (old_slots * old_capacity)
        check_kv_fits(self.kv, grows, slots, capacity)
        k, v = self.k, self.v
        self._allocate((k.shape[0], slots, self.n_kv, capacity, self.head_dim))
        rows = min(slots, old_slots)
        self.k[:, :rows, :, :old_capacity] = k[:, :rows]
        self.v[:, :rows, :, :old_capacity] = v[:, :rows]
        del k, v
        self.slots, self.capacity = slots, capacity
        del self.ids[slots:], self.fresh[slots:], self.shared[slots:]
        extra = slots - len(self.ids)
        self.ids += [[] for _ in range(extra)]
        self.fresh += [0] * extra
        self.shared += [0] * extra
        if slots > self.logits.shape[0]:
            self.logits = self.logits.new_empty((slots, self.logits.shape[1]))

    def restart(self, slots: int) -> None:
        """`slots` slots at the initial capacity, holding nothing (KVMemoryError, before the
        allocation, when even that does not fit)."""
        capacity = min(INITIAL_CAPACITY, self.max_len)
        check_kv_fits(self.kv, slots * capacity / (self.slots * self.capacity), slots, capacity)
        self._allocate((self.kv.shape[0], slots, self.n_kv, capacity, self.head_dim))
        self.slots, self.capacity = slots, capacity
        self.ids = [[] for _ in range(slots)]
        self.fresh, self.shared = [0] * slots, [0] * slots
        if slots > self.logits.shape[0]:
            self.logits = self.logits.new_empty((slots, self.logits.shape[1]))

    def _allocate(self, shape: tuple[int, ...]) -> None:
        """A zeroed KV cache of `shape` = [layers, slots, kv_heads, capacity, dim]: `self.k` and
        `self.v` are views of one tensor [layers, 2, ...], so that a decode step writes a
        layer's new keys and values with one index_copy_."""
        layers, *rest = shape
        self.kv = torch.zeros((layers, 2, *rest), dtype=self.dtype, device=self.device)
        with torch.enable_grad():  # views made under no_grad could not be written with grad on
            self.k, self.v = self.kv[:, 0], self.kv[:, 1]

    def _qkv(
        self, h: torch.Tensor, qkv_proj: Linear, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [..., heads, dim], k and v [..., kv_heads, dim], rotary applied to q and k."""
        qkv = qkv_proj(h)
        nq, nk = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        lead = qkv.shape[:-1]
        # Rotary on q and k together: one set of elementwise ops instead of two.
        qk = self._rope(
            qkv[..., : nq + nk].reshape(*lead, self.n_heads + self.n_kv, self.head_dim), cos, sin
        )
        v = qkv[..., nq + nk :].reshape(*lead, self.n_kv, self.head_dim)
        return qk[..., : self.n_heads, :], qk[..., self.n_heads :, :], v

    def _mlp(
        self, x: torch.Tensor, norm_w: torch.Tensor, gate_up: Linear, down: Linear
    ) -> torch.Tensor:
        gu = gate_up(self._norm(x, norm_w))
        inter = gu.shape[-1] // 2
        return x + down(F.silu(gu[..., :inter]) * gu[..., inter:])

    def prefill(
        self, first_slot: int, prompts: list[list[int]], starts: list[int] | None = None
    ) -> torch.Tensor:
        have = list(starts) if starts is not None else [0] * len(prompts)
        if any(not 0 <= s < len(p) for s, p in zip(have, prompts, strict=True)):
            raise ValueError(f"prefill starts {have} must leave each prompt a token to run")
        # Positions from starts[i] on are rewritten: forget them first (a failed prefill then
        # leaves no stale claim that they equal the shared-prefix buffer).
        self._carry([(first_slot + i, first_slot + i, s) for i, s in enumerate(have)])
        # A prefix shared by the whole batch (the system prompt; all of it for the n samples of
        # one task) is computed once, in the row that has most of it cached already, and its KV
        # copied to the rows that lack it.
        shared = _common_prefix(prompts) if len(prompts) > 1 else 0
        shared = min(shared, min(len(p) for p in prompts) - 1)  # each keeps >= 1 token to run
        needy = [i for i, s in enumerate(have) if s < shared]
        donor = max(range(len(prompts)), key=lambda i: have[i])
        if shared >= MIN_SHARED_PREFIX and needy and (len(needy) > 1 or donor not in needy):
            if have[donor] < shared:
                chunk = prompts[donor][have[donor] : shared]
                self._forward(first_slot + donor, [chunk], [have[donor]], logits=False)
                self._wrote(first_slot + donor, prompts[donor][:shared], have[donor])
            self.copy([(first_slot + donor, first_slot + i, shared) for i in needy if i != donor])
            have = [max(s, shared) for s in have]
        chunks = [p[s:] for p, s in zip(prompts, have, strict=True)]
        logits = self._forward(first_slot, chunks, have, logits=True)
        for i, (prompt, start) in enumerate(zip(prompts, have, strict=True)):
            self._wrote(first_slot + i, prompt, start)
        self._share(first_slot + len(prompts))
        return logits

    def _wrote(self, slot: int, tokens: list[int], start: int) -> None:
        """Slot `slot` now holds the KV of `tokens`: its first `start` positions it held already,
        the rest were just computed with the current weights."""
        fresh, shared = min(self.fresh[slot], start), min(self.shared[slot], start)
        self.ids[slot] = list(tokens)
        self.fresh[slot] = len(tokens) if fresh == start else fresh
        if self.prefix_epoch == self.epoch:
            matched = common_prefix_len(tokens, self.prefix_ids)
            shared = max(shared, min(self.fresh[slot], matched))
        self.shared[slot] = shared

    def _share(self, active: int) -> None:
        """Make the shared-prefix buffer the prefix common to the active slots 0..active-1 (with
        the current weights) when that is longer than what they all share with it now."""
        length = min(self.fresh[:active])
        if not self.cascade or length < MIN_SHARED_READ:
            return
        for s in range(1, active):
            length = common_prefix_len(self.ids[0][:length], self.ids[s])
            if length < MIN_SHARED_READ:
                return
        if length <= min(self.shared[:active]):
            return
        self.prefix_ids = self.ids[0][:length]
        self.prefix_k = self.k[:, 0, :, :length].clone()
        self.prefix_v = self.v[:, 0, :, :length].clone()
        self.prefix_epoch = self.epoch
        for s in range(self.slots):  # references to the old buffer are dropped
            matched = common_prefix_len(self.ids[s], self.prefix_ids)
            self.shared[s] = min(self.fresh[s], matched)

    def shared_length(self, n: int) -> int:
        """How many leading positions a decode step of slots 0..n-1 reads from the shared-prefix
        buffer (0: each row reads all of its own KV)."""
        length = min(self.shared[:n])
        return length if self.cascade and length >= MIN_SHARED_READ else 0

    def score(self, chunks: list[list[int]], positions: list[int]) -> torch.Tensor:
        """Speculative decoding's verify step: `chunks[i]` (a row's last token and its draft
        tokens) runs at positions positions[i].. of slot i (slots 0..n-1, the KV before
        positions[i] cached); the float32 logits of every chunk token, packed in row order:
        [sum of the chunks' lengths, vocab]. The KV of draft tokens the engine rejects stays
        past the row's length, hidden by the causal mask until later steps overwrite it."""
        for slot, at in enumerate(positions):
            if at < len(self.ids[slot]):  # overwrites a position of the prompt it held
                self._carry([(slot, slot, at)])
        return self._forward(0, chunks, positions, logits=True, every=True).float()

    def _forward(
        self,
        first_slot: int,
        chunks: list[list[int]],
        starts: list[int],
        *,
        logits: bool,
        every: bool = False,
    ) -> torch.Tensor:
        """Run `chunks` at positions starts[i].. of slots first_slot + i, whose first
        `starts[i]` positions are already cached; the logits of each chunk's last token (of
        every token, packed, when `every`).

        The projections and the MLP run on the chunks' real tokens only, packed end to end:
        prompts that share a system prompt differ in goals of unequal length (16 to 39 tokens in
        an evaluation of 127), and padding each to the longest doubled that work. Attention runs
        per row, right-padded, each row over its own slot's keys."""
        b, lens = len(chunks), [len(c) for c in chunks]
        longest = max(lens)
        end = max(s + n for s, n in zip(starts, lens, strict=True))
        self._ensure_capacity(end)
        device = self.device
        ids = torch.tensor([t for c in chunks for t in c], device=device)  # [N]
        at = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, lens, strict=True)])
        at = at.to(device)  # [N]: each token's position
        slot = torch.repeat_interleave(
            torch.arange(first_slot, first_slot + b), torch.tensor(lens)
        ).to(device)  # [N]: each token's slot
        padded = any(n != longest for n in lens)
        # Row i, column j of the padded layout holds chunk i's token j when real[i, j].
        real = (
            torch.arange(longest, device=device)[None, :]
            < torch.tensor(lens, device=device)[:, None]
        )
        x = F.embedding(ids, self.embed)  # [N, hidden]
        cos, sin = self.cos[at][:, None, :], self.sin[at][:, None, :]
        rows = slice(first_slot, first_slot + b)
        keys_at = torch.arange(end, device=device)
        if len(set(starts)) == 1:  # one start (0 for fresh prompts): a plain causal mask at 0
            start = starts[0]
            # Query i (position start + i) sees keys 0..start + i; a padding query sees as much.
            queries_at = torch.arange(start, start + longest, device=device)
            mask = keys_at[None, :] <= queries_at[:, None] if start else None
        else:  # ragged: each row at its own positions (padding queries see keys, not used)
            row_at = torch.tensor(starts, device=device)[:, None] + torch.arange(
                longest, device=device
            )  # [b, P]
            mask = (keys_at[None, None, :] <= row_at[:, :, None])[:, None]  # [b, 1, P, end]
        for layer, (in_w, qkv, o_proj, post_w, gate_up, down) in enumerate(self.layers):
            q, k, v = self._qkv(self._norm(x, in_w), qkv, cos, sin)  # [N, heads or kv, dim]
            self.k[layer][slot, :, at] = k
            self.v[layer][slot, :, at] = v
            if padded:
                q_rows = q.new_zeros((b, longest, self.n_heads, self.head_dim))
                q_rows[real] = q
            else:
                q_rows = q.view(b, longest, self.n_heads, self.head_dim)
            attn = F.scaled_dot_product_attention(
                q_rows.transpose(1, 2),  # [b, heads, P, dim]
                self.k[layer, rows, :, :end],
                self.v[layer, rows, :, :end],
                attn_mask=mask,
                is_causal=mask is None,
                enable_gqa=True,
            ).transpose(1, 2)  # [b, P, heads, dim]
            attn = attn[real] if padded else attn.reshape(b * longest, self.n_heads, -1)
            x = x + o_proj(attn.reshape(len(at), -1))
            x = self._mlp(x, post_w, gate_up, down)
        if not logits:
            return x
        if every:
            return self.lm_head(self._norm(x, self.final_norm))
        last = torch.tensor(lens, device=device).cumsum(0) - 1
        return self.lm_head(self._norm(x[last], self.final_norm)).float()

    def decode(self, tokens: list[int], positions: list[int]) -> torch.Tensor:
        n, length = len(tokens), max(positions) + 1
        self._ensure_capacity(length)
        for slot, at in enumerate(positions):
            if at < len(self.ids[slot]):  # overwrites a position of the prompt it held
                self._carry([(slot, slot, at)])
        p = self.shared_length(n)  # keys 0..p-1: one read of the buffer for all rows
        device = self.device
        pos = torch.tensor(positions, device=device)
        x = F.embedding(torch.tensor(tokens, device=device), self.embed)  # [n, hidden]
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        # Where row i's head h writes its new K (then V) in a layer's cache seen as
        # [2 * slots * kv * capacity, dim]: one index_copy_ per layer instead of two index_puts.
        heads = torch.arange(self.n_kv, device=device)
        k_at = ((torch.arange(n, device=device)[:, None] * self.n_kv + heads) * self.capacity
                + pos[:, None]).flatten()  # fmt: skip
        kv_at = torch.cat((k_at, k_at + self.slots * self.n_kv * self.capacity))
        # Each row sees its own prefix only: key j is visible to row i when j <= positions[i].
        hidden = torch.arange(length, device=device)[None, :] > pos[:, None]
        bias = torch.zeros((n, 1, 1, length), dtype=self.dtype, device=device)
        bias.masked_fill_(hidden[:, None, None, :], float("-inf"))
        rep = self.n_heads // self.n_kv
        for layer, (in_w, qkv, o_proj, post_w, gate_up, down) in enumerate(self.layers):
            q, k, v = self._qkv(self._norm(x, in_w), qkv, cos, sin)
            new = torch.cat((k.reshape(-1, self.head_dim), v.reshape(-1, self.head_dim)))
            self.kv[layer].view(-1, self.head_dim).index_copy_(0, kv_at, new)
            k_cache, v_cache = self.k[layer], self.v[layer]
            if not p:  # one fused kernel (torch's flash attention on CPU): 2.5x the matmuls
                attn = F.scaled_dot_product_attention(
                    q[:, :, None],  # [n, heads, 1, dim]
                    k_cache[:n, :, :length],
                    v_cache[:n, :, :length],
                    attn_mask=bias,
                    scale=self.scale,
                    enable_gqa=True,
                )
                x = x + o_proj(attn.reshape(n, -1))
                x = self._mlp(x, post_w, gate_up, down)
                continue
            keys, values = k_cache[:n, :, p:length], v_cache[:n, :, p:length]
            q = q.view(n, self.n_kv, rep, self.head_dim)  # query heads grouped by their KV head
            scores = torch.matmul(q, keys.transpose(-1, -2))  # [n, kv, rep, length - p]
            # All rows' queries against the buffer's keys: [kv, n * rep, p].
            q_all = q.transpose(0, 1).reshape(self.n_kv, n * rep, self.head_dim)
            head = torch.matmul(q_all, self.prefix_k[layer, :, :p].transpose(-1, -2))
            scores = torch.cat((head.view(self.n_kv, n, rep, p).transpose(0, 1), scores), -1)
            probs = torch.softmax(scores.mul_(self.scale).add_(bias).float(), -1).to(self.dtype)
            attn = torch.matmul(probs[..., p:], values)  # [n, kv, rep, dim]
            probs_all = probs[..., :p].transpose(0, 1).reshape(self.n_kv, n * rep, p)
            head = torch.matmul(probs_all, self.prefix_v[layer, :, :p])
            attn += head.view(self.n_kv, n, rep, self.head_dim).transpose(0, 1)
            x = x + o_proj(attn.reshape(n, -1))
            x = self._mlp(x, post_w, gate_up, down)
        return self.logits[:n].copy_(self.lm_head(self._norm(x, self.final_norm)))

    def move(self, src: int, dst: int, length: int) -> None:
        self.k[:, dst, :, :length] = self.k[:, src, :, :length]
        self.v[:, dst, :, :length] = self.v[:, src, :, :length]
        self._carry([(src, dst, length)])

    def _carry(self, moves: list[tuple[int, int, int]]) -> None:
        """What slot dst holds after taking the first `length` positions of slot src, for each
        (src, dst, length), all sources read first."""
        taken = [
            (dst, self.ids[src][: max(n, 0)], min(self.fresh[src], n), min(self.shared[src], n))
            for src, dst, n in moves
        ]
        for dst, ids, fresh, shared in taken:
            self.ids[dst], self.fresh[dst], self.shared[dst] = ids, max(fresh, 0), max(shared, 0)

    def copy(self, moves: list[tuple[int, int, int]]) -> None:
        """Copy the first `length` positions of slot src to slot dst, for each (src, dst,
        length), as if every source were read before any destination is written (a source that
        is also a destination is staged first), so a swap is two moves."""
        written = {dst for src, dst, _ in moves if src != dst}
        staged = []
        for src, dst, length in moves:
            if src == dst or length <= 0:
                continue
            k, v = self.k[:, src, :, :length], self.v[:, src, :, :length]
            if src in written:
                k, v = k.clone(), v.clone()
            staged.append((dst, length, k, v))
        for dst, length, k, v in staged:
            self.k[:, dst, :, :length] = k
            self.v[:, dst, :, :length] = v
        self._carry([m for m in moves if m[0] != m[1]])


class GenericDecoder:
    """Any causal LM through its own HF forward and cache, one sequence at a time."""

    def __init__(self, model: Any, *, slots: int) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.caches: list[Any] = [None] * slots
        # transformers 5 renamed `past_key_values` to `cache` (argument and output).
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"

    def refresh(self) -> None:
        pass

    def _forward(self, slot: int, ids: list[int]) -> torch.Tensor:
        cache = {self.cache_arg: self.caches[slot]}
        out = self.model(input_ids=torch.tensor([ids], device=self.device), use_cache=True, **cache)
        self.caches[slot] = out[self.cache_arg]
        logits: torch.Tensor = out.logits[0, -1].float()
        return logits

    def prefill(
        self, first_slot: int, prompts: list[list[int]], starts: list[int] | None = None
    ) -> torch.Tensor:
        if starts is not None and any(starts):
            raise ValueError("the generic decoder prefills whole prompts only (starts all 0)")
        logits = []
        for i, prompt in enumerate(prompts):
            self.caches[first_slot + i] = None
            logits.append(self._forward(first_slot + i, prompt))
        return torch.stack(logits)

    def decode(self, tokens: list[int], positions: list[int]) -> torch.Tensor:
        return torch.stack([self._forward(i, [t]) for i, t in enumerate(tokens)])

    def move(self, src: int, dst: int, length: int) -> None:
        self.caches[dst] = self.caches[src]
        self.caches[src] = None


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """How many leading items `a` and `b` share."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]: bisect with list compares (C speed)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _common_prefix(prompts: list[list[int]]) -> int:
    first, n = prompts[0], min(len(p) for p in prompts)
    for i in range(n):
        token = first[i]
        if any(p[i] != token for p in prompts):
            return i
    return n
