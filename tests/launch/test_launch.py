"""Accelerate configs load through accelerate itself; commands for one and many nodes; a real
2-process (gloo DDP) SFT through the generated `accelerate launch` command."""

from __future__ import annotations

import json

import pytest
import yaml

from trainteam.core.errors import BadInput
from trainteam.trainers.launch.node_commands import (
    free_port,
    launch_commands,
    prepare_distributed_run,
    run_launch,
    validate_accelerate_config,
    write_accelerate_config,
)
from trainteam.trainers.launch.worker import WorkerJob, main, run_job
from trainteam.trainers.planning import HardwareSpec, plan
from trainteam.trainers.training.config import ModelSpec, TrainConfig

SPEC = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128)
GPUS = HardwareSpec(
    device="cuda", name="H100", devices_per_node=8, nodes=2, device_memory_gib=80, bf16=True, fabric="infiniband"
)
CPU2 = HardwareSpec(device="cpu", devices_per_node=2, device_memory_gib=4)


def _gpu_plan(strategy: str, nodes: int = 2):
    cfg = TrainConfig(
        strategy=strategy,
        precision="bf16",
        num_nodes=nodes,
        devices_per_node=8,
        grad_accum=4,
        gradient_checkpointing=False,
    )
    return plan(cfg, 3_000_000_000, GPUS, strict=False)


@pytest.mark.parametrize(
    "strategy,dtype", [("ddp", "MULTI_GPU"), ("fsdp", "FSDP"), ("zero2", "DEEPSPEED"), ("zero3", "DEEPSPEED")]
)
def test_generated_configs_load_through_accelerate(tmp_path, strategy, dtype):
    path = write_accelerate_config(_gpu_plan(strategy), tmp_path, main_process_ip="10.0.0.1")
    seen = validate_accelerate_config(path)
    assert seen["distributed_type"] == dtype
    assert (seen["num_processes"], seen["num_machines"], seen["mixed_precision"]) == (16, 2, "bf16")
    if strategy == "fsdp":
        assert seen["fsdp_version"] == 2 and seen["wrap"] == ["LlamaDecoderLayer"]
    if strategy.startswith("zero"):
        stage = int(strategy[-1])
        assert seen["zero_stage"] == stage
        ds = seen["deepspeed_config"]
        assert ds["gradient_accumulation_steps"] == 4 and ds["zero_optimization"]["stage"] == stage
        assert yaml.safe_load(path.read_text())["deepspeed_config"]["deepspeed_multinode_launcher"] == "standard"


def test_bad_config_files_are_refused_naming_the_file(tmp_path):
    path = write_accelerate_config(_gpu_plan("fsdp"), tmp_path, main_process_ip="10.0.0.1")
    data = yaml.safe_load(path.read_text())
    data["fsdp_config"]["fsdp_shard_everything_twice"] = True
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(BadInput, match=r"config_file: .*fsdp_config\.fsdp_shard_everything_twice"):
        validate_accelerate_config(path)
    data = yaml.safe_load(path.read_text())
    data.pop("fsdp_config")
    data["num_gpus_please"] = 3
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(BadInput, match=r"config_file: .*num_gpus_please"):
        validate_accelerate_config(path)
    data.pop("num_gpus_please")
    data.update(distributed_type="MULTI_CPU", use_cpu=True)  # measured: accelerate then starts ONE process
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(BadInput, match=r"config_file: .*ONE process"):
        validate_accelerate_config(path)
    with pytest.raises(BadInput, match="config_file: .* not found"):
        validate_accelerate_config(tmp_path / "missing.yaml")
    with pytest.raises(BadInput, match="main_process_ip"):
        write_accelerate_config(_gpu_plan("ddp"), tmp_path)


def test_commands_for_one_node_and_many(tmp_path):
    many = _gpu_plan("fsdp")
    f = write_accelerate_config(many, tmp_path, main_process_ip="10.0.0.1")
    spec = launch_commands(
        many, "train.py", ["--job", "j.json"], config_file=f, main_process_ip="10.0.0.1", main_process_port=29555
    )
    assert len(spec.commands) == 2
    for rank, cmd in enumerate(spec.commands):
        assert cmd == [
            "accelerate",
            "launch",
            "--config_file",
            str(f),
            "--num_machines",
            "2",
            "--num_processes",
            "16",
            "--machine_rank",
            str(rank),
            "--main_process_ip",
            "10.0.0.1",
            "--main_process_port",
            "29555",
            "train.py",
            "--job",
            "j.json",
        ]
    ddp = _gpu_plan("ddp")
    tr = launch_commands(
        ddp,
        "trainteam.trainers.launch.worker",
        ["j.json"],
        launcher="torchrun",
        module=True,
        main_process_ip="10.0.0.1",
        main_process_port=29555,
    )
    assert tr.commands[1] == [
        "torchrun",
        "--nnodes",
        "2",
        "--nproc_per_node",
        "8",
        "--node_rank",
        "1",
        "--master_addr",
        "10.0.0.1",
        "--master_port",
        "29555",
        "-m",
        "trainteam.trainers.launch.worker",
        "j.json",
    ]
    one = plan(TrainConfig(strategy="ddp", devices_per_node=2), SPEC, CPU2, vocab_size=300)
    tr1 = launch_commands(one, "w.py", launcher="torchrun")
    assert tr1.commands == [["torchrun", "--standalone", "--nnodes", "1", "--nproc_per_node", "2", "w.py"]]
    assert tr1.shell().startswith("OMP_NUM_THREADS=") and tr1.shell().endswith("--nproc_per_node 2 w.py")
    acc1 = launch_commands(one, "w.py", config_file=f, main_process_port=29555)
    assert "--multi_gpu" in acc1.commands[0] and "--cpu" not in acc1.commands[0]  # --cpu runs ONE process
    with pytest.raises(BadInput, match="^launcher: "):
        launch_commands(many, "w.py", launcher="torchrun")
    with pytest.raises(BadInput, match="^config_file: "):
        launch_commands(many, "w.py")


def test_worker_refuses_a_bad_job_naming_the_field(tmp_path, capsys):
    bad = tmp_path / "job.json"
    bad.write_text(
        json.dumps({"config": {"max_steps": 0}, "model": {}, "tokenizer": "t", "data": "d.jsonl", "results_dir": "r"})
    )
    assert main([str(bad)]) == 2
    assert "config.max_steps" in capsys.readouterr().err
    assert main([str(tmp_path / "nope.json")]) == 2


def test_two_process_sft_through_the_generated_accelerate_command(tmp_path, tok_dir, arith):
    from trainteam.curation.jsonl import write_jsonl

    data = write_jsonl(arith[0], tmp_path / "train.jsonl")
    common = dict(max_steps=10, learning_rate=3e-3, seq_len=64, threads=1, spike={"enabled": False})
    ddp_cfg = TrainConfig(per_device_batch_size=8, strategy="ddp", devices_per_node=2, **common)
    p = plan(ddp_cfg, SPEC, CPU2, vocab_size=300)
    assert p.global_batch_size == 16
    spec = prepare_distributed_run(p, model=SPEC, tokenizer=tok_dir, data=data, out_dir=tmp_path / "launch")
    assert validate_accelerate_config(spec.config_file)["num_processes"] == 2
    assert spec.commands[0][-3:] == ["-m", "trainteam.trainers.launch.worker", str(tmp_path / "launch" / "job.json")]
    run_launch(spec, timeout=600)

    ranks = [json.loads((tmp_path / "launch" / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == 2 and r["backend"] == "gloo" for r in ranks)
    assert ranks[0]["pid"] != ranks[1]["pid"] and ranks[0]["steps"] == 10
    assert (tmp_path / "launch" / "run" / "final" / "model.safetensors").is_file()

    # The same global batch (16) in one process: the loss must land in the same place.
    single = TrainConfig(output_dir=tmp_path / "single", per_device_batch_size=16, **common)
    one = run_job(WorkerJob(config=single, model=SPEC, tokenizer=tok_dir, data=data, results_dir=tmp_path / "one"))
    assert one["world_size"] == 1
    ddp_losses = [v for _, v in ranks[0]["losses"]]
    one_losses = [v for _, v in one["losses"]]
    assert ddp_losses[-1] < ddp_losses[0] - 0.5  # it learned
    assert ddp_losses[-1] == pytest.approx(one_losses[-1], rel=0.02)


@pytest.mark.slow
def test_two_node_commands_rendezvous_on_one_machine(tmp_path, tok_dir, arith):
    """Both nodes' generated commands, started side by side with 127.0.0.1 as the main node,
    form one world of 2: the multi-node flags (num_machines, machine_rank, main_process_ip/port) work."""
    from trainteam.curation.jsonl import write_jsonl
    from trainteam.trainers.launch.node_commands import start_launch

    data = write_jsonl(arith[0], tmp_path / "train.jsonl")
    hw = HardwareSpec(device="cpu", devices_per_node=1, nodes=2, device_memory_gib=4, fabric="ethernet")
    cfg = TrainConfig(
        max_steps=4,
        per_device_batch_size=8,
        learning_rate=3e-3,
        seq_len=64,
        threads=1,
        strategy="ddp",
        num_nodes=2,
        devices_per_node=1,
        spike={"enabled": False},
    )
    p = plan(cfg, SPEC, hw, vocab_size=300)
    spec = prepare_distributed_run(
        p,
        model=SPEC,
        tokenizer=tok_dir,
        data=data,
        out_dir=tmp_path / "launch",
        main_process_ip="127.0.0.1",
        main_process_port=free_port(),
    )
    assert [c[c.index("--machine_rank") + 1] for c in spec.commands] == ["0", "1"]
    procs = [start_launch(spec, machine_rank=r) for r in (0, 1)]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
    ranks = [json.loads((tmp_path / "launch" / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world_size"] == 2 for r in ranks) and {r["rank"] for r in ranks} == {0, 1}
