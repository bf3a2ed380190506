"""`trainteam plan` on the command line: a plan with launch commands, a refusal as one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "trainteam.cli", "-w", str(cwd / "ws"), "plan", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


def test_plan_recommends_and_prints_the_commands_of_every_node(tmp_path):
    hw = tmp_path / "hw.yaml"
    hw.write_text(
        yaml.safe_dump(
            {
                "device": "cuda",
                "name": "H100",
                "devices_per_node": 8,
                "nodes": 2,
                "device_memory_gib": 80,
                "bf16": True,
                "fabric": "infiniband",
                "price_per_device_hour": 2.5,
            }
        )
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"seq_len": 4096, "per_device_batch_size": 4, "grad_accum": 16, "max_steps": 100}))
    out = _cli(
        "--params",
        "7e9",
        "--hardware",
        str(hw),
        "--config",
        str(cfg),
        "--recommend",
        "--launch-dir",
        str(tmp_path / "launch"),
        "--main-ip",
        "10.1.1.1",
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["config"]["strategy"] == "fsdp" and plan["global_batch_size"] == 64
    assert plan["total_tokens"] == 64 * 4096 * 100
    assert plan["cost"]["cost"] == plan["cost"]["device_hours"] * 2.5 > 0
    cmds = plan["launch_commands"]
    assert len(cmds) == 2 and all("--main_process_ip 10.1.1.1" in c for c in cmds)
    assert "--machine_rank 1" in cmds[1]
    assert yaml.safe_load((tmp_path / "launch" / "accelerate_fsdp.yaml").read_text())["num_machines"] == 2


def test_plan_refusal_is_one_line_naming_the_field(tmp_path):
    hw = tmp_path / "hw.yaml"
    hw.write_text(yaml.safe_dump({"device": "cpu", "device_memory_gib": 8}))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"precision": "fp16"}))
    out = _cli("--params", "1e6", "--hardware", str(hw), "--config", str(cfg), cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: precision: fp16 mixed precision needs a CUDA device; on a CPU use fp32 (or bf16 on a bf16 CPU)"
    ]
    cfg.write_text(yaml.safe_dump({"max_steps": -1}))
    out = _cli("--params", "1e6", "--hardware", str(hw), "--config", str(cfg), cwd=tmp_path)
    assert out.returncode == 2 and "max_steps" in out.stderr and str(cfg) in out.stderr


def test_plan_counts_the_sft_rows_of_a_data_file(tmp_path):
    hw = tmp_path / "hw.yaml"
    hw.write_text(yaml.safe_dump({"device": "cpu", "device_memory_gib": 8}))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"method": "sft", "seq_len": 64, "per_device_batch_size": 8, "max_steps": 10}))
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"prompt": "12+34=", "completion": "046"}) + "\n" for _ in range(5)))
    out = _cli(
        "--params", "1e6", "--hardware", str(hw), "--config", str(cfg), "--data", str(data), "--json", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["total_tokens"] == 8 * (9 + 2) * 10  # 9 bytes + BOS + EOS per row
    data.write_text("12+34=046\n")
    out = _cli("--params", "1e6", "--hardware", str(hw), "--config", str(cfg), "--data", str(data), cwd=tmp_path)
    assert (
        out.returncode == 2 and out.stderr.strip() == f"error: --data: {data}:1: invalid JSON (Extra data at column 3)"
    )
