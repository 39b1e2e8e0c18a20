"""Config loading: dotted overrides and errors that name the nested key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from honing.config import StrictModel, load_yaml_model, parse_overrides
from honing.errors import ConfigError


class Inner(StrictModel):
    lr: float = 1.0
    names: tuple[str, ...] = ()


class Outer(StrictModel):
    seed: int = 0
    inner: Inner = Inner()


def test_overrides_are_nested_and_typed() -> None:
    got = parse_overrides(["inner.lr=1e-5", "inner.names=[a, b]", "seed=3", "x=hello"])
    assert got == {"inner": {"lr": 1e-5, "names": ["a", "b"]}, "seed": 3, "x": "hello"}


def test_overrides_merge_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("seed: 1\ninner:\n  lr: 0.5\n  names: [x]\n")
    cfg = load_yaml_model(path, Outer, ["inner.lr=0.25"])
    assert cfg == Outer(seed=1, inner=Inner(lr=0.25, names=("x",)))


@pytest.mark.parametrize("bad", ["novalue", "=3", "a..b=1"])
def test_malformed_override_says_the_form(bad: str) -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides([bad])


def test_unknown_nested_key_lists_that_sections_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("inner:\n  lrr: 1\n")
    with pytest.raises(ConfigError) as err:
        load_yaml_model(path, Outer)
    assert "unknown key 'inner.lrr' (allowed: lr, names)" in str(err.value)
    assert str(path) in str(err.value)
