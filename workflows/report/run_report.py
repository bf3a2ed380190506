"""The run report a person reads at a glance: markdown plus PNG plots.

Three parts: the typed input (``ReportInput``: steps, stages, losses, evaluations,
gates); ``report_input``, which fills it from what the workspace recorded of a run;
and ``write_report``, which renders any ``ReportInput`` (so it can be tested without
running a workflow). ``write_run_report`` does both for a run.

Evaluations come from every step that recorded an Eval node and, per stage, from the
train step, which measures (and gates) each curriculum stage before the last one; the
gate thresholds and the stage table come from the task's stages, plain or curriculum.
Every plot's data is saved as JSON beside its PNG: the figures can be checked (and
re-plotted) without reading pixels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from jinja2 import Environment, StrictUndefined
from pydantic import BaseModel, ConfigDict, Field

from trainteam.contract.redaction import redact, redact_text
from trainteam.contract.step_io import StepResult
from trainteam.contract.step_outputs import (
    ChoiceOutput,
    EvalOutput,
    GateOutput,
    RegisterOutput,
    SealedOutput,
    TrainOutput,
)
from trainteam.contract.train_task import TrainTask
from trainteam.core.errors import BadInput
from trainteam.trainers.evaluation.diagnosis import Diagnosis
from trainteam.trainers.evaluation.gates import GateRule, as_rules
from trainteam.trainers.evaluation.metrics.metric_registry import METRICS, harness_metric, higher_is_better
from trainteam.trainers.search.recipe_search import SearchReport
from trainteam.workflows.engine.store import RunStore
from trainteam.workflows.report.views import run_public
from trainteam.workflows.task.curriculum import curriculum_from_task
from trainteam.workflows.task.stage_plan import plan_stage


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepRecord(_Strict):
    name: str
    persona: str | None = None
    status: str
    started: str | None = None
    finished: str | None = None
    seconds: float | None = Field(default=None, ge=0)
    cost: float = Field(default=0.0, ge=0, description="USD")


class LossEvent(_Strict):
    """A loss spike the monitor caught, or a restart from an earlier checkpoint."""

    stage: str
    step: int
    kind: Literal["spike", "restart"]
    loss: float | None = None
    note: str = ""


class GateOutcome(_Strict):
    passed: bool
    reasons: list[str] = Field(default_factory=list)
    accepted_by: str | None = None


class DiagnosisRecord(_Strict):
    """The judge's diagnosis of one failed gate visit and the retry plan that followed."""

    step: str = Field(description="the gate step and visit, e.g. gate #1")
    stage: str
    diagnosis: Diagnosis


class StageRecord(_Strict):
    """One stage of the run's curriculum: what it trained, on what, how long its sequences."""

    name: str
    kind: str
    method: str
    data: str = ""
    seq_len: int | None = None
    steps: int | None = None


class PlanVsRun(_Strict):
    """A stage's plan (the planner's estimate for the task on this machine) beside what its training measured."""

    stage: str
    steps_planned: int
    steps_run: int | None = None
    tokens_planned: int
    tokens_run: int | None = None
    tokens_per_s_planned: float
    throughput_source: str = Field(description="measured (a calibration on this machine) or assumed (peak x MFU)")
    tokens_per_s_run: float | None = None
    minutes_planned: float
    minutes_run: float | None = Field(default=None, description="the trainer's step time")
    wall_minutes_run: float | None = Field(default=None, description="the stage from set-up to its end")


class SealedTest(_Strict):
    """The figures to trust: the weights to register on the sealed test rows, scored once (no step chose by them),
    beside the dev figures the gates read, and the pairwise judge's comparison where it ran."""

    rows: int
    sizing: str
    metrics: dict[str, float]
    gap: dict[str, float] = Field(description="test - dev, per metric")
    pairwise: str = ""


class ReportInput(_Strict):
    run_id: str
    task_name: str
    status: str = ""
    steps: list[StepRecord] = Field(default_factory=list)
    stages: list[StageRecord] = Field(default_factory=list, description="the curriculum's stages, in order")
    losses: dict[str, list[tuple[int, float]]] = Field(default_factory=dict, description="stage -> [(step, loss)]")
    events: list[LossEvent] = Field(default_factory=list)
    evals: dict[str, dict[str, float]] = Field(default_factory=dict, description="stage -> {metric: value}")
    gates: dict[str, list[GateRule]] = Field(default_factory=dict, description="stage -> rules (thresholds)")
    gate_outcomes: dict[str, GateOutcome] = Field(default_factory=dict)
    diagnoses: list[DiagnosisRecord] = Field(default_factory=list, description="failed gates, in the order they ran")
    searches: list[SearchReport] = Field(default_factory=list, description="the engineer's recipe search per stage")
    model_id: str | None = None
    sealed_test: SealedTest | None = Field(default=None, description="the registered weights on the sealed rows")
    plan_vs_run: list[PlanVsRun] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class ReportFiles(_Strict):
    markdown: Path
    plots: dict[str, Path]
    data: dict[str, Path]


_MD = """# Run {{ r.run_id }} — {{ r.task_name }}

{% if r.status %}Status: **{{ r.status }}**{% endif %}{% if r.model_id %} · registered model `{{ r.model_id }}`{% endif %}

Total: {{ "%.1f"|format(total_seconds) }} s, ${{ "%.4f"|format(total_cost) }}.

## Steps

| step | persona | status | seconds | cost (USD) |
| --- | --- | --- | ---: | ---: |
{% for s in r.steps -%}
| {{ s.name }} | {{ s.persona or "" }} | {{ s.status }} | {{ "%.1f"|format(s.seconds) if s.seconds is not none else "" }} | {{ "%.4f"|format(s.cost) }} |
{% endfor %}
{% if plots.get("steps") %}![time and cost per step]({{ plots.steps }}){% endif %}
{% if r.stages %}
## Stages

| stage | kind | method | data | seq_len | steps |
| --- | --- | --- | --- | ---: | ---: |
{% for s in r.stages -%}
| {{ s.name }} | {{ s.kind }} | {{ s.method }} | {{ s.data }} | {{ s.seq_len if s.seq_len is not none else "" }} | {{ s.steps if s.steps is not none else "" }} |
{% endfor %}{% endif %}

## Training loss
{% for stage, pts in r.losses.items() if pts %}
- {{ stage }}: {{ pts|length }} logged steps, first {{ "%.4f"|format(pts[0][1]) }}, last {{ "%.4f"|format(pts[-1][1]) }}
{%- endfor %}
{% for e in r.events %}
- {{ e.kind }} in {{ e.stage }} at step {{ e.step }}{% if e.loss is not none %} (loss {{ "%.4f"|format(e.loss) }}){% endif %}{% if e.note %}: {{ e.note }}{% endif %}
{%- endfor %}
{% if plots.get("loss") %}
![loss curves]({{ plots.loss }}){% endif %}
{% if r.plan_vs_run %}
## Plan against the run

| stage | steps (plan / run) | tokens (plan / run) | tokens/s (plan / run) | minutes (plan / training / wall) |
| --- | ---: | ---: | ---: | ---: |
{% for p in r.plan_vs_run -%}
| {{ p.stage }} | {{ p.steps_planned }} / {{ p.steps_run if p.steps_run is not none else "" }} | {{ "{:,}".format(p.tokens_planned) }} / {{ "{:,}".format(p.tokens_run) if p.tokens_run is not none else "" }} | {{ "%.1f"|format(p.tokens_per_s_planned) }} ({{ p.throughput_source }}) / {{ "%.1f"|format(p.tokens_per_s_run) if p.tokens_per_s_run is not none else "" }} | {{ "%.2f"|format(p.minutes_planned) }} / {{ "%.2f"|format(p.minutes_run) if p.minutes_run is not none else "" }} / {{ "%.2f"|format(p.wall_minutes_run) if p.wall_minutes_run is not none else "" }} |
{% endfor %}{% endif %}

## Evaluation and gates

| stage | metric | value | better | gate |
| --- | --- | ---: | --- | --- |
{% for stage, metrics in r.evals.items() %}{% for m, v in metrics.items() if m in better -%}
| {{ stage }} | {{ m }} | {{ "%.4g"|format(v) }} | {{ better[m] }} | {{ thresholds.get(stage, {}).get(m, "") }} |
{% endfor %}{% endfor %}
{% for stage, g in r.gate_outcomes.items() %}
- gate **{{ stage }}**: {{ "passed" if g.passed else "FAILED" }}{% if g.accepted_by %} (accepted by {{ g.accepted_by }}){% endif %}{% for reason in g.reasons %}
  - {{ reason }}{% endfor %}
{%- endfor %}
{% if plots.get("evals") %}
![eval metrics per stage]({{ plots.evals }}){% endif %}
{% if r.sealed_test %}
## Sealed test — the figures to trust

{{ r.sealed_test.rows }} held-out rows that no deciding step read (not the gates, the search, the judge or a
retry), scored once on the weights to register. {{ r.sealed_test.sizing }}

| metric | test | dev | test - dev |
| --- | ---: | ---: | ---: |
{% for m, v in r.sealed_test.metrics.items() if not m.endswith("_se") -%}
| {{ m }} | {{ "%.4g"|format(v) }} | {{ "%.4g"|format(v - r.sealed_test.gap[m]) if m in r.sealed_test.gap else "" }} | {{ "%+.3g"|format(r.sealed_test.gap[m]) if m in r.sealed_test.gap else "" }} |
{% endfor %}{% if r.sealed_test.pairwise %}
{{ r.sealed_test.pairwise }}
{% endif %}{% endif %}
{% if r.searches %}
## Recipe search

{% for s in r.searches -%}
**{{ s.stage }}** ({{ s.method }}): {{ s.probes|length }} probes{% if s.run_steps %} towards the stage's {{ s.run_steps }} steps (all to step {{ s.rungs[0] }}, the best third to {{ s.probe_steps }}){% endif %}, scored by {{ s.objective }} on {{ s.validation_rows }} rows cut from the training data, {{ "%.0f"|format(s.spent_s) }} of {{ "%.0f"|format(s.budget_s) }} s; chosen{% if s.decided_by != "offline" %} by {{ s.decided_by }}{% endif %}: {% if s.chosen %}learning rate {{ "%g"|format(s.chosen.learning_rate) }}, {{ s.chosen.max_steps }} steps, batch {{ s.chosen.per_device_train_batch_size }}{% else %}nothing{% endif %}{% if s.continued_from %}; the stage's run went on from the chosen probe's step {{ s.continued_from }}{% endif %}

| trial | learning rate | steps | objective by step (lower is better) | end |
| ---: | ---: | ---: | --- | --- |
{% for p in s.probes -%}
| {{ p.trial }} | {{ "%g"|format(p.learning_rate) }} | {{ p.steps }} | {% for k, v in p["values"].items() %}{{ k }}: {{ "%.4f"|format(v) }}{{ ", " if not loop.last }}{% endfor %} | {{ "unstable" if p.unstable else "pruned" if p.pruned else "finished" }}{{ " ← chosen" if s.chosen and p.learning_rate == s.chosen.learning_rate }} |
{% endfor %}{% for reason in s.reasons %}
- {{ reason }}{% endfor %}{% if s.stopped_early_at %}
- stopped at step {{ s.stopped_early_at }} of {{ s.chosen.max_steps }}: {{ s.objective }} stopped improving ({% for k, v in s.heldout_curve.items() %}{{ k }}: {{ "%.4f"|format(v) }}{{ ", " if not loop.last }}{% endfor %}){% endif %}

{% endfor %}{% if plots.get("search") %}![probes: held-out loss by step]({{ plots.search }})
{% endif %}{% endif %}
{% if r.diagnoses %}
## Diagnosis

{% for d in r.diagnoses -%}
- **{{ d.step }}** ({{ d.stage }}): {{ d.diagnosis.kind }}{% if d.diagnosis.decided_by != "offline" %} (diagnosed by {{ d.diagnosis.decided_by }}){% endif %} — {{ d.diagnosis.summary }}
  - evidence: {{ d.diagnosis.evidence.line() }}
  - plan: {{ d.diagnosis.plan.line() }}{% if d.diagnosis.warning %}
  - warning: {{ d.diagnosis.warning }}{% endif %}
{% endfor %}{% endif %}
{% for n in r.notes %}
> {{ n }}
{% endfor %}
"""  # noqa: E501 (a Markdown table row or a paragraph of the report is one template line)


def _offsets(losses: dict[str, list[tuple[int, float]]]) -> dict[str, int]:
    """Stages are drawn one after another on a shared axis of global steps."""
    out, start = {}, 0
    for stage, pts in losses.items():
        out[stage] = start
        if pts:
            start += max(s for s, _ in pts) + 1
    return out


def _loss_plot(r: ReportInput, plt, png: Path) -> dict:
    offsets = _offsets(r.losses)
    data: dict = {"stages": {}, "spikes": [], "restarts": []}
    fig, ax = plt.subplots(figsize=(8, 4))
    for stage, pts in r.losses.items():
        xs = [offsets[stage] + s for s, _ in pts]
        ys = [v for _, v in pts]
        ax.plot(xs, ys, label=stage, linewidth=1.2)
        data["stages"][stage] = {"offset": offsets[stage], "steps": [s for s, _ in pts], "losses": ys}
    for e in r.events:
        x = offsets.get(e.stage, 0) + e.step
        y = e.loss if e.loss is not None else dict(r.losses.get(e.stage, [])).get(e.step)
        item = {"stage": e.stage, "step": e.step, "global_step": x, "loss": y, "note": e.note}
        if e.kind == "spike":
            data["spikes"].append(item)
            if y is not None:
                ax.scatter(
                    [x],
                    [y],
                    marker="x",
                    color="red",
                    s=60,
                    zorder=3,
                    label="spike" if len(data["spikes"]) == 1 else None,
                )
        else:
            data["restarts"].append(item)
            ax.axvline(
                x, color="gray", linestyle="--", linewidth=1, label="restart" if len(data["restarts"]) == 1 else None
            )
    ax.set_xlabel("step (stages in order)")
    ax.set_ylabel("training loss")
    ax.set_title(f"{r.task_name}: loss per stage")
    if r.losses:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return data


def _thresholds(r: ReportInput) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for stage, rules in r.gates.items():
        for rule in as_rules(rules):
            t = out.setdefault(stage, {}).setdefault(rule.metric, {})
            for k in ("min", "max", "max_regression"):
                if getattr(rule, k) is not None:
                    t[k] = getattr(rule, k)
    return out


def _eval_plot(r: ReportInput, plt, png: Path) -> dict:
    thresholds = _thresholds(r)
    metrics = sorted({m for vals in r.evals.values() for m in vals if m in METRICS or harness_metric(m)})
    stages = list(r.evals)
    data = {}
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(3.2 * max(1, len(metrics)), 3.6), squeeze=False)
    for ax, m in zip(axes[0], metrics, strict=False):  # one empty panel where there is no metric
        st = [s for s in stages if m in r.evals[s]]
        vals = [r.evals[s][m] for s in st]
        th = {s: thresholds[s][m] for s in st if m in thresholds.get(s, {})}
        meets = [
            ("min" not in th.get(s, {}) or v >= th[s]["min"]) and ("max" not in th.get(s, {}) or v <= th[s]["max"])
            for s, v in zip(st, vals, strict=True)
        ]
        bars = ax.bar(range(len(st)), vals, color=["#4c72b0" if ok else "#c44e52" for ok in meets])
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in vals], fontsize=8)
        for i, s in enumerate(st):
            for kind, color in (("min", "green"), ("max", "red")):
                if kind in th.get(s, {}):
                    ax.hlines(
                        th[s][kind],
                        i - 0.4,
                        i + 0.4,
                        colors=color,
                        linestyles="--",
                        label=f"gate {kind}" if i == 0 else None,
                    )
        ax.set_xticks(range(len(st)), st, rotation=30, fontsize=8)
        ax.set_title(f"{m} ({'higher' if higher_is_better(m) else 'lower'} is better)", fontsize=9)
        data[m] = {"stages": st, "values": vals, "thresholds": th, "meets_threshold": meets}
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return data


def _steps_plot(r: ReportInput, plt, png: Path) -> dict:
    names = [s.name for s in r.steps]
    secs = [s.seconds or 0.0 for s in r.steps]
    costs = [s.cost for s in r.steps]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, max(2.5, 0.35 * len(names) + 1)), sharey=True)
    a1.barh(names, secs, color="#55a868")
    a1.set_xlabel("seconds")
    a2.barh(names, costs, color="#c44e52")
    a2.set_xlabel("cost (USD)")
    a1.invert_yaxis()
    fig.suptitle("time and cost per step", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return {"steps": names, "seconds": secs, "cost": costs, "status": [s.status for s in r.steps]}


def _search_plot(r: ReportInput, plt, png: Path) -> dict:
    """Each probe's held-out loss at its rungs, one panel per searched stage, the chosen rate drawn bold."""
    fig, axes = plt.subplots(1, len(r.searches), figsize=(5 * len(r.searches), 3.4), squeeze=False)
    data = {}
    for ax, s in zip(axes[0], r.searches, strict=True):
        for p in s.probes:
            pts = sorted(p.values.items())
            chosen = s.chosen is not None and p.learning_rate == s.chosen.learning_rate
            ax.plot(
                [k for k, _ in pts],
                [v for _, v in pts],
                marker="o",
                lw=2.5 if chosen else 1,
                label=f"lr {p.learning_rate:g}" + (" (chosen)" if chosen else ""),
            )
        ax.set(title=f"{s.stage}: recipe search", xlabel="probe step", ylabel=s.objective)
        ax.legend(fontsize=7)
        data[s.stage] = {str(p.learning_rate): p.values for p in s.probes}
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return data


def write_report(r: ReportInput, out_dir: str | Path) -> ReportFiles:
    """Write ``report.md`` and ``{loss,evals,steps}.png`` (+ ``.json`` data) into ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots, data = {}, {}
    for name, make, wanted in (
        ("loss", _loss_plot, bool(r.losses)),
        ("evals", _eval_plot, bool(r.evals)),
        ("steps", _steps_plot, bool(r.steps)),
        ("search", _search_plot, bool(r.searches)),
    ):
        if not wanted:
            continue
        png, js = out / f"{name}.png", out / f"{name}.json"
        js.write_text(json.dumps(redact(make(r, plt, png)), indent=1))
        plots[name], data[name] = png, js
    thresholds = {
        stage: {m: ", ".join(f"{k} {v:g}" for k, v in t.items()) for m, t in per.items()}
        for stage, per in _thresholds(r).items()
    }
    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    md = env.from_string(_MD).render(
        r=r,
        plots={k: v.name for k, v in plots.items()},
        thresholds=thresholds,
        better={  # each metric's direction, from the registry (a standard error beside a score is not shown)
            m: "higher" if higher_is_better(m) else "lower"
            for vals in r.evals.values()
            for m in vals
            if m in METRICS or harness_metric(m)
        },
        total_seconds=sum(s.seconds or 0.0 for s in r.steps),
        total_cost=sum(s.cost for s in r.steps),
    )
    md_path = out / "report.md"
    md_path.write_text(redact_text(md))  # notes and reasons carry errors and summaries: masked like all we write
    return ReportFiles(markdown=md_path, plots=plots, data=data)


# -- filling the report from the workspace ---------------------------------------------------


def _latest_outputs(runs: RunStore, run_id: str) -> dict[str, dict[str, Any]]:
    """The output of each step's last finished attempt, in the order the steps ran (a failed
    attempt's too: a train step stopped by a stage's gate recorded what it measured)."""
    out: dict[str, dict[str, Any]] = {}
    for a in runs.attempts(run_id):
        if a["status"] in ("completed", "skipped", "failed") and a["output"]:
            out.pop(a["step"], None)
            out[a["step"]] = a["output"]
    return out


def _step_records(steps: list[dict], price: float) -> list[StepRecord]:
    return [
        StepRecord(
            name=s["name"] + (f" #{s['visit']}" if s["visit"] > 1 else ""),
            persona=s["persona"],
            status=s["status"],
            started=s["started_at"],
            finished=s["finished_at"],
            seconds=s["seconds"],
            cost=(s["seconds"] or 0.0) / 3600 * price,
        )
        for s in steps
    ]


def _diagnoses(runs: RunStore, run_id: str) -> list[DiagnosisRecord]:
    """The diagnosis each attempt that judged a failed gate recorded."""
    gates = [(a, GateOutput.stored(a["output"])) for a in runs.attempts(run_id)]
    return [
        DiagnosisRecord(
            step=f"{a['step']} #{a['visit']}",
            stage=gate.stage or "",
            diagnosis=Diagnosis.model_validate(gate.diagnosis),
        )
        for a, gate in gates
        if gate.diagnosis
    ]


def sealed_test(out: dict | None) -> SealedTest | None:
    """The sealed_test step's stored output as the report shows it (None where it did not score)."""
    if not out or out.get("outcome") != "ok":
        return None
    sealed = SealedOutput.stored(out)
    return SealedTest(
        rows=sealed.n_test,
        sizing=sealed.sizing,
        metrics={k: float(v) for k, v in out["metrics"].items()},
        gap=sealed.gap,
        pairwise=(sealed.pairwise or {}).get("note", ""),
    )


def report_input(ws, run_id: str) -> ReportInput:
    view = run_public(ws, run_id)
    task = TrainTask.model_validate(view["task"])
    runs = RunStore(ws.engine)
    outputs = _latest_outputs(runs, run_id)
    price = task.budget.cost_per_hour_usd
    steps = _step_records(view["steps"], price)
    losses: dict[str, list[tuple[int, float]]] = {}
    events: list[LossEvent] = []
    evals: dict[str, dict[str, float]] = {}
    gate_outcomes: dict[str, GateOutcome] = {}
    model_id = None
    for name, out in outputs.items():
        res = StepResult.model_validate(out)
        trained, measured, gate = TrainOutput.of(res), EvalOutput.of(res), GateOutput.of(res)
        for stage, curve in trained.losses.items():
            losses[stage] = [(int(s), float(v)) for s, v in curve]
        for e in trained.events:
            events.append(LossEvent(stage=e["stage"], step=int(e["step"]), kind=e["kind"], note=e.get("note", "")))
        base = trained.base or measured.base
        if base and base.metrics:  # what the first stage started from: beside every later score
            evals[base.name if base.measured else f"{base.name} (reference)"] = dict(base.metrics)
        for stage, metrics in trained.stage_evals.items():  # the train step's per-stage batteries
            evals[stage] = dict(metrics)
        for stage, g in trained.stage_gates.items():
            gate_outcomes[stage] = GateOutcome(
                passed=g["passed"], reasons=g["reasons"], accepted_by=g.get("accepted_by")
            )
        if str((out.get("nodes") or {}).get("eval", "")).startswith("Eval:"):
            key = "final" if name == "final_eval" else (res.stage or name)
            evals[key] = {k: float(v) for k, v in out["metrics"].items()}
        if gate.passed is not None and gate.stage is not None:
            gate_outcomes[gate.stage] = GateOutcome(
                passed=gate.passed, reasons=gate.reasons, accepted_by=gate.accepted_by
            )
        model_id = RegisterOutput.of(res).model_id or model_id

    diagnoses = _diagnoses(runs, run_id)
    searches = [
        SearchReport.model_validate(v) for out in outputs.values() for v in TrainOutput.stored(out).search.values()
    ]
    notes = [
        f"{name}: {out['summary']}"
        for name, out in outputs.items()
        if out.get("outcome") == "skipped" and ChoiceOutput.stored(out).choice
    ]
    curated = outputs.get("curate")
    if curated:
        notes.append(f"curation: {curated['summary']}")
    if view["error"]:
        notes.append(f"stopped: {view['error']}")
    cur = curriculum_from_task(task)
    order = cur.names()
    return ReportInput(
        run_id=run_id,
        task_name=view["task_name"],
        status=view["status"],
        steps=steps,
        stages=_stage_records(cur, view["metrics"]),
        losses=_in_order(losses, order),
        events=events,
        evals=_in_order(evals, [k for k in evals if k.startswith(("base", "random init"))] + order),
        gates={s.name: as_rules(s.gates) for s in cur.stages if s.gates},
        gate_outcomes=_in_order(gate_outcomes, order),
        diagnoses=diagnoses,
        searches=searches,
        model_id=model_id,
        sealed_test=sealed_test(outputs.get("sealed_test")),
        plan_vs_run=plan_vs_run(task, view["metrics"]),
        notes=notes,
    )


def plan_vs_run(task: TrainTask, metrics: dict[str, float]) -> list[PlanVsRun]:
    """Each trained stage's plan, as the planner makes it for the task on this machine (with the
    throughput measured here when stored), beside the training's own telemetry."""
    rows = []
    for stage in task.stage_names():
        run = next(
            (
                {k[len(p) :]: v for k, v in metrics.items() if k.startswith(p)}
                for p in (f"train.{stage}.", f"align.{stage}.")
                if f"{p}tokens" in metrics
            ),
            None,
        )
        if run is None:
            continue
        try:
            v = plan_stage(task, stage, task.train_config(stage))
        except BadInput:
            continue  # the data moved or the planner refuses it now: no estimate to show
        if not v.runnable:
            continue
        step_s = run.get("step_time_s")
        rows.append(
            PlanVsRun(
                stage=stage,
                steps_planned=v.max_steps,
                steps_run=int(run["steps"]) if "steps" in run else None,
                tokens_planned=v.total_tokens,
                tokens_run=int(run["tokens"]),
                tokens_per_s_planned=v.tokens_per_second,
                throughput_source=v.throughput_source,
                tokens_per_s_run=run.get("tokens_per_s"),
                minutes_planned=v.est_minutes,
                minutes_run=step_s / 60 if step_s is not None else None,
                wall_minutes_run=run["wall_s"] / 60 if "wall_s" in run else None,
            )
        )
    return rows


def _in_order(by_stage: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """Stages in curriculum order (stored outputs come back with their keys sorted), then the rest
    (``final``) as recorded: the loss plot lays the stages out one after another in this order."""
    return {**{s: by_stage[s] for s in order if s in by_stage}, **{k: v for k, v in by_stage.items() if k not in order}}


def _stage_records(cur, metrics: dict[str, float]) -> list[StageRecord]:
    rows = []
    for s in cur.stages:
        d = s.data
        data = (
            "task data"
            if d is None
            else (f"demo {d.demo} ({d.n_train} train / {d.n_eval} held-out)" if d.demo else f"files {d.path.name}")
        )
        done = next(
            (metrics[f"{step}.{s.name}.steps"] for step in ("train", "align") if f"{step}.{s.name}.steps" in metrics),
            None,
        )
        cfg = s.train_config()
        rows.append(
            StageRecord(
                name=s.name,
                kind=s.kind,
                method=s.method,
                data=data,
                seq_len=cfg.max_length,
                steps=int(done) if done is not None else None,
            )
        )
    return rows


def write_run_report(ws, run_id: str, out_dir: Path | None = None) -> ReportFiles:
    return write_report(report_input(ws, run_id), out_dir or ws.dir("reports") / run_id)
