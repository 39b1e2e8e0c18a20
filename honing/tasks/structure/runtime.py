"""The structure domain's sandbox side: its runtime, and runs of its kernel (kernel.py).

`ensure_runtime()` builds the "structure" runtime (the pinned REQUIREMENTS, installed by pip from
the package index once, then cached by the hash of the requirements: later calls are no-ops) and
`run_kernel(pool, request)` runs the kernel on one request in the sibling of `pool` that has that
runtime, with numpy and manifold3d preloaded (a pool that already has both is used as it is).

    reply = await run_kernel(pool, {"op": "build", "scene": scene})  # reply["summary"]...

What comes back is the kernel's reply, "ok": false included (its "failed" says whose input was
at fault). A run the request made fail (CPU time, memory, output) comes back as {"ok": false,
"failed": "scene", "problem": "input"}. Any other failure (the sandbox, the host, a reply that is
not JSON) raises SandboxError: an infrastructure failure, never a verdict.
"""

from __future__ import annotations

import asyncio
import json
import marshal
import sys
import tempfile
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from honing.errors import SandboxError
from honing.risk import RiskEvent
from honing.sandbox import ExecRequest, RuntimeStore, SandboxPool
from honing.tasks.checkrun import RunEnd, checker_limits, run_end

RUNTIME = "structure"
REQUIREMENTS = ["numpy==2.4.6", "manifold3d==3.5.4"]
PRELOAD = ["numpy", "manifold3d"]
KERNEL = Path(__file__).with_name("kernel.py")

CPU_S = 10.0  # CPU seconds one request may spend (a build or render takes well under 0.2 s)
MEMORY_MB = 1024
MAX_OUTPUT_BYTES = 16_000_000  # a 1024 x 1024 render in base64 fits

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
