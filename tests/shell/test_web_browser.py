"""The web console in a real Chromium (Debian's, driven by Playwright): a person signs in, approves a
waiting run with a note, watches it train (its loss curve grows), sees the decision in the graph,
rejects the run's second approval; a wrong token is refused and a second decision names the first.

Real processes throughout: the run is `trainteam execute-workflow` in a subprocess, the console is
`trainteam web --port 0` in another. Screenshots go to $TRAINTEAM_TEST_ARTIFACTS (else tmp_path).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import expect, sync_playwright

from trainteam.workflows.engine.store import ApprovalStore
from trainteam.workspace import Workspace

TASK = {
    "name": "tiny-web",
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64},
    "data": {"demo": "addition", "n_train": 400, "n_eval": 16, "max_operand": 20},
    "tokenizer": {"vocab_size": 280},
    "stages": ["pretrain"],
    "training": {"pretrain": {"max_steps": 700, "per_device_batch_size": 8, "seq_len": 32, "save_steps": 350,
                              "learning_rate": 0.003}},
    "gates": {"pretrain": {"metric": "heldout_loss", "max": 50.0}},
    "budget": {"max_wall_minutes": 30},
    "require_approval": ["train"],  # register_model asks by itself (the tool is gated)
}


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TRAINTEAM_THREADS": "1"}


def _spawn(ws: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trainteam.cli", "-w", str(ws), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _pending(ws: Path) -> list[dict]:
    if not (ws / "trainteam.db").exists():
        return []
    return ApprovalStore(Workspace.open(ws).engine).list("pending")


@pytest.fixture
def artifacts(tmp_path) -> Path:
    folder = Path(os.environ.get("TRAINTEAM_TEST_ARTIFACTS") or tmp_path) / "web-console"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _console(ws: Path, processes) -> str:
    token = subprocess.run([sys.executable, "-m", "trainteam.cli", "-w", str(ws), "web", "--new-token"],
                           capture_output=True, text=True, timeout=600, env=_env(), check=True).stdout.strip()
    server = _spawn(ws, "web", "--port", "0")
    processes.append(server)
    line = server.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    assert found, (line, server.stderr.read() if server.poll() is not None else "")
    return token, f"http://127.0.0.1:{found.group(1)}"


def _sign_in(page, base: str, token: str, name: str) -> None:
    page.goto(base + "/runs")
    page.fill("#token", token)
    page.fill("#name", name)
    page.click("#signin")
    expect(page.locator("#who")).to_have_text(name)


def test_a_person_approves_a_waiting_run_and_watches_it_train(tmp_path, artifacts, processes):
    ws = tmp_path / "ws"
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(TASK))
    run = _spawn(ws, "execute-workflow", "train_model", "--task", str(tmp_path / "task.yaml"), "--run-id", "web1")
    processes.append(run)
    token, base = _console(ws, processes)
    first = _wait(lambda: _pending(ws), 60, "the run to wait for its go-ahead to train")[0]
    assert (first["step"], first["action"]) == ("train", "run_step")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        alice, bob = browser.new_context().new_page(), browser.new_context().new_page()

        alice.goto(base + "/runs")  # no session: the sign-in page, and a wrong token is refused
        expect(alice.locator("h1")).to_have_text("Sign in")
        alice.fill("#token", token[:-3] + "abc")
        alice.fill("#name", "alice")
        alice.click("#signin")
        expect(alice.locator("#signin-error")).to_have_text("Wrong access token.")
        alice.screenshot(path=artifacts / "1-wrong-token.png")

        _sign_in(alice, base, token, "alice")
        row = alice.locator('tr[data-run="web1"]')
        expect(row.locator(".status")).to_have_text("waiting_approval")
        alice.screenshot(path=artifacts / "2-runs.png")

        _sign_in(bob, base, token, "bob")
        bob.goto(base + "/approvals")  # bob's page is open before alice decides
        alice.goto(base + "/approvals")
        section = alice.locator(f'section.pending[data-approval="{first["id"]}"]')
        expect(section.locator("h3")).to_contain_text("run_step")
        section.locator("textarea[name=note]").fill("go ahead, small run")
        alice.screenshot(path=artifacts / "3-approvals.png")
        section.locator("button.approve").click()
        expect(alice.locator("#decided")).to_contain_text(first["id"])
        done = alice.locator(f'section.decided[data-approval="{first["id"]}"]')
        expect(done.locator(".verdict")).to_have_text("approved")
        expect(done.locator(".decided-by")).to_have_text("alice")

        # bob's stale page: the decision is final, and his attempt names alice and when she decided
        bob.locator(f'section.pending[data-approval="{first["id"]}"] button.reject').click()
        decided_at = ApprovalStore(Workspace.open(ws).engine).get(first["id"])["decided_at"]
        expect(bob.locator("#decision-error")).to_have_text(
            f"approval {first['id']} was already approved by alice at {decided_at}")
        bob.screenshot(path=artifacts / "4-second-decision.png")

        _watch_the_curve_grow(alice, base, artifacts)
        second = _wait(lambda: _pending(ws), 60, "the register_model approval")[0]
        assert second["action"] == "register_model"

        alice.goto(base + "/approvals")
        section = alice.locator(f'section.pending[data-approval="{second["id"]}"]')
        section.locator("textarea[name=note]").fill("exact match 0: not this one")
        section.locator("button.reject").click()
        expect(alice.locator(f'section.decided[data-approval="{second["id"]}"] .verdict')).to_have_text("rejected")
        assert run.wait(timeout=600) == 1  # a rejected registration fails the run

        alice.goto(base + "/runs/web1")
        expect(alice.locator("#run-status")).to_have_text("failed")
        expect(alice.locator("#run-error")).to_contain_text("rejected by alice")
        expect(alice.locator('li[data-step="train"] .status')).to_have_text("completed")
        expect(alice.locator('li[data-step="train"] .persona')).to_have_text("training_engineer")
        alice.screenshot(path=artifacts / "6-run-rejected.png", full_page=True)

        _see_the_decision_in_the_graph(alice, base, first["id"], artifacts)
        browser.close()


def _watch_the_curve_grow(page, base: str, artifacts: Path) -> None:
    page.goto(base + "/runs/web1")
    curves = page.locator("#curves")
    expect(curves.locator('.chart[data-metric="loss"]')).to_be_visible(timeout=30_000)
    seen = int(curves.get_attribute("data-loss-points"))
    # streamed into the same page (the console's CSP forbids eval, so the test polls the attribute)
    grown = _wait(lambda: (n := int(curves.get_attribute("data-loss-points") or 0)) > seen and n, 30,
                  "the loss curve to get more points")
    assert grown > seen > 0
    expect(curves.locator('.chart[data-metric="learning_rate"] polyline')).to_have_count(1)
    page.screenshot(path=artifacts / "5-curve-growing.png", full_page=True)


def _see_the_decision_in_the_graph(page, base: str, approval_id: str, artifacts: Path) -> None:
    page.goto(base + "/approvals")
    page.locator(f'section.decided[data-approval="{approval_id}"] a', has_text="in the graph").click()
    expect(page.locator("#graph-node")).to_have_text(f"Decision:approval/{approval_id}")
    picture = page.locator("#lineage svg")
    expect(picture.locator('[data-node="Person:alice"]')).to_have_count(1)
    expect(picture.locator(f'[data-node="Decision:approval/{approval_id}"]')).to_contain_text("approved by alice")
    expect(picture.locator(f'[data-node="Approval:{approval_id}"]')).to_have_count(1)
    page.screenshot(path=artifacts / "7-graph.png", full_page=True)
    picture.locator('[data-node="Person:alice"]').click()  # each box leads to its own lineage
    expect(page.locator("#graph-node")).to_have_text("Person:alice")
