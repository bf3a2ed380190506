"""`trainteam validate TASK` as a real subprocess: one line per check on a good task (a demo task, and a
real instruct model with chat data and a TRL user's keys), one error line naming the field and exit 2 on a
bad one, and nothing written: no workspace, no database, no `.trainteam` folder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from instruction_rows import as_chat, instruction_rows
from spine_helpers import TINY_TASK, _env


def validate(cwd, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run from ``cwd`` with no -w: the default workspace would be ``cwd/.trainteam``."""
    return subprocess.run(
        [sys.executable, "-m", "trainteam.cli", "validate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**_env(), **(env or {})},
    )


def _files(folder) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture
def chat_task(tmp_path, real_model):
    """A user's task as a TRL user writes it: their model folder, their chat rows, TRL's key names."""
    for name, rows in (
        ("train.jsonl", as_chat(instruction_rows(40))),
        ("eval.jsonl", as_chat(instruction_rows(8, 40))),
    ):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {
        "name": "my-chat",
        "model": {"path": str(real_model)},
        "stages": ["sft"],
        "data": {"path": "train.jsonl", "eval_path": "eval.jsonl"},
        "budget": {"max_wall_minutes": 30},
        "training": {
            "sft": {
                "per_device_train_batch_size": 4,
                "gradient_accumulation_steps": 2,
                "num_train_epochs": 1,
                "max_length": 128,
                "lr_scheduler_type": "linear",
                "use_peft": True,
                "lora_r": 8,
                "lora_alpha": 16,
                "threads": 1,
                "trl": {"eval_strategy": "no", "assistant_only_loss": False},
            }
        },
    }
    return tmp_path, task


def _write(folder, task: dict):
    (folder / "task.yaml").write_text(yaml.safe_dump(task))
    return "task.yaml"


def test_a_demo_task_passes_every_check_and_writes_nothing(tmp_path):
    name = _write(tmp_path, TINY_TASK)
    proc = validate(tmp_path, name, "--no-measure")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "✓ task",
        "✓ model",
        "✓ preflight",
        "✓ answers",
        "✓ gate (pretrain)",
        "✓ tokens (pretrain)",
        "✓ plan (pretrain)",
    ]
    assert "random init" in lines[1] and "bounded by UTF-8 bytes" in lines[5] and "6 steps" in lines[6]
    assert lines[4] == "✓ gate (pretrain): the task's: heldout_loss <= 50"  # the gate that will apply, said before
    assert "(assumed: a FLOP guess, not measured)" in lines[6]  # how the estimate was made
    assert _files(tmp_path) == {"task.yaml"}  # no .trainteam, no database, no cache


def test_a_real_model_with_chat_data_and_trl_keys(chat_task, tmp_path_factory):
    folder, task = chat_task
    cache = tmp_path_factory.mktemp("cache")
    name = _write(folder, task)
    made = _files(folder)
    proc = validate(folder, name, env={"TRAINTEAM_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "✓ model: smollm2-135m-instruct: llama, 134,515,008 parameters" in out
    assert "has a chat template" in out and "tokenizer loads (vocab 49,152)" in out
    assert (
        "✓ tokens (sft): 40 training rows; 40 examples" in out
        and "counted with the model's tokenizer, chat format" in out
    )
    assert "✓ trl (sft): SFTConfig takes assistant_only_loss, eval_strategy" in out
    plan_line = next(line for line in out.splitlines() if line.startswith("✓ plan (sft)"))
    assert plan_line.startswith("✓ plan (sft): 5 steps,")  # 40 rows / (4 x 2)
    assert "(measured " in plan_line and " at load " in plan_line  # how the estimate was made, and under what load
    assert _files(folder) == made  # nothing new beside the task: no workspace
    assert len(list((cache / "calibration").glob("*.json"))) == 1  # the one measurement, outside any workspace


def test_rows_longer_than_max_length_are_said_to_be_dropped_where_curation_drops_them(chat_task):
    """A run that fine-tunes a local model curates rows over the stage's max_length away (rows.over_length):
    validate says so, with the count and the setting that keeps them; with the length rule off it says the
    trainer cuts them."""
    folder, task = chat_task
    task["training"]["sft"]["max_length"] = 40
    proc = validate(folder, _write(folder, task), "--no-measure")
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("! tokens (sft)"))
    assert line.endswith(
        "of 40 longer than max_length 40: the curate step drops them (rows.over_length); "
        "a larger training.sft.max_length keeps them"
    ), line
    task["curation"] = {"rows": {"max_tokens": None}}
    proc = validate(folder, _write(folder, task), "--no-measure")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("! tokens (sft)"))
    assert line.endswith("of 40 longer than max_length 40: cut there in training"), line


def test_free_form_answers_are_said_to_be_judged_by_free_form_metrics(tmp_path, real_model):
    """A chat task whose answers are replies in a house style: validate says they are free-form, which metrics
    judge them and why, and the default gate that will apply; exact match is named as never deciding."""
    from freeform_tasks import freeform_rows

    train, held, _ = freeform_rows("reply", 40, 30, seed=1)
    for name, rows in (("train.jsonl", train), ("eval.jsonl", held)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {
        "name": "replies",
        "model": {"path": str(real_model)},
        "stages": ["sft"],
        "data": {"path": "train.jsonl", "eval_path": "eval.jsonl"},
        "budget": {"max_wall_minutes": 20},
    }
    proc = validate(tmp_path, _write(tmp_path, task), "--no-measure")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = {line.split(":")[0]: line for line in proc.stdout.splitlines()}
    judging = lines["✓ judging"]
    assert "answers: free-form (long answers: the median reference holds" in judging
    assert "judged by heldout_loss, rouge_l, chrf, form_rate" in judging and "never deciding: exact_match" in judging
    gate = lines["✓ gate (sft)"]
    assert gate.startswith(
        "✓ gate (sft): the default (the task names none): heldout_loss below the input's beyond noise, rouge_l above"
    )
    assert "exact_match reported, never gating" in gate
    _refused(
        tmp_path,
        {**task, "eval": {"metrics": ["rouge_l", "bleu"]}},
        "eval.metrics: unknown metric 'bleu' (one of heldout_loss",
    )
    named = validate(tmp_path, _write(tmp_path, {**task, "eval": {"metrics": ["chrf"]}}), "--no-measure")
    assert "the task names its metrics: chrf) -> judged by chrf;" in named.stdout, named.stderr[-2000:]


def _refused(folder, task: dict, expected: str, *args: str) -> tuple[str, str]:
    """(stdout, the error line) of a refused task: exit 2, one line, no traceback, nothing written."""
    proc = validate(folder, _write(folder, task), "--no-measure", *args)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert expected in err[0], err[0]
    assert not (folder / ".trainteam").exists()
    return proc.stdout, err[0]


def test_a_misspelt_trl_key_is_refused_with_the_closest_name(tmp_path):
    task = {**TINY_TASK, "training": {"pretrain": {"max_steps": 6, "gradient_acumulation_steps": 2}}}
    out, _ = _refused(
        tmp_path,
        task,
        "task.yaml: training.pretrain: unknown field 'gradient_acumulation_steps'; "
        "did you mean 'gradient_accumulation_steps'?",
    )
    assert out.strip().splitlines() == ["✗ task"]


def test_a_key_given_twice_names_both(tmp_path):
    task = {**TINY_TASK, "training": {"pretrain": {"max_steps": 6, "grad_accum": 2, "gradient_accumulation_steps": 4}}}
    _refused(
        tmp_path, task, "training.pretrain: grad_accum and gradient_accumulation_steps: the same setting given twice"
    )


def test_an_unknown_trl_block_key_names_the_field_and_the_closest(chat_task):
    folder, task = chat_task
    task["training"]["sft"]["trl"] = {"eval_stratgy": "no"}
    out, _ = _refused(
        folder,
        task,
        "task.yaml: training.sft.trl.eval_stratgy: not a field of TRL's SFTConfig; did you mean 'eval_strategy'?",
    )
    assert out.strip().splitlines()[-1] == "✗ preflight" and out.startswith("✓ task")


def test_a_trl_block_key_trainteam_sets_names_our_field(chat_task):
    folder, task = chat_task
    task["training"]["sft"]["trl"] = {"learning_rate": 1e-3}
    _refused(folder, task, "training.sft: trl.learning_rate: trainteam sets it from learning_rate")


def test_a_model_folder_without_its_tokenizer(chat_task):
    folder, task = chat_task
    source, model = Path(task["model"]["path"]), folder / "model"
    model.mkdir()
    for f in source.iterdir():  # the weights linked, the configs copied, no tokenizer files
        if f.suffix == ".safetensors":
            (model / f.name).symlink_to(f)
        elif f.name in ("config.json", "generation_config.json"):
            shutil.copy(f, model / f.name)
    task["model"]["path"] = "model"
    out, err = _refused(folder, task, "task.yaml: model.path: ")
    assert "the tokenizer does not load" in err and "no tokenizer.json" in err
    assert out.strip().splitlines() == ["✓ task: my-chat: stages sft, workflow train_model", "✗ model"]


def test_a_bad_data_row_names_file_row_and_column(chat_task):
    folder, task = chat_task
    with (folder / "train.jsonl").open("a") as f:
        f.write(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}]}) + "\n")
    out, err = _refused(folder, task, "train.jsonl:41")
    assert "messages" in err and "content" in err
    assert out.strip().splitlines()[-1] == "✗ preflight"


def test_validate_measures_then_the_run_report_sets_the_plan_beside_the_run(tmp_path, ws):
    """A person validates (the throughput is measured once and cached), runs the task, and reads in the
    report the planner's steps, tokens, tokens/s and minutes beside what training measured."""
    from spine_helpers import cli

    env = {"TRAINTEAM_CACHE_DIR": str(tmp_path / "cache")}
    name = _write(tmp_path, TINY_TASK)
    checked = validate(tmp_path, name, env=env)
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert "(measured " in checked.stdout.strip().splitlines()[-1]
    run = cli(
        ws,
        "execute-workflow",
        "train_model",
        "--task",
        str(tmp_path / name),
        "--run-id",
        "r1",
        "--json",
        "--yes",
        timeout=600,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    metrics = json.loads(run.stdout)["metrics"]
    files = json.loads(cli(ws, "runs", "report", "r1", "--json", check=True, env=env).stdout)
    md = Path(files["markdown"]).read_text()
    assert "## Plan against the run" in md
    row = next(line for line in md.splitlines() if line.startswith("| pretrain | 6 / 6 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].endswith(f"/ {int(metrics['train.pretrain.tokens']):,}")
    assert "(measured)" in cells[3] and cells[3].endswith(f"/ {metrics['train.pretrain.tokens_per_s']:.1f}")


def test_a_task_without_a_recipe_says_what_the_engineer_will_search(tmp_path):
    task = {**TINY_TASK, "stages": ["pretrain", "grpo"], "training": {"pretrain": {"seq_len": 32}}}
    proc = validate(tmp_path, _write(tmp_path, task), "--no-measure")
    assert proc.returncode == 0, proc.stderr[-2000:]
    recipe = [line for line in proc.stdout.splitlines() if line.startswith("✓ recipe")]
    assert recipe[0].startswith(
        "✓ recipe (pretrain): learning_rate, max_steps, per_device_train_batch_size "
        "not given: "
        "the training engineer searches them (6 learning rates"
    )
    assert recipe[1] == "✓ recipe (grpo): learning_rate not given: 1e-05, the default for grpo"
