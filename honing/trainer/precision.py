"""A run's precision: one dtype for sampling and learning, decided once at start and written down.

    precision = decide(config)          -> RunPrecision (engine, learner, mixed, ...)
    config = precision.apply(config)    concrete dtypes: what RUN/config.yaml records

`auto` on either side follows the other side when that one is stated, else the run's default
(`honing.precision.train_dtype`: float32 on every host, by measurement). Both sides stated and
different is a mixed setup: the start-up check measures the gap and the report shows it; the
decoupled loss's importance weights (always on) correct it. With `engine.url` the server's dtype
is its own: the check measures it.

Not covered: what `auto` means on a host (honing.precision), the check itself
(honing.trainer.learner.check_logprob_match).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from honing.config import StrictModel
from honing.precision import native_bf16, train_dtype
from honing.trainer.run_config import TrainConfig

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
