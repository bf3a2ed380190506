"""A TRL / transformers / Axolotl user's recipe keys, the did-you-mean on an unknown key, num_train_epochs,
and the ``trl:`` passthrough checked against TRL's own config classes (and trained through)."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from trainteam.contract.train_task import TrainTask
from trainteam.core.errors import BadInput, format_validation_error
from trainteam.trainers.methods.method_registry import checked_trl as trl_args
from trainteam.trainers.methods.method_registry import config_class as trl_config_class
from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.training import key_aliases
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.trainer_args import common_args


def _error(data: dict) -> str:
    with pytest.raises(ValidationError) as info:
        TrainConfig.model_validate(data)
    return format_validation_error(info.value, "recipe.yaml")


def test_a_trl_recipe_validates_as_written():
    trl_recipe = {
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "learning_rate": 2e-4,
        "lr_scheduler_type": "linear",
        "max_length": 256,
        "bf16": True,
        "fp16": False,
        "use_peft": True,
        "lora_r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "lora_target_modules": ["q_proj", "v_proj"],
        "num_train_epochs": 2,
        "max_steps": -1,
        "logging_steps": 5,
        "save_steps": 50,
        "warmup_ratio": 0.1,
        "report_to": "none",
        "gradient_checkpointing": True,
        "packing": False,
    }
    ours = TrainConfig(
        per_device_batch_size=4,
        grad_accum=2,
        learning_rate=2e-4,
        lr_scheduler="linear",
        seq_len=256,
        precision="bf16",
        lora={"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]},
        num_train_epochs=2,
        logging_steps=5,
        save_steps=50,
        warmup_ratio=0.1,
        tracker="none",
        gradient_checkpointing=True,
        sft={"packing": False},
    )
    assert TrainConfig.model_validate(trl_recipe) == ours
    assert "grad_accum" not in ours.model_dump() and ours.model_dump()["gradient_accumulation_steps"] == 2


def test_an_axolotl_recipe_validates_as_written():
    axolotl = {
        "micro_batch_size": 2,
        "gradient_accumulation_steps": 8,
        "num_epochs": 3,
        "sequence_len": 512,
        "adapter": "qlora",
        "lora_r": 32,
        "lora_alpha": 16,
        "lora_target_linear": True,
        "sample_packing": True,
        "flash_attention": True,
        "learning_rate": 0.0002,
        "lr_scheduler": "cosine",
    }
    cfg = TrainConfig.model_validate(axolotl)
    assert (cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps, cfg.num_train_epochs, cfg.max_length) == (
        2,
        8,
        3.0,
        512,
    )
    assert cfg.lora.model_dump() == {
        "r": 32,
        "alpha": 16,
        "dropout": 0.0,
        "target_modules": "all-linear",
        "quantize_4bit": True,
    }
    assert cfg.sft.packing is True and cfg.attn_implementation == "flash_attention_2"


def test_method_keys_go_to_the_blocks_method_and_the_task_names_it():
    dpo = TrainConfig.model_validate({"method": "dpo", "beta": 0.25, "loss_type": ["ipo"]})
    assert dpo.dpo.beta == 0.25 and dpo.dpo.loss_type == ["ipo"] and dpo.grpo.beta == 0.0
    grpo = TrainConfig.model_validate(
        {"method": "grpo", "beta": 0.04, "num_generations": 4, "max_completion_length": 32, "loss_type": "grpo"}
    )
    assert (grpo.grpo.beta, grpo.grpo.num_generations, grpo.grpo.max_completion_length, grpo.grpo.loss_type) == (
        0.04,
        4,
        32,
        "grpo",
    )
    assert "beta: a dpo or grpo setting" in _error({"beta": 0.1})
    # in a task, a stage's block is that stage's method: TRL's top-level beta lands in dpo.beta
    task = TrainTask.model_validate(
        {
            "name": "t",
            "model": {"path": "."},
            "data": {"demo": "addition"},
            "budget": {"max_wall_minutes": 5},
            "stages": ["sft", "dpo"],
            "training": {"dpo": {"beta": 0.3, "per_device_train_batch_size": 2}},
        }
    )
    assert task.train_config("dpo").dpo.beta == 0.3 and task.train_config("dpo").per_device_train_batch_size == 2


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            {"grad_accum": 2, "gradient_accumulation_steps": 4},
            "grad_accum and gradient_accumulation_steps: the same setting given twice",
        ),
        ({"max_length": 128, "max_seq_length": 256}, "max_length and max_seq_length: the same setting given twice"),
        ({"seq_len": 128, "sequence_len": 256}, "seq_len and sequence_len: the same setting given twice"),
        ({"precision": "fp32", "bf16": True}, "precision and bf16: the same setting given twice"),
        ({"bf16": True, "fp16": True}, "bf16 and fp16: the same setting given twice"),
        ({"lora": {"r": 8}, "lora_r": 16}, "lora.r and lora_r: the same setting given twice"),
        ({"use_peft": False, "lora_r": 8}, "lora_r and use_peft: use_peft is false"),
        (
            {"lora_r": 8, "lora_alpha": 16},
            "lora_r: LoRA is not on; add use_peft: true (TRL) or adapter: lora (Axolotl)",
        ),
        ({"num_train_epochs": 2, "max_steps": 10}, "max_steps and num_train_epochs: give one"),
        ({"warmup_steps": 10, "warmup_ratio": 0.1}, "warmup_steps and warmup_ratio: the same setting given twice"),
        ({"report_to": ["wandb", "mlflow"]}, "report_to: ['wandb', 'mlflow']: trainteam logs to one tracker"),
        ({"bf16": "auto"}, "bf16: 'auto' is not true or false"),
    ],
)
def test_a_setting_given_twice_or_contradicted_names_both_keys(data, expected):
    assert expected in _error(data)


@pytest.mark.parametrize(
    "key, suggestion",
    [
        ("gradient_acumulation_steps", "did you mean 'gradient_accumulation_steps'?"),
        ("per_device_batch", "did you mean 'per_device_batch_size'?"),
        ("learnig_rate", "did you mean 'learning_rate'?"),
        ("lora_rank", "did you mean 'lora_r' (trainteam's lora.r)?"),
        ("num_train_epoch", "did you mean 'num_train_epochs'?"),
    ],
)
def test_an_unknown_key_names_the_closest_of_our_names_and_aliases(key, suggestion):
    line = _error({key: 1})
    assert line.startswith(f"recipe.yaml: unknown field {key!r}") and suggestion in line, line


def test_an_unknown_key_with_nothing_close_points_to_the_trl_block():
    assert (
        "unknown field 'dataloader_pin_memory' (another field of the method's TRL config goes in the trl: block)"
        in _error({"dataloader_pin_memory": "steps"})
    )
    assert _error({"eval_strategy": "steps"}).endswith(
        "(another field of the method's TRL config goes in the trl: block)"
    )
    with pytest.raises(ValidationError) as info:
        TrainConfig.model_validate({"lora": {"rank": 8}})
    assert "lora: unknown field 'rank'" in format_validation_error(info.value, "x")


def test_epochs_config_survives_a_dump_and_reload():
    cfg = TrainConfig.model_validate({"num_train_epochs": 2, "per_device_train_batch_size": 4})
    dumped = cfg.model_dump(mode="json")
    assert "max_steps" not in dumped  # unused with epochs, and reading both back would be refused
    assert TrainConfig.model_validate(dumped) == cfg
    assert TrainConfig.model_validate_json(cfg.model_dump_json()) == cfg


def test_every_argument_trainteam_sets_is_refused_in_the_trl_block(tmp_path):
    owned = set(common_args(TrainConfig(), tmp_path))
    assert owned <= set(key_aliases.OWNED), owned - set(key_aliases.OWNED)
    for key in owned:
        with pytest.raises(ValidationError) as info:
            TrainConfig.model_validate({"trl": {key: 1}})
        assert f"trl.{key}: trainteam sets it from {key_aliases.OWNED[key]}" in format_validation_error(info.value, "x")


def test_the_method_builders_own_arguments_are_refused_too(tmp_path):
    from trainteam.trainers.methods.grpo import grpo_args

    cls = trl_config_class("grpo")
    built = grpo_args(TrainConfig(method="grpo"), tmp_path)
    defaults = cls(output_dir=str(tmp_path), use_cpu=True)
    changed = {f.name for f in dataclasses.fields(cls) if getattr(built, f.name) != getattr(defaults, f.name)}
    changed -= {"_n_gpu", "run_name", "logging_dir"}  # derived by the class itself
    missing = {k for k in changed if key_aliases.owned_by(k, get_method("grpo").trl_owned) is None}
    assert not missing, missing
    with pytest.raises(
        BadInput, match=r"training.grpo.trl.num_generations: trainteam sets it from grpo.num_generations"
    ):
        trl_args(
            TrainConfig.model_construct(**{**TrainConfig(method="grpo").__dict__, "trl": {"num_generations": 4}}),
            "training.grpo.trl",
        )


@pytest.mark.parametrize(
    "method, key, value",
    [
        ("pretrain", "optim", "sgd"),
        ("sft", "assistant_only_loss", False),
        ("sft", "eval_strategy", "steps"),
        ("dpo", "label_smoothing", 0.1),
        ("grpo", "top_p", 0.9),
        ("grpo", "scale_rewards", "batch"),
    ],
)
def test_a_field_of_the_methods_trl_config_passes_through(method, key, value):
    cfg = TrainConfig.model_validate({"method": method, "trl": {key: value}})
    assert trl_args(cfg) == {key: value}
    assert key in {f.name for f in dataclasses.fields(trl_config_class(method))}


def test_an_unknown_trl_key_names_the_closest_field_of_that_config():
    cfg = TrainConfig.model_validate({"method": "grpo", "trl": {"top_pp": 0.9}})
    with pytest.raises(BadInput, match=r"^trl.top_pp: not a field of TRL's GRPOConfig; did you mean 'top_p'\?$"):
        trl_args(cfg)
    sft = TrainConfig.model_validate({"trl": {"top_p": 0.9}})  # a GRPO field is not an SFT one
    with pytest.raises(BadInput, match=r"^trl.top_p: not a field of TRL's SFTConfig"):
        trl_args(sft)


def test_a_value_trl_refuses_is_one_line_with_its_reason():
    cfg = TrainConfig.model_validate({"trl": {"eval_strategy": "sometimes"}})
    with pytest.raises(BadInput, match=r"^trl: SFTConfig refuses \['eval_strategy'\]: sometimes is not a valid"):
        trl_args(cfg)


def test_epochs_and_a_trl_field_reach_the_trainer(tmp_path, tiny, tok, arith):
    """One epoch over 40 rows at batch 8 is 5 steps, derived by the trainer and recorded; the trl
    block's evaluation schedule (not one of ours) runs."""
    from trainteam.trainers import train

    train_rows, ev = arith
    cfg = TrainConfig.model_validate(
        {
            "output_dir": str(tmp_path / "out"),
            "num_train_epochs": 1,
            "per_device_train_batch_size": 8,
            "learning_rate": 3e-3,
            "max_length": 32,
            "trl": {"eval_strategy": "steps", "eval_steps": 2},
        }
    )
    report = train("sft", cfg, tiny, train_rows[:40], tokenizer=tok, eval_data=ev[:8], progress=False)
    assert report.steps_done == 5 and report.telemetry["max_steps"] == 5
    assert [row["step"] for row in report.log_history if "eval_loss" in row][:2] == [2, 4]
