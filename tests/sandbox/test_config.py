"""Sandbox configuration: strict keys, the development-only 'none' isolation, missing bubblewrap."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

import honing.sandbox.launch
from honing.config import SandboxConfig, load_yaml_model, validate_model
from honing.errors import ConfigError, SandboxUnavailable
from honing.sandbox import ExecRequest, ExecStatus, SandboxPool


def test_unknown_key_is_an_error_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        validate_model(SandboxConfig, {"pool_size": 2, "timeout_seconds": 5}, source="run.yaml")
    message = str(info.value)
    assert "run.yaml" in message
    assert "unknown key 'timeout_seconds'" in message
    assert "timeout_s" in message  # the allowed keys are listed
    with pytest.raises(ValidationError):
        SandboxConfig(timeout_seconds=5)  # type: ignore[call-arg]


def test_invalid_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match="key 'pool_size'"):
        validate_model(SandboxConfig, {"pool_size": 0})
    with pytest.raises(ConfigError, match="key 'isolation'"):
        validate_model(SandboxConfig, {"isolation": "docker"})
    with pytest.raises(ConfigError, match="key 'memory_mb'"):
        validate_model(SandboxConfig, {"memory_mb": 1})


def test_valid_config_and_defaults() -> None:
    cfg = validate_model(SandboxConfig, {"pool_size": 3, "memory_mb": 256})
    assert cfg.size == 3 and cfg.memory_mb == 256
    assert cfg.isolation == "bwrap"
    assert SandboxConfig().size >= 1


def test_yaml_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "sandbox.yaml"
    path.write_text("pool_size: 2\nmemroy_mb: 128\n")
    with pytest.raises(ConfigError) as info:
        load_yaml_model(path, SandboxConfig)
    assert str(path) in str(info.value)
    assert "unknown key 'memroy_mb'" in str(info.value)


async def test_isolation_none_warns_and_still_runs(make_config, tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="isolation is 'none'"):
        pool = SandboxPool(make_config(isolation="none", pool_size=1, root=tmp_path / "p"))
        await pool.start()
    try:
        result = await pool.run(ExecRequest(code="import sys; print(sys.argv[1] * 2)", argv=["ab"]))
        assert result.status is ExecStatus.OK, result
        assert result.stdout == "abab\n"
        assert result.memory_enforcement == "rlimit_as"
        failing = await pool.run(ExecRequest(code="raise SystemExit(4)"))
        assert failing.status is ExecStatus.ERROR and failing.exit_code == 4
        looping = await pool.run(ExecRequest(code="while True: pass", timeout_s=1))
        assert looping.status is ExecStatus.TIMEOUT
    finally:
        await pool.close()


async def test_missing_bubblewrap_is_reported_with_an_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(honing.sandbox.launch.shutil, "which", lambda *_a, **_k: None)
    pool = SandboxPool(SandboxConfig(pool_size=1, root=tmp_path / "p"))
    with pytest.raises(SandboxUnavailable) as info:
        await pool.start()
    message = str(info.value)
    assert "bubblewrap" in message
    assert "apt-get install bubblewrap" in message
    assert "isolation: none" in message  # and the development-only way out
    assert not (tmp_path / "p").exists() or list((tmp_path / "p").iterdir()) == []
    # The same missing binary does not matter to isolation 'none'.
    with pytest.warns(UserWarning, match="isolation is 'none'"):
        async with SandboxPool(SandboxConfig(isolation="none", pool_size=1)) as dev:
            assert (await dev.run(ExecRequest(code="print('dev')"))).stdout == "dev\n"
