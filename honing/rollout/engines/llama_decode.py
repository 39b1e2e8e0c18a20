"""Decoders for the `hf` engine: prefill and one batched decode step over a per-slot KV cache.

    decoder = make_decoder(model, slots=32, max_len=4096)
    logits = decoder.prefill(first_slot, [prompt_ids, ...])  # [b, vocab]: each prompt's last
    logits = decoder.decode(tokens, positions)               # [n, vocab] for slots 0..n-1
    decoder.move(src, dst, length)                           # compact the batch
    decoder.refresh()                                        # after the weights changed

Slots 0..n-1 are the sequences being decoded; the engine keeps them compact (a finished
sequence's slot is refilled from the last one with `move`), so a step only touches views of the
cache, never gathers.

* `LlamaDecoder` — the fast path, for Llama-family models (LlamaForCausalLM: RMSNorm, rotary,
  grouped-query attention, SiLU MLP; SmolLM2 is one). Its own forward reads the HF module's
  weight tensors; it keeps fused copies of the q/k/v and gate/up projections (one matmul each
  instead of three and two; `refresh()` rebuilds them). The KV cache is static per slot,
  `[layers, slots, kv_heads, capacity, head_dim]`, grown by doubling up to `max_len` (so a short
  workload does not reserve memory for the longest context). Each row has its own position;
  attention of a decode step is a masked matmul over the longest active prefix, with the query
  heads grouped per KV head (no repeated K/V). Rotary cos/sin come from the model's own rotary
  module once, as a table over all positions (so rope scaling types with a static table work).
* `GenericDecoder` — any other causal LM: the HF forward with its own cache, one sequence at a
  time. Correct, not fast.

Not covered: sampling, stopping, scheduling (the engine, `hf.py`); prefix caching across calls
(a multi-turn episode re-prefills its whole prompt each turn); sliding-window attention, biases
in the projections, dynamic rope scaling (those models take the generic path).
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import torch
import torch.nn.functional as F

INITIAL_CAPACITY = 256  # KV positions reserved per slot at first; doubled on demand
STATIC_ROPE_TYPES = frozenset({"default", "linear", "llama3", "yarn"})


class Decoder(Protocol):
    """What the engine's decode loop needs of a model."""

    def prefill(self, first_slot: int, prompts: list[list[int]]) -> torch.Tensor:
        """Fill slots first_slot.. with the prompts; logits of each prompt's last position."""
        ...

    def decode(self, tokens: list[int], positions: list[int]) -> torch.Tensor:
        """One step for slots 0..n-1: `tokens[i]` goes at `positions[i]`; logits [n, vocab]."""
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


def make_decoder(model: Any, *, slots: int, max_len: int) -> Decoder:
    if fast_path_reason(model) is None:
        return LlamaDecoder(model, slots=slots, max_len=max_len)
    return GenericDecoder(model, slots=slots)


class LlamaDecoder:
    """The fast path; see the module docstring."""

    def __init__(self, model: Any, *, slots: int, max_len: int) -> None:
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
        self.k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        with torch.inference_mode():
            positions = torch.arange(max_len, device=self.device)[None]
            cos, sin = model.model.rotary_emb(weight[:1][None], positions)
        self.cos, self.sin = cos[0], sin[0]  # [max_len, head_dim]
        self.refresh()

    def refresh(self) -> None:
        """(Re)build the fused projections from the model's current weights."""
        self.layers = []
        with torch.inference_mode():
            for layer in self.model.model.layers:
                attn, mlp = layer.self_attn, layer.mlp
                self.layers.append(
                    (
                        layer.input_layernorm.weight,
                        torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                        attn.o_proj.weight,
                        layer.post_attention_layernorm.weight,
                        torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                        mlp.down_proj.weight,
                    )
                )
        self.embed = self.model.model.embed_tokens.weight
        self.final_norm = self.model.model.norm.weight
        self.lm_head = self.model.lm_head.weight

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # As LlamaRMSNorm: in float32, cast back before the weight.
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
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
        capacity = min(capacity, self.max_len)
        shape = (*self.k.shape[:3], capacity, self.head_dim)
        k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        k[:, :, :, : self.capacity] = self.k
        v[:, :, :, : self.capacity] = self.v
        self.k, self.v, self.capacity = k, v, capacity

    def _qkv(
        self, h: torch.Tensor, qkv_w: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [..., heads, dim], k and v [..., kv_heads, dim], rotary applied to q and k."""
        qkv = F.linear(h, qkv_w)
        nq, nk = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        lead = qkv.shape[:-1]
        q = qkv[..., :nq].reshape(*lead, self.n_heads, self.head_dim)
        k = qkv[..., nq : nq + nk].reshape(*lead, self.n_kv, self.head_dim)
        v = qkv[..., nq + nk :].reshape(*lead, self.n_kv, self.head_dim)
        return self._rope(q, cos, sin), self._rope(k, cos, sin), v

    def _mlp(
        self, x: torch.Tensor, norm_w: torch.Tensor, gu_w: torch.Tensor, down_w: torch.Tensor
    ) -> torch.Tensor:
        gu = F.linear(self._norm(x, norm_w), gu_w)
        inter = gu.shape[-1] // 2
        return x + F.linear(F.silu(gu[..., :inter]) * gu[..., inter:], down_w)

    def prefill(self, first_slot: int, prompts: list[list[int]]) -> torch.Tensor:
        b, longest = len(prompts), max(len(p) for p in prompts)
        self._ensure_capacity(longest)
        ids = torch.zeros((b, longest), dtype=torch.long)  # right-padded: pads sit after the
        for i, p in enumerate(prompts):  # prompt, masked by causality, overwritten by decoding
            ids[i, : len(p)] = torch.tensor(p)
        ids = ids.to(self.device)
        x = F.embedding(ids, self.embed)  # [b, P, hidden]
        cos, sin = self.cos[:longest, None, :], self.sin[:longest, None, :]
        rows = slice(first_slot, first_slot + b)
        rep = self.n_heads // self.n_kv
        for layer, (in_w, qkv_w, o_w, post_w, gu_w, down_w) in enumerate(self.layers):
            q, k, v = self._qkv(self._norm(x, in_w), qkv_w, cos, sin)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [b, heads, P, dim]
            self.k[layer, rows, :, :longest] = k
            self.v[layer, rows, :, :longest] = v
            attn = F.scaled_dot_product_attention(
                q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True
            )
            x = x + F.linear(attn.transpose(1, 2).reshape(b, longest, -1), o_w)
            x = self._mlp(x, post_w, gu_w, down_w)
        last = torch.tensor([len(p) - 1 for p in prompts], device=self.device)
        x = x[torch.arange(b, device=self.device), last]
        return F.linear(self._norm(x, self.final_norm), self.lm_head).float()

    def decode(self, tokens: list[int], positions: list[int]) -> torch.Tensor:
        n, length = len(tokens), max(positions) + 1
        self._ensure_capacity(length)
        pos = torch.tensor(positions, device=self.device)
        x = F.embedding(torch.tensor(tokens, device=self.device), self.embed)  # [n, hidden]
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        rows = torch.arange(n, device=self.device)
        # Each row sees its own prefix only: key j is visible to row i when j <= positions[i].
        hidden = torch.arange(length, device=self.device)[None, :] > pos[:, None]
        bias = torch.zeros((n, 1, 1, length), dtype=self.dtype, device=self.device)
        bias.masked_fill_(hidden[:, None, None, :], float("-inf"))
        rep = self.n_heads // self.n_kv
        for layer, (in_w, qkv_w, o_w, post_w, gu_w, down_w) in enumerate(self.layers):
            q, k, v = self._qkv(self._norm(x, in_w), qkv_w, cos, sin)
            k_cache, v_cache = self.k[layer], self.v[layer]
            k_cache[rows, :, pos] = k
            v_cache[rows, :, pos] = v
            keys, values = k_cache[:n, :, :length], v_cache[:n, :, :length]
            q = q.view(n, self.n_kv, rep, self.head_dim)  # query heads grouped by their KV head
            scores = torch.matmul(q, keys.transpose(-1, -2)).mul_(self.scale).add_(bias)
            attn = torch.matmul(torch.softmax(scores.float(), -1).to(self.dtype), values)
            x = x + F.linear(attn.reshape(n, -1), o_w)
            x = self._mlp(x, post_w, gu_w, down_w)
        return F.linear(self._norm(x, self.final_norm), self.lm_head).float()

    def move(self, src: int, dst: int, length: int) -> None:
        self.k[:, dst, :, :length] = self.k[:, src, :, :length]
        self.v[:, dst, :, :length] = self.v[:, src, :, :length]


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

    def prefill(self, first_slot: int, prompts: list[list[int]]) -> torch.Tensor:
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
