"""The judge's diagnosis of a failed gate: each cause from evidence shaped like real runs', the
retry plan's bounds, a configured model's diagnosis held to the same bounds, and the retry's config.

The curves are synthetic but drawn from the calibration runs in ``trainers/evaluation/diagnosis.py``'s
docstring: a 2-layer Llama fine-tuned (SFT) on 2-digit addition, per-step losses at batch 16."""

from __future__ import annotations

import json
import math
import random
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest
from local_http import send_json, serving

from trainteam.contract.stage_config import resolve_stage
from trainteam.contract.step_io import ToolContext
from trainteam.contract.step_outputs import TrainOutput
from trainteam.contract.train_task import TrainTask
from trainteam.trainers.evaluation.diagnosis import (
    Attempt,
    ConfigChanges,
    Diagnosis,
    GateEvidence,
    ProbePoint,
    RetryPlan,
    check_diagnosis,
    check_plan,
    diagnose,
)
from trainteam.trainers.search.recipe_search import Probe, SearchReport
from trainteam.trainers.training.config import TrainConfig
from trainteam.workflows.steps.judge import judge_diagnosis, search_probes
from trainteam.workflows.steps.retry import StopRetry, retraining_plan, retry_note


def falling(
    n: int, first: float = 2.84, floor: float = 0.8, tau: float = 120.0, noise: float = 0.05, seed: int = 0
) -> list[tuple[int, float]]:
    """An exponential decay towards ``floor`` with per-step noise (SFT at lr 1e-3 fell 2.84 → 1.12 in 150 steps)."""
    rng = random.Random(seed)
    return [
        (t, floor + (first - floor) * math.exp(-t / tau) + rng.gauss(0, noise) * (0.3 if t == 1 else 1))
        for t in range(1, n + 1)
    ]


def evidence(curve: list[tuple[int, float]], **kw) -> GateEvidence:
    base = dict(
        stage="sft",
        losses=curve,
        heldout_loss=curve[-1][1] * 1.03,
        value=0.03,
        bar=0.9,
        steps=len(curve),
        max_steps=len(curve),
        learning_rate=1e-3,
        batch_rows=16,
        n_train=260,
        n_eval=32,
        rows_in=400,
        rows_out=260,
    )
    return GateEvidence(**{**base, **kw})


def test_a_curve_still_falling_at_the_end_is_under_fit_and_trains_four_times_longer():
    d = diagnose(evidence(falling(150)))  # the real run's shape: 2.84 → 1.12, last quarter 3.9 % below the one before
    assert d.kind == "under_fit" and "still falling" in d.summary
    assert d.plan.action == "more_steps" and d.plan.changes.max_steps == 600 and d.plan.retrains
    assert d.evidence.tail_drop > 0.02 and d.evidence.steps == 150
    assert "more steps (max_steps 600)" in d.line()


def test_a_loss_that_barely_moved_over_a_long_run_asks_for_a_higher_learning_rate():
    rng = random.Random(1)  # lr 1e-5: 2.83 → 2.74 in 150 steps, flat at the end
    curve = [(t, 2.83 - 0.09 * min(t, 60) / 60 + rng.gauss(0, 0.01)) for t in range(1, 151)]
    d = diagnose(evidence(curve, learning_rate=1e-5))
    assert (d.kind, d.plan.action, d.plan.changes.learning_rate) == ("under_fit", "higher_lr", 1e-4)
    assert d.plan.changes.max_steps is None
    # a short run that barely moved (the 6-step tiny pretrain) is too short, not too slow
    short = diagnose(evidence([(1, 5.59), (2, 5.56), (3, 5.55), (4, 5.56), (5, 5.55), (6, 5.53)], stage="pretrain"))
    assert (short.kind, short.plan.action, short.plan.changes.max_steps) == ("under_fit", "more_steps", 24)


def test_held_out_loss_far_above_a_low_training_loss_is_over_fit_and_trains_shorter():
    curve = falling(400, floor=0.01, tau=60, noise=0.01)
    d = diagnose(evidence(curve, heldout_loss=2.5, n_train=4000, max_steps=400))  # 1.6 epochs: the recipe's fault
    assert d.kind == "over_fit" and "held-out loss 2.5" in d.summary
    assert (d.plan.action, d.plan.changes.max_steps) == ("fewer_steps", 200)
    # the healthy end of a long run (1,500 steps: 0.057 train, 0.126 held-out, 2.2x) is not over-fit
    healthy = diagnose(evidence(falling(1500, floor=0.05, tau=300, noise=0.01), heldout_loss=0.126))
    assert healthy.kind == "under_fit"


def test_held_out_loss_that_rose_between_attempts_goes_back_to_the_shorter_one():
    earlier = [Attempt(steps=150, learning_rate=1e-3, heldout_loss=1.15, final_loss=1.12)]
    d = diagnose(evidence(falling(600, floor=0.9), heldout_loss=1.40, earlier=earlier, n_train=4000))
    assert d.kind == "over_fit" and "rose 22%" in d.summary
    assert (d.plan.action, d.plan.changes.max_steps) == ("fewer_steps", 150)
    assert "earlier attempt's 150 steps" in d.plan.reason


def test_an_over_fit_on_rows_seen_over_and_over_is_a_data_problem():
    curve = falling(400, floor=0.01, tau=60, noise=0.01)  # 400 steps × 16 rows on 40 rows: each seen 160 times
    d = diagnose(evidence(curve, heldout_loss=2.5, n_train=40, rows_in=40, rows_out=40))
    assert (d.kind, d.plan.action, d.plan.retrains) == ("data", "more_data", False)
    assert d.evidence.epochs == 160 and "seen 160 times" in d.summary
    dropped = diagnose(evidence(curve, heldout_loss=2.5, n_train=4000, rows_in=20000, rows_out=4000))
    assert dropped.kind == "data" and "curation removed 80%" in dropped.summary


def test_leaks_and_too_few_rows_are_data_problems_that_stop():
    leaky = diagnose(evidence(falling(150), leaks=10, n_eval=32))
    assert (leaky.kind, leaky.plan.action) == ("data", "stop") and "10 eval problems (31%)" in leaky.summary
    planted = diagnose(evidence(falling(150), leaks=20, n_eval=200))  # the demo plants 10 %: not the cause
    assert planted.kind == "under_fit"
    few = diagnose(evidence(falling(150), n_train=20))
    assert (few.kind, few.plan.action) == ("data", "more_data")


def test_a_non_finite_loss_or_a_spiking_curve_is_instability_with_a_lower_rate():
    curve = falling(150)
    curve[80] = (81, float("nan"))
    d = diagnose(evidence(curve))
    assert (d.kind, d.plan.action, d.plan.changes.learning_rate) == ("instability", "lower_lr", 1e-4)
    assert d.evidence.nonfinite == 1
    hot = [(1, 2.84), (2, 5.6), (3, 5.21), (4, 2.54), (5, 6.64), (6, 5.66)] + falling(144, first=4.0, floor=1.6)
    hot = [(i + 1, y) for i, (_, y) in enumerate(hot)]  # lr 0.1: 2.84 → 6.64 in five steps
    d = diagnose(evidence(hot, learning_rate=0.1))
    assert (d.kind, d.plan.changes.learning_rate) == ("instability", 0.01) and "2.34×" in d.summary
    spiked = diagnose(evidence(falling(150), spikes=1))
    assert (spiked.kind, spiked.plan.changes.learning_rate) == ("instability", 3e-4)


def test_probes_flat_across_learning_rates_on_a_flat_curve_is_a_ceiling_that_stops():
    flat = falling(600, floor=0.98, tau=20, noise=0.02)
    probes = [
        ProbePoint(learning_rate=lr, steps=33, values={3: 2.1, 11: 1.3, 33: end})
        for lr, end in ((1e-4, 1.01), (1e-3, 0.99), (1e-2, 1.00))
    ]
    d = diagnose(evidence(flat, heldout_loss=1.0, probes=probes))
    assert (d.kind, d.plan.action, d.plan.retrains) == ("ceiling", "stop", False)
    assert d.evidence.probe_spread == pytest.approx(0.0202, abs=1e-3)
    # the same run without a search: the curve flattened, nothing else wrong: a longer run (2×)
    plain = diagnose(evidence(flat, heldout_loss=1.0))
    assert (plain.kind, plain.plan.action, plain.plan.changes.max_steps) == ("under_fit", "more_steps", 1200)
    # probes 66 % apart (the 64-wide model's 100-step probes): the rate matters, no ceiling
    apart = [
        ProbePoint(learning_rate=lr, steps=100, values={100: v})
        for lr, v in ((3e-4, 1.65), (1e-3, 1.14), (3e-3, 0.995))
    ]
    assert diagnose(evidence(flat, heldout_loss=1.0, probes=apart)).kind == "under_fit"


def test_the_judge_reads_the_probes_the_recipe_search_recorded():
    """The probes' ``values`` are their held-out loss (the gate's metric, where the search measured it, is kept
    apart in ``metric``): the ceiling rule reads losses, never exact match."""
    probes = [
        Probe(
            trial=i,
            learning_rate=lr,
            per_device_batch_size=16,
            steps=33,
            values={3: 2.1, 11: 1.3, 33: v},
            metric={3: 0.0, 11: 0.1, 33: 0.5},
            pruned=False,
            seconds=1.0,
        )
        for i, (lr, v) in enumerate(((1e-4, 1.01), (1e-3, 0.99), (1e-2, 1.0)))
    ]
    report = SearchReport(
        stage="sft",
        method="sft",
        space=[1e-4, 1e-3, 1e-2],
        probe_steps=33,
        rungs=[3, 11, 33],
        probes=probes,
        budget_s=60.0,
    )
    details = json.loads(json.dumps({"search": {"sft": report.model_dump(mode="json")}}))  # as the run store keeps it
    read = search_probes(TrainOutput.model_validate(details), "sft")
    assert [(p.learning_rate, p.values[33]) for p in read] == [(1e-4, 1.01), (1e-3, 0.99), (1e-2, 1.0)]
    assert search_probes(TrainOutput(), "sft") == []


def test_the_plan_stays_within_what_the_budget_left_allows():
    # 200 s left, 0.5 s a step, 20 s on the other stages again: 0.8 × 200 - 20 = 140 s → 280 steps, not 4 × 100
    d = diagnose(evidence(falling(100), budget_left_s=200, seconds_per_step=0.5, fixed_s=20))
    assert d.evidence.affordable_steps == 280
    assert (d.plan.action, d.plan.changes.max_steps) == (
        "more_steps",
        280,
    ) and "budget left allows 280" in d.plan.reason
    tight = diagnose(evidence(falling(100), budget_left_s=70, seconds_per_step=0.5, fixed_s=20))  # 72 steps
    assert (tight.kind, tight.plan.action) == (
        "under_fit",
        "stop",
    ) and "budget left allows 72 steps" in tight.plan.reason
    no_time = diagnose(evidence(falling(150), learning_rate=0.1, spikes=1, budget_left_s=10, seconds_per_step=0.5))
    assert no_time.plan.action == "stop"


def test_a_stage_trained_by_epochs_gets_epochs_and_a_long_warmup_is_cut():
    d = diagnose(evidence(falling(150), num_train_epochs=3.0))
    assert d.plan.changes.given() == {"num_train_epochs": 12.0}
    over = diagnose(
        evidence(
            falling(400, floor=0.01, tau=60, noise=0.01),
            heldout_loss=2.5,
            n_train=4000,
            max_steps=400,
            warmup_steps=100,
        )
    )
    assert over.plan.changes.given() == {"max_steps": 200, "warmup_steps": 20}


def test_every_offline_plan_keeps_the_bounds_and_the_bounds_refuse_what_is_outside():
    ev = evidence(falling(150), budget_left_s=1000, seconds_per_step=0.5)
    assert check_diagnosis(diagnose(ev), ev) is None

    def plan(action="more_steps", **changes):
        return RetryPlan(action=action, stage="sft", changes=ConfigChanges(**changes), reason="r")

    assert check_plan(plan(max_steps=600), ev) is None
    assert "over 4× the attempt's 150" in check_plan(plan(max_steps=601), ev)
    small = evidence(falling(150), budget_left_s=100, seconds_per_step=0.5)
    assert "budget left allows 160 steps" in check_plan(plan(max_steps=300), small)
    assert "outside 0.1×–10×" in check_plan(plan("higher_lr", learning_rate=0.02), ev)
    assert "outside 0.1×–10×" in check_plan(plan("lower_lr", learning_rate=5e-5), ev)
    assert check_plan(plan("lower_lr", learning_rate=1e-4), ev) is None
    assert "do not go that way" in check_plan(plan("lower_lr", learning_rate=2e-3), ev)
    assert "same result" in check_plan(plan(), ev)
    assert "changes nothing" in check_plan(plan("stop", max_steps=10), ev)
    assert "judged stage 'sft'" in check_plan(plan(max_steps=300).model_copy(update={"stage": "pretrain"}), ev)
    data = Diagnosis(kind="data", summary="s", plan=plan(max_steps=300))
    assert "not fixed by retraining" in check_diagnosis(data, ev)


class Judge(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint answering the structured output with ``Judge.answer``."""

    answer: ClassVar[dict] = {}
    requests: ClassVar[int] = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Judge.requests += 1
        final = next(t["function"]["name"] for t in body["tools"] if t["function"]["name"].startswith("final_result"))
        call = {
            "id": f"call_{Judge.requests}",
            "type": "function",
            "function": {"name": final, "arguments": json.dumps(Judge.answer)},
        }
        send_json(
            self,
            200,
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                    }
                ],
            },
        )

    def log_message(self, *args):
        pass


def test_a_configured_model_may_diagnose_within_the_bounds_and_an_answer_outside_them_falls_back():
    ev = evidence(falling(150))
    offline = diagnose(ev)
    mine = {
        "kind": "instability",
        "summary": "the curve is noisy for its batch",
        "evidence": {"final_loss": 0.0},
        "plan": {"action": "lower_lr", "stage": "sft", "changes": {"learning_rate": 5e-4}, "reason": "halve it"},
    }
    with serving(Judge) as url:
        env = {
            "TRAINTEAM_MODEL_EVAL_JUDGE": "openai:scripted-judge",
            "TRAINTEAM_MODEL_BASE_URL": url,
            "TRAINTEAM_MODEL_API_KEY": "sk-judge-0123456789abcdef",
        }
        Judge.answer, Judge.requests = mine, 0
        d = judge_diagnosis(ev, ["exact_match 0.03 < min 0.9"], environ=env)
        assert (d.kind, d.plan.action, d.plan.changes.learning_rate) == ("instability", "lower_lr", 5e-4)
        assert d.decided_by == "openai:scripted-judge" and d.warning is None
        assert d.evidence == offline.evidence  # the numbers are the measured ones, not the model's
        Judge.answer = {**mine, "plan": {**mine["plan"], "changes": {"learning_rate": 1e-1}}}  # 100×: refused
        d = judge_diagnosis(ev, ["exact_match 0.03 < min 0.9"], environ=env)
        assert d.model_copy(update={"warning": None}) == offline
        assert "outside 0.1×–10×" in d.warning and Judge.requests == 3  # one answer, one retry, then offline


def _ctx(visit: int, gate_out: dict | None) -> ToolContext:
    outputs = {"train": {"outcome": "ok", "details": {}}}
    if gate_out is not None:
        outputs["gate"] = gate_out
    return ToolContext(
        ws=None, run_id="r", step="train", visit=visit, persona="training_engineer", task=None, outputs=outputs
    )


def _failed_gate(d: Diagnosis) -> dict:
    return {
        "outcome": "failed",
        "summary": "gate sft: failed",
        "details": {"stage": "sft", "judged": {"exact_match": 0.03}, "diagnosis": d.model_dump(mode="json")},
    }


def _task(**sft) -> TrainTask:
    return TrainTask.model_validate(
        {
            "name": "t",
            "model": {"path": "."},
            "data": {"demo": "addition"},
            "budget": {"max_wall_minutes": 5},
            "stages": ["sft"],
            "training": {"sft": sft},
        }
    )


def _retried(ctx: ToolContext, task: TrainTask, stage: str = "sft") -> TrainConfig:
    return resolve_stage(task, stage, retry=retraining_plan(ctx, stage))


def test_a_retry_trains_with_the_failed_gates_plan_on_a_retry_only():
    task = _task(max_steps=150, learning_rate=1e-3, warmup_steps=10)
    cfg = task.train_config("sft")
    gate = _failed_gate(diagnose(evidence(falling(150))))
    assert _retried(_ctx(1, gate), task) == cfg
    assert retry_note(_ctx(1, gate), "sft") is None
    again = _retried(_ctx(2, gate), task)
    assert (again.max_steps, again.learning_rate, again.warmup_steps) == (600, 1e-3, 10)
    assert retry_note(_ctx(2, gate), "sft").startswith("sft retried after under-fit: more steps (max_steps 600)")
    assert retraining_plan(_ctx(2, gate), "pretrain") is None  # the gate judged sft only
    by_epochs = _task(num_train_epochs=3, learning_rate=1e-3)
    assert _retried(_ctx(2, gate), by_epochs).max_steps == 600  # the plan's steps decide
    assert _retried(_ctx(2, gate), by_epochs).num_train_epochs is None


def test_a_retry_stops_when_the_plan_cannot_help_or_there_is_none():
    stop = _failed_gate(diagnose(evidence(falling(150), leaks=10, n_eval=32)))
    with pytest.raises(StopRetry, match="sft: no retry \\(stop\\): retraining cannot help \\(data\\)") as raised:
        retraining_plan(_ctx(2, stop), "sft")
    assert raised.value.plan.action == "stop"
    assert "no retry (stop)" in retry_note(_ctx(2, stop), "sft")
    bare = {"outcome": "failed", "summary": "gate failed by the judge: x", "details": {"stage": "sft", "judged": {}}}
    with pytest.raises(StopRetry, match="gate failed sft without a diagnosis"):
        retraining_plan(_ctx(2, bare), "sft")
    assert retraining_plan(_ctx(2, None), "sft") is None
