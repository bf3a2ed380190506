"""The web console under load: does watching a run slow the run down?

A tiny model trains (one torch thread) into a run's folder in a workspace served by a real
`trainteam web` process. Another process holds 20 browser-like clients, each loading the run page
once a second, and 4 clients streaming the run's curves (Server-Sent Events, the run page's live
chart). While one long training run goes on, the clients are switched on and off in windows of a few
seconds in ABBA blocks (quiet, loaded, loaded, quiet): switched off, they send nothing and hold no
stream. Short windows inside one run cancel what made whole-run rounds unreadable on a shared
machine: the neighbours' load drifts over tens of seconds, and each run's own set-up varies.

Step time: the gaps between consecutive ``log`` events of ``run-history.jsonl`` (one per step); a
window's median over the steps that end in it, its first second left out (the switch settling).
Each block gives one ratio (its loaded windows' median step over its quiet windows'); the estimate
is the blocks' geometric mean, its 95 % interval the wider of a bootstrap over the blocks
(percentile) and Student's t on the log ratios. Goal: ≤ 1.05. The output says whether the interval
resolves it (met: its top ≤ 1.05; missed: its bottom > 1.05; else unresolved). The console's cost is
also given directly, as the CPU seconds its process used per second of training, quiet and loaded
(and the clients' process's, which shares the machine), with the 1-minute load average.

    .venv/bin/python benchmarks/web_load.py [--seconds 240] [--window 4]

Ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from itertools import pairwise
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import psutil
from scipy import stats

RUN = "bench"
POLLERS, STREAMERS, POLL_S, WARMUP = 20, 4, 1.0, 10
SETTLE_S = 1.0  # left out at the start of each window
GOAL, BLOCK, DRAWS = 1.05, ("quiet", "loaded", "loaded", "quiet"), 10_000


# -- the clients (a process of their own: `web_load.py --clients PORT TOKEN`; SIGUSR1 on, SIGUSR2 off) -------


class Crowd:
    """The clients' shared state: on or off, the open streams (closed when switched off), counters."""

    def __init__(self, port: int, cookie: str):
        self.port, self.cookie = port, cookie
        self.on, self.stop = threading.Event(), threading.Event()
        self.streams: list[http.client.HTTPConnection] = []
        self.lock = threading.Lock()
        self.stats = {"pages": 0, "events": 0, "errors": 0, "reconnects": 0, "page_s": []}

    def switch_off(self) -> None:
        self.on.clear()
        with self.lock:
            for conn in self.streams:
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)


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


def _poll(crowd: Crowd) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", crowd.port, timeout=30)
    while not crowd.stop.is_set():
        if not crowd.on.wait(0.2):
            continue
        t0 = time.perf_counter()
        try:
            conn.request("GET", f"/runs/{RUN}", headers={"Cookie": crowd.cookie})
            res = conn.getresponse()
            res.read()
        except (http.client.HTTPException, OSError):  # the server closed an idle keep-alive connection
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", crowd.port, timeout=30)
            crowd.stats["reconnects"] += 1
            continue
        crowd.stats["pages"] += 1
        crowd.stats["errors"] += res.status != 200
        crowd.stats["page_s"].append(time.perf_counter() - t0)
        crowd.stop.wait(max(0.0, POLL_S - (time.perf_counter() - t0)))


def _stream(crowd: Crowd) -> None:
    """While on: one open stream of the run's curves, read line by line; off: none."""
    while not crowd.stop.is_set():
        if not crowd.on.wait(0.2):
            continue
        conn = http.client.HTTPConnection("127.0.0.1", crowd.port, timeout=60)
        with crowd.lock:
            crowd.streams.append(conn)
        try:
            conn.request(
                "GET", f"/api/runs/{RUN}/curves/stream", headers={"Cookie": crowd.cookie, "Accept": "text/event-stream"}
            )
            res = conn.getresponse()
            crowd.stats["errors"] += res.status != 200
            while crowd.on.is_set() and not crowd.stop.is_set():
                line = res.fp.readline()
                if not line:
                    break
                crowd.stats["events"] += line.startswith(b"event: curves")
        except OSError:
            pass  # switched off: the socket was shut down under the read
        finally:
            with crowd.lock:
                crowd.streams.remove(conn)
            conn.close()


def clients(port: int, token: str) -> None:
    crowd = Crowd(port, _sign_in(port, token))
    threads = [threading.Thread(target=_poll, args=(crowd,), daemon=True) for _ in range(POLLERS)]
    threads += [threading.Thread(target=_stream, args=(crowd,), daemon=True) for _ in range(STREAMERS)]
    for t in threads:
        t.start()
    signal.signal(signal.SIGUSR1, lambda *_: crowd.on.set())
    signal.signal(signal.SIGUSR2, lambda *_: crowd.switch_off())
    signal.signal(signal.SIGTERM, lambda *_: crowd.stop.set())
    print("ready", flush=True)
    while not crowd.stop.is_set():
        crowd.stop.wait(0.2)
    stats = crowd.stats
    page_s = sorted(stats.pop("page_s")) or [0.0]
    print(
        json.dumps({**stats, "page_p50_s": page_s[len(page_s) // 2], "page_p95_s": page_s[int(len(page_s) * 0.95)]}),
        flush=True,
    )


# -- the run and the windows ----------------------------------------------------------------------


def _console(ws: Path) -> tuple[subprocess.Popen, int, str]:
    cli = [sys.executable, "-m", "trainteam.cli", "-w", str(ws), "web"]
    token = subprocess.run(cli + ["--new-token"], capture_output=True, text=True, check=True).stdout.strip()
    server = subprocess.Popen(cli + ["--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = int(re.search(r"127\.0\.0\.1:(\d+)/", server.stdout.readline()).group(1))
    return server, port, token


def _step_ends(history: Path) -> list[tuple[float, float]]:
    """(when a step ended, how long it took), the warm-up steps left out."""
    times = [
        e["time"] for e in map(json.loads, history.read_text().splitlines()) if e.get("event") == "log" and "loss" in e
    ]
    return [(b, b - a) for a, b in pairwise(times[WARMUP:])]


def _train(ws: Path, name: str, steps: int, tok, data: Path, seconds: float | None = None) -> Path:
    """Train ``steps`` steps, or until ``seconds`` pass (a callback stops the trainer)."""
    from transformers import TrainerCallback

    from trainteam.trainers import ModelSpec, TrainConfig, build_model, train

    class _StopAt(TrainerCallback):
        def __init__(self, deadline: float):
            self.deadline = deadline

        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = control.should_training_stop or time.time() >= self.deadline
            return control

    out = ws / "checkpoints" / RUN / name
    cfg = TrainConfig(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        max_length=32,
        logging_steps=1,
        save_steps=steps,
        spike={"enabled": False},
    )  # a long run: no stop at a spike
    model = build_model(ModelSpec(hidden_size=64, num_layers=2, num_heads=2, max_position_embeddings=64), tok)
    stop = [_StopAt(time.time() + seconds)] if seconds else None
    train("pretrain", cfg, model, data, tokenizer=tok, progress=False, callbacks=stop)
    return out / "run-history.jsonl"


def _setup(ws: Path):
    import torch

    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
    from trainteam.trainers import TokenizerConfig, load_tokenizer, train_tokenizer
    from trainteam.workflows.engine.store import RunStore
    from trainteam.workspace import Workspace

    torch.set_num_threads(1)
    store = RunStore(Workspace.open(ws).engine)
    store.create(RUN, "train_model", {"name": "web-load"})
    store.set_status(RUN, "running", current_step="train")
    rows, _ = generate_arithmetic(ArithmeticConfig(n_train=600, n_eval=20, seed=1))
    data = ws / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok_dir = train_tokenizer(
        (r["prompt"] + r["completion"] for r in rows), TokenizerConfig(vocab_size=300), ws / "tok"
    )
    return load_tokenizer(tok_dir), data


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def _switch(
    crowd: subprocess.Popen, served: psutil.Process, window_s: float, done: threading.Event, windows: list[dict]
) -> None:
    """Switch the clients on and off, window by window in ABBA blocks, until training is done;
    each window's start, kind, the console's and the clients' CPU seconds and the load average."""
    clients_proc, k = psutil.Process(crowd.pid), 0
    while not done.is_set():
        kind = BLOCK[k % len(BLOCK)]
        crowd.send_signal(signal.SIGUSR1 if kind == "loaded" else signal.SIGUSR2)
        windows.append(
            {
                "kind": kind,
                "start": time.time(),
                "console_cpu": _cpu_s(served),
                "clients_cpu": _cpu_s(clients_proc),
                "load_1m": round(os.getloadavg()[0], 2),
            }
        )
        k += 1
        done.wait(window_s)
    windows.append(
        {
            "kind": "end",
            "start": time.time(),
            "console_cpu": _cpu_s(served),
            "clients_cpu": _cpu_s(clients_proc),
            "load_1m": round(os.getloadavg()[0], 2),
        }
    )


def window_rows(windows: list[dict], steps: list[tuple[float, float]]) -> list[dict]:
    """Each whole window's median step (of the steps ending in it after ``SETTLE_S``) and CPU per second."""
    rows = []
    for w, nxt in pairwise(windows):
        gaps = [g for t, g in steps if w["start"] + SETTLE_S <= t < nxt["start"]]
        wall = nxt["start"] - w["start"]
        if len(gaps) >= 5:
            rows.append(
                {
                    "kind": w["kind"],
                    "median_step_s": statistics.median(gaps),
                    "steps": len(gaps),
                    "console_cpu_per_train_s": (nxt["console_cpu"] - w["console_cpu"]) / wall,
                    "clients_cpu_per_train_s": (nxt["clients_cpu"] - w["clients_cpu"]) / wall,
                    "load_1m": w["load_1m"],
                }
            )
        else:
            rows.append({"kind": w["kind"], "median_step_s": None})
    return rows


def block_ratios(rows: list[dict]) -> list[float]:
    """One ratio per whole ABBA block with every window measured: loaded medians over quiet medians."""
    ratios = []
    for i in range(0, len(rows) - len(BLOCK) + 1, len(BLOCK)):
        block = rows[i : i + len(BLOCK)]
        if any(r["median_step_s"] is None for r in block):
            continue
        loaded = sum(r["median_step_s"] for r in block if r["kind"] == "loaded")
        quiet = sum(r["median_step_s"] for r in block if r["kind"] == "quiet")
        ratios.append(loaded / quiet)
    return ratios


def geometric_mean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def ratio_interval(ratios: list[float], seed: int = 0) -> tuple[float, float]:
    """A 95 % interval of the blocks' geometric mean: the wider of scipy's percentile bootstrap over the
    blocks and Student's t on their log ratios (with a handful of blocks the bootstrap alone is too narrow)."""
    logs = np.log(ratios)
    boot = stats.bootstrap(
        (logs,),
        np.mean,
        confidence_level=0.95,
        n_resamples=DRAWS,
        method="percentile",
        random_state=np.random.default_rng(seed),
    ).confidence_interval
    half = stats.t.ppf(0.975, len(logs) - 1) * stats.sem(logs)
    low, high = min(boot.low, logs.mean() - half), max(boot.high, logs.mean() + half)
    return math.exp(low), math.exp(high)


def verdict(low: float, high: float, goal: float = GOAL) -> str:
    if high <= goal:
        return "met"
    if low > goal:
        return "missed"
    return "unresolved"


def _median_of(rows: list[dict], kind: str, key: str) -> float | None:
    values = [r[key] for r in rows if r["kind"] == kind and r.get(key) is not None]
    return round(statistics.median(values), 4) if values else None


def _measure(ws: Path, seconds: float, window_s: float, tok, data: Path) -> tuple[list[dict], list, dict]:
    """The windows, the steps and the clients' counters of one training run of about ``seconds``."""
    server, port, token = _console(ws)
    crowd = subprocess.Popen(
        [sys.executable, __file__, "--clients", str(port), token], stdout=subprocess.PIPE, text=True
    )
    try:
        assert crowd.stdout.readline().strip() == "ready"
        _train(ws, "warm-up", 60, tok, data)  # imports, first allocations: not measured
        print(f"training {seconds:g} s, windows of {window_s:g} s", flush=True)
        windows, done = [], threading.Event()
        switcher = threading.Thread(target=_switch, args=(crowd, psutil.Process(server.pid), window_s, done, windows))
        switcher.start()
        try:
            history = _train(ws, "measured", 10_000_000, tok, data, seconds=seconds)
            ended = [e for e in map(json.loads, history.read_text().splitlines()) if e.get("event") == "end"]
            assert ended and ended[-1].get("reason") not in ("spike", "interrupted"), ended[-1:]
        finally:
            done.set()
            switcher.join()
        crowd.send_signal(signal.SIGTERM)
        counts = json.loads(crowd.communicate(timeout=30)[0].strip().splitlines()[-1])
    finally:
        crowd.kill()
        server.terminate()
        server.wait(timeout=30)
    return windows, _step_ends(history), counts


def main(seconds: float, window_s: float) -> dict:
    ws = Path(tempfile.mkdtemp(prefix="web-load-")) / "ws"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tok, data = _setup(ws)
    windows, steps, counts = _measure(ws, seconds, window_s, tok, data)
    rows = window_rows(windows, steps)
    ratios = block_ratios(rows)
    if len(ratios) < 2:
        raise SystemExit(f"only {len(ratios)} whole ABBA block(s) measured: give more --seconds")
    ratio, (low, high) = geometric_mean(ratios), ratio_interval(ratios)
    per_kind = {
        k: [round(r["median_step_s"] * 1000, 3) for r in rows if r["kind"] == k and r["median_step_s"]]
        for k in ("quiet", "loaded")
    }
    loaded_s = sum(w2["start"] - w1["start"] for w1, w2 in pairwise(windows) if w1["kind"] == "loaded")
    return {
        "benchmark": "web_load",
        "seconds": seconds,
        "window_s": window_s,
        "windows": len(rows),
        "blocks": len(ratios),
        "steps": len(steps),
        "pollers": POLLERS,
        "streamers": STREAMERS,
        "quiet_step_ms": round(statistics.median(per_kind["quiet"]), 3),
        "loaded_step_ms": round(statistics.median(per_kind["loaded"]), 3),
        "ratio": round(ratio, 4),
        "ratio_95": [round(low, 4), round(high, 4)],
        "goal_ratio": GOAL,
        "verdict": verdict(low, high),
        "met": verdict(low, high) == "met",
        "block_ratios": [round(r, 4) for r in ratios],
        "window_medians_ms": per_kind,
        "console_cpu_s_per_train_s": {k: _median_of(rows, k, "console_cpu_per_train_s") for k in ("quiet", "loaded")},
        "clients_cpu_s_per_train_s": _median_of(rows, "loaded", "clients_cpu_per_train_s"),
        "load_average_1m": [r["load_1m"] for r in rows if r.get("load_1m") is not None],
        "cores": os.cpu_count(),
        "pages_per_loaded_s": round(counts["pages"] / loaded_s, 1) if loaded_s else None,
        "sse_events": counts["events"],
        "client_errors": counts["errors"],
        "page_p50_s": counts["page_p50_s"],
        "page_p95_s": counts["page_p95_s"],
    }


def _summary(result: dict) -> str:
    low, high = result["ratio_95"]
    cpu = result["console_cpu_s_per_train_s"]
    resolution = {
        "met": f"resolves the goal: the step time rises by at most {(high - 1) * 100:.1f} %",
        "missed": f"resolves the goal as missed: the step time rises by at least {(low - 1) * 100:.1f} %",
        "unresolved": f"does not resolve the {GOAL - 1:.0%} goal on this machine (more rounds, or a quieter machine)",
    }[result["verdict"]]
    return (
        f"loaded/quiet step time {result['ratio']:.3f} (95 % interval {low:.3f}–{high:.3f} over "
        f"{result['blocks']} ABBA blocks of {result['window_s']:g} s windows): the interval {resolution}. "
        f"The console used {cpu['quiet']} CPU s "
        f"per training second quiet, {cpu['loaded']} loaded (the clients {result['clients_cpu_s_per_train_s']}), "
        f"on {result['cores']} cores."
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--clients":
        clients(int(sys.argv[2]), sys.argv[3])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=240.0, help="how long the measured run trains")
    parser.add_argument("--window", type=float, default=4.0, help="seconds the clients stay on or off")
    args = parser.parse_args()
    if args.window < 2 * SETTLE_S or args.seconds < 8 * args.window:
        parser.error(
            f"--seconds {args.seconds:g} / --window {args.window:g}: a window of at least {2 * SETTLE_S:g} s "
            "and at least two ABBA blocks of windows"
        )
    result = main(args.seconds, args.window)
    print(_summary(result))
    print("RESULT " + json.dumps(result))
