"""The web console under load: does watching a run slow the run down?

A tiny model trains (one torch thread) into a run's folder in a workspace served by a real
`trainteam web` process. In the loaded rounds another process holds 20 browser-like clients, each
loading the run page once a second, and 4 clients streaming the run's curves (Server-Sent Events,
the run page's live chart); in the quiet rounds the console runs with no clients. Rounds are
interleaved ABBA (quiet, loaded, loaded, quiet, ...) so drift in the machine's load hits both alike.

Step time: the gaps between consecutive ``log`` events of the round's ``run-history.jsonl`` (one per
step), the first steps left out (warm-up); each round's median, and the ratio of the loaded rounds'
median to the quiet rounds'. Goal: ≤ 1.05. The 1-minute load average is printed per round, and the
CPU the console process used during the round (in cores): on a shared machine the step-time ratio
is noisy, the console's CPU share says what the clients cost.

    .venv/bin/python benchmarks/web_load.py [--rounds 8] [--steps 200]

Ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

import psutil

RUN = "bench"
POLLERS, STREAMERS, POLL_S, WARMUP = 20, 4, 1.0, 10


# -- the clients (a process of their own: `web_load.py --clients PORT TOKEN`) -----------------------

def _sign_in(port: int, token: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/signin")
    res = conn.getresponse()
    html, cookie = res.read().decode(), res.getheader("set-cookie", "").split(";")[0]
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    body = urlencode({"token": token, "name": "load", "csrf": csrf, "next": "/runs"})
    conn.request("POST", "/signin", body, {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie})
    res = conn.getresponse()
    res.read()
    session = [c for c in res.headers.get_all("set-cookie") if c.startswith("trainteam_session=")]
    assert res.status == 303 and session, f"sign-in failed: {res.status}"
    return session[0].split(";")[0]


def _poll(port: int, cookie: str, stats: dict, stop: threading.Event) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while not stop.is_set():
        t0 = time.perf_counter()
        conn.request("GET", f"/runs/{RUN}", headers={"Cookie": cookie})
        res = conn.getresponse()
        res.read()
        stats["pages"] += 1
        stats["errors"] += res.status != 200
        stats["page_s"].append(time.perf_counter() - t0)
        stop.wait(max(0.0, POLL_S - (time.perf_counter() - t0)))


def _stream(port: int, cookie: str, stats: dict, stop: threading.Event) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", f"/api/runs/{RUN}/curves/stream", headers={"Cookie": cookie, "Accept": "text/event-stream"})
    res = conn.getresponse()
    stats["errors"] += res.status != 200
    while not stop.is_set():
        line = res.fp.readline()
        if not line:
            break
        stats["events"] += line.startswith(b"event: curves")


def clients(port: int, token: str) -> None:
    cookie = _sign_in(port, token)
    stats = {"pages": 0, "events": 0, "errors": 0, "page_s": []}
    stop = threading.Event()
    threads = [threading.Thread(target=_poll, args=(port, cookie, stats, stop), daemon=True) for _ in range(POLLERS)]
    threads += [threading.Thread(target=_stream, args=(port, cookie, stats, stop), daemon=True) for _ in range(STREAMERS)]
    for t in threads:
        t.start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    while not stop.is_set():
        stop.wait(0.2)
    page_s = sorted(stats.pop("page_s")) or [0.0]
    print(json.dumps({**stats, "page_p50_s": page_s[len(page_s) // 2], "page_p95_s": page_s[int(len(page_s) * .95)]}),
          flush=True)


# -- the run and the rounds -----------------------------------------------------------------------

def _console(ws: Path) -> tuple[subprocess.Popen, int, str]:
    cli = [sys.executable, "-m", "trainteam.cli", "-w", str(ws), "web"]
    token = subprocess.run(cli + ["--new-token"], capture_output=True, text=True, check=True).stdout.strip()
    server = subprocess.Popen(cli + ["--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = int(re.search(r"127\.0\.0\.1:(\d+)/", server.stdout.readline()).group(1))
    return server, port, token


def _step_gaps(history: Path) -> list[float]:
    times = [e["time"] for e in map(json.loads, history.read_text().splitlines())
             if e.get("event") == "log" and "loss" in e]
    return [b - a for a, b in zip(times[WARMUP:], times[WARMUP + 1:])]


def _round(ws: Path, k: int, steps: int, tok, data: Path) -> list[float]:
    from trainteam.trainers import ModelSpec, TrainConfig, build_model, train

    out = ws / "checkpoints" / RUN / f"round-{k}"
    cfg = TrainConfig(output_dir=out, max_steps=steps, per_device_batch_size=8, learning_rate=3e-3, seq_len=32,
                      logging_steps=1)
    model = build_model(ModelSpec(hidden_size=64, num_layers=2, num_heads=2, max_position_embeddings=64), tok)
    train("pretrain", cfg, model, data, tokenizer=tok, progress=False)
    return _step_gaps(out / "run-history.jsonl")


def _setup(ws: Path):
    import torch

    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
    from trainteam.trainers import TokenizerConfig, load_tokenizer, train_tokenizer
    from trainteam.workflows.store import RunStore
    from trainteam.workspace import Workspace

    torch.set_num_threads(1)
    store = RunStore(Workspace.open(ws).engine)
    store.create(RUN, "train_model", {"name": "web-load"})
    store.set_status(RUN, "running", current_step="train")
    rows, _ = generate_arithmetic(ArithmeticConfig(n_train=600, n_eval=20, seed=1))
    data = ws / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok_dir = train_tokenizer((r["prompt"] + r["completion"] for r in rows), TokenizerConfig(vocab_size=300), ws / "tok")
    return load_tokenizer(tok_dir), data


def main(rounds: int, steps: int) -> dict:
    ws = Path(tempfile.mkdtemp(prefix="web-load-")) / "ws"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tok, data = _setup(ws)
    server, port, token = _console(ws)
    order = [("quiet", "loaded", "loaded", "quiet")[i % 4] for i in range(rounds)]
    medians: dict[str, list[float]] = {"quiet": [], "loaded": []}
    client_stats, loads, server_cpu = [], [], {"quiet": [], "loaded": []}
    served = psutil.Process(server.pid)
    try:
        _round(ws, -1, 30, tok, data)  # warm the process up (imports, first allocations): not counted
        for k, kind in enumerate(order):
            crowd = None
            if kind == "loaded":
                crowd = subprocess.Popen([sys.executable, __file__, "--clients", str(port), token],
                                         stdout=subprocess.PIPE, text=True)
                assert crowd.stdout.readline().strip() == "ready"
                time.sleep(1.5)  # every client has made its first request
            cpu0, t0 = sum(served.cpu_times()[:2]), time.perf_counter()
            gaps = _round(ws, k, steps, tok, data)
            server_cpu[kind].append((sum(served.cpu_times()[:2]) - cpu0) / (time.perf_counter() - t0))
            if crowd is not None:
                crowd.send_signal(signal.SIGTERM)
                client_stats.append(json.loads(crowd.communicate(timeout=30)[0].strip().splitlines()[-1]))
            medians[kind].append(statistics.median(gaps))
            loads.append(round(os.getloadavg()[0], 2))
            print(f"round {k} {kind:6s}: median step {medians[kind][-1] * 1000:.2f} ms over {len(gaps)} steps, "
                  f"load {loads[-1]}, console {server_cpu[kind][-1]:.2f} cores" + (f", clients {client_stats[-1]}" if crowd is not None else ""), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    quiet, loaded = statistics.median(medians["quiet"]), statistics.median(medians["loaded"])
    return {"benchmark": "web_load", "rounds": rounds, "steps": steps, "pollers": POLLERS, "streamers": STREAMERS,
            "quiet_step_ms": round(quiet * 1000, 3), "loaded_step_ms": round(loaded * 1000, 3),
            "ratio": round(loaded / quiet, 4), "goal_ratio": 1.05, "met": loaded / quiet <= 1.05,
            "round_medians_ms": {k: [round(v * 1000, 3) for v in vs] for k, vs in medians.items()},
            "load_average_1m": loads, "cores": os.cpu_count(),
            "console_cpu_cores": {k: [round(v, 3) for v in vs] for k, vs in server_cpu.items()},
            "pages_per_round": [c["pages"] for c in client_stats], "sse_events_per_round": [c["events"] for c in client_stats],
            "client_errors": sum(c["errors"] for c in client_stats),
            "page_p50_s": max((c["page_p50_s"] for c in client_stats), default=None)}


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--clients":
        clients(int(sys.argv[2]), sys.argv[3])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    result = main(args.rounds, args.steps)
    print("RESULT " + json.dumps(result))
