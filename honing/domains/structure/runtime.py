"""The structure domain's sandbox side: its runtime, and runs of its kernel (kernel.py).

`ensure_runtime()` builds the "structure" runtime (the pinned REQUIREMENTS, installed by pip from
the package index once, then cached by the hash of the requirements: later calls are no-ops) and
`run_kernel(pool, request)` runs the kernel on one request in the sibling of `pool` that has that
runtime, with numpy and manifold3d preloaded (a pool that already has both is used as it is).

    reply = await run_kernel(pool, {"op": "build", "scene": scene})  # reply["summary"]...

What comes back is the kernel's reply, "ok": false included (its "failed" says whose input was
at fault). A run the request made fail (CPU time, memory, output) comes back as {"ok": false,
"failed": "scene", "problem": "input"}. Any other failure (the sandbox, the host, a reply that is
not JSON) raises SandboxError: an infrastructure failure, never a verdict. A model's script runs
apart (`run_script_audited`): that run is the model's program, so however it ends is its own
doing, and all it gives back is a scene as data (`scene_problem` bounds it) for a fresh run.
"""

from __future__ import annotations

import asyncio
import json
import marshal
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from honing.errors import SandboxError
from honing.risk import RiskEvent
from honing.sandbox import ExecRequest, ExecResult, ExecStatus, RuntimeStore, SandboxPool
from honing.tasks.checkrun import RunEnd, checker_limits, run_end

RUNTIME = "structure"
REQUIREMENTS = ["numpy==2.4.6", "manifold3d==3.5.4"]
PRELOAD = ["numpy", "manifold3d"]
KERNEL = Path(__file__).with_name("kernel.py")

CPU_S = 10.0  # CPU seconds one request may spend (a build or render takes well under 0.2 s)
MEMORY_MB = 1024
MAX_OUTPUT_BYTES = 16_000_000  # a 1024 x 1024 render in base64 fits
SCENE_DEPTH = 64  # a scene's JSON nests at most this deep (the kernel allows 40 levels of nodes)
SCENE_VALUES = 100_000  # and holds at most this many values
SCENE_TEXT = 2_000_000  # and this many characters of strings

_built: dict[Path, Path] = {}  # runtimes directory -> site-packages, built in this process
_BUILD_LOCK = threading.Lock()  # one build at a time (episodes start together)


def ensure_runtime(
    progress: Callable[[str], None] | None = None, store: RuntimeStore | None = None
) -> Path:
    """The site-packages directory of the structure runtime in `store` (default: honing's),
    built first if it is not there: then one line goes to `progress` (default: stderr), such
    as "structure runtime: building (numpy, manifold3d) ... done in 12 s". RuntimeBuildError
    (a SandboxError) when pip cannot install the requirements."""
    store = store or RuntimeStore()
    with _BUILD_LOCK:
        return _ensure(store, progress)


def _ensure(store: RuntimeStore, progress: Callable[[str], None] | None) -> Path:
    if store.dir in _built:
        return _built[store.dir]
    with tempfile.TemporaryDirectory(prefix="honing-structure-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text("".join(f"{line}\n" for line in REQUIREMENTS))
        info = store.build(RUNTIME, requirements)
    if not info.cached:
        names = ", ".join(r.split("==")[0] for r in REQUIREMENTS)
        line = f"{RUNTIME} runtime: building ({names}) ... done in {info.built_s:.0f} s"
        if progress is None:
            print(line, file=sys.stderr, flush=True)
        else:
            progress(line)
    _built[store.dir] = info.path
    return info.path


async def kernel_pool(pool: SandboxPool) -> SandboxPool:
    """`pool` if its cells have the structure runtime and preload its modules, else its
    structure sibling (as many cells as `pool`), building the runtime on first use."""
    config = pool.config
    if config.runtime == RUNTIME and set(PRELOAD) <= set(config.preload):
        return pool
    if RuntimeStore().dir not in _built:
        await asyncio.to_thread(ensure_runtime)
    return await pool.sibling(RUNTIME, PRELOAD, size=config.size)


# The kernel travels compiled (the sandbox runs this very interpreter): compiling its source
# in every run would cost more than most requests.
LOADER = """\
import marshal
with open("structure_kernel.bin", "rb") as f:
    exec(marshal.loads(f.read()), {"__name__": "__main__"})
"""


@cache
def kernel_code() -> bytes:
    """kernel.py, compiled and marshalled."""
    source = KERNEL.read_text()
    return marshal.dumps(compile(source, "structure_kernel.py", "exec", dont_inherit=True))


def kernel_request(request: dict[str, Any], cpu_s: float = CPU_S) -> ExecRequest:
    """The sandbox run of the kernel on `request`."""
    cpu, wall = checker_limits(cpu_s)
    return ExecRequest(
        code=LOADER,
        files={"structure_kernel.bin": kernel_code()},
        stdin=json.dumps(request),
        timeout_s=wall,
        cpu_s=cpu,
        memory_mb=MEMORY_MB,
        max_output_bytes=MAX_OUTPUT_BYTES,
        filename="structure_loader.py",
    )


async def run_kernel(
    pool: SandboxPool, request: dict[str, Any], *, cpu_s: float = CPU_S
) -> dict[str, Any]:
    """The kernel's reply to `request` (see kernel.py's `handle`), run in `pool`'s structure
    sibling with `cpu_s` seconds of CPU (and 3 times that of wall clock)."""
    reply, _ = await run_kernel_audited(pool, request, cpu_s=cpu_s)
    return reply


async def run_kernel_audited(
    pool: SandboxPool, request: dict[str, Any], *, cpu_s: float = CPU_S
) -> tuple[dict[str, Any], list[RiskEvent]]:
    """`run_kernel`'s reply, and the risky actions the sandbox saw the run take (a model's
    script runs in it, and its scene drives the kernel)."""
    checker = await kernel_pool(pool)
    result = await checker.run(kernel_request(request, cpu_s))
    risks = list(result.risks)
    end, reason = run_end(result)
    reason = reason.replace("checker", "kernel")
    if end is RunEnd.INPUT:
        error = f"the request made the structure kernel fail: {reason}"
        return {"ok": False, "error": error, "failed": "scene", "problem": "input"}, risks
    if end is not RunEnd.REPLIED:
        raise SandboxError(f"structure kernel: {reason}")
    try:
        reply = json.loads((result.stdout.strip().splitlines() or ["null"])[-1])
    except json.JSONDecodeError:
        reply = None
    if not (isinstance(reply, dict) and isinstance(reply.get("ok"), bool)):
        tail = result.stdout.strip()[-200:] or result.stderr.strip()[-200:]
        raise SandboxError(f"structure kernel: no usable reply ({tail!r})")
    return reply, risks


@dataclass(frozen=True)
class ScriptRun:
    """What a model's script made: `scene` (plain JSON data, not yet built) and what it
    printed, or `error` (why it made none: its own failure, in words)."""

    scene: dict[str, Any] | None
    printed: str = ""
    error: str = ""
    risks: list[RiskEvent] = field(default_factory=list)


def scene_problem(value: Any) -> str | None:
    """Why `value` cannot be a scene to send to the kernel, or None: it must be a JSON object
    of plain values (objects with string keys, lists, strings, floats, integers of at most 64
    bits, booleans, null) at most SCENE_DEPTH deep, with at most SCENE_VALUES values and
    SCENE_TEXT characters of strings. Walked without recursion: no nesting breaks the host."""
    if not isinstance(value, dict):
        return f"a scene must be an object, not {type(value).__name__}"
    stack: list[tuple[Any, int]] = [(value, 1)]
    count = text = 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > SCENE_VALUES:
            return f"a scene holds at most {SCENE_VALUES} values"
        if depth > SCENE_DEPTH:
            return f"a scene nests at most {SCENE_DEPTH} levels deep"
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return "a scene's keys must be strings"
                text += len(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            text += len(item)
        elif isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > 64:
            return "a scene's numbers are at most 64-bit integers (or floats)"
        elif not (item is None or isinstance(item, bool | int | float)):
            return f"a scene holds only JSON values, not {type(item).__name__}"
        if text > SCENE_TEXT:
            return f"a scene holds at most {SCENE_TEXT} characters of text"
    return None


def script_failure(result: ExecResult) -> str:
    """How the run of a model's script ended without a reply, in words (its own doing)."""
    status = result.status
    if status is ExecStatus.TIMEOUT:
        return f"the script ran past its time limit ({result.error or 'timeout'})"
    if status is ExecStatus.MEMORY_LIMIT:
        return "the script went past its memory limit"
    if status is ExecStatus.OUTPUT_LIMIT:
        return "the script's output went past its byte limit"
    if result.signal is not None:
        return f"the script's process was killed by signal {result.signal}"
    return f"the script's process ended ({result.status.value}, exit code {result.exit_code})"


async def run_script_audited(pool: SandboxPool, code: str, *, cpu_s: float = CPU_S) -> ScriptRun:
    """The scene a model's `code` makes, run by the kernel's "script" op in a run of its own.
    That run executes the model's program, so however it ends (an error, an exit, a signal, a
    limit, output that is no reply, a reply with forged or missing fields) is the script's
    failure, with the reason; only a failure of the sandbox itself raises SandboxError."""
    checker = await kernel_pool(pool)
    result = await checker.run(kernel_request({"op": "script", "code": code}, cpu_s))
    risks = list(result.risks)
    if result.status is ExecStatus.SANDBOX_ERROR:
        raise SandboxError(f"structure script: the sandbox failed: {result.error}")
    if result.status is not ExecStatus.OK:
        return ScriptRun(None, error=script_failure(result), risks=risks)
    try:
        reply = json.loads((result.stdout.strip().splitlines() or ["null"])[-1])
    except (ValueError, RecursionError):
        reply = None
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        return ScriptRun(None, error="the script's run gave no reply: its output's last line is "
                         "not the kernel's", risks=risks)  # fmt: skip
    if not reply["ok"]:
        error = reply.get("error")
        return ScriptRun(None, error=str(error)[:2000] if error else "the script failed",
                         risks=risks)  # fmt: skip
    scene, printed = reply.get("scene"), reply.get("printed", "")
    problem = scene_problem(scene)
    if problem is not None:
        return ScriptRun(None, error=f"the script's reply holds no valid scene: {problem}",
                         risks=risks)  # fmt: skip
    assert isinstance(scene, dict)
    return ScriptRun(scene, printed=printed[-2000:] if isinstance(printed, str) else "",
                     risks=risks)  # fmt: skip
