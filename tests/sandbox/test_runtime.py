"""Named runtimes: built once with pip from a local wheel, cached by content, mounted read-only."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from honing.config import SandboxConfig
from honing.errors import RuntimeBuildError, SandboxError
from honing.sandbox import ExecRequest, ExecStatus, RuntimeStore, SandboxPool


def make_wheel(directory: Path, value: int) -> Path:
    """A minimal pure-Python wheel for package `honingprobe` whose VALUE is `value`."""
    wheel = directory / "honingprobe-1.0-py3-none-any.whl"
    dist = "honingprobe-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("honingprobe/__init__.py", f"VALUE = {value}\n")
        z.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: honingprobe\nVersion: 1.0\n")
        z.writestr(
            f"{dist}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{dist}/RECORD", "")
    return wheel


@pytest.fixture
def store_with_probe(tmp_path: Path) -> tuple[RuntimeStore, Path]:
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir()
    wheel = make_wheel(wheel_dir, 42)
    req = tmp_path / "requirements.txt"
    req.write_text(f"{wheel}\n")
    return RuntimeStore(home=tmp_path / "home"), req


def test_build_is_cached_by_content(store_with_probe: tuple[RuntimeStore, Path]) -> None:
    store, req = store_with_probe
    first = store.build("probe", req)
    assert not first.cached
    assert (first.path / "honingprobe" / "__init__.py").read_text() == "VALUE = 42\n"
    again = store.build("probe", req)
    assert again.cached and again.id == first.id
    # Same requirement text, different wheel content: a different runtime.
    make_wheel(req.parent / "wheels", 43)
    changed = store.build("probe", req)
    assert changed.id != first.id and not changed.cached
    assert [r.name for r in store.all()] == ["probe"]


async def test_runtime_is_importable_and_read_only(
    store_with_probe: tuple[RuntimeStore, Path],
) -> None:
    store, req = store_with_probe
    store.build("probe", req)
    code = (
        "import honingprobe, os\n"
        "print(honingprobe.VALUE)\n"
        "try:\n"
        "    open(os.path.join(os.path.dirname(honingprobe.__file__), 'x'), 'w')\n"
        "    print('writable')\n"
        "except OSError as e:\n"
        "    print('read-only', e.errno)\n"
    )
    async with SandboxPool(SandboxConfig(pool_size=1, runtime="probe"), runtimes=store) as pool:
        result = await pool.run(ExecRequest(code=code))
    assert result.status is ExecStatus.OK, result.stderr
    assert result.stdout.splitlines() == ["42", "read-only 30"]  # EROFS


async def test_default_runtime_has_no_packages(store_with_probe: tuple[RuntimeStore, Path]) -> None:
    store, _ = store_with_probe
    async with SandboxPool(SandboxConfig(pool_size=1), runtimes=store) as pool:
        result = await pool.run(ExecRequest(code="import honingprobe"))
    assert result.status is ExecStatus.ERROR
    assert "ModuleNotFoundError" in result.stderr


async def test_unknown_runtime_says_how_to_build(tmp_path: Path) -> None:
    pool = SandboxPool(SandboxConfig(runtime="nope"), runtimes=RuntimeStore(home=tmp_path))
    with pytest.raises(RuntimeBuildError, match="honing sandbox runtime build nope"):
        await pool.start()


def test_failed_pip_install_is_reported(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text(f"{tmp_path / 'missing-1.0-py3-none-any.whl'}\n")
    with pytest.raises(RuntimeBuildError, match="pip could not install"):
        RuntimeStore(home=tmp_path / "home").build("broken", req)
    with pytest.raises(RuntimeBuildError, match="is not built"):
        RuntimeStore(home=tmp_path / "home").resolve("broken")


def test_bad_name_is_rejected(tmp_path: Path) -> None:
    req = tmp_path / "r.txt"
    req.write_text("")
    with pytest.raises(RuntimeBuildError, match="invalid"):
        RuntimeStore(home=tmp_path).build("../evil", req)


async def test_runtime_from_installed_distributions_with_preload(tmp_path: Path) -> None:
    store = RuntimeStore(home=tmp_path)
    info = store.build_from_installed("yaml", ["PyYAML"])
    assert any(r.startswith("PyYAML==") for r in info.requirements)
    assert store.build_from_installed("yaml", ["PyYAML"]).cached
    config = SandboxConfig(pool_size=1, runtime="yaml", preload=["yaml"])
    async with SandboxPool(config, runtimes=store) as pool:
        code = "import sys, yaml\nprint(yaml.safe_load('a: [1, 2]'), 'yaml' in sys.modules)"
        result = await pool.run(ExecRequest(code=code))
    assert result.status is ExecStatus.OK, result.stderr
    assert result.stdout == "{'a': [1, 2]} True\n"
    with pytest.raises(RuntimeBuildError, match="not installed beside honing"):
        store.build_from_installed("nope", ["surely-not-installed-dist"])


async def test_a_preload_that_fails_is_a_clear_start_error(tmp_path: Path) -> None:
    pool = SandboxPool(SandboxConfig(pool_size=1, preload=["no_such_module_anywhere"]))
    with pytest.raises(SandboxError, match="no_such_module_anywhere"):
        await pool.start()


async def test_warm_code_runs_once_per_cell_and_each_run_gets_its_own_copy() -> None:
    warm = "import os\nmade_in = os.getpid()\nseen = []\n"
    config = SandboxConfig(pool_size=1, warm=warm)
    code = (
        "import os, honing_warm as w\n"
        "w.seen.append(os.getpid())\n"
        "print(w.made_in != os.getpid(), len(w.seen))"
    )
    async with SandboxPool(config) as pool:
        first = await pool.run(ExecRequest(code=code))
        second = await pool.run(ExecRequest(code=code))
    async with SandboxPool(SandboxConfig(pool_size=1)) as plain:
        missing = await plain.run(ExecRequest(code="import honing_warm"))
    # made before the fork, in the cell; a run's change is not seen by the next run
    assert (first.stdout, second.stdout) == ("True 1\n", "True 1\n"), first.stderr
    assert missing.status is ExecStatus.ERROR and "honing_warm" in missing.stderr


async def test_warm_code_that_fails_is_a_clear_start_error() -> None:
    pool = SandboxPool(SandboxConfig(pool_size=1, warm="raise ValueError('cold start')"))
    with pytest.raises(SandboxError, match="cold start"):
        await pool.start()


async def test_a_sibling_with_warm_code_is_its_own_pool(tmp_path: Path) -> None:
    store = RuntimeStore(home=tmp_path)
    store.build_from_installed("yaml", ["PyYAML"])
    async with SandboxPool(SandboxConfig(pool_size=1), runtimes=store) as pool:
        plain = await pool.sibling("yaml", ["yaml"])
        warm = await pool.sibling(
            "yaml", ["yaml"], warm="import yaml\nparsed = yaml.safe_load('a: 1')"
        )
        assert warm is not plain and await pool.sibling("yaml", ["yaml"]) is plain
        shown = await warm.run(ExecRequest(code="import honing_warm; print(honing_warm.parsed)"))
    assert shown.stdout == "{'a': 1}\n", shown.stderr


async def test_sibling_pool_with_another_runtime_is_shared_and_closed_with_its_parent(
    tmp_path: Path,
) -> None:
    store = RuntimeStore(home=tmp_path)
    store.build_from_installed("yaml", ["PyYAML"])
    async with SandboxPool(SandboxConfig(pool_size=1), runtimes=store) as pool:
        sibling = await pool.sibling("yaml", ["yaml"])
        assert await pool.sibling("yaml", ["yaml"]) is sibling
        in_sibling = await sibling.run(ExecRequest(code="import yaml; print(yaml.__name__)"))
        in_parent = await pool.run(ExecRequest(code="import yaml"))
    assert in_sibling.stdout == "yaml\n"
    assert in_parent.status is ExecStatus.ERROR  # the parent's runtime is still the stdlib
    assert sibling.state.value == "closed"
