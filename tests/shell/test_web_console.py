"""The web console over HTTP (``trainteam web``): the access token, sessions, CSRF, the pages' data.

Starlette's TestClient drives the real app on a real workspace; the token comes from the real CLI.
The browser scenario (a run approved from the page, its curve growing) is tests/shell/test_web_browser.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from trainteam.web.access import ACCESS_FILE
from trainteam.web.app import create_app
from trainteam.workflows.engine.approval_ids import short_id
from trainteam.workflows.engine.approvals import request as request_approval
from trainteam.workflows.engine.store import ApprovalStore, RunStore
from trainteam.workflows.report.evidence import (
    GateVerdict,
    RegisterEvidence,
    checkpoint_evidence,
    lineage_evidence,
    with_spike_curve,
)
from trainteam.workspace import Workspace


def _cli(ws: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainteam.cli", "-w", str(ws), *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    """A workspace with a token made by `trainteam web --new-token`, a run and an approval with evidence."""
    root = tmp_path_factory.mktemp("web") / "ws"
    made = _cli(root, "web", "--new-token")
    assert made.returncode == 0, made.stderr
    ws = Workspace.open(root)
    RunStore(ws.engine).create("r1", "train_model", {"name": "tiny"})
    RunStore(ws.engine).set_status("r1", "waiting_approval", current_step="register_model")
    request_approval(
        ws,
        run_id="r1",
        step="register_model",
        visit=1,
        action="register_model",
        proposed={"name": "tiny-model"},
        requested_by="ml_orchestrator",
        evidence={
            "gates": {"sft": {"passed": True, "exact_match": 0.75}},
            "loss_curve": [[1, 2.5], [2, 2.1], [3, 1.7], [4, 1.2]],
            "checkpoint": {"sha256": "ab" * 32, "path": "/x/final"},
            "lineage": [{"kind": "DatasetVersion", "id": "d1"}, {"kind": "Corpus", "id": "c1"}],
        },
    )
    return ws, made.stdout.strip()


def _client(ws) -> TestClient:
    return TestClient(create_app(ws), base_url="http://127.0.0.1")


def _csrf(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def _signed_in(ws, token: str, name: str = "alice") -> TestClient:
    client = _client(ws)
    form = client.get("/signin")
    done = client.post(
        "/signin",
        data={"token": token, "name": name, "csrf": _csrf(form.text), "next": "/runs"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == "/runs"
    return client


def test_without_a_session_every_page_is_the_sign_in_page(console):
    ws, _ = console
    client = _client(ws)
    for path in ("/runs", "/runs/r1", "/approvals", "/graph?node=Run:r1", "/runs/r1/transcripts"):
        page = client.get(path)
        assert page.status_code == 401 and "<h1>Sign in</h1>" in page.text, path
        shown = re.sub(r'name="(next|csrf)" value="[^"]*"', "", page.text)  # a random token may hold "r1"
        assert "r1" not in shown  # nothing of the run leaks
    api = client.get("/api/runs/r1/curves")
    assert api.status_code == 401 and api.json() == {"error": "sign in first"}


def test_a_wrong_token_is_refused_and_the_right_one_opens_a_strict_httponly_session(console):
    ws, token = console
    client = _client(ws)
    form = client.get("/signin")
    wrong = client.post(
        "/signin",
        data={"token": token[:-2] + "xx", "name": "mallory", "csrf": _csrf(form.text)},
        follow_redirects=False,
    )
    assert wrong.status_code == 401 and "Wrong access token." in wrong.text
    assert "trainteam_session" not in wrong.headers.get("set-cookie", "")
    assert client.get("/runs").status_code == 401

    form = client.get("/signin")
    right = client.post(
        "/signin", data={"token": token, "name": "alice", "csrf": _csrf(form.text)}, follow_redirects=False
    )
    cookie = [c for c in right.headers.get_list("set-cookie") if c.startswith("trainteam_session=")][0]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    runs = client.get("/runs")
    assert runs.status_code == 200 and 'data-run="r1"' in runs.text and "alice" in runs.text


def test_posts_without_the_csrf_token_are_refused(console):
    ws, token = console
    client = _client(ws)
    client.get("/signin")
    assert client.post("/signin", data={"token": token, "name": "eve"}).status_code == 403  # sign-in form too
    assert client.get("/runs").status_code == 401

    alice = _signed_in(ws, token)
    approval = ApprovalStore(ws.engine).list("pending")[0]["id"]
    for data in ({"decision": "approve", "note": "x"}, {"decision": "approve", "csrf": "forged"}):
        refused = alice.post(f"/approvals/{approval}/decide", data=data)
        assert refused.status_code == 403 and "CSRF" in refused.text
    assert ApprovalStore(ws.engine).get(approval)["status"] == "pending"  # nothing was decided
    other = _signed_in(ws, token, "bob")  # another session's token is not this session's
    bob_csrf = _csrf(other.get("/approvals").text)
    assert (
        alice.post(f"/approvals/{approval}/decide", data={"decision": "approve", "csrf": bob_csrf}).status_code == 403
    )
    assert alice.post("/signout", data={}).status_code == 403


def test_only_the_token_hash_is_stored(console):
    ws, token = console
    stored = json.loads((ws.root / ACCESS_FILE).read_text())
    assert stored["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert (ws.root / ACCESS_FILE).stat().st_mode & 0o077 == 0
    for path in ws.root.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


def test_a_new_token_replaces_the_old_one(tmp_path):
    root = tmp_path / "ws"
    first = _cli(root, "web", "--new-token").stdout.strip()
    second = _cli(root, "web", "--new-token").stdout.strip()
    assert first != second and second.startswith("ttw_")
    ws = Workspace.open(root)
    client = _client(ws)
    form = client.get("/signin")
    old = client.post("/signin", data={"token": first, "name": "a", "csrf": _csrf(form.text)})
    assert old.status_code == 401
    _signed_in(ws, second)


def test_serving_needs_a_token_first(tmp_path):
    proc = _cli(tmp_path / "ws", "web", "--port", "0")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: web: no access token yet; run `trainteam web --new-token` first and keep what it prints"
    ]


def test_approval_evidence_is_shown_as_sections_and_a_curve(console):
    ws, token = console
    page = _signed_in(ws, token).get("/approvals")
    assert page.status_code == 200
    section = page.text[page.text.index('class="approval pending"') :]
    assert "<dt>gates</dt>" in section and "<dt>exact_match</dt><dd>0.75</dd>" in section
    assert '<svg class="sparkline"' in section and "4 points, 2.5 → 1.2" in section
    assert "<th>kind</th>" in section and "<th>id</th>" in section and "<td>DatasetVersion</td>" in section
    assert 'name="csrf"' in section and 'value="approve"' in section and 'value="reject"' in section


def test_pages_refuse_other_hosts_and_carry_a_strict_content_policy(console):
    ws, token = console
    client = _signed_in(ws, token)
    page = client.get("/runs")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert '<script src="/static/console.js"' in page.text and "cdn" not in page.text.lower()
    assert client.get("/static/console.js").status_code == 200
    rebound = client.get("/runs", headers={"host": "evil.example"})
    assert rebound.status_code == 400


def test_the_lineage_picture_links_each_node(console):
    ws, token = console
    page = _signed_in(ws, token).get("/graph", params={"node": "Approval:r1.register_model.1.register_model"})
    assert page.status_code == 200
    svg = page.text[page.text.index('<svg class="lineage"') : page.text.index("</svg>")]
    assert 'data-node="Approval:r1.register_model.1.register_model"' in svg
    assert 'data-node="Step:r1/register_model#1"' in svg and "requested_by" in svg
    missing = _signed_in(ws, token).get("/graph", params={"node": "Model:nope"})
    assert missing.status_code == 404 and "does not exist" in missing.text


def test_curves_grow_from_the_run_history_training_writes_and_stream_until_the_run_ends(console):
    from trainteam.trainers.training.telemetry import RunHistory  # the writer training uses (Telemetry.on_log)

    ws, token = console
    store = RunStore(ws.engine)
    store.create("g1", "train_model", {"name": "grpo"})
    store.set_status("g1", "running", current_step="align")
    history = RunHistory(ws.dir("checkpoints") / "g1" / "grpo-v1")
    history.record("start", method="grpo", resume_step=0)
    for step in (1, 2):
        history.record("log", step=step, loss=0.5 / step, learning_rate=1e-5, reward=0.2 * step, epoch=0.1)
    client = _signed_in(ws, token)
    first = client.get("/api/runs/g1/curves").json()
    assert first["points"] == 6
    assert {(s["folder"], s["metric"]): s["points"] for s in first["series"]}[("grpo-v1", "reward")] == [
        [1, 0.2],
        [2, 0.4],
    ]
    with history.path.open("a") as fh:  # a line still being written is not read half
        fh.write('{"event": "log", "time": 1, "step": 3, "loss": 0.1')
    assert client.get("/api/runs/g1/curves").json()["points"] == 6
    with history.path.open("a") as fh:
        fh.write(', "reward": 0.9}\n')
    grown = client.get("/api/runs/g1/curves").json()
    assert grown["points"] == 8 and [3, 0.9] in [
        p for s in grown["series"] if s["metric"] == "reward" for p in s["points"]
    ]

    store.set_status("g1", "completed")
    with client.stream("GET", "/api/runs/g1/curves/stream") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        body = "".join(stream.iter_text())
    events = [block.split("\n") for block in body.strip().split("\n\n")]
    assert [e[0] for e in events] == ["event: curves", "event: end"]
    assert json.loads(events[0][1].removeprefix("data: "))["points"] == 8 and events[1][1] == "data: completed"
    refused = client.get("/api/runs/-x/curves")
    assert refused.status_code == 400 and "run id" in refused.json()["error"]


def test_the_run_state_the_page_follows_is_the_run_page_s_own(console):
    """A run marked running whose process is gone reads `interrupted` on its page and in the state its
    script polls (else the page would reload for ever on the difference)."""
    ws, token = console
    store = RunStore(ws.engine)
    store.create("dead1", "train_model", {"name": "tiny"})
    store.set_status("dead1", "running", current_step="train", executor_id=f"{socket.gethostname()}:4194000:gone")
    client = _signed_in(ws, token)
    page = client.get("/runs/dead1")
    assert 'data-status="interrupted"' in page.text
    assert client.get("/api/runs/dead1").json()["status"] == "interrupted"
    assert client.get("/api/runs/nope").status_code == 404


def test_the_live_stream_sends_each_point_once(tmp_path):
    """After its first event the stream sends only the points past those it sent (a series' offset)."""
    from trainteam.web.curves import CurveReader

    folder = tmp_path / "checkpoints" / "r9" / "sft-v1"
    folder.mkdir(parents=True)
    lines = [json.dumps({"event": "log", "time": 0, "step": s, "loss": 1.0 / s}) for s in (1, 2, 3)]
    (folder / "run-history.jsonl").write_text("\n".join(lines[:2]) + "\n")
    reader, sent = CurveReader(tmp_path / "checkpoints"), {}
    first = reader.read("r9").after(sent)
    assert [(s.offset, s.points) for s in first.series] == [(0, [(1, 1.0), (2, 0.5)])]
    assert reader.read("r9").after(sent).series == []  # nothing new, nothing sent
    with (folder / "run-history.jsonl").open("a") as fh:
        fh.write(lines[2] + "\n")
    more = reader.read("r9").after(sent)
    assert [(s.offset, s.points) for s in more.series] == [(2, [(3, 1.0 / 3)])] and more.points == 3


# The runs the judged approvals belong to, as DBOS workflows waiting in a queue no worker serves: a
# decision's message needs its run's workflow to exist (the system database made by a real launch).
_WAITING_RUNS = """
import sys
from dbos import DBOS, DBOSClient
from trainteam.workflows.engine.durable import dbos_config
from trainteam.workspace import Workspace
ws = Workspace.open(sys.argv[1])
DBOS(config=dbos_config(ws, "test-web-console"))
DBOS.launch()
DBOS.destroy()
client = DBOSClient(system_database_url=ws.dbos_database_url)
for run_id in sys.argv[2:]:
    client.enqueue({"queue_name": "nobody-serves", "workflow_name": "train_model", "workflow_id": run_id})
client.destroy()
"""


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """A workspace whose approvals carry the evidence runs write (workflows.evidence): a registration
    with a real checkpoint folder and its lineage in the graph, a spike with its curve, a budget overrun."""
    root = tmp_path_factory.mktemp("judged") / "ws"
    made = _cli(root, "web", "--new-token")
    assert made.returncode == 0, made.stderr
    ws = Workspace.open(root)
    folder = ws.dir("checkpoints") / "r2" / "sft-v1" / "final"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      weights")
    g = ws.graph
    corpus = g.add_node("Corpus", "c1", path="/data/corpus.jsonl")
    data = g.link("DatasetVersion", "d1", [("derived_from", corpus)], path="/data/d1")
    ckpt = g.link("Checkpoint", "w1", [("trained_on", data)], path=str(folder))
    registration = RegisterEvidence(
        stage="sft",
        metrics={"exact_match": 0.0, "heldout_loss": 1.25},
        gates=[
            GateVerdict(step="gate_sft", stage="sft", passed=True, promoted=True, checked=["heldout_loss"]),
            GateVerdict(
                step="gate_final",
                stage="sft",
                passed=False,
                promoted=False,
                checked=["exact_match"],
                reasons=["exact_match 0 < 0.5"],
            ),
        ],
        checkpoint=checkpoint_evidence(folder, ckpt),
        lineage=lineage_evidence(g, ckpt),
    )
    runs = RunStore(ws.engine)
    for run_id in ("r2", "r3", "r4"):
        runs.create(run_id, "train_model", {"name": "tiny"})
    waiting = subprocess.run(
        [sys.executable, "-c", _WAITING_RUNS, str(root), "r2", "r3", "r4"], capture_output=True, text=True, timeout=600
    )
    assert waiting.returncode == 0, waiting.stderr
    ask = {"visit": 1, "requested_by": "ml_orchestrator"}
    request_approval(
        ws,
        run_id="r2",
        step="register_model",
        action="register_model",
        proposed={"name": "tiny"},
        evidence={"summary": "gate_final failed", "register_model": registration.model_dump(mode="json")},
        **ask,
    )
    spike = {"stage": "sft", "spike_step": 30}
    losses = {"sft": [[s, 2.0 - s / 50 + (3.0 if s == 30 else 0.0)] for s in range(1, 51)]}
    request_approval(
        ws,
        run_id="r3",
        step="train",
        action="restart_after_spike_1",
        proposed=spike,
        evidence=with_spike_curve(
            {
                "monitor": {
                    "step": 30,
                    "metric": "loss",
                    "value": 4.4,
                    "window_mean": 1.42,
                    "window_std": 0.01,
                    "z": 298.0,
                }
            },
            spike,
            losses,
        ),
        **ask,
    )
    request_approval(
        ws,
        run_id="r4",
        step="train",
        action="exceed_budget_1",
        proposed={"continue_with": "train", "extra_minutes": 5.0},
        evidence={
            "spent": {"seconds": 660.0, "cost_usd": 0.0},
            "allowed_minutes": 10.0,
            "budget": {"max_wall_minutes": 10.0, "max_cost_usd": None},
        },
        **ask,
    )
    cards = {r["run_id"]: r for r in ApprovalStore(ws.engine).list()}
    return ws, made.stdout.strip(), cards, folder


def _section(html: str, approval: dict) -> str:
    start = html.index(f'data-approval="{approval["id"]}"')
    return html[start : html.index("</section>", start)]


def test_a_registration_shows_its_metrics_gates_checkpoint_and_lineage(judged):
    ws, token, rows, folder = judged
    client = _signed_in(ws, token)
    section = _section(client.get("/approvals").text, rows["r2"])
    assert re.search(r'<tr data-metric="exact_match"><td>exact_match</td><td>0</td></tr>', section)
    assert '<tr data-metric="heldout_loss"><td>heldout_loss</td><td>1.25</td></tr>' in section
    verdicts = re.findall(r'class="gate gate-(\w+)" data-gate="(\w+)"', section)
    assert verdicts == [("pass", "gate_sft"), ("fail", "gate_final")] and "exact_match 0 &lt; 0.5" in section
    sha = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert (
        f'<code class="checkpoint-path">{folder}</code>' in section and f'<code class="sha256">{sha}</code>' in section
    )
    links = re.findall(r'class="lineage-link" href="(/graph\?node=[^"]+)">', section)
    assert "/graph?node=DatasetVersion%3Ad1" in links and "/graph?node=Corpus%3Ac1" in links
    picture = client.get(links[links.index("/graph?node=Corpus%3Ac1") - 1])  # the dataset's row links its lineage
    assert picture.status_code == 200 and 'data-node="Corpus:c1"' in picture.text
    assert "<dt>summary</dt><dd>gate_final failed</dd>" in section  # the rest of the evidence as it was stored
    assert "<dt>register_model</dt>" not in section  # not also dumped raw


def test_a_spike_shows_the_curve_around_it_with_the_spike_marked(judged):
    ws, token, rows, _ = judged
    section = _section(_signed_in(ws, token).get("/approvals").text, rows["r3"])
    svg = section[section.index('<svg class="marked-curve"') : section.index("</svg>")]
    assert svg.count('r="2"/>') == 16  # 12 logged points before the spike, the spike, 3 after
    assert '<g class="mark" data-x="30" data-y="4.4">' in svg and "spike at 30: 4.4" in svg
    assert "z 298.0" in section and "window mean of 1.42" in section
    assert "<dt>monitor</dt>" not in section and "<dt>curve</dt>" not in section


def test_a_budget_overrun_shows_the_spend_against_what_was_allowed(judged):
    ws, token, rows, _ = judged
    section = _section(_signed_in(ws, token).get("/approvals").text, rows["r4"])
    assert '<dd class="spent">11.0 min</dd>' in section and '<dd class="allowed">10.0 min</dd>' in section
    assert 'value="660.0"' in section and "110 % of the allowed time" in section
    assert '<dd class="extra">5.0 min</dd>' in section


def test_short_ids_name_approvals_in_the_page_and_its_urls(judged):
    ws, token, rows, _ = judged
    client = _signed_in(ws, token, "carol")
    approval = rows["r4"]
    short = short_id(approval["id"])
    section = _section(client.get("/approvals").text, approval)
    assert f'<a class="short-id" href="/approvals/{short}">{short}</a>' in section
    assert f'action="/approvals/{short}/decide"' in section
    for ref in (short, short[:6], approval["id"]):
        one = client.get(f"/approvals/{ref}")
        assert one.status_code == 200 and f"<h1>Approval {short}" in one.text, ref
    assert client.get("/approvals/0000000000").status_code == 404
    assert client.get("/approvals/-x").status_code == 400
    csrf = _csrf(client.get(f"/approvals/{short}").text)
    done = client.post(
        f"/approvals/{short}/decide", data={"decision": "reject", "note": "no", "csrf": csrf}, follow_redirects=False
    )
    assert done.status_code == 303 and done.headers["location"] == f"/approvals?decided={short}"
    row = ApprovalStore(ws.engine).get(approval["id"])
    assert (row["status"], row["decided_by"], row["note"]) == ("rejected", "carol", "no")
    notice = client.get(done.headers["location"]).text
    assert f"Decision recorded for {short} ({approval['id']})." in notice


def test_the_run_page_is_built_once_per_half_second_for_all_its_viewers():
    from trainteam.web.page_cache import ShortLived

    now = [0.0]
    builds: list[int] = []
    pages = ShortLived(ttl_s=0.5, clock=lambda: now[0])

    def build() -> int:
        builds.append(1)
        return len(builds)

    assert [pages.get("r1", build) for _ in range(20)] == [1] * 20  # twenty viewers, one build
    now[0] = 0.6
    assert pages.get("r1", build) == 2 and pages.get("r2", build) == 3
    pages.clear()  # a decision made in the console
    assert pages.get("r1", build) == 4

    def broken() -> int:
        raise RuntimeError("database went away")

    now[0] = 2.0
    with pytest.raises(RuntimeError):
        pages.get("r3", broken)
    assert pages.get("r3", build) == 5  # a failed build is not kept
