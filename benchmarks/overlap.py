"""Overlapped generation and training (`async: {max_staleness: 1}`) versus alternating, with the
engine in a separate process: `honing serve` in a subprocess, reached through `engine.url`.

    .venv/bin/python benchmarks/overlap.py [--steps 5] [--groups 2] [--n 4] [--model tiny]

Both runs train the same model from the same start on the same tasks (synthetic-math, seeded)
with the same settings; only `async` differs. The server is reset to the starting model at each
run's start. `--model tiny` (default) is a random 4-layer Llama with SmolLM2's tokenizer (built
into a temporary directory); `default` or a directory trains that model (minutes per update on a
CPU). A random model earns no reward, so dynamic sampling is off: every update still runs its
full forward and backward pass, which is the cost overlap hides.

Reported: episodes per minute over updates 2..N (from the first update's end to the last's, so
start-up is left out), the speedup, and the overlapped run's mean staleness (versions between
each trajectory's oldest token and the learner that trained on it). Overlap can only help when
engine and learner do not compete for the same compute: on one CPU shared by both (this
benchmark's default) they slow each other down, and the gain is at most the idle time each
leaves — see docs/scaling.md ("Overlapped generation and training").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from honing.config import validate_model
from honing.rollout.models import load_tokenizer, resolve_model
from honing.trainer.loop import train
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import UpdateRecord


def last_line(alternating: float, overlapped: float, staleness: float) -> str:
    """The benchmark's figure: episodes per minute each way, their ratio, the mean staleness."""
    speedup = overlapped / alternating if alternating > 0 else 0.0
    return (
        f"overlap: alternating {alternating:.1f} episodes/min; overlapped {overlapped:.1f} "
        f"episodes/min; speedup {speedup:.1f}x; mean staleness {staleness:.2f}"
    )


def mean_staleness(records: list[dict[str, Any]]) -> float:
    """Mean over trajectories of the `staleness` counts ({"lag": count}) of update records."""
    total = sum(c for r in records for c in r["staleness"].values())
    lagged = sum(int(lag) * c for r in records for lag, c in r["staleness"].items())
    return lagged / total if total else 0.0


def breakdown(records: list[dict[str, Any]]) -> str:
    """Mean seconds per update (2..N) waiting for rollouts, updating and syncing."""
    rest = records[1:] or records
    parts = [f"{key} {sum(r[key] for r in rest) / len(rest):.2f}s"
             for key in ("rollout_s", "update_s", "sync_s")]  # fmt: skip
    return "per update: " + ", ".join(parts)


def tiny_model(out: Path, hidden: int, layers: int) -> Path:
    """A random Llama with SmolLM2's tokenizer and chat template, saved in `out`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer(resolve_model("default"))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(model: str, port: int, max_batch: int) -> subprocess.Popen[bytes]:
    """`honing serve MODEL` in a subprocess, once it answers /v1/models."""
    command = [sys.executable, "-m", "honing", "serve", model, "--port", str(port),
               "--max-batch", str(max_batch), "--dtype", "float32"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"honing serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise RuntimeError("honing serve did not answer within 300 s")


def settings(args: argparse.Namespace, model: str, url: str, out: Path, k: int) -> TrainConfig:
    data: dict[str, Any] = {
        "name": f"overlap-k{k}",
        "model": model,
        "out": str(out),
        "seed": 0,
        "train": {"math": {"tasks": "synthetic-math", "count": 64, "seed": 1}},
        "steps": args.steps,
        "groups_per_step": args.groups,
        "n": args.n,
        "learner": {"lr": 1e-4, "dynamic_sampling": False, "dtype": "float32"},
        "agent": {"max_turns": 1, "max_new_tokens": args.max_new_tokens, "temperature": 1.0},
        "engine": {"url": url, "slots": args.groups * args.n},
        "eval": {"before": False},
        "checkpoint": {"every": 10_000},
        "observe": {"tensorboard": False},
    }
    if k:
        data["async"] = {"max_staleness": k}
    return validate_model(TrainConfig, data)


def measure(config: TrainConfig) -> tuple[float, list[dict[str, Any]]]:
    """Episodes per minute over updates 2..N, and the run's update records."""
    ends: list[float] = []

    def on_step(_: UpdateRecord) -> None:
        ends.append(time.perf_counter())

    asyncio.run(train(config, on_step=on_step))
    records = [json.loads(x) for x in (config.out / "metrics.jsonl").read_text().splitlines()]
    episodes = sum(r["episodes"] for r in records[1:])
    return 60 * episodes / (ends[-1] - ends[0]), records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny, default, or a model directory")
    parser.add_argument("--hidden", type=int, default=256, help="tiny only: hidden size")
    parser.add_argument("--layers", type=int, default=4, help="tiny only: layers")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the rate is measured from update 2 on)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = args.model
        if model == "tiny":
            model = str(tiny_model(root / "model", args.hidden, args.layers))
        port = free_port()
        server = start_server(model, port, args.groups * args.n)
        try:
            url = f"http://127.0.0.1:{port}/v1"
            alternating, plain = measure(settings(args, model, url, root / "k0", 0))
            print(f"alternating: {alternating:.1f} episodes/min; {breakdown(plain)}", flush=True)
            overlapped, records = measure(settings(args, model, url, root / "k1", 1))
            staleness = mean_staleness(records)
            print(f"overlapped (max_staleness 1): {overlapped:.1f} episodes/min; "
                  f"{breakdown(records)}; staleness per update "
                  f"{[r['staleness'] for r in records]}", flush=True)  # fmt: skip
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
    print(last_line(alternating, overlapped, staleness))


if __name__ == "__main__":
    main()
