"""`trainteam plan`: token / memory / cost accounting, refusals and launch commands, before a run.

Light on purpose: the planner imports no torch, so a person can plan a 70B run on a laptop.
"""

from __future__ import annotations

from pathlib import Path

import typer

from trainteam.commands.common import console, load_config_file, print_json
from trainteam.core.errors import BadInput


def _load(path: Path, cls, what: str):
    return load_config_file(path, cls, what)


def _row_tokens(data: Path | None, spec, cfg) -> float | None:
    """Mean tokens per row of a sample of ``data``: counted with the model's tokenizer when the model
    spec names a local folder, else bounded by UTF-8 bytes."""
    if data is None:
        return None
    from trainteam.curation.rows import read_rows
    from trainteam.trainers.planning.tokens import SAMPLE_ROWS, count_tokens, model_tokenizer, row_tokens_bound

    if not data.exists():
        raise BadInput(f"--data: {data} does not exist")
    try:
        rows = read_rows(data, limit=SAMPLE_ROWS)
    except BadInput as exc:
        raise BadInput(f"--data: {exc}") from None
    if getattr(spec, "path", None) is not None and rows:
        tokenizer = model_tokenizer(str(spec.path), spec.chat_template)
        return count_tokens(tokenizer, rows, cfg.method).mean(cfg.max_length) or None
    per_row = row_tokens_bound(rows)
    if per_row is None:
        raise BadInput(f"--data: {data} holds no text")
    return per_row


def _check_options(params: float | None, launcher: str) -> None:
    import math

    if params is not None and not (math.isfinite(params) and 1e3 <= params <= 1e13):
        raise BadInput(f"--params: {params:g} is not a model size (a number of parameters from 1e3 to 1e13)")
    if launcher not in ("accelerate", "torchrun"):
        raise BadInput(f"--launcher: {launcher!r} is not accelerate or torchrun")


def plan_command(
    model: Path | None = typer.Option(None, "--model", help="ModelSpec as YAML/JSON"),
    params: float | None = typer.Option(None, "--params", help="model size as a number of parameters, e.g. 7e9"),
    vocab_size: int | None = typer.Option(
        None, "--vocab-size", min=1, max=1 << 21, help="when the model spec leaves it open"
    ),
    data: Path | None = typer.Option(
        None,
        "--data",
        help="SFT data (any file or folder a task's data.path takes): count its rows' tokens, not seq_len windows",
    ),
    config: Path | None = typer.Option(None, "--config", help="TrainConfig as YAML/JSON (default: TrainConfig())"),
    hardware: Path | None = typer.Option(None, "--hardware", help="HardwareSpec as YAML/JSON (default: this machine)"),
    recommend: bool = typer.Option(False, "--recommend", help="choose strategy, precision, micro-batch, accumulation"),
    global_batch: int | None = typer.Option(
        None, "--global-batch", min=1, max=1 << 24, help="with --recommend: global batch to keep"
    ),
    lenient: bool = typer.Option(
        False, "--lenient", help="wasteful settings become warnings (impossible ones stay refused)"
    ),
    launch_dir: Path | None = typer.Option(
        None, "--launch-dir", help="write the accelerate config here and print commands"
    ),
    script: str = typer.Option("train.py", "--script", help="with --launch-dir: the training script to launch"),
    launcher: str = typer.Option("accelerate", "--launcher", help="accelerate or torchrun"),
    main_ip: str = typer.Option("127.0.0.1", "--main-ip", help="address of the machine with rank 0"),
    port: int = typer.Option(29500, "--port", min=1, max=65535, help="rendezvous port"),
    as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
) -> None:
    """Plan a run: tokens, memory per device, time and cost, and why; refuse what cannot work."""
    from trainteam.trainers.planning import HardwareSpec, detect_hardware
    from trainteam.trainers.planning import plan as make_plan
    from trainteam.trainers.planning import recommend as make_recommendation
    from trainteam.trainers.training.config import ModelSpec, TrainConfig

    if (model is None) == (params is None):
        raise BadInput("--model / --params: give exactly one")
    _check_options(params, launcher)
    spec = _load(model, ModelSpec, "--model") if model is not None else int(params or 0)  # one of them: checked
    cfg = _load(config, TrainConfig, "--config") if config is not None else TrainConfig()
    hw = (
        _load(hardware, HardwareSpec, "--hardware")
        if hardware is not None
        else detect_hardware(processes=cfg.devices_per_node)
    )
    if recommend:
        result = make_recommendation(
            spec,
            hw,
            base=cfg,
            global_batch_size=global_batch,
            vocab_size=vocab_size,
            row_tokens=_row_tokens(data, spec, cfg),
            strict=not lenient,
        )
    else:
        if global_batch is not None:
            raise BadInput("--global-batch: only with --recommend (otherwise it follows from the config)")
        result = make_plan(
            cfg, spec, hw, vocab_size=vocab_size, row_tokens=_row_tokens(data, spec, cfg), strict=not lenient
        )
    commands = _launch_lines(result, launch_dir, script, launcher, main_ip, port) if launch_dir is not None else None
    if as_json:
        out = result.model_dump(mode="json")
        if commands is not None:
            out["launch_commands"] = commands
        return print_json(out)
    console.print(result.summary(), highlight=False, markup=False)
    for rank, line in enumerate(commands or []):
        console.print(f"node {rank}: {line}", highlight=False, markup=False)


def _launch_lines(result, launch_dir: Path, script: str, launcher: str, main_ip: str, port: int) -> list[str]:
    """The command each machine runs (``--launch-dir``: accelerate's config written there)."""
    from trainteam.trainers.launch.node_commands import launch_commands, write_accelerate_config

    if launcher not in ("accelerate", "torchrun"):
        raise BadInput(f"--launcher: {launcher!r} is not accelerate or torchrun")
    cfg_file = None
    if launcher == "accelerate":
        ip = main_ip if result.config.num_nodes > 1 else None
        cfg_file = write_accelerate_config(result, launch_dir, main_process_ip=ip, main_process_port=port)
    spec_l = launch_commands(
        result,
        script,
        launcher="accelerate" if launcher == "accelerate" else "torchrun",  # one of the two: checked
        config_file=cfg_file,
        main_process_ip=main_ip,
        main_process_port=port,
    )
    return [spec_l.shell(r) for r in range(len(spec_l.commands))]


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)
