"""Runs pools in a process of its own for tests/sandbox/test_enforcement.py; prints one JSON line.

    python enforcement_child.py fallback   # run as an unprivileged user: the RLIMIT_AS fallback
    python enforcement_child.py v2         # cgroup v2 only (may move this process into a leaf)

A process of its own because what is checked depends on who runs it (an unprivileged user) or
changes the process (the move into `honing-supervisor` under cgroup v2).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

from honing.errors import SandboxUnavailable
from honing.sandbox import ExecRequest, SandboxConfig, SandboxPool, cgroups

# Four processes of 40 MiB each: over a 96 MiB limit together, under it one by one.
SPREAD = """
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        x = bytearray(40 << 20)
        for i in range(0, len(x), 4096):
            x[i] = 1
        time.sleep(1)
        os._exit(0)
    kids.append(pid)
print("failed", sum(os.waitpid(pid, 0)[1] != 0 for pid in kids))
"""
FORKS = """
import os, time
made = 0
try:
    for _ in range(12):
        if os.fork() == 0:
            time.sleep(2)
            os._exit(0)
        made += 1
except OSError:
    pass
print(made)
"""


def config(**values: Any) -> SandboxConfig:
    return SandboxConfig(pool_size=1, timeout_s=30.0, **values)


async def fallback() -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with SandboxPool(config()) as pool:
        out["enforcement"] = pool.enforcement.to_json_dict()
        spread = await pool.run(ExecRequest(code=SPREAD, memory_mb=96))
        out["spread"] = [spread.status.value, spread.stdout, spread.memory_enforcement]
        out["seccomp_result"] = spread.seccomp
    async with SandboxPool(config(require={"seccomp": True})) as pool:
        out["seccomp_required"] = pool.enforcement.seccomp
    try:
        async with SandboxPool(config(require={"cgroup": True})):
            out["refused"] = None
    except SandboxUnavailable as exc:
        out["refused"] = str(exc)
    return out


async def v2() -> dict[str, Any]:
    cgroups.HIERARCHIES = ("v2",)
    before = Path("/proc/self/cgroup").read_text()
    out: dict[str, Any] = {}
    async with SandboxPool(config(max_procs=6)) as pool:
        enforcement = pool.enforcement
        if enforcement.memory != "cgroup_v2":
            return {"skip": "; ".join(enforcement.missing)}
        out["enforcement"] = enforcement.to_json_dict()
        spread = await pool.run(ExecRequest(code=SPREAD, memory_mb=96))
        out["spread"] = [spread.status.value, spread.stdout, spread.memory_enforcement]
        fits = await pool.run(ExecRequest(code="x = bytearray(60 << 20); print('ok')"))
        out["fits"] = [fits.status.value, fits.stdout, fits.peak_memory_mb]
        forks = await pool.run(ExecRequest(code=FORKS, max_procs=4))
        out["forks"] = forks.stdout.strip()
        [cell] = pool._cells.values()
        assert cell.cgroup is not None
        out["cell_group"] = str(cell.cgroup.memory)
        out["limit"] = (cell.cgroup.memory / "memory.max").read_text().strip()
    out["pool_group_left"] = Path(out["cell_group"]).parent.exists()
    out["before"], out["after"] = before, Path("/proc/self/cgroup").read_text()
    return out


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    mode = sys.argv[1]
    result = asyncio.run(fallback() if mode == "fallback" else v2())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
