"""Typed configuration of the training stack (pydantic; imports no torch).

One base ``TrainConfig`` holds what every method shares; each method's own
settings sit in a sub-model (``sft``, ``dpo``, ``grpo``, ``lora``) mapped one to
one onto the TRL config of that method. The CLI and task files are built from
these same classes.

A field that has a transformers/TRL counterpart carries its name (``per_device_train_batch_size``,
``gradient_accumulation_steps``, ``max_length``, ``lr_scheduler_type``, ``use_liger_kernel``...). At the
edge, trainteam's earlier spelling of those fields (``per_device_batch_size``, ``grad_accum``, ``seq_len``...;
an error names the key as written) and other recipes' names (``bf16: true``, ``lora_r``, ``micro_batch_size``...;
``key_aliases``) are accepted too, an unknown key's error names the closest known one, and ``trl:``
passes any other field of the method's TRL config through (checked against that
config class where TRL is imported: ``trainer_args.trl_args``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, cast

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from trainteam.trainers.training import key_aliases
from trainteam.trainers.training.method_names import NAMES as METHOD_NAMES


def one_of(names: tuple[str, ...]) -> Any:
    """A string type that takes only ``names`` (a list known when the program starts): validated, refused and
    shown in the JSON schema as ``Literal[names]`` would be."""
    quoted = [repr(n) for n in names]
    expected = f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else quoted[0]

    def known(name: str) -> str:
        if name not in names:
            raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
        return name

    return Annotated[str, AfterValidator(known), WithJsonSchema({"enum": list(names), "type": "string"})]


# A training method's name: one of the registry's (trainers/training/method_names.py); a plain str to a type checker.
if TYPE_CHECKING:
    Method = str
else:
    Method = one_of(METHOD_NAMES)
Precision = Literal["fp32", "fp16", "bf16"]
Strategy = Literal["single", "ddp", "fsdp", "zero2", "zero3"]


def _spelled(field: str) -> AliasChoices:
    """A field under its TRL name, or trainteam's earlier name for it (``key_aliases.EARLIER``)."""
    return AliasChoices(field, *[old for old, new in key_aliases.EARLIER.items() if new == field])


class _Strict(BaseModel):
    """No unknown keys; the error for one names the closest field or alias (difflib)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    renames: ClassVar[dict[str, str]] = {}  # another tool's name for a field -> the field

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = cls._rewrite(data)
        aliases = cls._aliases()
        spelled = [
            c
            for f in cls.model_fields.values()
            if isinstance(f.validation_alias, AliasChoices)
            for c in f.validation_alias.choices
            if isinstance(c, str)
        ]
        unknown = key_aliases.unknown_keys(data, [*cls.model_fields, *spelled], aliases, hint=cls._unknown_hint())
        if unknown:
            raise ValueError(unknown)
        return data

    @classmethod
    def _rewrite(cls, data: dict) -> dict:
        """Other tools' names for our fields, renamed (given twice: an error naming both)."""
        given = [k for k in data if k in cls.renames]
        if not given:
            return data
        out = dict(data)
        for key in given:
            field = cls.renames[key]
            if field in out:
                raise ValueError(f"{field} and {key}: the same setting given twice; keep one")
            out[field] = out.pop(key)
        return out

    @classmethod
    def _aliases(cls) -> list[str]:
        return list(cls.renames)

    @classmethod
    def _unknown_hint(cls) -> str:
        return ""


class ModelSpec(_Strict):
    """A model built from config with random init, or a local HF model folder."""

    renames: ClassVar[dict[str, str]] = {"model_name_or_path": "path", "base_model": "path"}  # TRL, Axolotl
    path: Path | None = Field(default=None, description="local HF model folder; no hub downloads")
    arch: Literal["llama", "qwen2", "gpt2"] = "llama"
    hidden_size: int = Field(default=128, gt=0, le=1 << 16)
    num_layers: int = Field(default=2, gt=0, le=1024)
    num_heads: int = Field(default=4, gt=0, le=1024)
    num_kv_heads: int | None = Field(default=None, gt=0, le=1024)
    intermediate_size: int | None = Field(default=None, gt=0, le=1 << 20)
    max_position_embeddings: int = Field(default=256, gt=0, le=1 << 20)
    vocab_size: int | None = Field(default=None, gt=0, le=1 << 21, description="default: the tokenizer's")
    trust_remote_code: bool = Field(default=False, description="only a person turns this on")
    chat_template: str | None = Field(
        default=None,
        max_length=4096,
        description=(
            "a chat template for the model's tokenizer (trainers/training/chat_templates.py): a template TRL ships "
            "by name (qwen2_5: ChatML, tools in the system turn, <tool_call> calls; gemma3: Gemma's turns) or a "
            ".jinja file; saved with the checkpoints. Unset: the model's own, else its family's turn format when "
            "its vocabulary holds the tokens (a base Gemma), else plain prompts"
        ),
    )

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelSpec:
        if self.path is None and self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.path is None and self.chat_template:
            raise ValueError("chat_template: only a local model (model.path) takes a chat template")
        return self


class TokenizerConfig(_Strict):
    vocab_size: int = Field(
        default=512, ge=260, le=1 << 20, description="byte alphabet (256) + special tokens + merges"
    )
    split_digits: bool = Field(default=True, description="one token per digit; arithmetic fails without it")
    min_frequency: int = Field(default=1, ge=1, le=1 << 30)
    special_tokens: list[str] = Field(default_factory=lambda: ["<pad>", "<s>", "</s>", "<unk>"], max_length=1000)
    extra_tokens: list[str] = Field(
        default_factory=list, max_length=10000, description="functional tokens added after training"
    )


class LoraOptions(_Strict):
    r: int = Field(default=8, gt=0, le=4096)
    alpha: int = Field(default=16, gt=0, le=1 << 16)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"
    quantize_4bit: bool = Field(default=False, description="QLoRA; needs a CUDA device")


class SFTOptions(_Strict):
    packing: bool | None = Field(default=None, description="None: trainteam chooses")
    padding_free: bool | None = None
    completion_only_loss: bool = True


class DPOOptions(_Strict):
    beta: float = Field(default=0.1, gt=0, le=1000)
    loss_type: list[str] = Field(default_factory=lambda: ["sigmoid"])
    precompute_ref_log_probs: bool = False


class GRPOOptions(_Strict):
    num_generations: int = Field(default=8, ge=2, le=1024)
    max_completion_length: int = Field(default=16, gt=0, le=1 << 16)
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo"] = "dapo"
    beta: float = Field(default=0.0, ge=0, le=1000)
    epsilon: float = Field(default=0.2, gt=0, le=10)
    epsilon_high: float | None = Field(default=None, gt=0, le=10, description="clip-higher (DAPO)")
    temperature: float = Field(default=1.0, gt=0, le=100)
    vllm_server_url: str | None = Field(default=None, description="separate generation server")


class SpikeSignal(_Strict):
    """A logged metric whose jump means "diverging", and which way it jumps."""

    metric: str = Field(min_length=1, description="a key of the trainer's logs: loss, grad_norm, reward, kl, ...")
    direction: Literal["up", "down"] = "up"


def loss_signals(watch_grad_norm: bool) -> list[SpikeSignal]:
    """What diverging looks like for a method that says nothing of its own: the loss going up, and the
    gradient norm with ``watch_grad_norm``."""
    return [SpikeSignal(metric="loss")] + ([SpikeSignal(metric="grad_norm")] if watch_grad_norm else [])


class SpikeOptions(_Strict):
    enabled: bool = True
    window: int = Field(default=128, ge=4, le=100_000)
    sigma: float = Field(default=6.0, gt=0)
    warmup_steps: int = Field(default=64, ge=0, le=10_000_000)
    # Off by default: on the demo's SFT the grad norm rose from ~0.5 to ~1.2 (> 6σ of its
    # window) as the model began to learn the answers, while the loss sat at 1.40 ± 0.04.
    # A non-finite grad norm is a spike either way.
    watch_grad_norm: bool = False
    signals: list[SpikeSignal] | None = Field(
        default=None, description="None: the method's own (pretrain/sft/dpo: loss up; grpo: reward down, kl up)"
    )
    # A jump must clear sigma × max(window std, rel_floor × |window mean|, abs_floor): a
    # near-constant signal (GRPO's surrogate loss on a solved task sat at -0.0012 ± 0 and
    # read z = 29,756) never makes a spike out of noise.
    rel_floor: float = Field(default=0.01, ge=0)
    abs_floor: float = Field(default=0.02, ge=0)
    max_restarts: int = Field(
        default=2,
        ge=0,
        le=100,
        description="restart proposals per stage; then the step fails (or asks a person, with on_gate_failure: ask)",
    )


class DistributedSpec(_Strict):
    """A task's ``distributed:`` block: the train and align steps launch every stage as
    ``accelerate launch`` (or ``torchrun``) child processes with the generated config
    (``trainers/launch/node_commands.py``) and supervise them (``trainers/launch/supervisor.py``). On a CPU, DDP runs
    over gloo; FSDP and DeepSpeed need CUDA devices (the planner refuses them on a CPU)."""

    strategy: Literal["ddp", "fsdp", "deepspeed"]
    num_processes: int = Field(ge=2, le=65536, description="processes over all machines (accelerate's count)")
    num_machines: int = Field(default=1, gt=0, le=4096)
    machine_rank: int = Field(
        default=0,
        ge=0,
        description="this machine's rank; only machine 0 runs the workflow "
        "(the others run their node's command from launch/node<R>.sh)",
    )
    main_process_ip: str | None = Field(
        default=None, max_length=253, pattern=r"^[A-Za-z0-9.:_-]+$", description="required with num_machines > 1"
    )
    main_process_port: int | None = Field(
        default=None, ge=1024, le=65535, description="default: a free port on one machine, 29500 over many"
    )
    launcher: Literal["accelerate", "torchrun"] = "accelerate"
    zero_stage: Literal[2, 3] = Field(default=2, description="DeepSpeed ZeRO stage (strategy deepspeed)")
    max_restarts: int = Field(
        default=1,
        ge=0,
        le=100,
        description="launches after a rank dies, each resuming from "
        "the newest complete checkpoint; then the step fails",
    )

    @model_validator(mode="after")
    def _consistent(self) -> DistributedSpec:
        if self.num_processes % self.num_machines:
            raise ValueError(
                f"num_processes: {self.num_processes} processes do not split evenly over {self.num_machines} machines"
            )
        if self.machine_rank >= self.num_machines:
            raise ValueError(f"machine_rank: {self.machine_rank} is not below num_machines ({self.num_machines})")
        if self.num_machines > 1 and not self.main_process_ip:
            raise ValueError("main_process_ip: required for a run over more than one machine")
        if self.launcher == "torchrun" and self.strategy != "ddp":
            raise ValueError(f"launcher: torchrun carries no {self.strategy} settings; use accelerate")
        return self

    @property
    def train_strategy(self) -> Strategy:
        """The TrainConfig strategy (the planner's and the accelerate config's name for it)."""
        # "zero2" / "zero3" are Strategy values; mypy cannot see it through the f-string
        return cast(Strategy, f"zero{self.zero_stage}" if self.strategy == "deepspeed" else self.strategy)

    def train_fields(self) -> dict[str, Any]:
        """What the block sets in every stage's TrainConfig."""
        return {
            "strategy": self.train_strategy,
            "num_nodes": self.num_machines,
            "devices_per_node": self.num_processes // self.num_machines,
        }


class TrainConfig(_Strict):
    """A stage's training settings, under TRL/transformers' names where they have one. trainteam's earlier
    names (``EARLIER``) and other recipes' names (``key_aliases``) are accepted at the edge; a dump holds only
    these names (and no max_steps with num_train_epochs)."""

    method: Method = "sft"
    output_dir: Path | None = None
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    max_steps: int = Field(
        default=100, gt=0, le=10_000_000, description="unused (and not stored) with num_train_epochs"
    )
    num_train_epochs: float | None = Field(
        default=None,
        gt=0,
        le=10_000,
        description="passes over the data instead of "
        "max_steps: the trainer derives the steps from the data's size and the "
        "batch when training starts (recorded as the stage's max_steps)",
    )
    per_device_train_batch_size: int = Field(
        default=8, gt=0, le=1 << 16, validation_alias=_spelled("per_device_train_batch_size")
    )
    gradient_accumulation_steps: int = Field(
        default=1, gt=0, le=1 << 16, validation_alias=_spelled("gradient_accumulation_steps")
    )
    micro_batch_tokens: int | None = Field(
        default=None,
        gt=0,
        le=1 << 30,
        description="tokens one forward holds at most (rows x the longest row): the rest of a step's rows "
        "accumulate, the optimizer's batch unchanged; default on a CPU: what keeps 768 MiB of activations "
        "(517 tokens of SmolLM2-135M; trainers/training/micro_batch.py), on a GPU no bound",
    )
    learning_rate: float = Field(default=3e-4, gt=0, le=10)
    lr_scheduler_type: Literal["cosine", "linear", "constant", "constant_with_warmup", "warmup_stable_decay"] = Field(
        default="cosine", validation_alias=_spelled("lr_scheduler_type")
    )
    warmup_steps: int = Field(default=0, ge=0, le=10_000_000)
    warmup_ratio: float | None = Field(
        default=None, ge=0, lt=1, description="warm-up as a fraction of the steps, instead of warmup_steps"
    )
    weight_decay: float = Field(default=0.0, ge=0)
    max_grad_norm: float = Field(default=1.0, gt=0, le=1e12)
    max_length: int = Field(
        default=128,
        gt=0,
        le=1 << 20,
        validation_alias=_spelled("max_length"),
        description="tokens a sequence is cut at (pretraining: the packed window)",
    )
    precision: Precision = "fp32"
    gradient_checkpointing: bool = False
    attn_implementation: Literal["eager", "sdpa", "flash_attention_2"] = "sdpa"
    use_liger_kernel: bool = Field(default=False, validation_alias=_spelled("use_liger_kernel"))
    logging_steps: int = Field(default=1, gt=0, le=10_000_000)
    save_steps: int | None = Field(default=None, gt=0, le=10_000_000)
    save_total_limit: int = Field(default=2, gt=0, le=1000)
    resume: Literal["auto", "never"] | Path = "auto"
    strategy: Strategy = "single"
    num_nodes: int = Field(default=1, gt=0, le=4096)
    devices_per_node: int = Field(default=1, gt=0, le=64)
    tensor_parallel_size: int = Field(default=1, gt=0, le=64, description="devices one layer is split over")
    tracker: Literal["none", "mlflow", "tensorboard", "wandb"] = "none"
    threads: int | None = Field(default=None, gt=0, le=1024, description="torch threads; None: chosen from load")
    lora: LoraOptions | None = None
    sft: SFTOptions = Field(default_factory=SFTOptions)
    dpo: DPOOptions = Field(default_factory=DPOOptions)
    grpo: GRPOOptions = Field(default_factory=GRPOOptions)
    spike: SpikeOptions = Field(default_factory=SpikeOptions)
    trl: dict[str, Any] = Field(
        default_factory=dict,
        max_length=200,
        description="other fields of the method's TRL "
        "config (SFTConfig, DPOConfig, GRPOConfig; TrainingArguments for pretrain), passed "
        "through as given; checked against that class before a run starts",
    )

    @classmethod
    def _rewrite(cls, data: dict) -> dict:
        return key_aliases.rewrite(data, cls.method_sections())

    @classmethod
    @functools.cache
    def method_sections(cls) -> dict[str, frozenset[str]]:
        """The methods with a block of their own here (the field named after the method), and its fields: read
        once, since every TrainConfig validated asks."""
        return {
            name: frozenset(f.annotation.model_fields)
            for name, f in cls.model_fields.items()
            if name in METHOD_NAMES and isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
        }

    @classmethod
    def _aliases(cls) -> list[str]:
        return key_aliases.alias_names()

    @classmethod
    def _unknown_hint(cls) -> str:
        return " (another field of the method's TRL config goes in the trl: block)"

    @model_validator(mode="after")
    def _trl_not_ours(self) -> TrainConfig:
        """A ``trl:`` key trainteam sets itself for every method is refused, naming the field that sets it (a key
        one method's settings set is refused where its trainer is built: ``trainer_args.trl_args``)."""
        for key in self.trl:
            ours = key_aliases.owned_by(key)
            if ours is None and key in key_aliases.RENAMES:
                ours = key_aliases.RENAMES[key]
            if ours is not None:
                raise ValueError(f"trl.{key}: trainteam sets it from {ours}; set that instead of trl.{key}")
        return self

    @model_serializer(mode="wrap")
    def _without_unused_steps(self, handler):
        out = handler(self)
        if self.num_train_epochs is not None and isinstance(out, dict):
            out.pop("max_steps", None)  # the epochs decide; a dump read back must not hold both
        return out
