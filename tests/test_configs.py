"""Tests for the config alignment checklist: readers, key table and MindFormers/Megatron checks."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from pytest_accuracy.configs import (
    CATEGORIES,
    ConfigFinding,
    check_configs,
    config_flavour,
    load_key_table,
    parse_args_dump,
    parse_command_line,
    read_config,
    unmapped_keys,
)
from pytest_accuracy.errors import AccuracyInputError

EXAMPLES = Path(__file__).resolve().parent.parent / "example_data" / "configs"
MF_ALIGNED = EXAMPLES / "mindformers_llama2_7b.yaml"
MF_MISALIGNED = EXAMPLES / "mindformers_llama2_7b_misaligned.yaml"
MEGATRON_SCRIPT = EXAMPLES / "megatron_llama2_7b.sh"
MEGATRON_YAML = EXAMPLES / "megatron_llama2_7b_args.yaml"


@pytest.fixture(scope="module")
def mf() -> dict[str, object]:
    return read_config(MF_ALIGNED)


@pytest.fixture(scope="module")
def megatron() -> dict[str, object]:
    return read_config(MEGATRON_SCRIPT)


def by_key(findings: list[ConfigFinding]) -> dict[str, ConfigFinding]:
    return {f.key: f for f in findings}


def statuses(findings: list[ConfigFinding], status: str) -> set[str]:
    return {f.key for f in findings if f.status == status}


# ---------------------------------------------------------------- the example pairs


@pytest.mark.parametrize("bench_path", [MEGATRON_SCRIPT, MEGATRON_YAML], ids=["script", "yaml"])
def test_aligned_pair_passes_every_key_both_sides_set(
    mf: dict[str, object], bench_path: Path
) -> None:
    findings = check_configs(
        mf, read_config(bench_path), npu_path=MF_ALIGNED, bench_path=bench_path
    )
    assert statuses(findings, "fail") == set()
    assert statuses(findings, "missing") == set()
    both_set = [f for f in findings if f.npu_source and f.bench_source]
    assert len(both_set) >= 45
    assert all(f.status == "pass" for f in both_set)


def test_misaligned_pair_fails_exactly_the_three_planted_differences(
    megatron: dict[str, object],
) -> None:
    findings = check_configs(read_config(MF_MISALIGNED), megatron)
    assert statuses(findings, "fail") == {"rms_norm_eps", "num_heads", "adam_beta2"}
    assert statuses(findings, "missing") == set()
    eps = by_key(findings)["rms_norm_eps"]
    assert eps.message == (
        "config 'rms_norm_eps' differs: npu model.model_config.rms_norm_eps = 1e-06, "
        "bench --norm-epsilon = 1e-05 (the guide: rms_norm_eps corresponds to Megatron "
        "layernorm_epsilon (norm-epsilon); check that they are equal)"
    )
    assert (eps.npu_value, eps.bench_value, eps.category) == (1e-06, 1e-05, "network")
    beta2 = by_key(findings)["adam_beta2"]
    assert (beta2.npu_source, beta2.bench_source) == ("optimizer.betas[1]", "--adam-beta2")


def test_both_megatron_forms_and_both_mindformers_files_compare(mf: dict[str, object]) -> None:
    megatron_pair = check_configs(read_config(MEGATRON_SCRIPT), read_config(MEGATRON_YAML))
    assert statuses(megatron_pair, "fail") | statuses(megatron_pair, "missing") == set()
    mf_pair = check_configs(mf, read_config(MF_MISALIGNED))
    # n_kv_heads: 32 explicitly on one side, num_heads 32 (n_kv_heads unset) on the other.
    assert statuses(mf_pair, "fail") == {"rms_norm_eps", "num_heads", "adam_beta2"}
    # MindFormers-only settings are compared when both sides are MindFormers.
    assert by_key(mf_pair)["layernorm_compute_type"].status == "pass"


def test_example_script_reads_as_megatron_arguments(megatron: dict[str, object]) -> None:
    assert config_flavour(megatron) == "megatron"
    assert megatron["num_layers"] == 32
    assert megatron["norm_epsilon"] == 1e-05
    assert megatron["swiglu"] is True
    assert megatron["add_bias_linear"] is False  # --disable-bias-linear, as argparse stores it
    assert megatron["masked_softmax_fusion"] is False  # --no-masked-softmax-fusion
    assert megatron["nproc_per_node"] == 8
    assert megatron["data_path"] == "/data/wiki/llama2_text_document"  # DATA_PATH=... above


def test_unmapped_keys_lists_settings_no_canonical_key_reads(
    mf: dict[str, object], megatron: dict[str, object]
) -> None:
    assert unmapped_keys(mf) == ["parallel_config.vocab_emb_dp"]
    assert unmapped_keys(megatron) == ["attention_softmax_in_fp32", "masked_softmax_fusion"]


# ---------------------------------------------------------------- statuses and messages


def test_key_on_one_side_only_is_missing_and_names_the_side(
    mf: dict[str, object], megatron: dict[str, object]
) -> None:
    npu = copy.deepcopy(mf)
    del npu["optimizer"]["weight_decay"]  # type: ignore[attr-defined]
    bench = {k: v for k, v in megatron.items() if k != "seq_length"}
    found = by_key(check_configs(npu, bench, npu_path="mf.yaml", bench_path="run.sh"))
    decay, seq = found["weight_decay"], found["seq_length"]
    assert decay.status == "missing" and seq.status == "missing"
    assert decay.message.startswith(
        "config 'weight_decay' is missing on the npu side: bench --weight-decay = 0.1, "
        "but the npu config (mf.yaml) sets none of optimizer.weight_decay"
    )
    assert (decay.npu_value, decay.bench_value) == (None, 0.1)
    assert "missing on the bench side: npu model.model_config.seq_length = 4096" in seq.message
    assert "bench config (run.sh) sets none of --seq-length" in seq.message


def test_key_absent_on_both_sides_is_skipped(
    mf: dict[str, object], megatron: dict[str, object]
) -> None:
    window = by_key(check_configs(mf, megatron))["loss_scale_window"]
    assert window.status == "skip"
    assert window.message == "config 'loss_scale_window': set by neither config"


def test_megatron_defaults_count_and_say_so(
    mf: dict[str, object], megatron: dict[str, object]
) -> None:
    bench = {k: v for k, v in megatron.items() if k not in ("hidden_dropout", "ffn_hidden_size")}
    found = by_key(check_configs(mf, bench))
    assert found["hidden_dropout"].status == "fail"
    assert "bench --hidden-dropout (Megatron default) = 0.1" in found["hidden_dropout"].message
    # Megatron's --swiglu rule gives 10880, MindFormers' multiple_of rule 11008.
    ffn = found["intermediate_size"]
    assert (ffn.status, ffn.npu_value, ffn.bench_value) == ("fail", 11008, 10880)
    # Without defaults neither Megatron's 0.1 nor the Llama class's "no dropout" counts.
    off = by_key(check_configs(mf, bench, use_defaults=False))
    assert off["hidden_dropout"].message == "config 'hidden_dropout': set by neither config"


def test_mindformers_only_setting_is_skipped_with_the_guides_advice(
    mf: dict[str, object], megatron: dict[str, object]
) -> None:
    norm = by_key(check_configs(mf, megatron))["layernorm_compute_type"]
    assert norm.status == "skip"
    assert norm.npu_value == "float32" and norm.bench_value is None
    assert "Megatron has no setting for it" in norm.message
    assert "the guide: Megatron is not configurable" in norm.message


def test_gradient_clipping_flag_and_dynamic_loss_scale() -> None:
    npu = {
        "model": {"model_config": {"type": "LlamaConfig", "compute_dtype": "float16"}},
        "runner_wrapper": {
            "use_clip_grad": False,
            "scale_sense": {
                "type": "DynamicLossScaleUpdateCell",
                "loss_scale_value": 65536,
                "scale_window": 1000,
            },
        },
    }
    bench = parse_command_line("pretrain_gpt.py --fp16 --initial-loss-scale 65536 --clip-grad 1.0")
    found = by_key(check_configs(npu, bench))
    assert found["clip_grad"].status == "fail"
    assert "npu runner_wrapper.use_clip_grad = False (-> 0.0)" in found["clip_grad"].message
    for key in ("compute_dtype", "loss_scale_type", "loss_scale_value", "loss_scale_window"):
        assert found[key].status == "pass", found[key].message
    assert found["loss_scale_type"].npu_value == "dynamic"


def test_query_groups_without_gqa_flag_are_ignored_like_megatron_does() -> None:
    npu = {"model": {"model_config": {"num_heads": 32, "n_kv_heads": 8}}}
    bench = parse_command_line("--num-attention-heads 32 --num-query-groups 8")
    kv = by_key(check_configs(npu, bench))["n_kv_heads"]
    assert (kv.status, kv.bench_value) == ("fail", 32)
    assert "--num-query-groups is ignored without it" in kv.message
    bench["group_query_attention"] = True
    assert by_key(check_configs(npu, bench))["n_kv_heads"].status == "pass"


def test_floats_compare_with_a_relative_tolerance_and_yaml_strings_count() -> None:
    bench = {"norm_epsilon": 1e-5, "lr": 1e-4}
    npu = {
        "model": {"model_config": {"rms_norm_eps": "1e-5"}},
        "lr_schedule": {"learning_rate": 1.00000000001e-4},
    }
    found = by_key(check_configs(npu, bench, keys=["rms_norm_eps", "lr"]))
    assert found["rms_norm_eps"].status == "pass"
    assert "model.model_config.rms_norm_eps = 1e-5 (-> 1e-05)" in found["rms_norm_eps"].message
    assert found["lr"].status == "pass"


def test_unreadable_value_fails_with_the_reason() -> None:
    found = check_configs({"model": {"model_config": {"num_layers": "many"}}}, {"num_layers": 2})
    layers = by_key(found)["num_layers"]
    assert layers.status == "fail"
    assert "npu model.model_config.num_layers = many: cannot read it as int" in layers.message


def test_shell_variables_are_skipped_not_compared(mf: dict[str, object]) -> None:
    bench = parse_command_line("pretrain_gpt.py --lr $LR --num-layers ${LAYERS}")
    found = by_key(check_configs(mf, bench))
    assert found["lr"].status == "skip"
    assert "bench --lr = $LR is a shell variable" in found["lr"].message
    assert found["num_layers"].status == "skip"


def test_keys_and_ignore_select_what_is_checked(
    mf: dict[str, object], megatron: dict[str, object]
) -> None:
    findings = check_configs(mf, megatron, keys=["seed", "lr"], ignore=["lr"])
    assert [(f.key, f.status) for f in findings] == [("seed", "pass"), ("lr", "skip")]
    assert findings[1].message == "config 'lr' ignored by request"
    with pytest.raises(ValueError, match="unknown config keys"):
        check_configs(mf, megatron, keys=["no_such_key"])


def test_unknown_config_dict_is_an_input_error(mf: dict[str, object]) -> None:
    with pytest.raises(AccuracyInputError, match=r"bench\.json"):
        check_configs(mf, {"foo": 1}, bench_path="bench.json")


# ---------------------------------------------------------------- command lines and dumps


def test_command_line_continuations_flags_and_equals_form() -> None:
    args = parse_command_line(
        "torchrun --nproc_per_node 8 pretrain_gpt.py \\\n"
        "    --num-layers 32 \\\n"
        "    --lr=1e-4 --bf16 \\\n"
        "    --no-gradient-accumulation-fusion --no-load-optim \\\n"
        "    --data-path 0.5 /data/a 0.5 /data/b --ignore-value -100 \\\n"
        "    --seed 1 --seed 2 \\\n"
        "    --save $CKPT 2>&1 | tee train.log\n"
    )
    assert args == {
        "nproc_per_node": 8,
        "num_layers": 32,
        "lr": 1e-4,
        "bf16": True,
        "gradient_accumulation_fusion": False,
        "no_load_optim": True,  # Megatron stores this one under its own name
        "data_path": [0.5, "/data/a", 0.5, "/data/b"],
        "ignore_value": -100,
        "seed": 2,  # the later flag wins, as in argparse
        "save": "$CKPT",
    }


def test_command_line_arguments_in_variables_arrays_and_comments() -> None:
    script = (
        "#!/bin/bash\n"
        "export CUDA_DEVICE_MAX_CONNECTIONS=1  # it's fine\n"
        'GPT_ARGS="\n'
        "    --num-layers 24 \\\n"
        "    --fp16\n"
        '"\n'
        "MODEL_ARGS=(\n"
        "    --hidden-size 1024   # width\n"
        "    --tokenizer-type 'GPT2BPETokenizer'\n"
        ")\n"
        'torchrun pretrain_gpt.py $GPT_ARGS "${MODEL_ARGS[@]}" --rotary-base 500000 --name a#b\n'
    )
    assert parse_command_line(script) == {
        "num_layers": 24,
        "fp16": True,
        "hidden_size": 1024,
        "tokenizer_type": "GPT2BPETokenizer",
        "rotary_base": 500000,
        "name": "a#b",
    }


def test_read_config_detects_a_bare_command_line(tmp_path: Path) -> None:
    file = tmp_path / "launch.txt"
    file.write_text("python pretrain_gpt.py --num-layers 2 --hidden-size 64 --swiglu\n")
    assert read_config(file) == {"num_layers": 2, "hidden_size": 64, "swiglu": True}


def test_args_dump_from_a_megatron_log(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "[rank0]: using world size: 8, data-parallel size: 8\n"
        "------------------------ arguments ------------------------\n"
        "  adam_beta2 ...................................... 0.95\n"
        "  bf16 ............................................ True\n"
        "  data_path ....................................... ['/data/a_text_document']\n"
        "  num_query_groups ................................ None\n"
        "  params_dtype .................................... torch.bfloat16\n"
        "-------------------- end of arguments ---------------------\n"
        "  later_line ...................................... 1\n"
    )
    args = read_config(log)
    assert args == {
        "adam_beta2": 0.95,
        "bf16": True,
        "data_path": ["/data/a_text_document"],
        "num_query_groups": None,
        "params_dtype": "torch.bfloat16",
    }
    assert parse_args_dump(log.read_text()) == args


def test_json_arguments_with_dashed_names(tmp_path: Path) -> None:
    file = tmp_path / "args.json"
    file.write_text('{"--num-layers": 4, "hidden-size": 256, "language_model": {"seq_length": 8}}')
    assert read_config(file) == {"num_layers": 4, "hidden_size": 256, "seq_length": 8}


def test_mindformers_base_config_is_merged(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        "seed: 0\nmodel:\n  model_config:\n    num_layers: 2\n    hidden_size: 64\n"
    )
    child = tmp_path / "run.yaml"
    child.write_text("base_config: ['base.yaml']\nmodel:\n  model_config:\n    num_layers: 4\n")
    assert read_config(child) == {
        "seed": 0,
        "model": {"model_config": {"num_layers": 4, "hidden_size": 64}},
    }


# ---------------------------------------------------------------- bad input


def test_bad_yaml_names_the_file(tmp_path: Path) -> None:
    file = tmp_path / "broken.yaml"
    file.write_text("model:\n  model_config: {num_layers: 2\n")
    with pytest.raises(AccuracyInputError) as info:
        read_config(file)
    assert info.value.path == str(file)
    assert str(file) in str(info.value) and "not valid YAML" in str(info.value)


def test_python_yaml_tags_are_refused_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    file = tmp_path / "evil.yaml"
    file.write_text(f"model: !!python/object/apply:builtins.open ['{marker}', 'w']\n")
    with pytest.raises(AccuracyInputError, match="python tags are refused"):
        read_config(file)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("list.yaml", "- 1\n- 2\n", "expected a mapping"),
        ("other.yaml", "foo: 1\nbar: {baz: 2}\n", "neither a MindFormers config nor Megatron"),
        ("bad.json", "{not json", "not valid JSON"),
        ("quotes.sh", "pretrain_gpt.py --num-layers 'unclosed\n", "cannot split the command line"),
    ],
)
def test_unusable_files_are_input_errors(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    file = tmp_path / name
    file.write_text(text)
    with pytest.raises(AccuracyInputError, match=problem) as info:
        read_config(file)
    assert info.value.path == str(file)


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(AccuracyInputError, match="cannot read config"):
        read_config(tmp_path / "nope.yaml")


# ---------------------------------------------------------------- the key table


def test_key_table_covers_the_guides_checklists() -> None:
    table = load_key_table()
    assert len(table.keys) >= 30
    assert {spec.category for spec in table.keys.values()} == set(CATEGORIES)
    required = {
        "rms_norm_eps", "num_heads", "n_kv_heads", "num_layers", "hidden_size",
        "intermediate_size", "vocab_size", "seq_length", "rotary_base", "adam_beta1",
        "adam_beta2", "adam_eps", "weight_decay", "lr", "min_lr", "lr_warmup_fraction",
        "lr_decay_style", "clip_grad", "hidden_dropout", "attention_dropout", "init_method_std",
        "seed", "compute_dtype", "param_init_type", "loss_scale_value", "data_parallel",
        "model_parallel", "pipeline_stage", "use_seq_parallel", "expert_parallel",
        "micro_batch_size", "global_batch_size", "expert_num", "num_experts_chosen",
        "aux_loss_factor", "capacity_factor",
    }  # fmt: skip
    assert required <= set(table.keys)
    assert all(spec.why and spec.tolerance > 0 for spec in table.keys.values())


def test_a_custom_key_table_is_validated(tmp_path: Path) -> None:
    file = tmp_path / "keys.yaml"
    file.write_text(
        "keys:\n  x:\n    category: network\n    type: int\n    why: w\n    megatron_derive: nope\n"
    )
    with pytest.raises(AccuracyInputError, match="unknown derivation 'nope'"):
        load_key_table(file)
