"""Group relative policy optimisation: TRL's ``GRPOTrainer`` on prompts, rewarded by the task's answer
checks (``curation.rewards.default_rewards``: the exact answer and a well-formed ending).

Its time goes to sampling completions (``generates``): the planner keeps its guess instead of a
calibration, and the pace check makes no estimate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.curation import formats as F
from trainteam.curation.formats import PromptFormat, prompt_format, prompt_text
from trainteam.curation.rewards import default_rewards
from trainteam.trainers.methods.base import TrainingMethod, is_peft
from trainteam.trainers.training.config import SpikeSignal, TrainConfig
from trainteam.trainers.training.stage_change import StageChange
from trainteam.trainers.training.trainer_args import common_args, peft_config, trl_args


def grpo_dataset(tokenizer, ds):
    """Prompts in the training context (turns for a chat model, which TRL renders with the
    template); the reference answer moves to ``answer`` for the rewards."""
    fmt = prompt_format(tokenizer)

    def fmt_row(r):
        prompt, reference = F.example(r)
        if fmt == "chat":
            return {"prompt": F.as_messages(prompt, r.get("system")), "answer": reference}
        return {"prompt": prompt_text(tokenizer, prompt, system=r.get("system")), "answer": reference}

    return ds.map(fmt_row, remove_columns=list(ds.column_names))


def shape(config: TrainConfig, tokenizer, ds):
    return grpo_dataset(tokenizer, ds)


def grpo_args(config: TrainConfig, out: Path):
    """GRPOConfig from TrainConfig: loss variant, clip-higher, and a separate vLLM server if given."""
    from trl import GRPOConfig

    o = config.grpo
    vllm: dict[str, Any] = {}
    if o.vllm_server_url:
        from trl.import_utils import is_vllm_available

        if not is_vllm_available():
            raise BadInput("grpo.vllm_server_url: the vllm package is needed to talk to a generation server")
        vllm = dict(use_vllm=True, vllm_mode="server", vllm_server_base_url=o.vllm_server_url)
    batch = config.per_device_train_batch_size
    # The generation batch must divide by num_generations: round the batch up to a multiple.
    if batch % o.num_generations:
        batch = ((batch // o.num_generations) + 1) * o.num_generations
    kw = common_args(config, out)
    kw["per_device_train_batch_size"] = batch
    return GRPOConfig(
        **kw,
        num_generations=o.num_generations,
        max_completion_length=o.max_completion_length,
        loss_type=o.loss_type,
        beta=o.beta,
        epsilon=o.epsilon,
        epsilon_high=o.epsilon_high,
        temperature=o.temperature,
        mask_truncated_completions=o.loss_type == "dapo",
        **vllm,
        **trl_args(config, GRPOConfig, owned=METHOD.trl_owned),
    )


def build(config: TrainConfig, model, tokenizer, ds, eval_ds, out: Path, callbacks, reward_funcs=None) -> Any:
    from trl import GRPOTrainer

    train_ds = shape(config, tokenizer, ds)
    args = grpo_args(config, out)
    if tokenizer.padding_side != "left":
        tokenizer.padding_side = "left"
    return GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs or default_rewards(tokenizer),
        args=args,
        train_dataset=train_ds,
        processing_class=tokenizer,
        callbacks=callbacks,
        peft_config=None if is_peft(model) else peft_config(config),
    )


def row_tokens(tokenizer, rows: list[dict], fmt: PromptFormat) -> list[int]:
    """The prompt; the completions are sampled."""
    return [len(F.prompt_ids(tokenizer, F.query(r), fmt)) for r in rows]


def completion_changes(cfg: TrainConfig, tokens: int) -> StageChange | None:
    """The change that makes the sampled completions ``tokens`` long (the answer checks' length), None where
    the block sets their length."""
    if "max_completion_length" in cfg.grpo.model_fields_set:
        return None
    return StageChange(source="completion", grpo=cfg.grpo.model_copy(update={"max_completion_length": tokens}))


def _holds_reference(cfg: TrainConfig) -> bool:
    return cfg.grpo.beta > 0  # a KL term against a frozen reference


# GRPO at 1e-5 when its block names no rate (benchmarks/align_gain.py from a 53.5 % SFT checkpoint:
# 1e-4 fell to 44 %, 1e-5 reached 65.5-68 %).
METHOD = TrainingMethod(
    name="grpo",
    sequences_per_row=None,  # a forward scores a prompt's group of completions together: never split
    kind="align",
    trl_config="trl.GRPOConfig",
    build=build,
    shape=shape,
    columns=(("prompt", "completion"), ("messages",)),
    row_kinds=("pair", "chat"),
    row_tokens=row_tokens,
    words=r"\bgrpo\b|reinforcement|\brl\b",
    spike_signals=(SpikeSignal(metric="reward", direction="down"), SpikeSignal(metric="kl", direction="up")),
    default_lr=(1e-5, 1e-5),
    needs_rewards=True,
    generates=True,
    evaluates=False,
    holds_reference=_holds_reference,
    completion_changes=completion_changes,
    trl_owned={
        "num_generations": "grpo.num_generations",
        "max_completion_length": "grpo.max_completion_length",
        "loss_type": "grpo.loss_type",
        "beta": "grpo.beta",
        "epsilon": "grpo.epsilon",
        "epsilon_high": "grpo.epsilon_high",
        "temperature": "grpo.temperature",
        "mask_truncated_completions": "grpo.loss_type (on with dapo)",
        "use_vllm": "grpo.vllm_server_url",
        "vllm_mode": "grpo.vllm_server_url",
        "vllm_server_base_url": "grpo.vllm_server_url",
    },
    tool_doc="Group relative policy optimisation (TRL GRPOTrainer) with verifiable rewards (the answer spec): a "
    "train_model run whose last stage is grpo, after the stages in before; registering waits for a person.",
)
