"""Shared fixtures: sandbox pools, unique tokens, host-side probes (processes, helpers), tiny
models, and the base of a tiny run for the tests that run `honing train`."""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from honing.rollout.models import load_tokenizer, resolve_model
from honing.sandbox import SandboxConfig, SandboxPool

PROJECT_DIR = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--auto-dtype",
        choices=["bfloat16", "float32"],
        default=None,
        help="Force what dtype 'auto' resolves to (sets $HONING_AUTO_DTYPE), as on a host with "
        "(bfloat16) or without (float32) bf16 hardware; make test runs the dtype tests under both.",
    )


def pytest_configure(config: pytest.Config) -> None:
    from honing.precision import FORCE_ENV

    forced = config.getoption("--auto-dtype")
    if forced is not None:
        os.environ[FORCE_ENV] = forced  # subprocesses (CLI runs, Ray workers) inherit it


def pytest_report_header(config: pytest.Config) -> str:
    from honing.precision import FORCE_ENV, auto_dtype, native_bf16

    forced = os.environ.get(FORCE_ENV) or "unset"
    return f"auto dtype: {auto_dtype()} (native bf16: {native_bf16()}; ${FORCE_ENV}: {forced})"


@pytest.fixture
def project_dir() -> Path:
    """The honing checkout on the host (must be invisible inside the sandbox)."""
    return PROJECT_DIR


def _bwrap_missing() -> bool:
    return shutil.which("bwrap") is None


def config(**overrides: object) -> SandboxConfig:
    """A small, fast pool configuration for tests."""
    values: dict[str, object] = {"pool_size": 2, "timeout_s": 10.0}
    values.update(overrides)
    return SandboxConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
async def pool() -> AsyncIterator[SandboxPool]:
    """A started two-cell bubblewrap pool, closed after the test."""
    if _bwrap_missing():
        pytest.skip("bubblewrap (bwrap) is not installed")
    async with SandboxPool(config()) as p:
        yield p


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def module_pool() -> AsyncIterator[SandboxPool]:
    """A two-cell pool (10 s limit) shared by a whole test module; the module's tests and
    fixtures that use it run on the module's event loop (loop_scope="module")."""
    if _bwrap_missing():
        pytest.skip("bubblewrap (bwrap) is not installed")
    async with SandboxPool(config()) as p:
        yield p


@pytest.fixture
async def pool1() -> AsyncIterator[SandboxPool]:
    """A one-cell pool: consecutive runs are guaranteed to share the same cell."""
    if _bwrap_missing():
        pytest.skip("bubblewrap (bwrap) is not installed")
    async with SandboxPool(config(pool_size=1)) as p:
        yield p


@pytest.fixture
def token() -> str:
    """A unique marker that appears nowhere on the machine before the test."""
    return "honingtok" + secrets.token_hex(8)


@pytest.fixture
def sleep_token() -> str:
    """A unique, valid `sleep` duration (minutes long) to find an exec'd `sleep` on the host."""
    return f"{random.randint(600, 899)}.{secrets.randbelow(10**9):09d}{random.randint(1, 9)}"


def _host_pids_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (the sandbox's pids are visible here)."""
    found = []
    needle = marker.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            found.append(int(entry.name))
    return found


@pytest.fixture
def host_pids_with() -> Callable[[str], list[int]]:
    """`host_pids_with(marker)`: host pids whose command line contains `marker`."""
    return _host_pids_with


@pytest.fixture
def make_config() -> Callable[..., SandboxConfig]:
    """`make_config(**overrides)`: a small, fast `SandboxConfig` for tests (skips without bwrap)."""

    def make(**overrides: object) -> SandboxConfig:
        cfg = config(**overrides)
        if cfg.isolation == "bwrap" and _bwrap_missing():
            pytest.skip("bubblewrap (bwrap) is not installed")
        return cfg

    return make


@pytest.fixture
def host_helper(token: str) -> Iterator[subprocess.Popen[bytes]]:
    """A host process whose command line carries `token`; killed after the test."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", token],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def home_secret(token: str) -> Iterator[Path | None]:
    """A secret file in the host user's home, removed after the test (None if unwritable)."""
    path = Path.home() / f".honing-test-secret-{token}"
    try:
        path.write_text(f"home secret {token}\n")
    except OSError:
        yield None
        return
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


# -- models: the embedded default's tokenizer on a tiny random-weight Llama ------------------
@pytest.fixture(scope="session")
def smol_dir() -> Path:
    """The embedded SmolLM2-135M-Instruct (converted from GGUF once, then cached)."""
    return resolve_model("default")


def random_llama(smol_dir: Path, out: Path, *, initializer_range: float = 0.02) -> Path:
    """A 2-layer random Llama with SmolLM2's tokenizer and chat template, saved in `out`. A larger
    `initializer_range` gives sharper logits (tests that need a few likely tokens, or a bf16
    rounding that shows)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer(smol_dir)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        initializer_range=initializer_range,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(smol_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama with SmolLM2's tokenizer and chat template, saved as a directory."""
    return random_llama(smol_dir, tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def make_random_llama(
    smol_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str, float], Path]:
    """`make(name, initializer_range)`: a `random_llama` in a new directory named after `name`."""

    def make(name: str, initializer_range: float) -> Path:
        out = tmp_path_factory.mktemp(name)
        return random_llama(smol_dir, out, initializer_range=initializer_range)

    return make


# -- tiny runs: shared by the export and serve tests that run `honing train` ------------------
def _math_tasks(directory: Path, count: int) -> Path:
    """`count` addition tasks ("What is i + 2i?") as JSONL."""
    path = directory / "tasks.jsonl"
    rows = [{"id": f"m{i}", "domain": "math", "prompt": f"What is {i} + {2 * i}?",
             "answer": str(3 * i)} for i in range(1, count + 1)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _tiny_run_config(name: str, model: Path, tasks: Path, **settings: Any) -> dict[str, Any]:
    """Two updates of 2 groups × 2 on the first 4 tasks, held out on the rest. A random model's
    rewards are all equal (no gradient), so AdamW's decoupled weight decay is what moves the
    weights: the trained model always differs from the base."""
    return {
        "name": name,
        "model": str(model),
        "train": {"m": {"tasks": str(tasks), "limit": 4}},
        "heldout": {"m": {"tasks": str(tasks)}},
        "steps": 2,
        "groups_per_step": 2,
        "n": 2,
        "learner": {"lr": 1e-2, "weight_decay": 0.1, "dynamic_sampling": False},
        "sandbox": {"pool_size": 1, "timeout_s": 20.0},
        **settings,
    }


@pytest.fixture(scope="session")
def math_tasks() -> Callable[[Path, int], Path]:
    """`math_tasks(directory, count)`: a small math task file (see `_math_tasks`)."""
    return _math_tasks


@pytest.fixture(scope="session")
def tiny_run_config() -> Callable[..., dict[str, Any]]:
    """`tiny_run_config(name, model, tasks, **settings)`: a tiny run's config as a dict."""
    return _tiny_run_config
