"""The step contract: what a step reads of earlier steps and of people's decisions is typed, from recorded JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainteam.contract.step_io import (
    Decision,
    KeepProposal,
    KeptWeights,
    NeedsPerson,
    RestartPlan,
    Resume,
    StepInputs,
    StepResult,
    ToolContext,
)

APPROVED = {"id": "r.train.1.restart_after_spike_1", "status": "approved", "decided_by": "eve", "note": None}


def test_a_persons_decisions_reach_the_rerun_typed_and_survive_a_transcript():
    proposal = {
        "stage": "sft",
        "from_start": False,
        "spike_step": 12,
        "reason": "spike",
        "output_dir": "/ck/sft-v1",
        "lr_factor": 0.5,
        "proposal": {
            "spike_step": 12,
            "rollback_checkpoint": "/ck/sft-v1/checkpoint-10",
            "skip_batches": 2,
            "lr_scale": 0.5,
            "reason": "spike",
        },
    }
    keep = {"stage": "dpo", "keep": "/ck/dpo-v1/checkpoint-4", "spike_step": 6, "reason": "keep it"}
    restart = NeedsPerson(
        action="restart_after_spike",
        resume=Resume(kind="restart", stage="sft", restart=RestartPlan.model_validate(proposal)),
    )
    kept = NeedsPerson(
        action="accept_spiked_dpo", resume=Resume(kind="keep_spiked", stage="dpo", keep=KeepProposal(**keep))
    )
    decided = StepInputs().after(restart, APPROVED).after(kept, APPROVED)
    assert isinstance(decided.restart, RestartPlan) and decided.restart.proposal is not None
    assert decided.restart.proposal.rollback_checkpoint == Path("/ck/sft-v1/checkpoint-10")
    assert isinstance(decided.kept_after_spike["dpo"], KeptWeights)
    assert decided.kept_after_spike["dpo"].approval == Decision.model_validate(APPROVED)
    # a transcript records the inputs as JSON; a replay reads them back to the same values
    assert StepInputs.model_validate(decided.model_dump(mode="json")) == decided
    # a question stored before the payloads were typed (one ``value`` dict) reads, and resumes the same way
    stored = [
        NeedsPerson.model_validate(
            {"action": n.action, "resume": {"kind": n.resume.kind, "stage": n.resume.stage, "value": value}}
        )
        for n, value in ((restart, proposal), (kept, keep))
    ]
    assert [n.resume for n in stored] == [restart.resume, kept.resume]
    assert StepInputs().after(stored[0], APPROVED).after(stored[1], APPROVED) == decided
    with pytest.raises(ValueError, match="restart proposed"):
        Resume(kind="restart", stage="sft")
    gate = StepInputs().after(NeedsPerson(action="accept_failed_gate", resume=Resume(kind="accept_gate")), APPROVED)
    assert gate.accepted_gate is not None and gate.accepted_gate.decided_by == "eve" and gate.restart is None


def test_earlier_outputs_are_read_through_typed_accessors():
    recorded = {
        "prepare_corpus": {"outcome": "ok", "artifacts": {"train": "/d/train.jsonl"}, "nodes": {"train": "D:1"}},
        "curate": {"outcome": "skipped"},
        "evaluate": {
            "outcome": "ok",
            "artifacts": {"checkpoint": "/ck/final", "tokenizer": "/ck/final"},
            "nodes": {"checkpoint": "Checkpoint:abc", "eval": "Eval:r/evaluate#1"},
            "metrics": {"exact_match": 0.5},
            "details": {"stage": "sft"},
        },
    }
    ctx = ToolContext(
        ws=None,
        run_id="r",
        step="gate",
        visit=1,
        persona="eval_judge",
        task=None,  # type: ignore[arg-type]
        outputs=recorded,
    )
    ev = ctx.output("evaluate")
    assert isinstance(ev, StepResult) and ev.checkpoint == Path("/ck/final") and ev.checkpoint_node == "Checkpoint:abc"
    assert ev.stage == "sft" and ev.node("eval").startswith("Eval:") and ev.metrics["exact_match"] == 0.5
    assert ctx.latest("prepare_corpus", "curate").artifact("train") == Path("/d/train.jsonl")  # curate was skipped
    assert ctx.ran("curate") is None
    with pytest.raises(LookupError, match="did not run"):
        ctx.output("curate")
    with pytest.raises(LookupError, match="no artifact 'eval'"):
        ctx.output("prepare_corpus").artifact("eval")
    assert ctx.outputs_json()["evaluate"]["nodes"]["eval"] == "Eval:r/evaluate#1"  # what a transcript records
