"""Each step's output is read back typed, and a run stored in an earlier shape still reads (issue 41, item 2)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from trainteam.contract.step_io import StepResult
from trainteam.contract.step_outputs import (
    EvalOutput,
    GateOutput,
    RegisterOutput,
    SealedOutput,
    TrainOutput,
)
from trainteam.trainers.evaluation.stage_gate import StageInput
from trainteam.trainers.training.config import TrainConfig


def _stored(details: dict) -> dict:
    """A step output as the run store keeps it: JSON, read back."""
    return json.loads(json.dumps({"outcome": "ok", "summary": "", "details": details}))


def test_a_train_output_reads_back_typed_with_its_resolved_config():
    cfg = TrainConfig(method="sft", learning_rate=2e-4, max_steps=40)
    written = TrainOutput(
        stages=["sft"],
        trained_on=["/d/train.jsonl"],
        losses={"sft": [(1, 2.5), (2, 2.1)]},
        spikes=[{"stage": "sft", "step": 2}, {"stage": "dpo", "step": 1}],
        configs={"sft": cfg.model_dump(mode="json")},
        inputs={"sft": StageInput(name="base", metrics={"exact_match": 0.1})},
        base=StageInput(name="base", metrics={"exact_match": 0.1}),
        search={"sft": {"chosen": {"learning_rate": 3e-4}, "probes": [{"learning_rate": 1e-4}]}},
        checkpoints={"sft": "Checkpoint:abc"},  # a key the model does not name is kept
    ).model_dump(mode="json", exclude_unset=True)
    read = TrainOutput.stored(_stored(written))
    assert read.config("sft") == cfg and read.config("dpo") is None
    assert read.inputs["sft"].metrics == {"exact_match": 0.1} and read.base is not None
    assert read.chosen("sft") == {"learning_rate": 3e-4} and read.probes("sft") == [{"learning_rate": 1e-4}]
    assert read.spikes_in("sft") == 1 and read.trained_on == ["/d/train.jsonl"]
    assert read.model_extra == {"checkpoints": {"sft": "Checkpoint:abc"}}


def test_outputs_stored_in_earlier_shapes_read():
    # an earlier train step kept four fields of the resolved config, and no inputs, base or search
    old = TrainOutput.stored(_stored({"stages": ["sft"], "losses": {"sft": [[1, 2.0]]}, "configs": {"sft": {"lr": 1}}}))
    assert old.config("sft") is None and old.inputs == {} and old.base is None and old.chosen("sft") == {}
    # an earlier gate recorded no checked metrics and no diagnosis; an eval no generation length
    gate = GateOutput.stored(_stored({"stage": "sft", "passed": False, "reasons": ["x"], "judged": {"exact_match": 0}}))
    assert gate.passed is False and gate.checked == [] and gate.diagnosis is None
    ev = EvalOutput.stored(_stored({"stage": "sft", "n_eval": 60}))
    assert ev.n_eval == 60 and ev.answer_tokens is None


def test_another_steps_output_reads_as_one_that_recorded_nothing():
    curate = StepResult(details={"stages": {"sft": {"version": "v1"}}})  # curation's ``stages`` is a dict
    assert TrainOutput.of(curate) == TrainOutput() and GateOutput.of(curate) == GateOutput()
    assert RegisterOutput.stored(None).model_id is None and SealedOutput.stored("junk") == SealedOutput()
    assert not GateOutput.written_by(StepResult(details={"stage": "sft", "n_eval": 3}))
    assert EvalOutput.written_by(StepResult(details={"stage": "sft", "n_eval": 3}))


def test_a_recorded_output_of_the_wrong_type_is_refused_naming_the_field():
    with pytest.raises(ValidationError, match="n_test"):
        SealedOutput.of(StepResult(details={"n_test": "many"}))


TASK = """name: judged
model: {hidden_size: 32, num_layers: 1, num_heads: 2, max_position_embeddings: 128}
data: {demo: addition, n_train: 64, n_eval: 8}
budget: {max_wall_minutes: 5}
stages: [pretrain, sft]
training:
  sft: {num_train_epochs: 2, learning_rate: 0.001, per_device_train_batch_size: 4}
"""


def test_the_judge_reads_the_config_the_attempt_trained_with_or_resolves_an_earlier_runs(tmp_path):
    from trainteam.contract.stage_config import resolve_stage
    from trainteam.contract.step_io import ToolContext
    from trainteam.contract.train_task import load_task_file
    from trainteam.trainers.search.recipe_search import Recipe
    from trainteam.workflows.steps.judge import _attempt_config

    (tmp_path / "task.yaml").write_text(TASK)
    task = load_task_file(tmp_path / "task.yaml")
    recipe = Recipe(learning_rate=4e-3, max_steps=30, per_device_train_batch_size=8, warmup_steps=2)
    resolved = resolve_stage(task, "sft", recipe=recipe)
    search = {"sft": {"chosen": recipe.model_dump(mode="json")}}
    now = StepResult(details={"losses": {"sft": []}, "configs": {"sft": resolved.model_dump(mode="json")}})
    # an earlier version kept four fields of the config: the judge resolves it as the step did
    before = StepResult(details={"losses": {"sft": []}, "configs": {"sft": {"max_steps": 30}}, "search": search})
    ctx = ToolContext(ws=None, run_id="r", step="gate", visit=1, persona="eval_judge", task=task)  # type: ignore[arg-type]
    assert _attempt_config(ctx, "sft", TrainOutput.of(now)) == resolved
    assert _attempt_config(ctx, "sft", TrainOutput.of(before)) == resolved
    assert (resolved.learning_rate, resolved.max_steps, resolved.num_train_epochs) == (4e-3, 30, None)
