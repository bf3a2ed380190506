"""A curate step that removes more than ``max_drop_fraction`` of the rows waits for a person, through
the real CLI in real processes: the approval's evidence names the rules and their counts; approved,
the run goes on with what is left; rejected, it stops with the reason; nothing left is an error."""

from __future__ import annotations

import json

from instruction_rows import instruction_rows
from spine_helpers import DATA, cli, pending_approvals, run_view, spawn, wait_for, write_task

from trainteam.curation.jsonl import read_jsonl, write_jsonl
from trainteam.trainers.training.tokenizer import load_tokenizer

SPEC = str(DATA / "curate_only.yaml")


def _user_data(tmp_path, blank: int = 10, unique: int = 40, copies: int = 100) -> dict:
    """150 instruction rows of which only ``unique`` are usable: ``blank`` with an empty answer and
    ``copies`` that repeat the usable ones (in other letter case)."""
    good = instruction_rows(unique)
    rows = good + [{"id": f"blank{k}", "prompt": r["prompt"] + " (again)", "completion": "  "}
                   for k, r in enumerate(instruction_rows(blank, start=unique))]
    rows += [{"id": f"copy{k}", "prompt": good[k % unique]["prompt"].upper(),
              "completion": good[k % unique]["completion"]} for k in range(copies)]
    train = write_jsonl(rows, tmp_path / "mine.jsonl")
    held = write_jsonl(instruction_rows(20, start=150), tmp_path / "mine_eval.jsonl")
    return {"path": str(train), "eval_path": str(held)}


def _start(tmp_path, ws, run_id, **data):
    task = write_task(tmp_path, workflow="curate_only", data=_user_data(tmp_path, **data))
    return spawn(ws, "execute-workflow", SPEC, "--task", str(task), "--run-id", run_id)


def _attempt_outputs(ws, run_id):
    from trainteam.workflows.engine.store import RunStore
    from trainteam.workspace import Workspace

    return [(a["status"], a["output"]) for a in RunStore(Workspace.open(ws).engine).attempts(run_id)
            if a["step"] == "curate"]


def test_curation_over_the_limit_waits_for_a_person_and_approved_goes_on(tmp_path, ws, background):
    run = _start(tmp_path, ws, "r-cur-ok")
    background.append(run)
    pending = wait_for(lambda: pending_approvals(ws), timeout=600, what="the curation approval")
    assert [(a["step"], a["action"]) for a in pending] == [("curate", "accept_curation")]
    train = pending[0]["evidence"]["splits"]["train"]
    assert train["rules"] == {"exact_duplicates": 100, "rows.empty_answer": 10}
    assert (train["input"], train["output"], train["max_drop_fraction"]) == (150, 40, 0.5)
    assert train["removed_fraction"] == round(110 / 150, 4)
    assert train["examples"]["rows.empty_answer"][0] == "blank0: the completion is blank"
    assert train["examples"]["exact_duplicates"][0] == "copy0 (same as q000)"
    assert "150 → 40 records" in pending[0]["evidence"]["summary"]
    assert pending[0]["proposed"] == {"train_on": {"train": 40}}
    assert run_view(ws, "r-cur-ok")["status"] == "waiting_approval"
    # the curator did not wave it on
    status, output = _attempt_outputs(ws, "r-cur-ok")[0]
    assert status == "too_much_dropped" and output["details"]["persona"]["decision"] == "stop"

    cli(ws, "approvals", "approve", pending[0]["id"], "--by", "alice", "--note", "40 is enough to try", check=True)
    assert run.wait(timeout=600) == 0, run.stderr.read()
    view = run_view(ws, "r-cur-ok")
    assert view["status"] == "completed"
    assert view["metrics"]["curate.curation.output"] == 40 and view["metrics"]["curate.curation.input"] == 150
    status, output = _attempt_outputs(ws, "r-cur-ok")[-1]
    assert status == "completed" and output["details"]["accepted_by"]["decided_by"] == "alice"
    with open(output["artifacts"]["train"]) as fh:
        curated = [json.loads(line) for line in fh]
    assert [r["id"] for r in curated] == [f"q{k:03d}" for k in range(40)]


def test_rejected_curation_stops_the_run_with_the_reason(tmp_path, ws, background):
    run = _start(tmp_path, ws, "r-cur-no")
    background.append(run)
    pending = wait_for(lambda: pending_approvals(ws), timeout=600, what="the curation approval")
    cli(ws, "approvals", "reject", pending[0]["id"], "--by", "bob", "--note", "fix the export first", check=True)
    assert run.wait(timeout=600) == 1
    view = run_view(ws, "r-cur-no")
    assert view["status"] == "failed"
    assert "training on what curation left rejected by bob: fix the export first" in view["error"]
    assert "150 → 40 records" in view["error"] and "lost 73% of its rows" in view["error"]


def test_a_task_may_allow_more_and_nothing_left_is_an_error_naming_the_rules(tmp_path, ws):
    task = write_task(tmp_path, workflow="curate_only", data=_user_data(tmp_path), curation={"max_drop_fraction": 0.8})
    proc = cli(ws, "execute-workflow", SPEC, "--task", str(task), "--run-id", "r-cur-more", "-q", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert run_view(ws, "r-cur-more")["metrics"]["curate.curation.output"] == 40

    empty = write_task(tmp_path, name="empty.yaml", workflow="curate_only",
                       data=_user_data(tmp_path, blank=150, unique=0, copies=0))
    proc = cli(ws, "execute-workflow", SPEC, "--task", str(empty), "--run-id", "r-cur-empty", "-q", timeout=600)
    assert proc.returncode == 1
    error = run_view(ws, "r-cur-empty")["error"]
    assert "no training record is left of 150 (rows.empty_answer 150)" in error
    assert "curation: {rows: {empty_answer: false}}" in error


def test_rows_longer_than_the_sft_seq_len_are_dropped_with_the_models_tokenizer(tmp_path, ws, real_model):
    """A local instruct model's tokenizer and chat template count the rows; the SFT stage's seq_len is
    the limit (each short row is 40-48 tokens through SmolLM2's template, a long answer 102)."""
    data = _user_data(tmp_path, blank=0, unique=140, copies=0)
    long_answer = " ".join(["the fox ran to the river and back"] * 8)
    longs = [{"id": f"long{k}", "prompt": f"Tell me about fox number {k}.", "completion": long_answer}
             for k in range(10)]
    write_jsonl(read_jsonl(data["path"]) + longs, data["path"])
    tok = load_tokenizer(real_model)
    n = [len(tok.apply_chat_template([{"role": "user", "content": r["prompt"]},
                                      {"role": "assistant", "content": r["completion"]}], tokenize=True,
                                     return_dict=True)["input_ids"]) for r in longs[:3]]
    assert min(n) > 64
    task = write_task(tmp_path, workflow="curate_only", data=data, model={"path": str(real_model)}, stages=["sft"],
                      training={"sft": {"max_steps": 1, "seq_len": 64}}, gates={}, tokenizer={})
    proc = cli(ws, "execute-workflow", SPEC, "--task", str(task), "--run-id", "r-cur-long", "-q", timeout=600)
    assert proc.returncode == 0, proc.stderr
    view = run_view(ws, "r-cur-long")
    assert view["metrics"]["curate.curation.input"] == 150 and view["metrics"]["curate.curation.output"] == 140
    _, output = _attempt_outputs(ws, "r-cur-long")[-1]
    assert output["details"]["removed"] == {"rows.over_length": {"count": 10, "examples": [
        f"long{k}: {n[k]} tokens > 64 (the stage's seq_len)" for k in range(3)]}}
    assert output["details"]["over_length"] == "rows over 64 tokens dropped (the task's tokenizer)"
