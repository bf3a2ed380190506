"""Tool name → function. A spec naming a tool not listed here is rejected before a run starts."""

from __future__ import annotations

from typing import Callable

from trainteam.agents.toolbox import StepResult, ToolContext
from trainteam.workflows.steps.curate import curate
from trainteam.workflows.steps.corpus import prepare_corpus
from trainteam.workflows.steps.judge import evaluate, gate
from trainteam.workflows.steps.register import register_model
from trainteam.workflows.steps.train import align, merge_adapters, train, train_tokenizer

ToolFn = Callable[[ToolContext], StepResult]

TOOLS: dict[str, ToolFn] = {
    "prepare_corpus": prepare_corpus,
    "curate": curate,
    "train_tokenizer": train_tokenizer,
    "train": train,
    "align": align,
    "merge_adapters": merge_adapters,
    "evaluate": evaluate,
    "gate": gate,
    "register_model": register_model,
}


def get_tool(name: str) -> ToolFn:
    try:
        return TOOLS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r} (known: {', '.join(sorted(TOOLS))})") from None
