"""The warm start of `honing train`: supervised fine-tuning before RL, run once per run directory.

    model_dir = await warm_start(config, run_dir)    # RUN/warm_start/model, or reused

With `warm_start.traces`, the SFT data are tool-use traces made by playing the source's tasks'
reference solutions (`risky_share` of those with a risky path: that path; `recovery_share`
of those with a slip: a second trace, the slip and its error first) through the real
environments (`honing.trainer.traces`), rendered exactly as the agent loop renders rollouts
(with `team:`, every role's turns of the tasks played by a scripted team instead,
`honing.trainer.team_traces`);
with `warm_start.data`, a chat JSONL file. Reference traces that the agent's budget cannot
produce (a turn over `agent.max_new_tokens`, more turns than `agent.max_turns`) are warned about
with the value that fits: the policy would be taught episodes it can never finish. The model is
trained with the run's learner settings (LoRA or full) at the warm start's learning rate and
saved merged (`honing.trainer.sft`); RL then starts from it with a fresh adapter and optimiser;
the run's agent settings are saved beside it (`honing_agent.json`), so `honing eval --policy
model:RUN/warm_start/model` plays it as the run does. `RUN/warm_start/done.json` marks it
finished, so a resumed run reuses it.

Not covered: warm starts that mix several data sources, or evaluation during SFT; the budget
check of a `data` file (a team's traces are checked role by role, and refused when a reply does
not fit: `honing.trainer.team_traces`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from honing.errors import ConfigError
from honing.rollout.models import load_tokenizer, resolve_model
from honing.rollout.saved_agent import save_agent
from honing.sandbox import SandboxPool
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import DONE_FILE, WARM_DIR, RunDir
from honing.trainer.sft import SftConfig, run_sft
from honing.trainer.sources import warm_start_tasks
from honing.trainer.team_traces import write_team_traces
from honing.trainer.traces import recovery_choice, risky_choice, trace_budget, write_traces

log = logging.getLogger(__name__)


async def warm_start(config: TrainConfig, run_dir: Path) -> Path:
    """The warm-start model directory: trained now, or found from an earlier (resumed) run."""
    settings = config.warm_start
    assert settings is not None
    out = run_dir / WARM_DIR
    done = out / DONE_FILE
    model_dir = RunDir(run_dir).warm_model()
    if model_dir is not None:
        log.info("warm start: reusing %s", model_dir)
        return model_dir
    data = settings.data
    if settings.traces is not None:
        taskset = warm_start_tasks(settings)
        try:  # before the sandbox starts: a config without a risky path or slip fails at once
            risky_choice(taskset.tasks, settings.risky_share)
            recovery_choice(taskset.tasks, settings.recovery_share)
        except ConfigError as exc:
            raise ConfigError(f"warm_start.traces ({taskset.name}): {exc}") from exc
        data = out / "traces.jsonl"
        env = config.env_config
        async with SandboxPool(config.sandbox) as pool:
            if config.team is not None:
                tokenizer = load_tokenizer(resolve_model(config.model))
                played = await write_team_traces(
                    taskset,
                    data,
                    pool,
                    config.team,
                    config.agent_config(config.agent.temperature, config.seed),
                    tokenizer,
                    reject_share=settings.reject_share,
                    env_config=env,
                )
                log.info(
                    "warm start: %d team reference episodes of %s (%d with a rejected "
                    "submission first), %d rows -> %s",
                    len(played),
                    taskset.name,
                    sum(t.rejected for t in played),
                    sum(len(t.rows) for t in played),
                    data,
                )
            else:
                traces = await write_traces(
                    taskset,
                    data,
                    pool,
                    calculator_first=settings.calculator_first,
                    system_prompt=config.agent.system_prompt,
                    env_config=env,
                    restate=config.agent.restate,
                    risky_share=settings.risky_share,
                    recovery_share=settings.recovery_share,
                )
                log.info(
                    "warm start: %d reference traces of %s (%d from risky references, %d "
                    "recovering from a slip) -> %s",
                    len(traces),
                    taskset.name,
                    sum(t.risky for t in traces),
                    sum(t.slipped for t in traces),
                    data,
                )
                agent = config.agent
                budget = trace_budget(traces, load_tokenizer(resolve_model(config.model)),
                                      agent.max_new_tokens, agent.max_turns)  # fmt: skip
                warning = budget.warning(agent.max_new_tokens, agent.max_turns)
                if warning is not None:
                    log.warning("warm start: %s", warning)
    assert data is not None
    learner = config.learner.model_copy(
        update={"lr": settings.lr, "warmup_steps": 0, "schedule": "constant"}
    )
    sft = SftConfig(
        model=config.model,
        data=str(data),
        out=out,
        learner=learner,
        epochs=settings.epochs,
        batch_size=settings.batch_size,
        max_seq_len=config.agent.max_total_tokens,
        seed=config.seed,
    )
    result = await asyncio.to_thread(run_sft, sft)
    log.info(
        "warm start: %d steps on %d examples, loss %.3f -> %.3f, %.0f s",
        result.steps,
        result.examples,
        result.first_loss,
        result.final_loss,
        result.seconds,
    )
    save_agent(result.model_dir, config.agent.saved())  # evaluated as it was trained
    tmp = done.with_suffix(".tmp")
    tmp.write_text(json.dumps(result.to_json_dict(), indent=2))
    tmp.replace(done)
    return result.model_dir
