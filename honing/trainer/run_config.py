"""The configuration of `honing train`: one YAML file, overridable by `key.sub=value` arguments.

    model: default                     # the policy to train (a directory or a built-in name)
    out: runs/quickstart               # the run directory (store, checkpoints, metrics, evals)
    train: {math: {tasks: synthetic-math, count: 256, seed: 1, weight: 1.0}}   # mixed by weight
    heldout: {math: {tasks: synthetic-math, count: 32, seed: 2}}   # evaluated periodically
    phases: [{name: math, steps: 10, train: [math]}, ...]         # optional: sources by phase
    learner / curriculum / agent / engine / async / eval / checkpoint / warm_start / sandbox
    env / observe
    remote: s3://bucket/runs/quickstart  # optional: mirror the run there (honing.trainer.remote)

Covered: the sections, their defaults and validation (errors name the key and what is allowed),
the cross-checks between them, the settings one section takes from another (`env_config`,
`learner_config`), and reading a run's saved config (`load_saved`; at a URL, `load_remote`).
Not covered: running it (`honing.trainer.loop`); docs/training.md lists every key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    FieldSerializationInfo,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_validator,
)

from honing.config import (
    SandboxConfig,
    StrictModel,
    merge,
    parse_overrides,
    read_yaml_mapping,
    validate_model,
)
from honing.envs.base import EnvConfig
from honing.observe.sinks import ObserveConfig
from honing.rollout.engines import Dtype
from honing.rollout.engines.speculative import SpeculativeConfig
from honing.rollout.ray.config import RayConfig
from honing.rollout.saved_agent import SavedAgent
from honing.rollout.team import TeamConfig
from honing.tasks import domains
from honing.tasks.synthetic import Phrasings
from honing.trainer.config import LearnerConfig, RiskSettings
from honing.trainer.curriculum import CurriculumSettings
from honing.trainer.remote import RemoteSettings

if TYPE_CHECKING:
    from honing.rollout.agent import AgentConfig

SYNTHETIC_PREFIX = "synthetic-"
# (section, key) of the settings `honing train` takes from `agent`: `env.max_steps` is
# `agent.max_turns`, `learner.temperature` is `agent.temperature`. A run's config.yaml leaves
# them out; one saved before they were derived holds values the run did not play (`load_saved`).
DERIVED = (("env", "max_steps"), ("learner", "temperature"))


class TaskSource(StrictModel):
    """Where tasks come from: a built-in name, a file or a URL; synthetic sets take a size and a
    seed, so a held-out set is the same generator with another seed."""

    tasks: str = Field(description="Built-in name (synthetic-math, humaneval…), path or URL.")
    count: int | None = Field(
        None, ge=1, description="synthetic-* only: how many tasks to generate (default 64)."
    )
    seed: int | None = Field(None, description="synthetic-* only: the generator's seed.")
    tags: list[str] = Field(
        default_factory=list, description="Keep only the tasks with at least one of these tags."
    )
    limit: int | None = Field(None, ge=1, description="Keep the first `limit` tasks.")
    phrasings: Phrasings | None = Field(
        None,
        description="synthetic sets with held-out wordings only (each domain's "
        "`heldout_wordings`: synthetic-math, -sql, -tools, -finance, -structure, -code-repair): "
        "'train' words every task as training does; 'heldout' words about half in ways training "
        "never does (tagged phrasing-unseen). Default: 'heldout' for held-out sets, 'train' for "
        "the rest.",
    )
    weight: float = Field(1.0, gt=0, description="Share of the training mix (train sources).")

    @model_validator(mode="after")
    def _check(self) -> TaskSource:
        synthetic = self.tasks.startswith(SYNTHETIC_PREFIX)
        if not synthetic and (self.count is not None or self.seed is not None):
            raise ValueError(
                f"count and seed apply to synthetic-* task sets only, not {self.tasks!r}; use "
                "limit to shorten a task set"
            )
        phrased = domains.phrased_sets()
        if self.phrasings is not None and self.tasks not in phrased:
            raise ValueError(
                f"phrasings applies to {', '.join(phrased[:-1])} and {phrased[-1]} only, not "
                f"{self.tasks!r}; drop it"
            )
        return self


class Phase(StrictModel):
    """A stretch of the run that trains on some sources (later phases usually add domains)."""

    name: str = Field(min_length=1)
    steps: int = Field(ge=1, description="Updates in this phase.")
    train: list[str] = Field(min_length=1, description="Names of the train sources it mixes.")


class AgentSettings(StrictModel):
    """How episodes are played during training (the evaluation has its own temperature)."""

    max_turns: int = Field(4, ge=1, description="Model turns per episode at most.")
    max_new_tokens: int = Field(96, ge=1, description="Tokens per model turn at most.")
    max_total_tokens: int = Field(2048, ge=16, description="Prompt plus all turns at most.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature for training.")
    top_p: float = Field(1.0, gt=0, le=1)
    system_prompt: str | None = Field(
        None, description="None: honing's default tool-use system prompt."
    )
    restate: bool = Field(
        True,
        description="Each observation restates the whole task state (goal, constraints, actions, "
        "next steps); false: only what changed (errors, new next steps) after the first, for "
        "short episodes whose transcript already holds the rest (fewer tokens a turn).",
    )
    generate_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Seconds one model turn may take before the episode is an infrastructure "
        "failure (`infra:generate`). A CPU decoding many long-context rows at once needs more "
        "(finance: 32 rows of 2-3k tokens on 2 shared cores passed 600 s), or fewer engine.slots.",
    )

    def saved(self) -> SavedAgent:
        """These settings as saved beside a model the run wrote (`honing_agent.json`), so that
        `honing eval --policy model:DIR` and `honing serve DIR` play it as it was trained."""
        return SavedAgent(system_prompt=self.system_prompt, max_turns=self.max_turns,
                          max_new_tokens=self.max_new_tokens,
                          max_total_tokens=self.max_total_tokens, restate=self.restate)  # fmt: skip


class EngineSettings(StrictModel):
    """The inference engine that generates the rollouts: in process (hf), or a server."""

    slots: int = Field(32, ge=1, description="Sequences decoded together.")
    dtype: Dtype = Field(
        "auto",
        description="The engine's weights. auto: the learner's dtype when the run states one, "
        "else float32, so that the engine samples with the numerics the learner scores with "
        "(honing.trainer.precision); a dtype different from learner.dtype is a mixed setup.",
    )
    prefix_cache: bool = Field(True, description="Reuse the KV of earlier turns of an episode.")
    speculative: SpeculativeConfig | None = Field(
        None,
        description="Speculative decoding in the hf engine (greedy rows only, so mostly for "
        "evaluation at temperature 0): {method: ngram} or {method: draft, draft_model: DIR}.",
    )
    url: str | None = Field(
        None,
        description="An OpenAI-compatible server (honing serve, vLLM, SGLang: http://HOST:PORT/v1) "
        "that generates the rollouts instead; it must read the run directory: the starting "
        "model and each update's weights (RUN/weights/) are loaded into it by path.",
    )
    lora_adapters: bool = Field(
        False,
        description="url: the server hot-loads LoRA adapters (vLLM --enable-lora); a LoRA "
        "learner then sends its adapter, not the merged model.",
    )


class EvalSettings(StrictModel):
    """Periodic held-out evaluation (the three tiers of `honing eval`)."""

    every: int = Field(10, ge=1, description="Evaluate every this many updates (and at the end).")
    k: int = Field(1, ge=1, description="Episodes per held-out task.")
    temperature: float = Field(0.0, ge=0, description="0 is greedy: a stable measure.")
    before: bool = Field(True, description="Evaluate the starting policy before training.")
    after_warm_start: bool = Field(
        True, description="Evaluate after the warm start too (what SFT alone achieved)."
    )
    forgetting_threshold: float = Field(
        0.05,
        ge=0,
        le=1,
        description="After each phase, a held-out set whose success fell more than this (as a "
        "fraction, 0.05 = 5 points) below its best so far is reported as forgetting.",
    )


class CheckpointSettings(StrictModel):
    every: int = Field(5, ge=1, description="Checkpoint every this many updates (and at the end).")
    keep: int = Field(2, ge=1, description="Checkpoints kept; older ones are deleted.")
    keep_best: bool = Field(
        False,
        description="Keep the checkpoint with the best validation success (pooled over the "
        "validation sets, at each evaluation after an update; the earliest on a tie) beside "
        "the newest `keep`: `honing export` exports it by default, and the run's result line "
        "reports its held-out figure. Needs validation sets.",
    )


class WarmStart(StrictModel):
    """Supervised fine-tuning before RL: on a chat JSONL file, or on tool-use traces made by
    playing tasks' reference actions through the real environments (`honing.trainer.traces`)."""

    data: Path | None = Field(None, description="JSONL of {messages, tools} chat examples.")
    traces: TaskSource | None = Field(
        None, description="Tasks whose reference solutions become the SFT examples."
    )
    extra_traces: list[TaskSource] = Field(
        default_factory=list,
        description="More trace tasks, added to `traces`: e.g. more of the families the warm "
        "start leaves unsolved (the same generator, another seed, a `tags` filter). A task asked "
        "twice is played once.",
    )
    calculator_first: bool = Field(
        True, description="Traces of arithmetic tasks call the calculator before answering."
    )
    risky_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="traces only: this share of the trace tasks that have a "
        "metadata.risky_reference are played from it instead of their reference (the same "
        "tasks every run: chosen by a hash of their id), so the warm-started policy takes both "
        "paths. Every trace must still succeed.",
    )
    recovery_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="traces only: this share of the trace tasks whose domain has a slip (sql: "
        "the first query with a literal unquoted) get a second trace beside their own, which "
        "begins with the slip and the error it gets, the slip kept as context only (not "
        "learned), then the reference: the warm-started policy sees a failed call answered by "
        "a corrected one (the same tasks every run).",
    )
    reject_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="traces with a team: this share of the tasks first submit a wrong "
        "solution that the scripted validator rejects (honing.trainer.team_traces), so the "
        "validator learns to reject and the executor to recover.",
    )
    epochs: int = Field(1, ge=1)
    batch_size: int = Field(8, ge=1, description="Examples per optimiser step.")
    lr: float = Field(2e-4, gt=0, description="Learning rate of the warm start.")

    @model_validator(mode="after")
    def _check(self) -> WarmStart:
        if (self.data is None) == (self.traces is None):
            raise ValueError("warm_start needs exactly one of data (a JSONL file) or traces")
        if self.extra_traces and self.traces is None:
            raise ValueError("warm_start.extra_traces adds to traces: set traces too")
        if self.recovery_share > 0 and self.traces is None:
            raise ValueError(
                f"warm_start.recovery_share ({self.recovery_share:g}) applies to traces only; "
                "warm_start.data is played as it is: drop recovery_share"
            )
        if self.risky_share > 0 and self.traces is None:
            raise ValueError(
                f"warm_start.risky_share ({self.risky_share:g}) applies to traces only; "
                "warm_start.data is played as it is: drop risky_share"
            )
        return self


class AsyncSettings(StrictModel):
    """Overlapped generation and training (the YAML key `async`; honing.trainer.overlap)."""

    max_staleness: int = Field(
        0,
        ge=0,
        description="Updates that generation may run ahead of the learner: the episodes of "
        "updates u+1..u+K are played while update u trains (and may span its weight sync), so a "
        "token is at most K policy versions old when trained on. 0: generation and training "
        "alternate, exactly as without this section.",
    )


class Refill(StrictModel):
    """More groups when an update has too few with a signal (DAPO's dynamic sampling fills its
    batch; dropping alone can leave an update one group): the loop plays `groups_per_step` more
    tasks, up to `max_rounds` times, until `min_groups` of the learner's groups would be kept."""

    min_groups: int = Field(
        0,
        ge=0,
        description="Groups with a signal (rewards that differ; with keep_process_groups, "
        "process rewards too) an update wants before it trains; 0: off, the update trains on "
        "what its draw gave.",
    )
    max_rounds: int = Field(
        2, ge=1, description="Extra draws of groups_per_step tasks at most, per update."
    )


class TrainConfig(StrictModel):
    """The whole run of `honing train`."""

    # `async` is a Python keyword: the field is `overlap`, its YAML key (and dump) `async`
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        serialize_by_alias=True,
        validate_by_name=True,
        validate_by_alias=True,
    )

    name: str = Field("train", description="Names the run in its last line (e.g. quickstart).")
    model: str = Field("default", description="The starting policy: directory or built-in name.")
    out: Path = Field(description="The run directory (local; `remote` mirrors it to a URL).")
    remote: RemoteSettings | None = Field(
        None,
        description="Mirror the run directory to an fsspec URL (checkpoints committed atomically, "
        "the store, the logs) and resume from it: `remote: s3://bucket/runs/x` or {url, "
        "storage_options}. None: the run directory only.",
    )
    seed: int = Field(0, description="Seeds task order, sampling and initialisation.")
    deterministic: bool = Field(
        False,
        description="Bit-reproducible runs and resumes: one sequence per engine batch, no "
        "prefix cache, deterministic torch kernels. Slower.",
    )
    train: dict[str, TaskSource] = Field(min_length=1, description="Named training sources.")
    heldout: dict[str, TaskSource] = Field(
        default_factory=dict, description="Named held-out sets (never trained on)."
    )
    validation: dict[str, TaskSource] = Field(
        default_factory=dict,
        description="Named validation sets, evaluated with the held-out ones: what settings and "
        "checkpoint.keep_best choose by, so that the held-out figure is never chosen on. Their "
        "tasks are never trained on, and none a held-out set asks is kept.",
    )
    phases: list[Phase] = Field(
        default_factory=list, description="Sources by phase; empty: one phase over every source."
    )
    steps: int | None = Field(
        None, ge=1, description="Updates in all (without phases); with phases, their sum."
    )
    groups_per_step: int = Field(4, ge=1, description="Tasks (groups) per update.")
    n: int = Field(8, ge=2, description="Samples per task: the group size.")
    learner: LearnerConfig = LearnerConfig()
    risk: RiskSettings = RiskSettings()
    curriculum: CurriculumSettings = Field(
        CurriculumSettings(),
        description="Draw tasks from the band where the policy sometimes succeeds "
        "(honing.trainer.curriculum); off by default.",
    )
    refill: Refill = Field(
        Refill(),
        description="Play more groups when too few of an update's have a signal (off by "
        "default: `refill.min_groups: 0`).",
    )
    agent: AgentSettings = AgentSettings()
    team: TeamConfig | None = Field(
        None,
        description="Play each episode as a team (analyst → executor ↔ validator, "
        "honing.rollout.team); each role is trained on its own group. None: a single agent.",
    )
    engine: EngineSettings = EngineSettings()
    overlap: AsyncSettings | None = Field(
        None,
        alias="async",
        description="Overlap generation with training (`async: {max_staleness: K}`); None or "
        "K = 0: generation and training alternate (on-policy).",
    )
    eval: EvalSettings = EvalSettings()
    checkpoint: CheckpointSettings = CheckpointSettings()
    warm_start: WarmStart | None = None
    sandbox: SandboxConfig = SandboxConfig()
    env: EnvConfig = Field(
        default_factory=EnvConfig, description="Reward weights and limits of the environments."
    )
    observe: ObserveConfig = Field(
        default_factory=ObserveConfig,
        description="Metric sinks (TensorBoard on by default; MLflow, W&B offline); the event "
        "log RUN_DIR/events.jsonl is always written.",
    )
    backend: Literal["local", "ray"] = Field(
        "local",
        description="local: the engine and the sandboxes in this process. ray: the training "
        "episodes' engines and sandboxes run as supervised Ray actors (`ray`), as in `honing "
        "rollout --backend ray`; the learner, the store and held-out evaluation stay here.",
    )
    ray: RayConfig = Field(
        default_factory=RayConfig,
        description="backend ray: the cluster (address) and the engine and sandbox worker sets "
        "(count, num_cpus, num_gpus, resources each).",
    )

    @field_validator("out", mode="before")
    @classmethod
    def _local_out(cls, value: Any) -> Any:
        if isinstance(value, str) and "://" in value:
            raise ValueError(
                f"{value!r}: out is the local run directory; to keep the run at a URL, give "
                f"out=LOCAL_DIR and remote={value}"
            )
        return value

    @field_validator("remote", mode="before")
    @classmethod
    def _remote_url(cls, value: Any) -> Any:
        return {"url": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.checkpoint.keep_best and not self.validation:
            raise ValueError(
                "checkpoint.keep_best keeps the checkpoint that does best on validation, and the "
                "run has no validation sets: add one (e.g. validation: {math: {tasks: "
                "synthetic-math, count: 64, seed: 14}}), or drop keep_best. The held-out sets "
                "are never used to choose"
            )
        for phase in self.phases:
            unknown = [name for name in phase.train if name not in self.train]
            if unknown:
                raise ValueError(
                    f"phase {phase.name!r} trains on {unknown}, which are not train sources "
                    f"(allowed: {sorted(self.train)})"
                )
        if self.phases:
            total = sum(p.steps for p in self.phases)
            if self.steps is not None and self.steps != total:
                raise ValueError(
                    f"steps is {self.steps} but the phases add up to {total}: drop steps, or "
                    "make them agree"
                )
        elif self.steps is None:
            raise ValueError("give steps (the number of updates), or phases with their steps")
        if "max_steps" in self.env.model_fields_set and self.env.max_steps != self.agent.max_turns:
            raise ValueError(
                f"env.max_steps is {self.env.max_steps} but agent.max_turns is "
                f"{self.agent.max_turns}: an episode of honing train ends after agent.max_turns "
                "model turns, and the environment's step limit follows it. Drop env.max_steps "
                "and set agent.max_turns"
            )
        if self.risk.explore.enabled and self.agent.temperature == 0:
            raise ValueError(
                "risk.explore.enabled moves each task's sampling temperature around "
                "agent.temperature, which is 0 (greedy): set agent.temperature > 0, or turn "
                "explore off"
            )
        if self.team is not None and self.team.adapters == "per_role":
            if self.learner.lora is None:
                raise ValueError(
                    "team.adapters: per_role trains a LoRA adapter per role on the same base: "
                    "set learner.lora (e.g. learner.lora.r=16), or use team.adapters: shared"
                )
            if self.engine.url is not None:
                raise ValueError(
                    "team.adapters: per_role serves each role from an in-process engine of its "
                    f"own; engine.url ({self.engine.url}) is one server: drop engine.url, or use "
                    "team.adapters: shared"
                )
        if self.refill.min_groups and self.ahead:
            raise ValueError(
                f"refill.min_groups is {self.refill.min_groups} and async.max_staleness is "
                f"{self.ahead}: refill plays more of an update's groups after its draw, which "
                "overlap has already played ahead. Set one of them to 0"
            )
        if self.refill.min_groups and (
            not self.learner.dynamic_sampling or self.learner.advantage == "distill"
        ):
            raise ValueError(
                f"refill.min_groups is {self.refill.min_groups}, but no group is dropped "
                "(learner.dynamic_sampling is off, or the advantage is distill): there is "
                "nothing to refill. Drop refill, or turn learner.dynamic_sampling on"
            )
        if self.ahead and self.deterministic:
            raise ValueError(
                f"async.max_staleness is {self.ahead} and deterministic is true: with overlap, "
                "which weights sample each token depends on timing, so the run cannot be "
                "bit-reproducible. Drop deterministic, or set async.max_staleness: 0"
            )
        if self.ahead and self.team is not None and self.team.adapters == "per_role":
            raise ValueError(
                "async.max_staleness > 0 overlaps the run's one learner with generation; "
                "team.adapters: per_role (a learner per role) is not supported with it: use "
                "team.adapters: shared, or async.max_staleness: 0"
            )
        if self.engine.speculative is not None and self.engine.url is not None:
            raise ValueError(
                f"engine.speculative is the in-process hf engine's; engine.url "
                f"({self.engine.url}) is a server that decides its own (honing serve "
                "--speculative): drop one of them"
            )
        if self.backend == "ray" and self.engine.url is not None:
            raise ValueError(
                f"backend: ray runs the engines as Ray actors, and engine.url "
                f"({self.engine.url}) is a server of its own: drop engine.url, or use backend: "
                "local (the sandboxes stay here then)"
            )
        if self.backend != "ray" and self.ray != RayConfig():
            raise ValueError(
                "the ray section is set but backend is local: set backend: ray (or pass "
                "--ray-address), or drop the ray section"
            )
        if self.learner.advantage == "passk" and self.learner.passk_k >= self.n:
            raise ValueError(
                f"learner.passk_k is {self.learner.passk_k} but the group size n is {self.n}: "
                "pass@k advantages need k < n (with k = n a group has one k-subset, which "
                "passes whenever the group has a success, and nothing is trained). Lower "
                "learner.passk_k, or raise n"
            )
        if self.learner.advantage == "passk" and self.risk.mode != "off":
            raise ValueError(
                f"learner.advantage passk needs binary rewards, and risk.mode {self.risk.mode!r} "
                "trains on outcome - weight x cost: set risk.mode: off, or use advantage grpo"
            )
        if "temperature" in self.learner.model_fields_set:
            raise ValueError(
                f"learner.temperature is {self.learner.temperature}, but honing train takes it "
                "from agent.temperature: the learner scores tokens at the temperature they were "
                f"sampled at (here {self.agent.temperature}). Drop learner.temperature and set "
                "agent.temperature"
            )
        return self

    @field_serializer("env", "learner", mode="wrap")
    def _without_derived(
        self,
        section: StrictModel,
        handler: SerializerFunctionWrapHandler,
        info: FieldSerializationInfo,
    ) -> dict[str, Any]:
        """A dump (RUN/config.yaml) leaves out what `agent` decides, so that it loads again."""
        out: dict[str, Any] = handler(section)
        for name, key in DERIVED:
            if name == info.field_name:
                out.pop(key, None)
        return out

    @property
    def env_config(self) -> EnvConfig:
        """`env` as the environments get it: `max_steps` is `agent.max_turns`."""
        return self.env.model_copy(update={"max_steps": self.agent.max_turns})

    @property
    def learner_config(self) -> LearnerConfig:
        """`learner` as the Learner gets it: `temperature` is `agent.temperature`, the one the
        tokens were sampled at (0, greedy, is scored at 1, as the engine scores it)."""
        return self.learner.model_copy(update={"temperature": self.agent.temperature})

    @property
    def ahead(self) -> int:
        """Updates generation runs ahead of the learner (`async.max_staleness`; 0: none)."""
        return self.overlap.max_staleness if self.overlap is not None else 0

    @property
    def schedule(self) -> list[Phase]:
        """The phases, or the one implicit phase over every source."""
        if self.phases:
            return list(self.phases)
        assert self.steps is not None
        return [Phase(name="main", steps=self.steps, train=list(self.train))]

    @property
    def total_steps(self) -> int:
        return sum(p.steps for p in self.schedule)

    def agent_config(self, temperature: float, seed: int | None) -> AgentConfig:
        """The agent loop's settings (`agent`) at this sampling temperature and seed: training
        rollouts use `agent.temperature`, held-out evaluations `eval.temperature`."""
        from honing.rollout.agent import AgentConfig, Deadlines
        from honing.rollout.engines.base import SamplingParams

        a = self.agent
        sampling = SamplingParams(
            temperature=temperature, top_p=a.top_p, max_new_tokens=a.max_new_tokens, seed=seed
        )
        return AgentConfig(
            sampling=sampling,
            max_turns=a.max_turns,
            max_total_tokens=a.max_total_tokens,
            system_prompt=a.system_prompt,
            restate=a.restate,
            deadlines=Deadlines(generate_s=a.generate_timeout_s),
        )

    def phase_at(self, step: int) -> tuple[int, Phase]:
        """The phase (index, phase) that update `step` (0-based) belongs to."""
        end = 0
        for index, phase in enumerate(self.schedule):
            end += phase.steps
            if step < end:
                return index, phase
        raise IndexError(f"step {step} is past the last phase (total {end} steps)")


def load_saved(path: Path, overrides: Sequence[str] | None = None) -> TrainConfig:
    """A run's saved config (RUN/config.yaml), with `key=value` `overrides` over it. A run saved
    before `env.max_steps` and `learner.temperature` were derived recorded both, though it played
    `agent.max_turns` and `agent.temperature`: they are dropped, not checked."""
    data = read_yaml_mapping(path)
    for name, key in DERIVED:
        section = data.get(name)
        if isinstance(section, dict):
            section.pop(key, None)
    merge(data, parse_overrides(overrides or []))
    return validate_model(TrainConfig, data, source=str(path))


def load_remote(url: str, overrides: Sequence[str] | None = None) -> TrainConfig:
    """The saved config of the run mirrored at `url` (URL/config.yaml), with `overrides` over it
    and `remote.url` set to `url`. The URL is opened with the overrides' `remote.storage_options`
    when given (else the environment's settings: AWS_ENDPOINT_URL, credentials)."""
    import tempfile

    from honing.errors import ConfigError
    from honing.trainer.remote import RUN_CONFIG, Location

    items = list(overrides or [])
    parsed = parse_overrides(items)
    remote = parsed.get("remote")
    options = remote.get("storage_options") if isinstance(remote, dict) else None
    location = Location(url, options if isinstance(options, dict) else None)
    data = location.read_bytes(RUN_CONFIG)
    if data is None:
        raise ConfigError(
            f"{location.url_of(RUN_CONFIG)}: not found: no run to resume at {url} (start one "
            "with remote: URL in its config)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / RUN_CONFIG
        path.write_bytes(data)
        config = load_saved(path, [*items, f"remote.url={url}"])
    return config
