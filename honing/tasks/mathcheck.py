"""Math answers compared inside the sandbox, with math-verify (symbolic and numeric equality).

math-verify parses text with sympy, whose parser evaluates Python: a model's answer must never be
parsed on the host. Comparisons therefore run as small programs in a sibling pool of the caller's
pool whose runtime is math-verify as installed beside honing (built offline on first use, and
preloaded so a comparison costs milliseconds, not a sympy import).

    equal = await math_equal(pool, "391", "17*23 = 391")  # True, False, or None (no verdict)
"""

from __future__ import annotations

import json

from honing.sandbox import ExecRequest, ExecStatus, RuntimeStore, SandboxPool

RUNTIME = "honing-math"
DISTRIBUTIONS = ["math-verify"]
PRELOAD = ["math_verify", "sympy"]
TIMEOUT_S = 20.0

PROGRAM = """\
import json, sys
from math_verify import parse, verify

def read(text):
    wrapped = text if ("$" in text or "\\\\boxed" in text) else "$" + text + "$"
    return parse(wrapped) or parse(text)

pairs = json.loads(sys.stdin.read())
out = []
for expected, given in pairs:
    gold = read(expected)
    out.append(bool(gold) and bool(verify(gold, read(given))))
print(json.dumps(out))
"""


async def checker_pool(pool: SandboxPool) -> SandboxPool:
    """The sibling of `pool` that can run math-verify."""
    RuntimeStore().build_from_installed(RUNTIME, DISTRIBUTIONS)
    return await pool.sibling(RUNTIME, PRELOAD)


async def math_equal_many(pool: SandboxPool, pairs: list[tuple[str, str]]) -> list[bool] | None:
    """For each (expected, given): whether they state the same value. None if the sandbox failed."""
    if not pairs:
        return []
    checker = await checker_pool(pool)
    result = await checker.run(
        ExecRequest(code=PROGRAM, stdin=json.dumps(pairs), timeout_s=TIMEOUT_S, memory_mb=1024)
    )
    if result.status in (ExecStatus.TIMEOUT, ExecStatus.MEMORY_LIMIT, ExecStatus.OUTPUT_LIMIT):
        return [False] * len(pairs)  # an answer that blows the checker's limits is not equal
    if result.status is not ExecStatus.OK:
        return None  # the checker crashed or the sandbox failed: no verdict, not "unequal"
    return [bool(v) for v in json.loads(result.stdout)]


async def math_equal(pool: SandboxPool, expected: str, given: str) -> bool | None:
    found = await math_equal_many(pool, [(expected, given)])
    return None if found is None else found[0]
