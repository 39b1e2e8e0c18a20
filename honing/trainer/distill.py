"""On-policy distillation, `honing distill CONFIG`: a smaller student samples, a teacher judges
each token, and the learner trains the student toward the teacher (advantage `distill`).

    teacher: runs/quickstart/export     # the model to distil (e.g. the RL-trained export)
    student: {layers: 15}               # the teacher with fewer decoder layers, or {model: DIR}
    out: runs/distill
    train: {...}  heldout: {...}  steps: 20  learner: {lr: 5e-5}   # as in honing train

    config = load_yaml_model(path, DistillConfig)
    result = asyncio.run(distill(config))       # train + the teacher's figures beside the student's

The run is a `honing train` run (same run directory, resume with `honing train --resume OUT`):
its policy is the student, `learner.advantage` is `distill` and `learner.teacher` the teacher;
each sampled token's advantage is its teacher logprob minus the student's (honing.rl.
distill_advantages), so no reward is needed (rewards are still recorded and evaluated). A
student `{layers: K}` is the teacher's K decoder layers evenly spread, first and last kept,
with the teacher's embeddings, norms and head (`shrink`), written to OUT/student. Before
training, the teacher is evaluated on the held-out sets and both models' decode speed is
measured (turn about, best of three); RUN/distill.json holds those figures and the last line
sets them side by side.
Not covered: a teacher served elsewhere (it is loaded in this process), a student with another
tokenizer, distilling a team.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from honing.config import StrictModel
from honing.errors import ConfigError
from honing.observe.progress import RunProgress
from honing.trainer.result import TrainResult
from honing.trainer.run_config import TrainConfig

log = logging.getLogger(__name__)

STUDENT_DIR = "student"
DISTILL_FILE = "distill.json"


class StudentSettings(StrictModel):
    """The student: the teacher with fewer layers, or a model directory of its own."""

    layers: int | None = Field(
        None, ge=1, description="Keep this many of the teacher's decoder layers, evenly spread."
    )
    model: str | None = Field(
        None, description="A model directory (or built-in name) sharing the teacher's tokenizer."
    )

    @model_validator(mode="after")
    def _one(self) -> StudentSettings:
        if (self.layers is None) == (self.model is None):
            raise ValueError("give the student as layers: K (shrink the teacher) or model: DIR")
        return self


class DistillConfig(StrictModel):
    """`honing distill`'s file: `teacher`, `student` and a `honing train` config for the rest
    (its `model` is the student, its `learner.advantage` distill)."""

    teacher: str = Field(description="The teacher: a model directory or built-in name.")
    student: StudentSettings
    speed_batch: int = Field(16, ge=1, description="Sequences decoded at once for the speed.")
    speed_tokens: int = Field(64, ge=1, description="Tokens per sequence for the speed.")
    run: dict[str, Any] = Field(
        default_factory=dict, description="Everything else: honing train's keys."
    )

    @model_validator(mode="before")
    @classmethod
    def _gather(cls, data: Any) -> Any:
        """The file is flat (honing train's keys beside teacher/student): gather those."""
        if not isinstance(data, dict):
            return data
        own = {"teacher", "student", "speed_batch", "speed_tokens", "run"}
        rest = {k: v for k, v in data.items() if k not in own}
        if "model" in rest:
            raise ValueError(
                "model: the student is `student: {model: DIR}` (or {layers: K}) in honing distill"
            )
        mine = {k: v for k, v in data.items() if k in own}
        mine["run"] = {**rest, **dict(data.get("run") or {})}
        return mine

    def train_config(self, student: str) -> TrainConfig:
        """The `honing train` config of the run, with `student` as its policy."""
        from honing.config import validate_model

        raw = json.loads(json.dumps(self.run))  # a deep copy
        raw.setdefault("name", "distill")
        raw["model"] = student
        learner = raw.setdefault("learner", {})
        if learner.get("advantage", "distill") != "distill":
            raise ConfigError(
                f"learner.advantage is {learner['advantage']!r}: honing distill trains with "
                "advantage distill (drop the key)"
            )
        learner["advantage"] = "distill"
        learner["teacher"] = self.teacher
        learner.setdefault("dynamic_sampling", False)
        return validate_model(TrainConfig, raw, source="honing distill")


class SideBySide(BaseModel):
    """The teacher's figures beside the student's (RUN/distill.json)."""

    teacher: str
    student: str
    student_layers: int
    teacher_layers: int
    teacher_success: dict[str, float | None]  # held-out set -> success
    teacher_tok_s: float
    student_tok_s: float
    n: dict[str, int]  # held-out set -> episodes

    def line(self, result: TrainResult, name: str) -> str:
        """`NAME: teacher T% (X tok/s); student base S% → distilled D% (Y tok/s, Z.Zx faster);
        n=N`: pooled held-out success, decode speed at the same batch."""
        before = TrainResult.pooled(result.before)
        after = TrainResult.pooled(result.after)
        teacher = _pooled(self.teacher_success, self.n)
        return (
            f"{name}: teacher {_pct(teacher)} ({self.teacher_tok_s:.0f} tok/s, "
            f"{self.teacher_layers} layers); student base {_pct(before)} → distilled "
            f"{_pct(after)} ({self.student_tok_s:.0f} tok/s, {self.student_layers} layers, "
            f"{self.student_tok_s / max(self.teacher_tok_s, 1e-9):.1f}x the teacher's speed); "
            f"n={sum(self.n.values())}"
        )


def shrink(teacher: str | Path, out: Path, layers: int) -> Path:
    """Write to `out` a student made of `layers` of `teacher`'s decoder layers (evenly spread,
    the first and last kept) with its embeddings, final norm, head and tokenizer; returns `out`."""
    import torch

    from honing.rollout.models import load_model, load_tokenizer, resolve_model

    path = resolve_model(str(teacher))
    model = load_model(path, "float32")
    decoder = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(decoder, torch.nn.ModuleList):
        raise ConfigError(
            f"{path}: cannot find the decoder layers (model.model.layers) of a "
            f"{type(model).__name__}; give the student as model: DIR"
        )
    total = len(decoder)
    if layers >= total:
        raise ConfigError(
            f"student.layers is {layers} but the teacher has {total} decoder layers: keep fewer"
        )
    keep = kept_layers(total, layers)
    model.model.layers = torch.nn.ModuleList([decoder[i] for i in keep])
    for new, layer in enumerate(model.model.layers):
        for module in layer.modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = new  # the KV cache's slot
    model.config.num_hidden_layers = layers
    types = getattr(model.config, "layer_types", None)
    if isinstance(types, list) and len(types) == total:
        model.config.layer_types = [types[i] for i in keep]
    tmp = out.with_name(f".{out.name}.tmp")
    model.save_pretrained(tmp)
    load_tokenizer(path).save_pretrained(tmp)
    (tmp / "shrunk_from.json").write_text(
        json.dumps({"teacher": str(path), "layers": keep}, indent=2) + "\n"
    )
    tmp.rename(out)
    log.info("student: %d of the teacher's %d layers %s -> %s", layers, total, keep, out)
    return out


def kept_layers(total: int, layers: int) -> list[int]:
    """`layers` indices of `total`, evenly spread, the first and the last kept."""
    if layers == 1:
        return [total - 1]
    return sorted({int(i * (total - 1) / (layers - 1) + 0.5) for i in range(layers)})  # half up


async def distill(
    config: DistillConfig, *, progress: RunProgress | None = None
) -> tuple[TrainResult, str]:
    """Shrink the student (if asked), measure the teacher beside it, train (driving `progress`,
    a live display); the result and the last line."""
    from honing.trainer.loop import train

    raw_out = config.run.get("out")
    if raw_out is None:
        raise ConfigError("give out: the run directory (or out=DIR)")
    run_dir = Path(raw_out)
    if (run_dir / "config.yaml").exists():
        raise ConfigError(
            f"{run_dir} already holds a run: continue it with `honing train --resume {run_dir}`"
        )
    student = config.student.model
    if student is None:
        assert config.student.layers is not None
        target = run_dir / STUDENT_DIR
        if not target.exists():
            run_dir.mkdir(parents=True, exist_ok=True)
            shrink(config.teacher, target, config.student.layers)
        student = str(target)
    train_config = config.train_config(student).model_copy(update={"out": run_dir})
    side = await _side_by_side(config, train_config, student)
    result = await train(train_config, progress=progress)
    line = side.line(result, train_config.name)
    (run_dir / DISTILL_FILE).write_text(
        json.dumps({**side.model_dump(), "line": line}, indent=2) + "\n"
    )
    return result, line


async def _side_by_side(config: DistillConfig, run: TrainConfig, student: str) -> SideBySide:
    """The teacher's held-out success, and both models' decode speed."""
    from honing.eval.model import EnginePlayer
    from honing.eval.runner import evaluate
    from honing.sandbox import SandboxPool
    from honing.trainer.sources import heldout_sets
    from honing.trainer.sync import run_engine

    success: dict[str, float | None] = {}
    n: dict[str, int] = {}
    engine = run_engine(run, config.teacher)
    try:
        async with SandboxPool(run.sandbox) as pool:
            agent = run.agent_config(run.eval.temperature, run.seed)
            for name, taskset in heldout_sets(run).items():  # those the student is judged on
                report = await evaluate(taskset, EnginePlayer(engine, agent, name="teacher"),
                                        pool, k=run.eval.k, config=run.env_config,
                                        concurrency=run.engine.slots)  # fmt: skip
                success[name] = report.end_to_end.success_rate
                n[name] = report.end_to_end.total
                log.info("teacher on %s: success %s (n=%d)", name, _pct(success[name]), n[name])
        other = run_engine(run, student)
        try:  # turn about, best of 3: both under the same load, the noise of a shared machine out
            speeds: dict[str, list[float]] = {"teacher": [], "student": []}
            for _ in range(3):
                for name, side in (("teacher", engine), ("student", other)):
                    tok_s = await decode_speed(side, config.speed_batch, config.speed_tokens)
                    speeds[name].append(tok_s)
        finally:
            await other.close()
    finally:
        await engine.close()
    teacher_speed, student_speed = max(speeds["teacher"]), max(speeds["student"])
    log.info("decode: teacher %.0f tok/s, student %.0f tok/s", teacher_speed, student_speed)
    return SideBySide(
        teacher=config.teacher,
        student=student,
        teacher_layers=_layers(config.teacher),
        student_layers=_layers(student),
        teacher_success=success,
        teacher_tok_s=teacher_speed,
        student_tok_s=student_speed,
        n=n,
    )


async def decode_speed(engine: Any, batch: int, tokens: int) -> float:
    """Tokens per second of `engine` (a token engine: hf) decoding `batch` sequences of at
    most `tokens` tokens together (temperature 1, a fixed seed, after one warm-up call)."""
    from honing.rollout.engines.base import Prompt, SamplingParams

    tokenizer = engine.tokenizer
    prompts = [
        Prompt(token_ids=tokenizer.encode(f"Count from {i} upwards in words:"))
        for i in range(batch)
    ]
    warm = SamplingParams(max_new_tokens=4, seed=0)
    await engine.generate(prompts[:1], warm)
    sampling = SamplingParams(max_new_tokens=tokens, seed=1)
    started = time.perf_counter()
    generations = await engine.generate(prompts, sampling)
    seconds = time.perf_counter() - started
    return sum(len(g.token_ids) for g in generations) / max(seconds, 1e-9)


def _layers(model: str) -> int:
    from honing.rollout.models import resolve_model

    config = json.loads((resolve_model(model) / "config.json").read_text())
    return int(config.get("num_hidden_layers", 0))


def _pooled(success: dict[str, float | None], n: dict[str, int]) -> float | None:
    known = [(s, n[k]) for k, s in success.items() if s is not None]
    total = sum(count for _, count in known)
    return sum(s * count for s, count in known) / total if total else None


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"
