"""A stage's recipe search where a person looks: `runs show --json`, `runs show` and the console's run page.

The search is injected (a ``SearchReport`` as the train step stores it, and as its Decision node holds it
while the stage still trains); the real search end to end is tests/steps/test_recipe_run.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from trainteam.graph.record import record_recipe, record_run, record_step
from trainteam.trainers.search.recipe_search import Probe, Recipe, RungComparison, SearchReport
from trainteam.web.app import create_app
from trainteam.workflows.engine.store import ApprovalStore, RunStore
from trainteam.workflows.report.views import run_view
from trainteam.workspace import Workspace


def _cli(ws, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainteam.cli", "-w", str(ws), *args], capture_output=True, text=True, timeout=600
    )


def _search() -> SearchReport:
    """Six LoRA probes on dates: exact match 0 at step 4 (held-out loss ranked), apart at 36 (exact match ranked)."""
    rates = [3.3e-4, 6.06e-4, 1.11e-3, 2.04e-3, 3.74e-3, 5.28e-3]
    probes = [
        Probe(
            trial=i,
            learning_rate=lr,
            per_device_batch_size=8,
            steps=4,
            values={4: 1.2 - 0.1 * i},
            metric={4: 0.0},
            pruned=True,
        )
        for i, lr in enumerate(rates)
    ]
    for p, (loss, em) in zip(probes[4:], ((0.41, 0.62), (0.38, 0.95)), strict=True):
        p.steps, p.pruned, p.values[36], p.metric[36] = 36, False, loss, em
    probes.append(
        Probe(
            trial=6,
            learning_rate=9.69e-3,
            per_device_batch_size=8,
            steps=4,
            values={4: 0.55},
            metric={4: 0.0},
            unstable=False,
            pruned=True,
            widened=True,
        )
    )
    return SearchReport(
        stage="sft",
        method="sft",
        objective="exact_match",
        space=rates,
        prior="LoRA on trained weights: ...",
        prior_lr=1.32e-3,
        widened=[9.69e-3],
        probe_steps=36,
        run_steps=74,
        warmup_steps=2,
        rungs=[4, 36],
        probes=probes,
        best_trial=5,
        budget_s=300,
        spent_s=280,
        validation_rows=21,
        comparisons=[
            RungComparison(
                step=4,
                ranked_by="heldout_loss",
                order=[6, 5, 4, 3, 2, 1, 0],
                going_on=[6, 5],
                outcome="on to step 36",
                reason="exact_match 0 to 0, noise band 0.095: "
                "exact_match does not separate them, held-out loss ranks them",
            ),
            RungComparison(
                step=36,
                ranked_by="exact_match",
                order=[5, 4],
                going_on=[5],
                outcome="chosen",
                reason="exact_match 0.62 to 0.95, noise band 0.095: exact_match ranks them",
            ),
        ],
        chosen=Recipe(learning_rate=5.28e-3, max_steps=74, per_device_batch_size=8, warmup_steps=2),
        choice_reason="the best at step 36: exact_match ranks them",
        continued_from=36,
    )


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A workspace (with a console token) holding a run whose train step finished with a search, and a run
    still training whose search is only in the graph so far."""
    root = tmp_path_factory.mktemp("search") / "ws"
    made = _cli(root, "web", "--new-token")
    assert made.returncode == 0, made.stderr
    ws = Workspace.open(root)
    runs = RunStore(ws.engine)
    report = _search().model_dump(mode="json")
    runs.create("done1", "train_model", {"name": "dates"})
    attempt = runs.start_attempt("done1", "train", 1, "training_engineer", "x")
    runs.finish_attempt(
        attempt,
        "completed",
        1.0,
        output={"outcome": "ok", "summary": "trained", "details": {"search": {"sft": report}}},
    )
    runs.set_status("done1", "completed")
    runs.create("live1", "train_model", {"name": "dates"})
    runs.start_attempt("live1", "train", 1, "training_engineer", "x")
    runs.set_status("live1", "running", current_step="train")
    record_run(ws.graph, "live1", workflow="train_model")
    step = record_step(ws.graph, "live1", "train", 1, persona="training_engineer")
    record_recipe(
        ws.graph,
        "live1/train/sft/recipe",
        run_id="live1",
        stage="sft",
        step_node=step,
        probe_nodes=[],
        facts={"chosen": report["chosen"], "decided_by": "offline", "reasons": [], "report": report},
    )
    return ws, made.stdout.strip()


def test_runs_show_json_has_each_stages_probes_rungs_objective_choice_and_reason(searched):
    ws, _ = searched
    found = run_view(RunStore(ws.engine), ApprovalStore(ws.engine), "done1")["search"]["sft"]
    assert found["objective"] == "exact_match" and found["rungs"] == [4, 36] and found["widened"] == [9.69e-3]
    assert found["chosen"]["learning_rate"] == 5.28e-3 and found["choice_reason"].startswith("the best at step 36")
    assert [c["ranked_by"] for c in found["comparisons"]] == ["heldout_loss", "exact_match"]
    top = next(p for p in found["probes"] if p["trial"] == 5)
    assert top == {
        "trial": 5,
        "learning_rate": 5.28e-3,
        "steps": 36,
        "heldout_loss": {"4": 0.7, "36": 0.38},
        "metric": {"4": 0.0, "36": 0.95},
        "pruned": False,
        "unstable": False,
        "widened": False,
        "seconds": 0.0,
    }
    # the CLI, on its stdlib reader: the same view, and one line in the human form
    shown = json.loads(_cli(ws.root, "runs", "show", "done1", "--json").stdout)["search"]
    assert shown == json.loads(json.dumps({"sft": found}))
    text = _cli(ws.root, "runs", "show", "done1").stdout
    assert "recipe search sft: lr 0.00528 among 7 probes, 1 beyond the prior's range: the best at step 36" in text
    assert run_view(RunStore(ws.engine), ApprovalStore(ws.engine), "live1")["search"] == {}  # its step has not ended


def _signed_in(ws, token: str) -> TestClient:
    client = TestClient(create_app(ws), base_url="http://127.0.0.1")
    form = client.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
    done = client.post(
        "/signin", data={"token": token, "name": "alice", "csrf": csrf, "next": "/runs"}, follow_redirects=False
    )
    assert done.status_code == 303
    return client


def test_the_run_page_shows_the_search_as_soon_as_it_chose_and_after_the_step(searched):
    ws, token = searched
    client = _signed_in(ws, token)
    for run_id in ("done1", "live1"):  # the finished step's output; the Decision node of a stage still training
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200
        html = page.text
        assert "<h2>Recipe search</h2>" in html and 'data-stage="sft"' in html
        assert '<b class="chosen-lr">lr 0.00528</b>: the best at step 36: exact_match ranks them' in html
        assert (
            '<tr class="probe chosen"><td>5</td><td>0.00528</td><td>0.000 / 0.7000</td><td>0.950 / 0.3800</td>' in html
        )
        assert '<tr class="probe widened"><td>6</td><td>0.00969</td>' not in html  # stopped at step 4: "stopped"
        assert '<tr class="probe stopped"><td>6</td><td>0.00969</td><td>0.000 / 0.5500</td><td></td>' in html
        assert (
            "step 4: exact_match 0 to 0, noise band 0.095: exact_match does not separate them, held-out loss "
            "ranks them; on to step 36: lr 0.00969, lr 0.00528" in html
        )
        assert "step 36: exact_match 0.62 to 0.95, noise band 0.095: exact_match ranks them; chosen: lr 0.00528" in html
