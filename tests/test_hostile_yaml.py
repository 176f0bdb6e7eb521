"""Hostile YAML (waivers, configs, mappings): bounded aliases and depth, base_config confined."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_accuracy.compare.criteria import load_waivers
from pytest_accuracy.configs.readers import read_config
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.pairing.mapfiles import load_mapping_yaml
from pytest_accuracy.safe_yaml import safe_load

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
)
TOO_MANY = (
    "YAML nodes after alias expansion: 1195743 is over the limit 1000000 (YAML nodes after "
    "expanding every alias; ACC_MAX_YAML_NODES raises it)"
)


@pytest.mark.parametrize(
    "reader", [load_waivers, read_config, load_mapping_yaml], ids=["waivers", "config", "mapping"]
)
def test_billion_laughs_is_refused_by_every_reader(tmp_path: Path, reader: object) -> None:
    path = tmp_path / "lol.yaml"
    path.write_text("num_layers: 2\n" + LAUGHS)
    with pytest.raises(AccuracyInputError) as err:
        reader(path)  # type: ignore[operator]
    assert err.value.path == str(path)
    assert err.value.problem == TOO_MANY


def test_deep_yaml_is_a_named_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("w: " + "[" * 5000 + "]" * 5000)
    with pytest.raises(AccuracyInputError) as err:
        load_waivers(path)
    assert err.value.problem == (
        "YAML nesting depth: 65 is over the limit 64 (nesting depth of a YAML document; "
        "ACC_MAX_YAML_DEPTH raises it)"
    )


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(AccuracyInputError, match="refers to a node that contains it"):
        safe_load("a: &a [1, *a]", "rec.yaml")


def test_ordinary_aliases_still_load() -> None:
    assert safe_load("base: &b {lr: 1}\nrun: *b\n", "ok.yaml") == {
        "base": {"lr": 1}, "run": {"lr": 1}
    }


@pytest.mark.parametrize("base", ["SECRET", "../outside/planted.yaml"], ids=["absolute", "dotdot"])
def test_base_config_outside_the_config_tree_is_not_read(tmp_path: Path, base: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = outside / "planted.yaml"
    planted.write_text("num_layers: 4242\nsecret_token: hunter2\n")
    conf = tmp_path / "conf"
    conf.mkdir()
    cfg = conf / "run.yaml"
    shown = str(planted) if base == "SECRET" else base
    cfg.write_text(f"base_config: {shown}\nmodel:\n  model_config:\n    num_layers: 2\n")
    with pytest.raises(AccuracyInputError) as err:
        read_config(cfg)
    assert err.value.problem == (
        f"base_config {shown!r} is outside the config's directory {conf.resolve()} "
        "(set ACC_CONFIG_ROOT to a directory that holds both to allow it)"
    )
    assert "hunter2" not in str(err.value) and "4242" not in str(err.value)


def test_base_config_root_can_be_widened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "general").mkdir()
    (tmp_path / "general" / "base.yaml").write_text("seed: 7\n")
    (tmp_path / "llama").mkdir()
    cfg = tmp_path / "llama" / "run.yaml"
    cfg.write_text("base_config: ../general/base.yaml\nmodel: {model_config: {num_layers: 2}}\n")
    monkeypatch.setenv("ACC_CONFIG_ROOT", str(tmp_path))
    assert read_config(cfg)["seed"] == 7
