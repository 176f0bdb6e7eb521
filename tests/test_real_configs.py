"""Real configs (tests/data/real): functional-test yaml, launch scripts, MindFormers of all eras."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pytest_accuracy.configs import check_configs, parse_command_line, read_config
from pytest_accuracy.errors import AccuracyInputError
from tests.helpers import ROOT

REAL = ROOT / "tests" / "data" / "real"
# Dotted overrides of a config tree (NeMo recipes, MindSpeed-LLM FSDP2): refused by name.
DOTTED = [REAL / "megatron_model_config" / "nemo_t5_220m_overrides.yaml",
          REAL / "launch" / "mindspeed_fsdp2_qwen3_32b_A3.sh"]
MODEL_CONFIGS = [p for p in sorted((REAL / "megatron_model_config").glob("*.yaml"))
                 if p not in DOTTED]
SCRIPTS = [p for p in sorted((REAL / "launch").glob("*.sh")) if p not in DOTTED]
MINDFORMERS = sorted((REAL / "mindformers").glob("*.yaml"))


def by_key(findings):  # type: ignore[no-untyped-def]
    return {f.key: f for f in findings}


@pytest.mark.parametrize("path", MODEL_CONFIGS, ids=lambda p: p.name)
def test_functional_test_model_config_reads_model_args(path: Path) -> None:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))["MODEL_ARGS"]
    cfg = read_config(path)
    for flag in ("--num-layers", "--hidden-size", "--num-attention-heads", "--global-batch-size"):
        assert cfg[flag[2:].replace("-", "_")] == raw[flag]
    assert cfg["gradient_accumulation_fusion"] is False  # --no-gradient-accumulation-fusion: true
    assert cfg["bf16"] is True
    assert "env_vars" not in cfg and "test_type" not in cfg


@pytest.mark.parametrize("path", DOTTED, ids=lambda p: p.name)
def test_dotted_overrides_are_refused_by_name(path: Path) -> None:
    first = re.search(r"^\s*(?:--)?([a-z_]+\.[a-z_.]+)", path.read_text(encoding="utf-8"), re.M)
    assert first
    with pytest.raises(AccuracyInputError, match=rf"dotted arguments \({first.group(1)}, "):
        read_config(path)


def test_functional_test_ci_variables_stay_named() -> None:
    cfg = read_config(REAL / "megatron_model_config" / "moe_cp2_pp2_ep2_4experts.yaml")
    assert str(cfg["data_path"]).startswith("${DATA_PATH}/")
    assert cfg["num_experts"] == 4


def script_value(path: Path, name: str) -> int:
    match = re.search(rf"^{name}=(\d+)$", path.read_text(encoding="utf-8"), re.M)
    assert match, f"{name} not assigned in {path.name}"
    return int(match.group(1))


@pytest.mark.parametrize(
    ("name", "pins"),
    [
        ("mindspeed_qwen3_8b_4K_ptd.sh", {"seq_length": "SEQ_LENGTH", "global_batch_size": "GBS",
                                          "tensor_model_parallel_size": "TP",
                                          "pipeline_model_parallel_size": "PP",
                                          "micro_batch_size": "MBS", "train_iters": "TRAIN_ITERS",
                                          "max_position_embeddings": "SEQ_LENGTH"}),
        ("modellink_1.0.RC1_llama2_7b_ptd.sh", {"tensor_model_parallel_size": "TP",
                                                "pipeline_model_parallel_size": "PP"}),
        ("mindspeed_ms_llama2_7b.sh", {"tensor_model_parallel_size": "TP",
                                       "pipeline_model_parallel_size": "PP"}),
    ],
)
def test_launch_script_expands_its_own_variables(name: str, pins: dict[str, str]) -> None:
    path = REAL / "launch" / name
    cfg = read_config(path)
    for key, variable in pins.items():
        assert cfg[key] == script_value(path, variable), key


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_launch_scripts_read_their_model_shape(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    cfg = read_config(path)
    layers = re.search(r"--num-layers (\d+)", text)
    assert layers and cfg["num_layers"] == int(layers.group(1))
    assert not str(cfg.get("seq_length", "")).startswith("$")


def test_variable_forms_and_outside_variables() -> None:
    cfg = parse_command_line(
        'TP=2\nSEQ=${SEQ_LEN:-4096}\nexport PP="4"\n'
        'GPT_ARGS="--tensor-model-parallel-size ${TP} --seq-length $SEQ"\n'
        "torchrun pretrain_gpt.py $GPT_ARGS --pipeline-model-parallel-size ${PP} "
        "--num-layers ${LAYERS} --lr ${LR:-1e-4}\n"
    )
    assert cfg["tensor_model_parallel_size"] == 2 and cfg["seq_length"] == 4096
    assert cfg["pipeline_model_parallel_size"] == 4 and cfg["lr"] == 1e-4
    assert cfg["num_layers"] == "${LAYERS}"  # set outside the script: unknown, never guessed


def test_outside_variable_is_a_named_skip() -> None:
    bench = parse_command_line("pretrain_gpt.py --num-layers ${LAYERS}")
    found = by_key(check_configs({"model": {"model_config": {"num_layers": 2}}}, bench))
    assert found["num_layers"].status == "skip"
    assert "${LAYERS} is a shell variable set outside the script" in found["num_layers"].message


def mf_value(path: Path, *names: str) -> int | None:
    for name in names:
        match = re.search(rf"^\s+{name}: (\d+)\s*(#.*)?$", path.read_text(encoding="utf-8"), re.M)
        if match:
            return int(match.group(1))
    return None


@pytest.mark.parametrize("path", MINDFORMERS, ids=lambda p: p.name)
def test_mindformers_of_every_era_agree_with_a_matching_bench(path: Path) -> None:
    layers = mf_value(path, "num_layers", "num_hidden_layers")
    heads = mf_value(path, "num_heads", "num_attention_heads")
    kv = mf_value(path, "n_kv_heads", "num_key_value_heads")
    assert layers and heads
    gqa = f"--group-query-attention --num-query-groups {kv}" if kv else ""
    bench = parse_command_line(
        f"pretrain_gpt.py --num-layers {layers} --num-attention-heads {heads} {gqa}"
    )
    found = by_key(check_configs(read_config(path), bench, keys=["num_layers", "num_heads",
                                                                 "n_kv_heads"]))
    assert {k: f.status for k, f in found.items()} == dict.fromkeys(found, "pass"), {
        k: f.message for k, f in found.items()}


def test_r18_names_are_read_not_missing() -> None:
    cfg = read_config(REAL / "mindformers" / "r1.8.0_pretrain_qwen3_32b_4k.yaml")
    bench = parse_command_line(
        "pretrain_gpt.py --num-layers 64 --num-attention-heads 64 --group-query-attention "
        "--num-query-groups 8 --seq-length 4096"
    )
    found = by_key(check_configs(cfg, bench, keys=["num_layers", "n_kv_heads", "seq_length"]))
    assert "model.model_config.num_hidden_layers = 64" in found["num_layers"].message
    assert "model.model_config.num_key_value_heads = 8" in found["n_kv_heads"].message
    assert found["n_kv_heads"].status == "pass"


def test_r18_moe_names_and_dataset_seq_length() -> None:
    cfg = read_config(REAL / "mindformers" / "r1.8.0_pretrain_qwen3_30b_a3b_4k.yaml")
    bench = parse_command_line(
        "pretrain_gpt.py --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 "
        "--seq-length 4096"
    )
    keys = ["expert_num", "num_experts_chosen", "moe_intermediate_size", "seq_length"]
    found = by_key(check_configs(cfg, bench, keys=keys))
    assert {k: f.status for k, f in found.items()} == dict.fromkeys(keys, "pass")
    assert "train_dataset.data_loader.config.seq_length = 4096" in found["seq_length"].message


def test_plugin_checks_a_functional_test_yaml_against_mindformers(
    pytester: pytest.Pytester,
) -> None:
    npu = REAL / "mindformers" / "r1.8.0_pretrain_qwen3_32b_4k.yaml"
    bench = REAL / "megatron_model_config" / "gpt3_7b_tp1_pp4_memory_speed.yaml"
    result = pytester.runpytest(f"--acc-npu-config={npu}", f"--acc-bench-config={bench}",
                                "-p", "no:cacheprovider", "-k", "num_layers or seq_length", "-rA")
    result.stdout.fnmatch_lines(["*num_hidden_layers = 64*--num-layers = 32*",
                                 "*seq_length*4096*8192*"])
    result.stdout.no_fnmatch_line("*neither a MindFormers config nor Megatron arguments*")
    assert result.ret == 1


def test_rotary_emb_base_spelling_is_read() -> None:
    # research/qwen2_5 configs (r1.8) also spell the rope base rotary_emb_base.
    npu = {"model": {"model_config": {"type": "LlamaConfig", "rotary_emb_base": 1000000}}}
    found = by_key(check_configs(npu, parse_command_line("x.py --rotary-base 10000"),
                                 keys=["rotary_base"]))
    assert found["rotary_base"].status == "fail"
    assert "model.model_config.rotary_emb_base = 1000000" in found["rotary_base"].message
