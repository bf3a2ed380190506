"""`trainteam self-improve`: the team's runs → chat data → tool-calling SFT → agreement gate → bind.

The steps are ``workflows/improve/self_improve.py``'s; training is a normal ``train_model`` run (durable, its
``register_model`` waiting for a person unless ``--yes``); binding the personas is the person's too:
without ``--yes`` the command stops after the gate and prints the ``models bind`` command to run.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from trainteam.commands.common import console, err_console, print_json, workspace
from trainteam.core.errors import BadInput, format_validation_error


def _options(**given):
    from pydantic import ValidationError

    from trainteam.agents.cards import PERSONAS
    from trainteam.workflows.improve.self_improve import SelfImproveOptions

    try:
        opts = SelfImproveOptions.model_validate({k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, "self-improve")) from None
    if not opts.model.is_dir():
        raise BadInput(f"--model: {opts.model}: not a model folder")
    if opts.prompt not in ("full", "compact"):
        raise BadInput(f"--prompt: {opts.prompt!r} is not one of full, compact")
    bad = next((p for p in opts.bind + opts.personas if p not in PERSONAS), None)
    if bad is not None:
        raise BadInput(f"--bind/--persona: unknown persona {bad!r} (known: {', '.join(PERSONAS)})")
    return opts


def _train(ws, task_dict: dict, run_id: str | None, yes: bool, quiet: bool) -> dict:
    """The SFT as a ``train_model`` run in this process (``--yes``: its approvals granted up front, as you)."""
    import getpass

    from trainteam.commands.execute import PreApprover
    from trainteam.contract.train_task import TrainTask
    from trainteam.workflows.runs.runner import prepare_run, run_foreground

    task = TrainTask.model_validate(task_dict)
    new = prepare_run("train_model", task, "self-improve", run_id, "--run-id", lambda: ws)
    if not quiet:
        err_console.print(f"train: run [bold]{new.run_id}[/bold] (train_model)", highlight=False)
    if not yes:
        return run_foreground(new.ws, new.spec, new.task, new.run_id, progress=not quiet)
    with PreApprover(new.ws, new.run_id, f"{getpass.getuser()} (--yes)"):
        return run_foreground(new.ws, new.spec, new.task, new.run_id, progress=not quiet)


def self_improve(opts, run_id: str | None, yes: bool, quiet: bool) -> dict:
    """The loop, step by step; returns what each step gave (also printed as --json)."""
    import getpass

    from trainteam.workflows.improve import self_improve as loop
    from trainteam.workflows.runs.runner import check_new_run_id, new_run_id

    ws = workspace()
    run_id = check_new_run_id(ws, run_id) if run_id is not None else new_run_id("self-improve")
    rows = [r.model_dump(mode="json") for r in loop.gather_rows(ws, opts.runs, opts.personas, style=opts.prompt)]
    folder = ws.dir("datasets") / run_id
    data = loop.build_data(ws, rows, folder, opts.heldout_fraction, opts.seed)
    out: dict = {"rows": len(rows), "data": data.model_dump(mode="json")}
    if not quiet:
        err_console.print(
            f"data: {len(rows)} rows → {data.train_rows} train, {data.heldout_rows} held out "
            f"(runs {', '.join(data.heldout_runs)})",
            highlight=False,
        )
    task = loop.sft_task(opts, data)
    (folder / "task.json").write_text(json.dumps(task, indent=1))
    run = _train(ws, task, run_id, yes, quiet)
    out["train"] = {"run_id": run.get("run_id"), "status": run.get("status"), "error": run.get("error")}
    rec = loop.registered_by(ws, run.get("run_id", "")) if run.get("status") == "completed" else None
    if rec is None:
        out["status"] = "train_failed"
        return out
    agreement = loop.evaluate(Path(rec.path), data.heldout, opts.bind, opts.max_new_tokens)
    passed, why = loop.gate(agreement.agreement, opts.min_agreement)
    out.update(
        model=rec.id,
        model_path=rec.path,
        agreement=agreement.model_dump(mode="json"),
        gate={"passed": passed, "why": why},
    )
    bind_cmd = " ".join(f"trainteam models bind {rec.id} --role persona:{p} --prompt {opts.prompt};" for p in opts.bind)
    if not passed:
        out["status"] = "gate_failed"
    elif yes:
        out.update(status="bound", roles=loop.bind(ws, rec.id, opts.bind, opts.prompt, f"{getpass.getuser()} (--yes)"))
    else:
        out.update(status="needs_approval", bind=bind_cmd)
    return out


def _print_outcome(out: dict) -> None:
    a = out.get("agreement") or {}
    agreement = (
        f" (names {a.get('name_agreement')}, all but the reason {a.get('action_agreement')}, "
        f"{a.get('turns')} held-out calls)"
    )
    console.print(
        f"self-improve: {out['status']}"
        + (f" — {out['gate']['why']}" if "gate" in out else "")
        + (agreement if a else ""),
        highlight=False,
    )
    if out.get("bind"):
        console.print(f"bind (a person's call): {out['bind']}", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command("self-improve")
    def self_improve_cmd(
        model: Path = typer.Option(..., "--model", help="the base model folder (a local instruct model)"),
        run: list[str] | None = typer.Option(
            None,
            "--run",
            help="learn from these runs (repeatable; default: every run that completed with its gates passed)",
        ),
        persona: list[str] | None = typer.Option(None, "--persona", help="rows of these personas (default all)"),
        bind: list[str] | None = typer.Option(
            None, "--bind", help="personas measured and bound (repeatable; default training_engineer)"
        ),
        prompt: str = typer.Option("compact", "--prompt", help="compact (short brief, the step's tool) or full"),
        chat_template: str = typer.Option("qwen2_5", "--chat-template", help="a template that writes tool calls"),
        steps: int = typer.Option(150, "--steps", help="LoRA SFT steps"),
        lr: float = typer.Option(1e-3, "--lr"),
        max_length: int = typer.Option(1024, "--max-length", help="tokens kept per pair, from its end"),
        grad_accum: int = typer.Option(1, "--grad-accum"),
        gradient_checkpointing: bool = typer.Option(
            True,
            "--gradient-checkpointing/--no-gradient-checkpointing",
            help="recompute activations (less memory; ~15 % slower steps in bf16, ~70 % in fp32): kept under "
            "--max-memory-gib, dropped by the planner where the run fits the machine without it",
        ),
        max_memory_gib: float | None = typer.Option(
            None,
            "--max-memory-gib",
            help="the training run's memory budget: the planner keeps gradient checkpointing where it is needed "
            "to fit (default: this machine's memory)",
        ),
        precision: str = typer.Option(
            "auto", "--precision", help="auto (bf16 where the CPU or GPU computes it natively, else fp32), fp32 or bf16"
        ),
        heldout_fraction: float = typer.Option(0.34, "--heldout-fraction", help="share of the runs held out"),
        min_agreement: float = typer.Option(
            0.95, "--min-agreement", help="the gate: tool-call agreement on held-out steps"
        ),
        run_id: str | None = typer.Option(None, "--run-id", help="the training run's id"),
        yes: bool = typer.Option(False, "--yes", "-y", help="approve registering and binding up front, as you"),
        quiet: bool = typer.Option(False, "--quiet", "-q"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """The team trains the model that runs the team: its runs' transcripts → tool-calling SFT → measured
        against the offline policy on held-out runs → gated → bound to the personas."""
        opts = _options(
            model=model,
            runs=run or [],
            personas=persona or [],
            bind=bind or None,
            prompt=prompt,
            chat_template=chat_template,
            steps=steps,
            learning_rate=lr,
            max_length=max_length,
            grad_accum=grad_accum,
            gradient_checkpointing=gradient_checkpointing,
            precision=precision,
            max_memory_gib=max_memory_gib,
            heldout_fraction=heldout_fraction,
            min_agreement=min_agreement,
        )
        out = self_improve(opts, run_id, yes, quiet or as_json)
        if as_json:
            print_json(out)
        else:
            _print_outcome(out)
        raise typer.Exit(0 if out["status"] in ("bound", "needs_approval") else 1)
