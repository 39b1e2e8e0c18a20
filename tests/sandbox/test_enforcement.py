"""How a pool's limits are enforced, and that a weaker fallback is never silent.

Each path runs for real where the host allows it: cgroup v1 (as root on a v1 host), the RLIMIT_AS
fallback (a pool in a child process run as the unprivileged user `nobody`), cgroup v2 (a child
process, directly or in a `systemd-run --scope -p Delegate=yes`), isolation 'none' (no cgroup, no
seccomp), and `require` refusing to start. A path the host cannot take is skipped with what is
missing. Parsing /proc/self/cgroup and mountinfo is checked on fixed texts as well.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from honing.config import validate_model
from honing.errors import ConfigError, SandboxError, SandboxUnavailable
from honing.sandbox import ExecRequest, ExecStatus, SandboxConfig, SandboxPool
from honing.sandbox.cgroups import CGROUP_ROOT, _own_v1_path, own_v2_group

CHILD = Path(__file__).with_name("enforcement_child.py")
PROJECT = Path(__file__).resolve().parents[2]
X86_64 = os.uname().machine == "x86_64"
SPREAD = CHILD.read_text().split('SPREAD = """', 1)[1].split('"""', 1)[0]


def _v1_memory_writable() -> str:
    """'' when this process can make v1 memory groups, else why not."""
    own = _own_v1_path("memory")
    if own is None:
        return "no cgroup v1 memory controller is mounted (a cgroup v2 host)"
    if not os.access(own, os.W_OK):
        return f"{own} is not writable by uid {os.getuid()}"
    return ""


# -- cgroup v1, seccomp on: what this kind of host (root, v1) uses -----------------------------


async def test_cgroup_v1_is_used_and_reported_and_nothing_moves(
    make_config: Callable[..., Any],
) -> None:
    why = _v1_memory_writable()
    if why:
        pytest.skip(f"cgroup v1 path: {why}")
    before = Path("/proc/self/cgroup").read_text()
    async with SandboxPool(make_config(pool_size=1, memory_mb=96)) as pool:
        enforcement = pool.enforcement
        assert enforcement.memory == "cgroup_v1" and enforcement.pids_cgroup
        assert enforcement.cgroup
        if X86_64:
            assert enforcement.missing == ()
        assert enforcement.describe().startswith("memory and processes: cgroup v1; seccomp: ")
        assert pool.usage().enforcement == enforcement
        assert pool.usage().since(pool.usage()).enforcement == enforcement
        [cell] = pool._cells.values()
        assert cell.cgroup is not None and cell.cgroup.memory.is_relative_to(CGROUP_ROOT / "memory")
        group = cell.cgroup.memory.parent
        # four processes of 40 MiB: the cell's cgroup counts them together against 96 MiB
        spread = await pool.run(ExecRequest(code=SPREAD, memory_mb=96, timeout_s=30))
        assert spread.status is ExecStatus.MEMORY_LIMIT, spread
        assert spread.memory_enforcement == "cgroup_v1"
    assert not group.exists()  # the pool's groups go with it
    assert Path("/proc/self/cgroup").read_text() == before  # v1 never moves a process


@pytest.mark.skipif(not X86_64, reason="the syscall filter is installed on x86_64 only")
async def test_seccomp_is_on_and_reported_in_every_result(make_config: Callable[..., Any]) -> None:
    async with SandboxPool(make_config(pool_size=1, require={"seccomp": True})) as pool:
        assert pool.enforcement.seccomp
        assert all(cell.seccomp and cell.seccomp_error == "" for cell in pool._cells.values())
        result = await pool.run(ExecRequest(code="print(1)"))
        assert result.ok and result.seccomp
        assert result.memory_enforcement == pool.enforcement.memory
        assert pool.enforcement.describe().endswith("seccomp: on")


async def test_require_both_starts_where_the_host_has_both(make_config: Callable[..., Any]) -> None:
    why = _v1_memory_writable()
    if why or not X86_64:
        pytest.skip(f"needs cgroup v1 and x86_64: {why or os.uname().machine}")
    cfg = make_config(pool_size=1, require={"cgroup": True, "seccomp": True})
    async with SandboxPool(cfg) as pool:
        result = await pool.run(ExecRequest(code="print(2)"))
    assert result.stdout == "2\n" and result.seccomp and result.memory_enforcement == "cgroup_v1"


@pytest.mark.skipif(X86_64, reason="x86_64 has the filter; the path without it (a non-x86_64 "
                    "machine) is reported and refused there")  # fmt: skip
async def test_no_filter_off_x86_64_is_reported_and_refused_when_required(
    make_config: Callable[..., Any],
) -> None:
    async with SandboxPool(make_config(pool_size=1)) as pool:
        assert not pool.enforcement.seccomp
        assert any(os.uname().machine in m for m in pool.enforcement.missing)
    with pytest.raises(SandboxUnavailable, match=r"sandbox\.require\.seccomp"):
        await SandboxPool(make_config(pool_size=1, require={"seccomp": True})).start()


# -- isolation 'none': neither a cgroup nor seccomp ----------------------------------------------


async def test_isolation_none_reports_no_cgroup_and_no_seccomp_and_require_refuses(
    make_config: Callable[..., Any], tmp_path: Path
) -> None:
    with pytest.warns(UserWarning, match="isolation is 'none'"):
        async with SandboxPool(make_config(isolation="none", pool_size=1)) as pool:
            e = pool.enforcement
            result = await pool.run(ExecRequest(code="print(3)"))
    assert (e.memory, e.pids_cgroup, e.seccomp, e.isolation) == ("rlimit_as", False, False, "none")
    assert e.describe().startswith("isolation: none (unsafe); memory: RLIMIT_AS per process")
    assert "not a cell's pid 1" in " ".join(e.missing)
    assert result.ok and (result.memory_enforcement, result.seccomp) == ("rlimit_as", False)
    for require, said in (("cgroup", "isolation is 'none'"), ("seccomp", "syscall filter is off")):
        cfg = make_config(isolation="none", pool_size=1, require={require: True}, root=tmp_path)
        pool = SandboxPool(cfg)
        with pytest.warns(UserWarning), pytest.raises(SandboxUnavailable) as info:
            await pool.start()
        assert f"sandbox.require.{require} is set" in str(info.value) and said in str(info.value)
        assert list(tmp_path.iterdir()) == []  # the refused pool left nothing behind


def test_enforcement_is_known_only_once_started() -> None:
    with pytest.raises(SandboxError, match="not started"):
        _ = SandboxPool(SandboxConfig()).enforcement


def test_require_is_strict_config() -> None:
    cfg = validate_model(SandboxConfig, {"require": {"cgroup": True}})
    assert cfg.require.cgroup and not cfg.require.seccomp
    assert not SandboxConfig().require.cgroup and not SandboxConfig().require.seccomp
    allowed = r"unknown key 'require.cgroups' \(allowed: cgroup, seccomp\)"
    with pytest.raises(ConfigError, match=allowed):
        validate_model(SandboxConfig, {"require": {"cgroups": True}})


# -- the fallback: a pool run by an unprivileged user ---------------------------------------------


def _reachable(path: Path) -> bool:
    """Whether any user can reach `path`: every directory above it is o+x, it is o+r."""
    real = Path(os.path.realpath(path))
    if not real.exists() or not real.stat().st_mode & stat.S_IROTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)


def _unprivileged_python() -> tuple[str, str]:
    """An interpreter of this version that `nobody` can run, and the site-packages to give it;
    skips when there is none."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [Path(sys.executable), Path(f"/usr/bin/python{version}"),
                  Path(f"/usr/local/bin/python{version}")]  # fmt: skip
    python = next((p for p in candidates if _reachable(p)), None)
    packages = site.getsitepackages()[0]
    if python is None or not _reachable(Path(packages)) or not _reachable(PROJECT / "honing"):
        pytest.skip(
            f"no python{version} that an unprivileged user can run with this checkout's packages "
            f"(tried {', '.join(map(str, candidates))}; {packages})"
        )
    return str(python), f"{PROJECT}:{packages}"


@pytest.fixture
def nobody_home() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a pool as another, unprivileged user")
    home = Path(tempfile.mkdtemp(prefix="honing-nobody-"))
    os.chown(home, _nobody(), _nobody())
    yield home
    shutil.rmtree(home, ignore_errors=True)


def _nobody() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return 65534


def test_an_unprivileged_user_gets_the_fallback_with_a_warning_and_require_refuses(
    nobody_home: Path,
) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    python, path = _unprivileged_python()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(nobody_home), "TMPDIR": str(nobody_home),
           "PYTHONPATH": path}  # fmt: skip
    uid = _nobody()
    proc = subprocess.run(
        [python, str(CHILD), "fallback"], capture_output=True, text=True, timeout=300,
        env=env, user=uid, group=uid, extra_groups=[], cwd=nobody_home,
    )  # fmt: skip
    if proc.returncode != 0 and "failed to start" in proc.stderr:
        pytest.skip(f"bubblewrap cannot run as an unprivileged user here: {proc.stderr[-500:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    e = out["enforcement"]
    if e["memory"] != "rlimit_as":
        pytest.skip(f"an unprivileged user has cgroups here ({e['memory']}): no fallback to check")
    assert e["pids_cgroup"] is False and e["missing"][0].startswith("no cgroup: cgroup v1: ")
    assert "cgroup v2: " in e["missing"][0]  # both hierarchies tried, both said why not
    assert "a job of 32 processes may use 32 × 512 MiB" in e["description"]
    # the weakness the warning names: four processes of 40 MiB each pass a 96 MiB limit
    assert out["spread"] == ["ok", "failed 0\n", "rlimit_as"]
    # warned once (two pools started), naming what is missing and how to get it
    warnings = [line for line in proc.stderr.splitlines() if "no memory cgroup" in line]
    assert len(warnings) == 1, proc.stderr
    assert "RLIMIT_AS" in warnings[0] and "Why: cgroup v1: " in warnings[0]
    assert "`systemd-run --user --scope -p Delegate=yes honing ...`" in warnings[0]
    assert out["seccomp_result"] is X86_64 and out["seccomp_required"] is X86_64
    refused = out["refused"]
    assert refused is not None, "require.cgroup started a pool without cgroups"
    assert refused.startswith("sandbox.require.cgroup is set, but no cgroup can limit")
    assert "Delegate=yes" in refused and "cgroup v1: " in refused


# -- cgroup v2: a delegated group --------------------------------------------------------------


def test_own_v2_group_is_read_from_proc_texts() -> None:
    hybrid = "4:memory:/a\n0::/\n"
    mounts = ("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
              "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")  # fmt: skip
    assert own_v2_group(hybrid, mounts) == Path("/sys/fs/cgroup/unified")
    scope = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope\n"
    v2 = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    assert own_v2_group(scope, v2) == Path(
        "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope"
    )
    # a container that mounts only its own subtree (no cgroup namespace)
    sub = "700 600 0:26 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n"
    assert own_v2_group("0::/docker/abc/job\n", sub) == Path("/sys/fs/cgroup/job")
    assert own_v2_group("0::/elsewhere\n", sub) is None
    spaced = "50 23 0:40 / /mnt/my\\040cgroups rw - cgroup2 none rw\n"
    assert own_v2_group("0::/x\n", spaced) == Path("/mnt/my cgroups/x")
    assert own_v2_group("4:memory:/a\n", mounts) is None  # v1 only
    assert own_v2_group(hybrid, mounts.splitlines()[0]) is None  # no cgroup2 mounted


def test_own_v2_group_of_this_process_is_a_real_group() -> None:
    own = own_v2_group(
        Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text()
    )
    if own is None:
        pytest.skip("no cgroup2 hierarchy holds this process")
    assert (own / "cgroup.controllers").is_file()


def _v2_child(prefix: list[str]) -> dict[str, Any]:
    proc = subprocess.run([*prefix, sys.executable, str(CHILD), "v2"], capture_output=True,
                          text=True, timeout=300, cwd=PROJECT)  # fmt: skip
    if proc.returncode != 0:
        said = " ".join(proc.stderr.split())[-300:]
        return {"skip": f"{' '.join(prefix) or 'directly'}: {said}"}
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["stderr"] = proc.stderr
    return out


def test_cgroup_v2_limits_a_cell_where_a_group_is_delegated() -> None:
    """Directly (as root in a group honing may use), else in a delegated systemd scope."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    tried = []
    ways = [[]]
    if shutil.which("systemd-run"):
        user = [] if os.geteuid() == 0 else ["--user"]
        ways.append(["systemd-run", *user, "--scope", "-p", "Delegate=yes", "--quiet"])
    for prefix in ways:
        out = _v2_child(prefix)
        if "skip" not in out:
            break
        tried.append(out["skip"])
    else:
        pytest.skip(
            "no cgroup v2 memory controller this process may delegate: " + " | ".join(tried)
        )
    e = out["enforcement"]
    assert e["memory"] == "cgroup_v2" and e["description"].startswith(
        "memory and processes: cgroup v2" if e["pids_cgroup"] else "memory: cgroup v2"
    )
    assert (
        out["spread"][0] == "memory_limit" and out["spread"][2] == "cgroup_v2"
    )  # counted together
    assert out["fits"][:2] == ["ok", "ok\n"] and out["fits"][2] >= 60
    if e["pids_cgroup"]:
        assert int(out["forks"]) < 12
    assert int(out["limit"]) > 512 << 20  # the cell's baseline plus the last job's 512 MiB
    assert not out["pool_group_left"]
    own_before = next(ln for ln in out["before"].splitlines() if ln.startswith("0::"))
    own_after = next(ln for ln in out["after"].splitlines() if ln.startswith("0::"))
    moved = own_after != own_before
    # moved only into the leaf of its own group, and said so
    assert not moved or own_after == own_before.rstrip("/") + "/honing-supervisor"
    assert moved == ("moved honing" in out["stderr"])
