"""What trained is what is recorded: a real run of a task in trainteam's earlier spelling; the config the
resolver gave the trainer is recorded once per attempt (the stage's Checkpoint node, the train step's output,
``runs show`` and ``runs show --json``) under TRL's names, and equals the TrainingArguments the trainer saved."""

from __future__ import annotations

from spine_helpers import TINY_TASK, cli, run_view, write_task

TRAINING = {"max_steps": 6, "per_device_batch_size": 8, "grad_accum": 2, "seq_len": 32, "save_steps": 3,
            "learning_rate": 0.002, "warmup_steps": 1, "lr_scheduler": "linear"}


def test_the_recorded_config_is_what_the_trainer_got(tmp_path, ws):
    import torch

    task = write_task(tmp_path, training={"pretrain": TRAINING})
    run = cli(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "r-cfg", "-q", "--yes",
              timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]

    trained = run_view(ws, "r-cfg")["trained"]
    assert [(t["step"], t["visit"], t["stage"]) for t in trained] == [("train", 1, "pretrain")]
    config = trained[0]["config"]
    assert {k: config[k] for k in ("per_device_train_batch_size", "gradient_accumulation_steps", "max_length",
                                   "lr_scheduler_type", "learning_rate", "max_steps", "warmup_steps")} == {
        "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2, "max_length": 32,
        "lr_scheduler_type": "linear", "learning_rate": 0.002, "max_steps": 6, "warmup_steps": 1}

    from trainteam.workspace import Workspace

    graph = Workspace.open(ws).graph
    [checkpoint] = [n for n in graph.nodes("Checkpoint") if n.get("stage") == "pretrain"]
    assert checkpoint["config"] == config  # recorded with the weights it made

    # what the trainer got: the TrainingArguments transformers saved beside the weights
    args = torch.load(ws / "checkpoints" / "r-cfg" / "pretrain-v1" / "checkpoint-6" / "training_args.bin",
                      weights_only=False)
    for field in ("learning_rate", "gradient_accumulation_steps", "per_device_train_batch_size", "max_steps",
                  "warmup_steps", "seed"):
        assert getattr(args, field) == config[field], field
    assert args.lr_scheduler_type.value == config["lr_scheduler_type"]
    assert args.output_dir == config["output_dir"]

    shown = cli(ws, "runs", "show", "r-cfg", check=True).stdout
    line = next(x for x in shown.splitlines() if x.strip().startswith("trained train#1 pretrain:"))
    assert "learning_rate 0.002" in line and "gradient_accumulation_steps 2" in line and "max_length 32" in line
    assert TINY_TASK["training"]["pretrain"]["per_device_batch_size"] == 8  # the spine's task: still the old spelling
