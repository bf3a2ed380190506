"""Natural-language submission: a sentence → a validated TrainTask and its plan, or a one-line refusal.

The ml_orchestrator Agent does the reading. Offline, its policy is the rule-based
reader of ``request_parser``; with a real provider the model returns the TrainTask as
structured output. Either way the result is then checked against the text itself:
a data path must be written in the request and a budget must be stated, so no model
can guess a path or start a run without a ceiling. Missing model / data / budget, a
task the planner refuses, or one over its own budget → ``BadInput`` naming the field.

A model's answer is input too, held to the person's words (``_grounded``): each budget
number must be an amount the request writes in that unit (or what the rule reader derives
from them); every other setting the answer changes from its default must be a number
written in the request (or read as a percentage / hours), a word it contains, or what the
rule reader reads there — anything else is refused with one line naming the field, not
dropped, so what runs is never silently different from what was asked (the instructions
say "anything the request does not say keeps its default"). ``model.trust_remote_code`` is
refused from any parsed request: only a person's own task file turns it on. Steps the
request asks to approve must stay in ``require_approval``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from trainteam.agents.briefing import data_line, model_line
from trainteam.agents.cards import render
from trainteam.agents.policy import stream_of
from trainteam.agents.providers import build_model, choose_model, provider_errors, provider_failure
from trainteam.contract.search_spec import SEARCHABLE
from trainteam.contract.train_task import TrainTask, resolve_paths
from trainteam.core.errors import BadInput, format_validation_error
from trainteam.curation.answers import default_answer
from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.training.config import TrainConfig
from trainteam.workflows.requests.model_sources import ModelSources, resolver
from trainteam.workflows.requests.request_rules import (
    Filled,
    Reading,
    Resolve,
    read_request,
    request_refusal,
    stated_budget,
    stated_numbers,
)
from trainteam.workflows.task.eval_plan import planned_gates, planned_style
from trainteam.workflows.task.stage_plan import plan_stage, task_machine

DEMO_REQUEST = (
    "Pretrain a tiny Llama from scratch to add two-digit numbers: hidden size 128, 2 layers, 4 heads, context 64. "
    "Use the bundled addition demo with 20000 training problems and 200 held out, operands up to 99, seed 0, "
    "and a tokenizer vocabulary of 300 with digits split. "
    "Plant 20 held-out problems in the training data so curation has leaks to catch. "
    "Pretrain for 300 steps at batch 32, sequence length 64, learning rate 0.001, warm up over 30 steps, "
    "checkpoint every 100 steps; "
    "then SFT for 1500 steps at batch 64, sequence length 64, learning rate 0.0005, warm up over 100 steps, "
    "checkpoint every 100 steps; "
    "then GRPO for 400 steps at batch 128, sequence length 64, learning rate 0.00001, 8 generations per prompt, "
    "sampling temperature 0.5, "
    "completions of at most "
    "6 tokens, checkpoint every 100 steps. "
    "Gate SFT at 90% exact match; GRPO must not regress exact match; if a gate fails, retry once. "
    "Budget: 30 minutes. Name it addition."
)


class RequestRefusal(BaseModel):
    """The orchestrator's answer when a request cannot become a task."""

    missing: list[str] = Field(default_factory=list, description="required fields the request does not state")
    reason: str = Field(description="one line a person can act on")


def _request_text(messages: list[ModelMessage]) -> str:
    for m in messages:
        for p in getattr(m, "parts", []):
            if isinstance(p, UserPromptPart) and isinstance(p.content, str):
                return p.content
    return ""


def _offline_reader(messages: list[ModelMessage], info: AgentInfo, resolve: Resolve | None = None) -> ModelResponse:
    """The offline ml_orchestrator: read the request with the rules (a model it names found by
    ``resolve``), answer with a task or a refusal."""
    tools = {t.name: t for t in info.output_tools}
    task_tool = next(n for n in tools if "Refusal" not in n)
    refuse_tool = next(n for n in tools if "Refusal" in n)
    reading = read_request(_request_text(messages), resolve)
    if reading.missing or reading.problems:
        reason = "; ".join(reading.problems + [_MISSING[m] for m in reading.missing])
        call = ToolCallPart(refuse_tool, {"missing": reading.missing, "reason": reason}, tool_call_id="request-1")
        return ModelResponse(parts=[call], model_name="trainteam-offline")
    if "require_approval" in reading.fields:  # asked-for approvals add to the default ones
        default = TrainTask.model_fields["require_approval"].get_default(call_default_factory=True)
        reading.fields["require_approval"] = list(dict.fromkeys([*default, *reading.fields["require_approval"]]))
    try:
        TrainTask.model_validate(reading.fields)
    except ValidationError as exc:
        call = ToolCallPart(
            refuse_tool, {"missing": [], "reason": format_validation_error(exc, "request")}, tool_call_id="request-1"
        )
        return ModelResponse(parts=[call], model_name="trainteam-offline")
    return ModelResponse(
        parts=[ToolCallPart(task_tool, reading.fields, tool_call_id="request-1")], model_name="trainteam-offline"
    )


_MISSING = {
    "model": "model: say which model — describe one to build (e.g. 'a tiny llama, hidden 128, 2 layers'), "
    "say it is built from scratch, give a local model folder, or name a model registered in the workspace "
    "or in your local Hugging Face cache (e.g. 'Qwen2.5-0.5B-Instruct'); fine-tuning starts from a "
    "pretrained model, never from random init",
    "data": "data: name the bundled demo (addition, subtraction, multiplication) or give your data's path "
    "(JSONL, JSON, CSV/TSV, Parquet; a held-out file is optional); trainteam never guesses a data path",
    "budget": "budget: give a time limit (e.g. 'budget 20 minutes'); a run never starts without one",
}


def _agent(model: Any = None, resolve: Resolve | None = None) -> Agent:
    if model is None:
        choice = choose_model("ml_orchestrator")
        reader = partial(_offline_reader, resolve=resolve)
        model = (
            FunctionModel(reader, stream_function=stream_of(reader), model_name="offline-ml_orchestrator")
            if choice.offline
            else build_model(choice)
        )
    return Agent(
        model,
        name="ml_orchestrator",
        output_type=[TrainTask, RequestRefusal],
        instructions=render("request.md.j2", workflow="train_model"),
        retries=2,
    )


def _grounded(task, text: str, resolve: Resolve | None = None):
    """Refuse what the text does not say, whatever the model answered; the task, with a model the
    request names (written as the request writes it) at the folder it resolved to."""
    if task.data.path is not None:
        for field, value in (("data.path", task.data.path), ("data.eval_path", task.data.eval_path)):
            if value is not None and str(value) not in text:
                raise BadInput(f"{field}: {value} is not written in the request; give the path explicitly")
    if task.model.trust_remote_code:
        raise BadInput(
            "model.trust_remote_code: a request cannot turn it on; only your own task file can "
            "(model.trust_remote_code: true, run with execute-workflow --task)"
        )
    said = read_request(text, resolve)
    if "budget" in said.missing:
        raise BadInput(_MISSING["budget"])
    if "model" in said.missing and task.model.path is None:  # no model named and no safe default for this data
        raise BadInput(_MISSING["model"])
    refused = [p for p in said.problems if p.startswith(("budget", "model"))]
    if refused:  # "no budget", a closed or unknown model, "trust remote code": refused whatever a model answered
        raise BadInput(refused[0])
    task = _grounded_model(task, text, said)
    _grounded_budget(task.budget, text, said)
    _grounded_settings(task, text, said)
    asked = [s for s in said.fields.get("require_approval", []) if s not in task.require_approval]
    if asked:
        raise BadInput(
            f"require_approval: the request asks to approve {', '.join(asked)} first; "
            "the orchestrator's answer left it out"
        )
    return task


def _grounded_model(task, text: str, said: Reading):
    """The model the request names is the task's model: a named one at the folder it resolved to
    (never built from random init instead), a described architecture kept, a path written."""
    choice = said.choice
    path = task.model.path
    if choice is not None:
        if path is None:
            raise BadInput(
                f"model: the request names '{choice.words}' ({choice.detail}); the orchestrator's answer "
                f"builds a {task.model.arch} from random init instead"
            )
        if str(path) not in (choice.words, str(choice.path)):
            raise BadInput(f"model.path: {path} is not the model the request names ('{choice.words}': {choice.path})")
        return task.model_copy(update={"model": task.model.model_copy(update={"path": choice.path})})
    if path is not None and str(path) not in text:
        raise BadInput(f"model.path: {path} is not written in the request; give the folder explicitly")
    arch = said.fields.get("model", {}).get("arch")
    if path is None and arch is not None and any(s.field == "model" for s in said.said) and task.model.arch != arch:
        raise BadInput(
            f"model.arch: {task.model.arch} is not the model the request names (a {arch}); "
            "a request's model is never swapped"
        )
    return task


def _close(a: float, values) -> bool:
    return any(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for b in values)


def _grounded_budget(budget, text: str, said: Reading) -> None:
    """Each budget number is an amount the request writes in that unit, or what the rule
    reader derives from them (minutes from the money and the hourly price)."""
    stated = stated_budget(text)
    read = said.fields.get("budget", {})
    for field, unit in (("max_wall_minutes", "minutes"), ("max_cost_usd", "USD"), ("cost_per_hour_usd", "USD/hour")):
        value = getattr(budget, field)
        if field != "max_wall_minutes" and value == 0:
            continue  # the default: no price, no money ceiling
        allowed = stated[field] | ({read[field]} if field in read else set())
        if not _close(value, allowed):
            says = ", ".join(f"{v:g}" for v in sorted(allowed)) or "none"
            raise BadInput(
                f"budget.{field}: {value:g} {unit} is not written in the request (it states: {says}); "
                "a budget comes from the request's own words"
            )
    if budget.extension_minutes is not None:
        raise BadInput("budget.extension_minutes: a request cannot set it; put it in a task file")


_FREE = {"name", "description", "stages", "budget", "require_approval", "on_gate_failure"}  # checked apart, or harmless
# The engineering a model is asked for: the shape that "a small llama" means and the usual hyperparameters (not
# how much work: max_steps, n_train). A model may choose these without the request's words, because they pass the
# same validation, the planner (a stage it refuses, or an estimate over the budget, is refused in plan_request) and
# the budget ceiling inside every step. What spends or widens trust — the budget, data, paths, gates, approvals,
# trust_remote_code — stays held to the words.
_JUDGEMENT = re.compile(
    r"model\.(arch|hidden_size|num_layers|num_heads|num_kv_heads|intermediate_size|"
    r"max_position_embeddings)|tokenizer\.vocab_size|training\.\w+\.(learning_rate|"
    r"per_device_train_batch_size|gradient_accumulation_steps|warmup_steps|lr_scheduler_type|max_length|"
    r"weight_decay)"
)


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every setting in a dump; an empty dict or list is a leaf (e.g. LoRA on)."""
    if isinstance(value, dict):
        if not value and path:
            yield path, value
        for key, v in value.items():
            if path or key not in _FREE:
                if key != "method":  # a stage's method is its stage name, set by train_config
                    yield from _leaves(v, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        if not value and path:
            yield path, value
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, value


def _grounded_settings(task, text: str, said: Reading) -> None:
    """Every setting the answer moves off its default is in the request's words or its rule reading."""
    read = dict(_leaves(said.fields))
    prefixes = {p.split("[")[0].rsplit(".", i)[0] for p in read for i in range(p.count(".") + 1)}
    numbers = stated_numbers(text) | {
        v for v in read.values() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    lowered = text.lower()
    moved = task.model_dump(mode="json", exclude_defaults=True)
    if task.answer == default_answer(demo=task.data.demo is not None):
        moved.pop("answer", None)  # chosen from the data (a default that depends on it), not set
    for derived in ("stages", "align_lr"):  # worked out when the task is validated, from what it says
        moved.get("search", {}).pop(derived, None)
    if moved.get("search") == {}:
        moved.pop("search")
    for path, value in _leaves(moved):
        if value is None or read.get(path, object()) == value or _JUDGEMENT.fullmatch(path):
            continue
        if isinstance(value, bool):
            ok = False
        elif isinstance(value, (int, float)):
            ok = _close(value, numbers)
        elif isinstance(value, str):
            ok = value.lower() in lowered
        else:  # {} or []: a sub-setting switched on with its defaults
            ok = path in prefixes
        if not ok:
            shown = repr(value) if isinstance(value, str) else value
            raise BadInput(
                f"{path}: {shown} is not written in the request; a request sets only what it says "
                "(say it in the request, or use a task file)"
            )


def parse_request(
    text: str,
    *,
    base_dir=None,
    model: Any = None,
    check_plan: bool = True,
    workspace=None,
    sources: ModelSources | None = None,
):
    """A TrainTask from a sentence (paths resolved against ``base_dir``, default the cwd).

    Raises ``BadInput`` naming what is missing or impossible. ``check_plan`` also runs the
    run planner over every stage and refuses a task it cannot run or that exceeds its budget.
    A model the request names is looked up in ``sources`` (default: folders under ``base_dir``,
    the models registered in ``workspace`` (default TRAINTEAM_HOME or ./.trainteam), the local
    Hugging Face cache), read only; one it cannot find is refused.
    """
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    if not isinstance(text, str) or not text.strip():
        raise BadInput("request: empty; say which model, which data and what budget")
    refusal = request_refusal(text)  # before any model sees it: bounded work, bounded tokens, plain text
    if refusal:
        raise BadInput(refusal)
    base = Path(base_dir) if base_dir else Path.cwd()
    sources = sources or ModelSources.find(base, workspace)
    resolve = resolver(sources)
    agent = _agent(model, resolve)
    try:
        result = agent.run_sync(text)
    except UnexpectedModelBehavior as exc:
        if isinstance(exc.__cause__, ValidationError):  # the answer failed a task file's validation: name the field
            raise BadInput(format_validation_error(exc.__cause__, "request")) from None
        raise BadInput(f"request: the orchestrator could not turn it into a valid task ({exc.message})") from None
    except provider_errors() as exc:  # the provider setting is a person's input: one line, exit 2
        choice = choose_model("ml_orchestrator") if model is None else None
        raise BadInput(provider_failure("ml_orchestrator", exc, agent.model, choice)) from None
    out = result.output
    if isinstance(out, RequestRefusal):
        raise BadInput(out.reason if out.reason else f"request: missing {', '.join(out.missing)}")
    task: TrainTask = _grounded(out, text, resolve)
    task = resolve_paths(task, base, "request")
    if check_plan:
        plan_request(task, request=text, sources=sources)
    return task


class RequestPlan(BaseModel):
    task: str
    model: str
    data: str
    stages: list[dict[str, Any]] = Field(description="per stage: steps, tokens, parameters, memory, minutes, fixes")
    steps: list[str] = Field(description="workflow steps that will run, with their persona")
    budget_minutes: float
    budget_usd: float
    est_minutes: float
    est_cost_usd: float
    gates: dict[str, str]
    understood: list[str] = Field(
        default_factory=list, description="each model, data and stage choice the request's own words make, quoting them"
    )
    ignored: list[str] = Field(
        default_factory=list, description="model names the request writes that the plan does not use, and why"
    )
    defaults: list[str] = Field(
        default_factory=list,
        description="what the request left out and the plan fills in, one line each, stated before anything runs",
    )
    notes: list[str] = Field(default_factory=list)

    def text(self) -> str:
        lines = [
            f"task {self.task}",
            f"  model: {self.model}",
            f"  data: {self.data}",
            f"  stages: {' → '.join(s['stage'] for s in self.stages)}",
        ]
        for s in self.stages:
            lines.append(
                f"    {s['stage']}: {s['max_steps']} steps, {s['total_tokens']:,} tokens, "
                f"{s['params']:,} parameters, {s['memory_gib']:.2f} GiB, ~{s['est_minutes']:.1f} min"
            )
        lines += [
            *(f"  gate {k}: {v}" for k, v in self.gates.items()),
            f"  steps: {' → '.join(self.steps)}",
            f"  estimate: ~{self.est_minutes:.1f} min of training, cost {self.est_cost_usd:.2f} USD "
            f"(budget {self.budget_minutes:g} min, {self.budget_usd:g} USD)",
        ]
        lines += [f"  understood: {u}" for u in self.understood]
        lines += [f"  ignored: {i}" for i in self.ignored]
        lines += [f"  default: {d}" for d in self.defaults]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def plan_request(
    task,
    hardware=None,
    steps: list[str] | None = None,
    *,
    request: str | None = None,
    sources: ModelSources | None = None,
) -> RequestPlan:
    """Stages, model, data, budget and the planner's time and cost; BadInput if it cannot run.

    A stage the planner refuses but can repair (e.g. a sequence longer than the model's
    context) is shown with its fix — the training_engineer applies it — not refused.
    ``defaults`` states what the task fills in that ``request`` (the person's words, when the
    task came from them) does not say; without it, only what the task itself leaves open.
    ``understood`` quotes the words each model, data and stage choice came from (a named model
    found again in ``sources``, default as ``parse_request`` finds it).
    """
    hw = hardware or task_machine(task)
    if task.budget.cost_per_hour_usd:
        hw = hw.model_copy(update={"price_per_device_hour": task.budget.cost_per_hour_usd})
    stages, notes = [], []
    for stage in task.stage_names():
        cfg = task.train_config(stage)
        v = plan_stage(task, stage, cfg, hw)
        if not v.runnable:
            why = "; ".join(f"{r['field']}: {r['reason']}" for r in v.refusals)
            raise BadInput(f"training.{stage}.{why}" if v.refusals else f"training.{stage}: the planner refused it")
        if v.fixes:
            notes.append(
                f"{stage}: the planner adjusts {v.fixes} ("
                + "; ".join(f"{r['field']}: {r['reason']}" for r in v.refusals)
                + ")"
            )
        stages.append({"stage": stage, "max_steps": cfg.max_steps, **v.model_dump(exclude={"stage"})})
    minutes = sum(s["est_minutes"] for s in stages)
    cost = sum(s["est_cost_usd"] for s in stages)
    if minutes > task.budget.max_wall_minutes:
        raise BadInput(
            f"budget.max_wall_minutes: the planner estimates ~{minutes:.1f} min of training, over the "
            f"{task.budget.max_wall_minutes:g} min budget; raise the budget or shrink the run"
        )
    if task.budget.cost_per_hour_usd and cost > task.budget.max_cost_usd:
        raise BadInput(
            f"budget.max_cost_usd: the planner estimates {cost:.2f} USD, over the "
            f"{task.budget.max_cost_usd:g} USD budget"
        )
    style = planned_style(task)
    gates = planned_gates(task, style)
    if style is not None:
        notes = [style.line(), *notes]
    said = None if request is None else read_request(request, resolver(sources or ModelSources.find()))
    return RequestPlan(
        task=task.name,
        model=model_line(task),
        data=data_line(task),
        stages=stages,
        steps=steps or [],
        budget_minutes=task.budget.max_wall_minutes,
        budget_usd=task.budget.max_cost_usd,
        est_minutes=round(minutes, 3),
        est_cost_usd=round(cost, 4),
        gates=gates,
        understood=request_understood(task, said),
        ignored=said.ignored if said else [],
        defaults=request_defaults(task, said),
        notes=notes,
    )


def _understood_model(task, said: Reading, words: str) -> str:
    m = task.model
    if said.choice is not None:
        if m.path == said.choice.path:
            return f"model: '{words}' → {said.choice.detail}, fine-tuned from its weights"
    elif m.path is not None and said.fields.get("model", {}).get("path") is not None:
        return f"model: '{words}' → {model_line(task)}"
    elif m.path is None and "arch" in said.fields.get("model", {}):
        return f"model: '{words}' → {model_line(task)}"
    return f"model: '{words}' is in the request; the orchestrator's model chose {model_line(task)}"


def request_understood(task, said: Reading | None) -> list[str]:
    """The model, data and stage choices the person's words make, each quoting them (what the
    words leave out is in ``request_defaults``)."""
    if said is None:
        return []
    lines: list[str] = []
    for s in said.said:
        if s.field == "model":
            lines.append(_understood_model(task, said, s.words))
        elif s.field == "stages" and s.value in task.stages:
            lines.append(f"stages: '{s.words}' → {s.value}")
        elif s.field == "data" and s.value == "path" and task.data.path is not None:
            lines.append(f"data: '{s.words}' → your data {task.data.path}")
        elif s.field == "data" and s.value == "eval_path" and task.data.eval_path is not None:
            lines.append(f"data: '{s.words}' → held out: {task.data.eval_path}")
        elif s.field == "data" and s.value == task.data.demo:
            lines.append(f"data: '{s.words}' → the bundled {s.value} demo")
    return list(dict.fromkeys(lines))


def _agrees(task, filled: Filled) -> bool:
    """The task holds what the reader filled in (a provider's answer may have chosen otherwise)."""
    if filled.field == "stages":
        return filled.value in task.stages
    if filled.field == "model":
        return all(getattr(task.model, k) == v for k, v in filled.value.items())
    return task.data.demo == filled.value  # data.demo


def _chosen(task, field: str) -> str:
    return {"model": model_line(task), "stages": " → ".join(task.stages)}.get(field, data_line(task))


def request_defaults(task, said: Reading | None) -> list[str]:
    """Every setting the plan fills in that the person's words (``said``) leave out, one line each:
    the reader's defaults the task holds (a configured model's other choice is named as its own),
    where held-out rows come from without an eval file, and what the training engineer's recipe
    search chooses (``task.search.stages``) or an align stage's default learning rate."""
    lines: list[str] = []
    for filled in said.defaults if said is not None else []:
        line = (
            filled.line
            if _agrees(task, filled)
            else (
                f"{filled.field}: not said in the request; the orchestrator's model chose {_chosen(task, filled.field)}"
            )
        )
        if line not in lines:
            lines.append(line)
    d = task.data
    if d.path is not None and d.eval_path is None:
        where = (
            f"its {d.eval_split} split"
            if d.eval_split
            else (
                f"a seeded {d.eval_fraction:.0%} of its rows (data.eval_fraction), at least 1 and at most 500"
                if d.path.is_file()
                else f"its validation/test split, else a seeded {d.eval_fraction:.0%} of its rows"
            )
        )
        lines.append(f"data: no held-out file named; held-out rows are {where}")
    share = f"probe runs on a slice of the data, at most {task.search.budget_fraction:.0%} of the budget"
    for stage in task.stage_names():
        searched = (task.search.stages or {}).get(stage, [])
        if searched:
            lines.append(
                f"training.{stage}: {', '.join(searched)} not said; the training engineer's recipe search "
                f"chooses them ({share}); the estimate uses the library defaults"
            )
        if stage in task.search.align_lr:
            lines.append(
                f"training.{stage}: learning_rate not said; {stage.upper()}'s default {task.search.align_lr[stage]:g}"
            )
        if said is not None:
            decided = {*searched, *(["learning_rate"] if stage in task.search.align_lr else [])}
            lines += _library_defaults(task, stage, said, decided)
    return lines


def _library_defaults(task, stage: str, said: Reading, decided: set[str]) -> list[str]:
    """The recipe settings of a stage the request does not say and nothing else chooses: the
    library's defaults (or what a configured model chose), stated."""
    cfg = task.train_config(stage)
    given = set(said.fields.get("training", {}).get(stage, {})) | decided
    if cfg.num_train_epochs is not None:
        given.add("max_steps")
    left = [k for k in SEARCHABLE if k not in given]
    library = [k for k in left if getattr(cfg, k) == TrainConfig.model_fields[k].default]
    out = []
    for keys, why in (
        (library, "the library defaults"),
        ([k for k in left if k not in library], "chosen by the orchestrator's model"),
    ):
        if keys:
            out.append(f"training.{stage}: {', '.join(f'{k} {getattr(cfg, k):g}' for k in keys)} not said; {why}")
    if library and get_method(cfg.method).searched and task.search.enabled is None:
        out[0] += " (a stage that gives part of its recipe is not searched; say 'search the recipe' for the rest)"
    return out
