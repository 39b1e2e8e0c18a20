"""A peft LoRA adapter merged into base weights: W' = W + s · B·A for each adapted module.

    adapter = read_adapter(Path("ckpt/adapter"))  # adapter_config.json + .safetensors
    merged = adapter.merge(base)                  # {base parameter name: merged tensor}

`s` is `lora_alpha / r` (`lora_alpha / sqrt(r)` with `use_rslora`), per module when the config has
`rank_pattern` / `alpha_pattern`; `fan_in_fan_out` adapters (GPT-2's Conv1D) are transposed.
Parameter names are the base model's: peft's `base_model.model.` prefix is dropped.

Not covered (refused with ServeError naming the feature): DoRA, embedding LoRA, `modules_to_save`,
adapters stored as `adapter_model.bin`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from honing.errors import ServeError

PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class Adapter:
    """One adapter's factors, by the base parameter name of the module they adapt."""

    path: Path
    a: dict[str, torch.Tensor]  # (r, in)
    b: dict[str, torch.Tensor]  # (out, r)
    scaling: dict[str, float]
    fan_in_fan_out: bool

    @property
    def targets(self) -> list[str]:
        return sorted(self.a)

    def merge(self, base: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The merged weights of the adapted parameters (`base` holds at least those)."""
        merged: dict[str, torch.Tensor] = {}
        for name in self.targets:
            if name not in base:
                raise ServeError(
                    f"adapter {self.path}: it adapts {name}, which the served model does not have "
                    "(an adapter of another base model?)"
                )
            weight = base[name]
            delta = self.b[name].float() @ self.a[name].float() * self.scaling[name]
            if self.fan_in_fan_out:
                delta = delta.T
            if tuple(delta.shape) != tuple(weight.shape):
                raise ServeError(
                    f"adapter {self.path}: {name} is {tuple(weight.shape)} in the served model "
                    f"but the adapter's B·A is {tuple(delta.shape)} (another base model?)"
                )
            merged[name] = (weight.float() + delta.to(weight.device)).to(weight.dtype)
        return merged


def read_adapter(path: Path) -> Adapter:
    """Read a peft adapter directory (see the module docstring for what is refused)."""
    from safetensors.torch import load_file

    config_file, weights_file = path / "adapter_config.json", path / "adapter_model.safetensors"
    if not config_file.is_file() or not weights_file.is_file():
        raise ServeError(
            f"{path} is not a peft LoRA adapter directory: it needs adapter_config.json and "
            "adapter_model.safetensors (peft's save_pretrained writes both)"
        )
    try:
        config: dict[str, Any] = json.loads(config_file.read_text())
        tensors = load_file(str(weights_file))
    except Exception as exc:
        raise ServeError(f"{path}: cannot read the adapter: {exc}") from exc
    if config.get("peft_type", "LORA") != "LORA":
        raise ServeError(f"{path}: peft_type {config.get('peft_type')!r}; only LORA is served")
    if config.get("use_dora"):
        raise ServeError(f"{path}: DoRA adapters are not supported; merge it and reload_weights")
    if config.get("modules_to_save") or any("modules_to_save" in k for k in tensors):
        raise ServeError(
            f"{path}: the adapter fully trains modules_to_save; export the merged model and "
            "POST /reload_weights instead"
        )
    a: dict[str, torch.Tensor] = {}
    b: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        found = re.fullmatch(r"(.+)\.lora_([AB])(?:\.[^.]+)?\.weight", key)
        if found is None:
            raise ServeError(
                f"{path}: tensor {key} is not a lora_A/lora_B weight (embedding LoRA and other "
                "extras are not supported)"
            )
        module = found.group(1).removeprefix(PEFT_PREFIX)
        (a if found.group(2) == "A" else b)[module + ".weight"] = tensor
    if not a or set(a) != set(b):
        raise ServeError(f"{path}: lora_A and lora_B weights do not pair up")
    r, alpha = int(config.get("r", 8)), float(config.get("lora_alpha", 8))
    rslora = bool(config.get("use_rslora"))
    ranks: dict[str, int] = config.get("rank_pattern") or {}
    alphas: dict[str, float] = config.get("alpha_pattern") or {}
    scaling = {}
    for name in a:
        module = name.removesuffix(".weight")
        rank = int(_pattern(ranks, module, r))
        value = float(_pattern(alphas, module, alpha))
        scaling[name] = value / (math.sqrt(rank) if rslora else rank)
    return Adapter(path, a, b, scaling, bool(config.get("fan_in_fan_out")))


def _pattern(patterns: Mapping[str, Any], module: str, default: Any) -> Any:
    """peft's rank/alpha pattern lookup: a key matching the end of the module's name."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default
