"""Tool name → StepTool. A spec naming a tool not listed here is rejected before a run starts."""

from __future__ import annotations

from trainteam.contract.step_io import StepTool
from trainteam.workflows.steps.corpus import prepare_corpus
from trainteam.workflows.steps.curate import curate
from trainteam.workflows.steps.judge import evaluate, gate, gate_facts
from trainteam.workflows.steps.plans import TrainArgs, apply_overrides, plan_curate, plan_stages
from trainteam.workflows.steps.precheck import precheck_data
from trainteam.workflows.steps.register import register_model, register_model_evidence
from trainteam.workflows.steps.sealed_test import sealed_test
from trainteam.workflows.steps.train import align, merge_adapters, train, train_tokenizer

STEPS: dict[str, StepTool] = {
    "prepare_corpus": StepTool(prepare_corpus),
    "curate": StepTool(curate, plan=plan_curate),
    "precheck_data": StepTool(precheck_data),
    "train_tokenizer": StepTool(train_tokenizer),
    "train": StepTool(train, args=TrainArgs, prepare=apply_overrides, plan=plan_stages),
    "align": StepTool(align, args=TrainArgs, prepare=apply_overrides, plan=plan_stages),
    "merge_adapters": StepTool(merge_adapters),
    "evaluate": StepTool(evaluate),
    "gate": StepTool(gate, facts=gate_facts),
    "sealed_test": StepTool(sealed_test),
    "register_model": StepTool(register_model, evidence=register_model_evidence),
}


def get_tool(name: str) -> StepTool:
    try:
        return STEPS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r} (known: {', '.join(sorted(STEPS))})") from None
