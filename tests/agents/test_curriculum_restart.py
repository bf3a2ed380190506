"""A loss spike in the middle of a curriculum: the restart resumes at the stage that spiked.

The tools run in-process on a real workspace with real (tiny) training, the way the engine
calls them: the spiked attempt's proposal and curves come back as ``decided.restart``
and ``decided.before``. The long_context stage is made to diverge (learning rate 0.2, no
clipping, a detector that flags any rise over a 4-step window); the restart runs with the
detector at its defaults, as a transient spike would not recur.
"""

from __future__ import annotations

from itertools import pairwise

import pytest

from trainteam.agents.hooks import ensure_step_node
from trainteam.contract.step_io import StepInputs, ToolContext
from trainteam.contract.train_task import TrainTask
from trainteam.workflows.steps.corpus import prepare_corpus
from trainteam.workflows.steps.curate import curate
from trainteam.workflows.steps.train import train, train_tokenizer
from trainteam.workspace import Workspace

SPIKY = {"warmup_steps": 0, "window": 4, "sigma": 0.01}
DIVERGING = {
    "max_steps": 8,
    "per_device_batch_size": 2,
    "seq_len": 64,
    "learning_rate": 0.2,
    "lr_scheduler": "constant",
    "max_grad_norm": 1.0e9,
}


# Six tiny steps move the held-out loss less than the default gate's noise band: these tests are about what
# comes after, so the early stages pass a loose explicit gate.
LOOSE = [{"metric": "heldout_loss", "max": 50.0}]


def _task(long_context: dict, mid_gates: list | None = None) -> TrainTask:
    return TrainTask.model_validate(
        {
            "name": "spiky",
            "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64},
            "data": {"demo": "addition", "n_train": 300, "n_eval": 16, "max_operand": 20},
            "tokenizer": {"vocab_size": 280},
            "budget": {"max_wall_minutes": 10},
            "curriculum": [
                {
                    "name": "pretrain",
                    "training": {"max_steps": 6, "per_device_batch_size": 8, "seq_len": 32},
                    "gates": LOOSE,
                },
                {
                    "name": "mid_train",
                    "data": {"demo": "subtraction", "n_train": 300, "n_eval": 16, "max_operand": 20},
                    "training": {"max_steps": 6, "per_device_batch_size": 8, "seq_len": 32},
                    "gates": mid_gates or LOOSE,
                },
                {"name": "long_context", "training": long_context},
                {"name": "sft", "training": {"max_steps": 4, "per_device_batch_size": 8, "seq_len": 32}},
            ],
        }
    )


class _Run:
    def __init__(self, ws: Workspace, run_id: str):
        self.ws, self.run_id, self.outputs = ws, run_id, {}

    def step(self, name: str, fn, task: TrainTask, decided: StepInputs | None = None):
        ctx = ToolContext(
            ws=self.ws,
            run_id=self.run_id,
            step=name,
            visit=1,
            persona="training_engineer",
            task=task,
            outputs=dict(self.outputs),
            decided=decided or StepInputs(),
            progress=False,
        )
        ensure_step_node(ctx)
        return fn(ctx)

    def prepared(self, task: TrainTask) -> _Run:
        for name, fn in (("prepare_corpus", prepare_corpus), ("curate", curate), ("train_tokenizer", train_tokenizer)):
            self.outputs[name] = self.step(name, fn, task).model_dump(mode="json")
        return self


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    return Workspace.open(tmp_path_factory.mktemp("restart") / "ws")


def test_a_spike_mid_curriculum_restarts_that_stage_and_keeps_the_ones_before(ws):
    spiky = _task({**DIVERGING, "spike": SPIKY})
    run = _Run(ws, "r1").prepared(spiky)
    first = run.step("train", train, spiky)
    assert first.outcome == "spike" and first.details["stage"] == "long_context", first.summary
    proposal = first.details["proposal"]
    assert proposal["stage"] == "long_context"
    # the person deciding sees what the monitor saw, even with no checkpoint to roll back to
    ev = first.details["evidence"]
    assert ev["step"] == proposal["spike_step"] and ev["metric"] in ("loss", "grad_norm")
    if "z" in ev:
        assert ev["z"] > SPIKY.get("sigma", 6.0) and f"z {ev['z']:.1f}" in proposal["reason"]
    else:
        assert ev["rule"] == "non-finite"
    ckpts = ws.root / "checkpoints" / "r1"
    assert sorted(p.name for p in ckpts.iterdir()) == ["long_context-v1", "mid_train-v1", "pretrain-v1"]
    kept = {
        s: (ckpts / f"{s}-v1" / "final" / "model.safetensors").stat().st_mtime_ns for s in ("pretrain", "mid_train")
    }
    evals_before = sorted(d["id"] for d in ws.graph.nodes("Eval"))
    # each stage measured, and each stage's input measured on that stage's own held-out rows where they differ
    # from the stage before's (mid_train holds out subtraction; long_context the task's addition)
    assert evals_before == [
        "Eval:r1/train#1/long_context/input",
        "Eval:r1/train#1/mid_train",
        "Eval:r1/train#1/mid_train/input",
        "Eval:r1/train#1/pretrain",
    ]

    # the engineer plans only the work left: the spiked stage and the ones after it
    from trainteam.workflows.steps.plans import plan_stages

    assert first.needs is not None and first.needs.resume.kind == "restart" and first.needs.proposed == proposal
    # the person approved: what the engine hands the re-run (the proposal, the curves so far)
    decided = StepInputs().after(first.needs, {"status": "approved", "decided_by": "tester"})
    ctx = ToolContext(
        ws=ws,
        run_id="r1",
        step="train",
        visit=1,
        persona="training_engineer",
        task=spiky,
        decided=decided,
        progress=False,
    )
    assert list(plan_stages(ctx, "train")["stages"]) == ["long_context", "sft"]

    calm = _task({**DIVERGING, "spike": {"enabled": False}})
    again = run.step("train", train, calm, decided=decided)
    assert again.outcome == "ok", again.summary
    assert again.details["stages"] == ["pretrain", "mid_train", "long_context", "sft"]
    # the stages before the spike were not trained again: same weights, metrics read back
    for stage, mtime in kept.items():
        assert (ckpts / f"{stage}-v1" / "final" / "model.safetensors").stat().st_mtime_ns == mtime
        assert again.metrics[f"{stage}.steps"] == 6
    assert again.metrics["mid_train.heldout_loss"] == first.metrics["mid_train.heldout_loss"]
    assert sorted(d["id"] for d in ws.graph.nodes("Eval")) == sorted(evals_before + ["Eval:r1/train#1/long_context"])
    # the spiked stage started over (no checkpoint preceded the spike) at half the learning rate
    assert [(e["stage"], e["kind"]) for e in again.details["events"]] == [
        ("long_context", "spike"),
        ("long_context", "restart"),
    ]
    lc = ws.graph.get_node(again.details["checkpoints"]["long_context"])
    assert "long_context-v1-restart" in lc["path"] and lc["seq_len"] == 64
    g = ws.graph.to_networkx()
    chain = [again.details["checkpoints"][s] for s in ("pretrain", "mid_train", "long_context", "sft")]
    for prev, node in pairwise(chain):
        assert [v for _, v, k in g.out_edges(node, keys=True) if k == "derived_from"] == [prev]
    assert again.artifacts["checkpoint"].endswith("sft-v1/final")
    assert again.metrics["long_context.steps"] == 8 and again.metrics["sft.steps"] == 4


def test_a_failed_stage_gate_ends_the_train_step_before_the_next_stage(ws):
    strict = _task({**DIVERGING, "learning_rate": 0.003}, mid_gates=[{"metric": "heldout_loss", "max": 0.01}])
    run = _Run(ws, "r2").prepared(strict)
    result = run.step("train", train, strict)
    assert result.outcome == "error"
    assert (
        result.summary.startswith("gate mid_train: failed: heldout_loss")
        and "long_context → sft not trained" in result.summary
    )
    gate = ws.graph.get_node(result.nodes["gate"])
    assert gate["passed"] is False and gate["stage"] == "mid_train"
    assert result.details["stage_gates"]["mid_train"]["passed"] is False
    assert sorted(p.name for p in (ws.root / "checkpoints" / "r2").iterdir()) == ["mid_train-v1", "pretrain-v1"]
