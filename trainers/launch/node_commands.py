"""From a ``RunPlan`` to accelerate config files and the exact launch command of every node.

The config files are what ``accelerate config`` would write; ``validate_accelerate_config``
reads them back through accelerate's own launch path (its argument parser, its config
classes, the environment it hands to workers, and the FSDP / DeepSpeed plugin built from
that environment), so a key accelerate does not know, or a value it rejects, fails here and
not on a rented cluster.

On a CPU, DDP is launched as ``distributed_type: MULTI_GPU`` (``--multi_gpu``): accelerate
then starts N processes and the Trainer (``use_cpu``) joins them with gloo. ``--cpu
--num_processes N`` silently runs ONE process, so it is never generated.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field

from trainteam.core.errors import BadInput, TrainteamError
from trainteam.trainers.launch.worker import WorkerJob
from trainteam.trainers.planning import RunPlan

Launcher = Literal["accelerate", "torchrun"]

# The decoder block class FSDP wraps one unit at a time, by architecture.
LAYER_CLASSES = {
    "llama": "LlamaDecoderLayer",
    "qwen2": "Qwen2DecoderLayer",
    "gpt2": "GPT2Block",
    "mistral": "MistralDecoderLayer",
    "qwen3": "Qwen3DecoderLayer",
    "gemma2": "Gemma2DecoderLayer",
}


class LaunchSpec(BaseModel):
    """One command per node (index = machine rank), the environment they need, the config file."""

    launcher: Launcher
    commands: list[list[str]]
    env: dict[str, str] = Field(default_factory=dict)
    config_file: Path | None = None

    def shell(self, machine_rank: int = 0) -> str:
        """The command line of one node, as a person would paste it (environment included)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(self.commands[machine_rank])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_config(
    plan: RunPlan, *, main_process_ip: str | None = None, main_process_port: int = 29500, layer_cls: str | None = None
) -> dict:
    """The accelerate config dict of a plan (``distributed_type`` from its strategy)."""
    cfg = plan.config
    cpu = plan.hardware.device == "cpu"
    machines = cfg.num_nodes
    out: dict = {
        "compute_environment": "LOCAL_MACHINE",
        "mixed_precision": "no" if cfg.precision == "fp32" else cfg.precision,
        "num_machines": machines,
        "num_processes": plan.world_size,  # accelerate counts processes over all machines
        "machine_rank": 0,
        "main_process_port": main_process_port,
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,  # see the module docstring: the CPU is chosen by the Trainer, not here
        "debug": False,
    }
    if machines > 1:
        if not main_process_ip:
            raise BadInput("main_process_ip: required for a run over more than one node")
        out["main_process_ip"] = main_process_ip
    strategy = cfg.strategy
    if strategy == "single":
        out["distributed_type"] = "NO"
        out["use_cpu"] = cpu
    elif strategy == "ddp":
        out["distributed_type"] = "MULTI_GPU"
    elif strategy == "fsdp":
        arch = plan.model_arch
        cls = layer_cls or LAYER_CLASSES.get(arch)
        if cls is None:
            raise BadInput(f"layer_cls: no known decoder block class for architecture {arch!r}; pass layer_cls")
        out["distributed_type"] = "FSDP"
        out["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": cls,
            "fsdp_reshard_after_forward": True,
            "fsdp_offload_params": False,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True,
            # FSDP2 checkpoints activations itself; the Trainer's gradient_checkpointing must stay off.
            "fsdp_activation_checkpointing": cfg.gradient_checkpointing,
        }
    elif strategy in ("zero2", "zero3"):
        out["distributed_type"] = "DEEPSPEED"
        ds = {
            "zero_stage": 2 if strategy == "zero2" else 3,
            "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
            "gradient_clipping": cfg.max_grad_norm,
            "offload_optimizer_device": "none",
            "offload_param_device": "none",
            "zero3_init_flag": strategy == "zero3",
        }
        if strategy == "zero3":
            ds["zero3_save_16bit_model"] = True
        if machines > 1:
            ds["deepspeed_multinode_launcher"] = "standard"  # torchrun on each node; no pdsh / hostfile
        out["deepspeed_config"] = ds
    else:  # pragma: no cover - Strategy is a closed Literal
        raise BadInput(f"strategy: {strategy!r} unknown")
    return out


def write_accelerate_config(
    plan: RunPlan,
    out_dir: Path,
    *,
    main_process_ip: str | None = None,
    main_process_port: int = 29500,
    layer_cls: str | None = None,
) -> Path:
    """Write ``accelerate_<strategy>.yaml`` under ``out_dir``; every node uses the same file."""
    data = accelerate_config(
        plan, main_process_ip=main_process_ip, main_process_port=main_process_port, layer_cls=layer_cls
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"accelerate_{plan.config.strategy}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def validate_accelerate_config(path: Path) -> dict:
    """Load a config file the way ``accelerate launch`` does; BadInput naming the file if it is wrong.

    Returns what accelerate understood: distributed type, process counts, and for FSDP /
    DeepSpeed the plugin it would build in each worker.
    """
    import argparse
    from unittest import mock

    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    path = Path(path)
    if not path.is_file():
        raise BadInput(f"config_file: {path} not found")
    try:
        cluster = ClusterConfig.from_yaml_file(str(path))
    except (ValueError, TypeError, KeyError) as exc:
        raise BadInput(f"config_file: {path}: {exc}") from None
    procs = cluster.num_processes if cluster.num_processes and cluster.num_processes > 0 else 1
    if procs > 1 and (cluster.use_cpu or cluster.distributed_type.value == "MULTI_CPU"):
        raise BadInput(
            f"config_file: {path}: use_cpu / MULTI_CPU with {procs} processes makes accelerate run ONE "
            "process; use distributed_type MULTI_GPU (the Trainer joins CPU ranks with gloo) or torchrun"
        )
    parser = launch_command_parser()
    known = {a.dest for a in parser._actions}
    for section, prefix in (("fsdp_config", "fsdp_"), ("deepspeed_config", "")):
        for key in getattr(cluster, section) or {}:
            name = key if key.startswith(prefix) else prefix + key
            if name not in known:
                raise BadInput(f"config_file: {path}: {section}.{key} is not an accelerate launch option")
    args = parser.parse_args(["--config_file", str(path), "train.py"])
    try:
        args, _, _ = _validate_launch_command(args)
        summary = {
            "distributed_type": str(cluster.distributed_type.value),
            "num_processes": args.num_processes,
            "num_machines": args.num_machines,
            "mixed_precision": args.mixed_precision,
        }
        if args.use_fsdp:
            env = prepare_multi_gpu_env(argparse.Namespace(**vars(args)))
            with mock.patch.dict(os.environ, env):
                plugin = FullyShardedDataParallelPlugin()
            summary.update(
                fsdp_version=plugin.fsdp_version,
                wrap=plugin.transformer_cls_names_to_wrap,
                reshard_after_forward=plugin.reshard_after_forward,
            )
        elif args.use_deepspeed:
            fields = list(cluster.deepspeed_config) + ["mixed_precision"]
            args.deepspeed_fields_from_accelerate_config = ",".join(fields)
            _, env = prepare_deepspeed_cmd_env(argparse.Namespace(**vars(args)))
            with mock.patch.dict(os.environ, env):
                plugin = DeepSpeedPlugin()
            summary.update(zero_stage=plugin.zero_stage, deepspeed_config=plugin.deepspeed_config)
    except (ValueError, TypeError, KeyError) as exc:
        raise BadInput(f"config_file: {path}: {exc}") from None
    return summary


def launch_commands(
    plan: RunPlan,
    target: str | Path,
    args: list[str] | None = None,
    *,
    launcher: Launcher = "accelerate",
    module: bool = False,
    config_file: Path | None = None,
    main_process_ip: str = "127.0.0.1",
    main_process_port: int = 29500,
) -> LaunchSpec:
    """The command of every node for ``target`` (a script, or a module with ``module=True``).

    accelerate: ``accelerate launch --config_file F --num_machines N --num_processes P
    --machine_rank R --main_process_ip IP --main_process_port PORT`` (flags win over the file).
    torchrun: ``--standalone`` on one node, static rendezvous on many; it carries no FSDP or
    DeepSpeed settings, so it is offered for single / ddp only.
    """
    cfg = plan.config
    nodes, per_node = cfg.num_nodes, cfg.devices_per_node
    tail = (["-m", str(target)] if module else [str(target)]) + list(args or [])
    env: dict[str, str] = {}
    if plan.hardware.device == "cpu":
        cores = os.cpu_count() or 1
        env["OMP_NUM_THREADS"] = str(max(1, cores // per_node))
    commands: list[list[str]] = []
    if launcher == "accelerate":
        if config_file is None:
            raise BadInput("config_file: accelerate launch needs the file from write_accelerate_config")
        for rank in range(nodes):
            cmd = [
                "accelerate",
                "launch",
                "--config_file",
                str(config_file),
                "--num_machines",
                str(nodes),
                "--num_processes",
                str(plan.world_size),
                "--machine_rank",
                str(rank),
            ]
            if cfg.strategy == "ddp":
                cmd.append("--multi_gpu")
            if nodes > 1:
                cmd += ["--main_process_ip", main_process_ip]
            cmd += ["--main_process_port", str(main_process_port)]
            commands.append(cmd + tail)
    elif launcher == "torchrun":
        if cfg.strategy not in ("single", "ddp"):
            raise BadInput(
                f"launcher: torchrun carries no {cfg.strategy} settings; use accelerate with the config file"
            )
        for rank in range(nodes):
            if nodes == 1:
                cmd = ["torchrun", "--standalone", "--nnodes", "1", "--nproc_per_node", str(per_node)]
            else:
                cmd = [
                    "torchrun",
                    "--nnodes",
                    str(nodes),
                    "--nproc_per_node",
                    str(per_node),
                    "--node_rank",
                    str(rank),
                    "--master_addr",
                    main_process_ip,
                    "--master_port",
                    str(main_process_port),
                ]
            commands.append(cmd + tail)
    else:
        raise BadInput(f"launcher: {launcher!r} is not accelerate or torchrun")
    return LaunchSpec(launcher=launcher, commands=commands, env=env, config_file=config_file)


def prepare_distributed_run(
    plan: RunPlan,
    *,
    model,
    tokenizer: Path,
    data: Path,
    out_dir: Path,
    method: str = "sft",
    eval_data: Path | None = None,
    launcher: Launcher = "accelerate",
    main_process_ip: str = "127.0.0.1",
    main_process_port: int | None = None,
) -> LaunchSpec:
    """Everything a cluster needs for one planned run, written under ``out_dir``: the accelerate
    config, the worker's job file (training output in ``out_dir/run``, per-rank records in
    ``out_dir/ranks``) and the command of every node. Nothing runs here.
    """
    out_dir = Path(out_dir)
    port = main_process_port or (free_port() if plan.config.num_nodes == 1 else 29500)
    config = plan.config.model_copy(update={"output_dir": out_dir / "run"})
    job = WorkerJob(
        method=method,
        config=config,
        model=model,
        tokenizer=Path(tokenizer),
        data=Path(data),
        eval_data=Path(eval_data) if eval_data else None,
        results_dir=out_dir / "ranks",
    )
    job_file = job.save(out_dir / "job.json")
    cfg_file = None
    if launcher == "accelerate":
        ip = main_process_ip if plan.config.num_nodes > 1 else None
        cfg_file = write_accelerate_config(plan, out_dir, main_process_ip=ip, main_process_port=port)
    return launch_commands(
        plan,
        "trainteam.trainers.launch.worker",
        [str(job_file)],
        launcher=launcher,
        module=True,
        config_file=cfg_file,
        main_process_ip=main_process_ip,
        main_process_port=port,
    )


def _argv_env(spec: LaunchSpec, machine_rank: int, extra_env: dict[str, str] | None) -> tuple[list[str], dict]:
    cmd = list(spec.commands[machine_rank])
    local = Path(sys.executable).parent / cmd[0]
    if local.is_file():  # the launcher of this interpreter's venv, not whatever is first on PATH
        cmd[0] = str(local)
    return cmd, {**os.environ, **spec.env, **(extra_env or {})}


def start_launch(
    spec: LaunchSpec, *, machine_rank: int = 0, cwd: Path | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Start one node's command in the background (output captured); the caller waits."""
    cmd, env = _argv_env(spec, machine_rank, extra_env)
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_launch(
    spec: LaunchSpec,
    *,
    machine_rank: int = 0,
    timeout: float | None = None,
    cwd: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run one node's command here and wait; a failure raises with the tail of its output."""
    cmd, env = _argv_env(spec, machine_rank, extra_env)
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise TrainteamError(f"launch failed (exit {proc.returncode}): {shlex.join(cmd)}\n" + "\n".join(tail))
    return proc
