"""Numeric precision: what `auto` means on this host, for inference alone and for a training run.

    native_bf16(device)     the hardware computes bf16 fast (AMX / AVX512-BF16 CPUs, bf16 GPUs)
    auto_dtype(device)      `auto` for a model that only samples (eval, serve, rollout)
    train_dtype()           `auto` for a training run, engine and learner alike: float32
    FORCE_ENV               HONING_AUTO_DTYPE=bfloat16|float16|float32: `auto_dtype` answers as
                            a host with (or without) bf16 hardware would, on any host

A run's learner scores what its engine sampled, so the two must compute the same numbers.
Measured on SmolLM2-135M (docs/training.md, "Precision"), bf16 on both sides disagrees by up to
0.3 in logprob, float32 on both by 4e-5: so a run's `auto` is float32 on every host, and bf16 is a
choice a config states. Inference alone has no learner to agree with: it takes bf16 where the
hardware has it. Not covered: loading a model in a dtype (honing.rollout.models), a run's policy
record (honing.trainer.precision).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal, cast, get_args

if TYPE_CHECKING:  # torch is imported where it is used: configs that name a dtype load fast
    import torch

from honing.errors import ConfigError

Dtype = Literal["auto", "bfloat16", "float16", "float32"]  # of a model's weights or compute
Concrete = Literal["bfloat16", "float16", "float32"]
FORCE_ENV = "HONING_AUTO_DTYPE"
CONCRETE: tuple[str, ...] = get_args(Concrete)


def forced() -> Concrete | None:
    """The dtype $HONING_AUTO_DTYPE forces `auto` to, or None when unset or empty."""
    value = os.environ.get(FORCE_ENV, "").strip()
    if not value:
        return None
    if value not in CONCRETE:
        raise ConfigError(
            f"{FORCE_ENV}={value!r}: allowed: {', '.join(CONCRETE)} (or unset it to let the "
            "hardware decide)"
        )
    return cast(Concrete, value)


def native_bf16(device: torch.device | str = "cpu") -> bool:
    """Whether `device` computes bfloat16 natively (on other CPUs torch emulates it, several
    times slower than float32)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    cpu = torch.cpu
    return bool(
        getattr(cpu, "_is_amx_tile_supported", lambda: False)()
        or getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()
    )


def auto_dtype(device: torch.device | str = "cpu") -> Concrete:
    """`auto` for inference alone: $HONING_AUTO_DTYPE if set; else bfloat16 where the hardware
    has it (float16 on GPUs without bf16), float32 on other CPUs."""
    value = forced()
    if value is not None:
        return value
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return "bfloat16" if native_bf16(device) else "float16"
    return "bfloat16" if native_bf16(device) else "float32"


def train_dtype() -> Literal["float32"]:
    """`auto` for a training run, engine and learner alike: float32 on every host (the module
    docstring says why; $HONING_AUTO_DTYPE does not change it, as a bf16 host would not)."""
    return "float32"


def resolve(dtype: Dtype, device: torch.device | str = "cpu") -> Concrete:
    """A concrete dtype for inference alone: `dtype` itself, or what `auto` means here."""
    return auto_dtype(device) if dtype == "auto" else dtype
