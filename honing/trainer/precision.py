"""A run's precision: one dtype for sampling and learning, decided once at start and written down.

    precision = decide(config)          -> RunPrecision (engine, learner, mixed, ...)
    config = precision.apply(config)    concrete dtypes: what RUN/config.yaml records

`auto` on either side follows the other side when that one is stated, else the run's default
(`honing.precision.train_dtype`: float32 on every host, by measurement). Both sides stated and
different is a mixed setup: the start-up check measures the gap and the report shows it; the
decoupled loss's importance weights (always on) correct it. With `engine.url` the server's dtype
is its own: the check measures it.

    startup_check(learner, trajectories, precision, step)   # the check, logged and warned

Not covered: what `auto` means on a host (honing.precision), the scoring itself
(honing.trainer.learner.check_logprob_match).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from honing.config import StrictModel
from honing.observe.events import emit
from honing.precision import native_bf16, train_dtype
from honing.records import Trajectory
from honing.trainer.run_config import TrainConfig

if TYPE_CHECKING:
    from honing.trainer.learner import Learner, MatchReport

log = logging.getLogger(__name__)

SERVER = "server"  # the engine's dtype when a server samples: its own, not the run's
MATCH_THRESHOLD = 1e-2  # start-up check: max |engine - learner| logprob on one batch


class RunPrecision(StrictModel):
    """The dtypes a run samples and learns in, and why."""

    engine: str = Field(description="The engine's weights: a torch dtype name, or 'server'.")
    learner: Literal["float32", "bfloat16"] = Field(
        description="float32, or bf16 autocast over fp32 master weights."
    )
    mixed: bool = Field(description="The config states different dtypes for the two sides.")
    source: Literal["auto", "config"] = Field(
        description="auto: honing decided; config: the config stated a dtype."
    )
    native_bf16: bool = Field(description="This host computes bf16 natively.")

    @property
    def same(self) -> bool:
        """Engine and learner compute the same numbers (a server's dtype is not known)."""
        return self.engine == self.learner

    def describe(self) -> str:
        """One phrase for logs, the report and the model card."""
        if self.engine == SERVER:
            return f"learner {self.learner}; the server samples in its own dtype"
        if self.same:
            return f"{self.learner} for sampling and learning ({self.source})"
        return (
            f"mixed: engine {self.engine}, learner {self.learner} (stated in the config; the "
            "importance weights correct the gap)"
        )

    def apply(self, config: TrainConfig) -> TrainConfig:
        """`config` with the concrete dtypes (a server keeps `engine.dtype` as given)."""
        engine = config.engine
        if self.engine != SERVER:
            engine = engine.model_copy(update={"dtype": self.engine})
        learner = config.learner.model_copy(update={"dtype": self.learner})
        return config.model_copy(update={"engine": engine, "learner": learner})


def decide(config: TrainConfig) -> RunPrecision:
    """The run's precision from its config (see the module docstring)."""
    wanted_engine, wanted_learner = config.engine.dtype, config.learner.dtype
    server = config.engine.url is not None
    stated = (not server and wanted_engine != "auto") or wanted_learner != "auto"
    learner: Literal["float32", "bfloat16"] = train_dtype()
    if wanted_learner != "auto":
        learner = wanted_learner
    elif not server and wanted_engine in ("float32", "bfloat16"):
        learner = "bfloat16" if wanted_engine == "bfloat16" else "float32"
    engine: str = SERVER if server else (learner if wanted_engine == "auto" else wanted_engine)
    return RunPrecision(
        engine=engine,
        learner=learner,
        mixed=engine not in (learner, SERVER),
        source="config" if stated else "auto",
        native_bf16=native_bf16(),
    )


def startup_check(
    learner: Learner, trajectories: Sequence[Trajectory], precision: RunPrecision, step: int
) -> MatchReport | None:
    """Score the first batch's tokens with the learner and compare with the engine's: a gap
    means different numerics, temperature, tokens or weights. Expected only in a mixed setup
    the config stated; anything else is a warning naming the likely cause. None when no
    trajectory has the engine's logprobs of its tokens."""
    from honing.trainer.learner import check_logprob_match

    scored = [t for t in trajectories if any(t.loss_mask) and len(t.logprobs) == len(t.token_ids)]
    if not scored:
        return None
    report = check_logprob_match(learner, scored[:8])
    passed = report.max_abs_diff <= MATCH_THRESHOLD
    log.info("start-up check: engine vs learner %s (%s)", report, precision.describe())
    emit(
        "logprob_check",
        step,
        tokens=report.tokens,
        max_abs_diff=report.max_abs_diff,
        mean_abs_diff=report.mean_abs_diff,
        threshold=MATCH_THRESHOLD,
        passed=passed,
        engine=precision.engine,
        learner=precision.learner,
        mixed=precision.mixed,
    )
    if passed:
        return report
    what = f"engine and learner disagree on logprobs (max |diff| {report.max_abs_diff:.2e})"
    if precision.mixed:
        log.info(
            "%s, as expected of the mixed precision the config states (%s); the importance "
            "weights correct it",
            what,
            precision.describe(),
        )
        return report
    if precision.engine == SERVER:
        cause = (
            "the server likely samples in another dtype than the learner's "
            f"{precision.learner} (honing serve --dtype {precision.learner}; "
            f"vLLM --dtype {precision.learner}), or with another temperature"
        )
    else:
        cause = (
            f"check the engine's dtype (this run's is {precision.engine}), the agent's "
            "and the learner's temperature, and the engine's model"
        )
    message = f"{what}: the importance weights will correct it, but {cause}"
    log.warning("%s", message)
    emit("warning", step, message=message)
    return report
