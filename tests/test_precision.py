"""What `auto` means (forced by $HONING_AUTO_DTYPE or read from the hardware) and the run's one
precision policy: engine and learner agree unless the config states a mixed setup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from honing.errors import ConfigError
from honing.precision import FORCE_ENV, auto_dtype, native_bf16, resolve, train_dtype
from honing.trainer.precision import SERVER, decide
from honing.trainer.run_config import TrainConfig


def run_config(tmp_path: Path, **settings: Any) -> TrainConfig:
    values: dict[str, Any] = {
        "out": str(tmp_path / "run"),
        "train": {"math": {"tasks": "synthetic-math", "count": 4}},
        "steps": 1,
        **settings,
    }
    return TrainConfig.model_validate(values)


@pytest.mark.parametrize("value", ["bfloat16", "float32", "float16"])
def test_the_environment_variable_forces_what_auto_means(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(FORCE_ENV, value)
    assert auto_dtype() == value
    assert resolve("auto") == value
    assert resolve("float32") == "float32"  # a stated dtype is never overridden


def test_unforced_auto_follows_the_hardware(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FORCE_ENV, raising=False)
    assert auto_dtype() == ("bfloat16" if native_bf16() else "float32")
    monkeypatch.setenv(FORCE_ENV, "")  # empty is unset
    assert auto_dtype() == ("bfloat16" if native_bf16() else "float32")


def test_a_bad_forced_value_names_the_variable_and_the_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(FORCE_ENV, "bf16")
    with pytest.raises(ConfigError, match=f"{FORCE_ENV}='bf16': allowed: bfloat16, float16"):
        auto_dtype()


@pytest.mark.parametrize("value", [None, "bfloat16", "float32"])
def test_a_run_defaults_to_float32_on_both_sides_on_any_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    """A bf16 host samples alone in bf16 but trains in float32 on both sides (the measurement
    in docs/training.md: bf16 sampling against a bf16 learner fails the start-up check)."""
    if value is None:
        monkeypatch.delenv(FORCE_ENV, raising=False)
    else:
        monkeypatch.setenv(FORCE_ENV, value)
    assert train_dtype() == "float32"
    p = decide(run_config(tmp_path))
    assert (p.engine, p.learner, p.mixed, p.source) == ("float32", "float32", False, "auto")
    assert p.native_bf16 == native_bf16()
    config = p.apply(run_config(tmp_path))
    assert (config.engine.dtype, config.learner.dtype) == ("float32", "float32")


@pytest.mark.parametrize(
    ("engine", "learner", "expected"),
    [
        ("auto", "bfloat16", ("bfloat16", "bfloat16", False)),  # the engine follows the learner
        ("bfloat16", "auto", ("bfloat16", "bfloat16", False)),  # and the learner the engine
        ("float32", "float32", ("float32", "float32", False)),
        ("bfloat16", "float32", ("bfloat16", "float32", True)),  # stated and different: mixed
        ("float16", "auto", ("float16", "float32", True)),  # the learner has no float16
    ],
)
def test_a_stated_side_sets_the_other_and_only_two_stated_sides_can_differ(
    tmp_path: Path, engine: str, learner: str, expected: tuple[str, str, bool]
) -> None:
    cfg = run_config(tmp_path, engine={"dtype": engine}, learner={"dtype": learner})
    p = decide(cfg)
    assert (p.engine, p.learner, p.mixed) == expected
    assert p.source == "config"
    resolved = p.apply(cfg)
    assert (resolved.engine.dtype, resolved.learner.dtype) == expected[:2]
    assert decide(resolved) == p  # deciding again on the recorded config changes nothing
    assert ("mixed" in p.describe()) == expected[2]


def test_a_server_samples_in_its_own_dtype(tmp_path: Path) -> None:
    cfg = run_config(tmp_path, engine={"url": "http://127.0.0.1:9/v1"})
    p = decide(cfg)
    assert (p.engine, p.learner, p.mixed, p.same) == (SERVER, "float32", False, False)
    assert p.apply(cfg).engine.dtype == "auto"  # not the run's to set
    assert "its own dtype" in p.describe()
