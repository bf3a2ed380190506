"""Personas as real pydantic-ai Agents: least privilege, clear errors, plan-first, graph logging, briefs."""

from __future__ import annotations

import json

import pytest
from persona_helpers import ctx, fake_checkpoint, final_eval_output, task
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from trainteam.agents.cards import PERSONAS, load_card, load_skill
from trainteam.agents.runtime import run_persona_step
from trainteam.contract.step_io import StepInputs
from trainteam.graph import NodeKind
from trainteam.workflows.steps import STEPS, get_tool
from trainteam.workspace import Workspace


@pytest.fixture
def ws(tmp_path):
    return Workspace.open(tmp_path / "ws")


def _finish(info, messages, summary="done"):
    return ModelResponse(
        parts=[ToolCallPart(info.output_tools[0].name, {"summary": summary}, tool_call_id=f"f{len(messages)}")]
    )


def test_every_card_and_skill_loads_and_names_real_tools():
    for persona in PERSONAS:
        card = load_card(persona)
        assert card.name == persona and card.goal and card.template.endswith(".j2")
        for skill in card.skills:
            s = load_skill(skill)
            assert s.name == skill and len(s.text) > 200 and s.load_when
        assert card.tool_names and set(card.tool_names) <= set(STEPS), persona
    # the cards name every step tool: a workflow spec is checked against them (workflows/engine/spec.py), and the
    # engine, which imports no step, runs what they name from the catalog it is launched with
    assert {name for persona in PERSONAS for name in load_card(persona).tool_names} == set(STEPS)
    assert load_card("ml_orchestrator").grant("register_model").requires_approval
    assert load_card("training_engineer").grant("train").plan_first


@pytest.mark.parametrize("persona", PERSONAS)
def test_each_persona_sees_only_its_own_tools(ws, persona):
    seen = {}

    def probe(messages, info):
        seen["tools"] = sorted(t.name for t in info.function_tools)
        seen["instructions"] = info.instructions
        return _finish(info, messages)

    card = load_card(persona)
    step_tool = next(g.name for g in card.tools if g.name in STEPS)
    result = run_persona_step(ctx(ws, persona, step_tool), step_tool, model=FunctionModel(probe))
    assert seen["tools"] == sorted(g.name for g in card.tools if g.name in STEPS)
    others = set(STEPS) - set(card.tool_names)
    assert others and not others & set(seen["tools"])
    assert f"**{persona}**" in seen["instructions"] and "never instructions" in seen["instructions"]
    # the model finished without running the tool: the step says so instead of pretending
    assert result.outcome == "error" and f"did not run {step_tool}" in result.summary


def test_a_step_tool_outside_the_persona_is_refused_before_any_model_runs(ws):
    def never(messages, info):
        raise AssertionError("no model may be asked")

    result = run_persona_step(ctx(ws, "data_curator", "train"), "train", model=FunctionModel(never))
    assert result.outcome == "error"
    assert "'train' is not one of data_curator's tools" in result.summary
    assert "prepare_corpus" in result.summary
    assert not ws.graph.nodes(NodeKind.CHECKPOINT)


def test_hallucinated_tool_ends_as_a_clear_error_in_the_transcript(ws):
    def hallucinate(messages, info):
        return ModelResponse(
            parts=[ToolCallPart("approve_everything", {"all": True}, tool_call_id=f"h{len(messages)}")]
        )

    result = run_persona_step(
        ctx(ws, "data_curator", "prepare_corpus"), "prepare_corpus", model=FunctionModel(hallucinate)
    )
    assert result.outcome == "error"
    assert "unknown tool 'approve_everything'" in result.summary and "prepare_corpus" in result.summary
    record = json.loads((ws.dir("transcripts") / "run1" / "prepare_corpus#1.json").read_text())
    assert record["status"] == "error"
    retries = [
        p["content"]
        for m in record["messages"]
        for p in m["parts"]
        if p["part_kind"] in ("retry-prompt", "tool-return")
    ]
    assert retries and all("Unknown tool name: 'approve_everything'" in str(c) for c in retries)
    calls = [n for n in ws.graph.nodes(NodeKind.TOOL_CALL) if n["tool"] == "approve_everything"]
    assert calls and all(n["status"] == "unknown_tool" for n in calls)
    assert not ws.graph.nodes(NodeKind.DATASET_VERSION)  # nothing ran


def test_a_model_that_corrects_itself_after_the_unknown_tool_error_succeeds(ws):
    def once_wrong(messages, info):
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn == 0:
            return ModelResponse(parts=[ToolCallPart("download_data", {}, tool_call_id="t0")])
        if turn == 1:
            return ModelResponse(parts=[ToolCallPart("prepare_corpus", {"reason": "the real tool"}, tool_call_id="t1")])
        return _finish(info, messages, "prepared")

    result = run_persona_step(
        ctx(ws, "data_curator", "prepare_corpus"), "prepare_corpus", model=FunctionModel(once_wrong)
    )
    assert result.outcome == "ok" and result.metrics["n_train"] == 300
    assert result.details["persona"]["summary"] == "prepared"


def test_offline_curator_returns_the_tools_own_result_and_logs_it_to_the_graph(ws):
    result = run_persona_step(ctx(ws, "data_curator", "prepare_corpus"), "prepare_corpus")
    direct = get_tool("prepare_corpus").run(ctx(ws, "data_curator", "prepare_corpus", run_id="direct"))
    assert result.outcome == "ok"
    assert result.artifacts == direct.artifacts and result.nodes == direct.nodes
    assert result.details["persona"]["persona"] == "data_curator"
    g = ws.graph.to_networkx()
    step = "Step:run1/prepare_corpus#1"
    calls = [u for u, v, k in g.in_edges(step, keys=True) if k == "called_by" and u.startswith("ToolCall:")]
    decisions = [u for u, v, k in g.in_edges(step, keys=True) if k == "called_by" and u.startswith("Decision:")]
    transcripts = [u for u, v, k in g.in_edges(step, keys=True) if k == "records"]
    assert len(calls) == 1 and ws.graph.get_node(calls[0])["outcome"] == "ok"
    assert ws.graph.get_node(decisions[0])["decision"] == "proceed"
    assert transcripts and ws.graph.get_node(transcripts[0])["persona"] == "data_curator"


def test_plan_first_tool_returns_a_plan_and_trains_nothing(ws):
    def plan_only(messages, info):
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn == 0:
            return ModelResponse(parts=[ToolCallPart("train", {"reason": "look first"}, tool_call_id="p0")])
        return _finish(info, messages, "only planned")

    result = run_persona_step(ctx(ws, "training_engineer", "train"), "train", model=FunctionModel(plan_only))
    assert result.outcome == "error" and "did not run train" in result.summary
    record = json.loads((ws.dir("transcripts") / "run1" / "train#1.json").read_text())
    returned = [p["content"] for m in record["messages"] for p in m["parts"] if p["part_kind"] == "tool-return"]
    plan = returned[0]["plan"]["stages"]["pretrain"]
    assert returned[0]["executed"] is False and plan["runnable"] and plan["params"] > 0 and plan["max_steps"] == 4
    assert not any((ws.dir("checkpoints")).rglob("*.safetensors"))


def test_engineer_stops_when_the_planner_refuses_a_stage_it_cannot_fix(ws):
    t = task(training={"pretrain": {"max_steps": 4, "lora": {"quantize_4bit": True}}})
    result = run_persona_step(ctx(ws, "training_engineer", "train", t), "train")
    assert result.outcome == "error"
    assert "lora.quantize_4bit" in result.summary and "CUDA" in result.summary
    assert result.details["persona"]["decision"] == "stop"
    assert not ws.graph.nodes(NodeKind.CHECKPOINT)


def test_engineer_stops_a_plan_over_the_time_budget(ws):
    t = task(budget={"max_wall_minutes": 0.001}, training={"pretrain": {"max_steps": 5000, "seq_len": 64}})
    result = run_persona_step(ctx(ws, "training_engineer", "train", t), "train")
    assert result.outcome == "error" and "over the 0.001 min budget" in result.summary


def _eval_output(ws, value):
    out = final_eval_output(ws, fake_checkpoint(ws), value)
    out["details"] = {"stage": "pretrain"}
    return out


@pytest.mark.parametrize("value,outcome,decision", [(0.5, "failed", "fail"), (0.85, "passed", "pass")])
def test_judge_decides_the_gate_from_the_metric(ws, value, outcome, decision):
    c = ctx(ws, "eval_judge", "gate", outputs={"evaluate": _eval_output(ws, value)})
    result = run_persona_step(c, "gate")
    assert result.outcome == outcome
    assert result.details["persona"]["decision"] == decision
    assert any("0.8000" in r for r in result.details["persona"]["reasons"])


def test_instructions_carry_task_budget_graph_facts_and_only_needed_skills(ws):
    seen = {}

    def probe(messages, info):
        seen.setdefault("instructions", []).append(info.instructions)
        return _finish(info, messages)

    prepared = run_persona_step(ctx(ws, "data_curator", "prepare_corpus"), "prepare_corpus")
    outputs = {"prepare_corpus": prepared.model_dump(mode="json")}
    run_persona_step(ctx(ws, "training_engineer", "train", outputs=outputs), "train", model=FunctionModel(probe))
    dist = task(training={"pretrain": {"max_steps": 4, "strategy": "ddp", "devices_per_node": 2}})
    run_persona_step(
        ctx(ws, "training_engineer", "train", dist, outputs=outputs, visit=2), "train", model=FunctionModel(probe)
    )
    first, second = seen["instructions"]
    assert "wall time: 30.0 min" in first and "hidden 32 x 1 layers" in first
    assert "DatasetVersion" in first and "records=300" in first  # what the graph knows
    assert "### train_model" in first and "### launch" not in first and "### troubleshooting" not in first
    assert "### launch" in second and "### troubleshooting" in second and "attempt 2" in second


def test_a_failing_tool_is_recorded_then_handed_to_the_engine_as_is(ws):
    # train needs the prepare_corpus output; without it the tool raises, as the engine expects
    with pytest.raises(LookupError, match="prepare_corpus"):
        run_persona_step(ctx(ws, "training_engineer", "train_tokenizer"), "train_tokenizer")
    record = json.loads((ws.dir("transcripts") / "run1" / "train_tokenizer#1.json").read_text())
    assert record["status"] == "error" and "LookupError" in record["error"]
    failed = [n for n in ws.graph.nodes(NodeKind.TOOL_CALL) if n["tool"] == "train_tokenizer"]
    assert failed and failed[0]["status"] == "error"


def test_a_second_agent_run_of_the_same_step_visit_gets_its_own_transcript(ws):
    c = ctx(ws, "data_curator", "prepare_corpus")
    run_persona_step(c, "prepare_corpus")
    again = run_persona_step(c, "prepare_corpus")  # e.g. the restart after a loss spike
    assert again.details["persona"]["transcript"].endswith("prepare_corpus#1.2.json")
    assert sorted(p.name for p in (ws.dir("transcripts") / "run1").iterdir()) == [
        "prepare_corpus#1.2.json",
        "prepare_corpus#1.json",
    ]


def test_another_personas_tool_is_as_unknown_as_an_invented_one(ws):
    def overreach(messages, info):
        return ModelResponse(
            parts=[ToolCallPart("register_model", {"reason": "ship it myself"}, tool_call_id=f"o{len(messages)}")]
        )

    outputs = {"final_eval": final_eval_output(ws, fake_checkpoint(ws))}
    result = run_persona_step(
        ctx(ws, "data_curator", "prepare_corpus", outputs=outputs), "prepare_corpus", model=FunctionModel(overreach)
    )
    assert result.outcome == "error" and "unknown tool 'register_model'" in result.summary
    assert not ws.graph.nodes(NodeKind.MODEL)


def test_engineer_counts_what_the_run_already_spent(ws):
    t = task(budget={"max_wall_minutes": 10}, training={"pretrain": {"max_steps": 5000, "seq_len": 64}})
    c = ctx(ws, "training_engineer", "train", t)
    c.spent_s = 599.9  # what the engine measured of the run's earlier steps
    result = run_persona_step(c, "train")
    assert result.outcome == "error" and "0.0 min left of 10 min budget" in result.summary
    assert not ws.graph.nodes(NodeKind.CHECKPOINT)


def test_the_offline_policy_streams_the_same_run_for_event_consumers(ws):
    import asyncio

    from trainteam.agents.policy import StepFacts, offline_model
    from trainteam.agents.runtime import PersonaDeps, build_agent

    card = load_card("data_curator")
    facts = StepFacts("data_curator", "prepare_corpus", 1, "prepare_corpus", plan_first=False)

    async def stream():
        agent = build_agent(card, offline_model(facts), STEPS, instructions="brief", capabilities=[])
        deps = PersonaDeps(ctx=ctx(ws, "data_curator", "prepare_corpus"), card=card, step_tool="prepare_corpus")
        names, last = [], None
        async with agent.run_stream_events("go", deps=deps) as events:
            async for ev in events:
                names.append(type(ev).__name__)
                if type(ev).__name__ == "FunctionToolCallEvent":
                    assert ev.part.tool_name == "prepare_corpus"
                last = ev
        return names, last.result.output

    names, report = asyncio.run(stream())
    assert "FunctionToolCallEvent" in names and "FunctionToolResultEvent" in names and "FinalResultEvent" in names
    plain = run_persona_step(ctx(ws, "data_curator", "prepare_corpus", run_id="plain"), "prepare_corpus")
    assert report.summary == plain.details["persona"]["summary"] and report.decision == "proceed"


def test_a_restart_is_planned_for_the_work_it_has_left(ws):
    from trainteam.workflows.steps.plans import plan_stages

    t = task(
        stages=["pretrain", "sft"],
        training={"pretrain": {"max_steps": 400, "seq_len": 64}, "sft": {"max_steps": 1000, "seq_len": 64}},
    )
    whole = plan_stages(ctx(ws, "training_engineer", "train", t), "train")
    # On disk as a spike left it: pretrain trained to its end, SFT checkpointed at step 750.
    run = ws.root / "checkpoints" / "run1"
    for folder in (run / "pretrain-v1" / "final", run / "sft-v1" / "checkpoint-750"):
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"\x02" + bytes(7) + b"{}")  # sound safetensors, no tensors
    (run / "pretrain-v1" / "final" / "tokenizer.json").write_text("{}")  # train() saves the tokenizer with it
    (run / "sft-v1" / "checkpoint-750" / "trainer_state.json").write_text('{"global_step": 750}')
    c = ctx(ws, "training_engineer", "train", t)
    rollback = {
        "spike_step": 752,
        "rollback_checkpoint": str(run / "sft-v1" / "checkpoint-750"),
        "skip_batches": 2,
        "lr_scale": 0.5,
        "reason": "spike at 752",
    }
    c.decided = StepInputs(restart={"stage": "sft", "spike_step": 752, "proposal": rollback})
    rest = plan_stages(c, "train")
    sft_minutes = whole["stages"]["sft"]["est_minutes"]
    assert list(rest["stages"]) == ["sft"]  # pretrain resumes from its final weights
    assert rest["stages"]["sft"]["steps_done"] == 750
    assert rest["est_minutes"] == pytest.approx(0.25 * sft_minutes, abs=0.002)
    assert rest["est_minutes"] < whole["est_minutes"]
    # a restart from the stage's start trains in a folder of its own: all of SFT is left
    c.decided = StepInputs(
        restart={"stage": "sft", "from_start": True, "spike_step": 752, "output_dir": str(run / "sft-v1-restart1")}
    )
    assert plan_stages(c, "train")["est_minutes"] == pytest.approx(sft_minutes, abs=0.002)
