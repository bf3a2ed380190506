"""lm-evaluation-harness on a local checkpoint folder, offline.

The harness does the evaluation (task configs, prompting, generation, metrics);
this module only points it at local things: task YAML from a folder (built-in
tasks are not scanned, they name hub datasets) and data files on disk, with the
hub switched off. ``lm_eval`` is imported inside the functions: importing its
evaluator costs ~2.6 s here, which short CLI commands must not pay.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from trainteam.core.errors import BadInput
from trainteam.curation.formats import example, prompt_format, prompt_text, query


class LmEvalResult(BaseModel):
    checkpoint: str
    tasks: dict[str, dict[str, float]] = Field(description="task -> {metric: value} (stderr left out)")
    n_samples: dict[str, int] = Field(default_factory=dict)
    results_path: str | None = None

    def metric(self, task: str, name: str) -> float:
        try:
            return self.tasks[task][name]
        except KeyError:
            raise BadInput(
                f"lm-eval result: no metric {name!r} for task {task!r} (have {sorted(self.tasks.get(task, {}))})"
            ) from None


def write_exact_match_task(
    out_dir: str | Path,
    name: str,
    records: Iterable[dict[str, Any]],
    tokenizer,
    *,
    max_new_tokens: int = 8,
) -> Path:
    """Write a harness task (YAML + JSONL) asking for greedy exact match on prompt/completion records.

    The context is built with ``prompt_text`` so the harness sees exactly what training saw;
    generation stops at the tokenizer's EOS.
    """
    if not name.replace("_", "").isalnum():
        raise BadInput(f"lm-eval task name {name!r}: use letters, digits and _ only")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"{name}.jsonl"
    n, fmt = 0, prompt_format(tokenizer)
    with data.open("w") as fh:
        for i, r in enumerate(records):
            try:
                prompt, answer = example(r)
            except (KeyError, ValueError):
                raise BadInput(
                    f"lm-eval task {name}: record {i} needs 'prompt' and 'completion', or 'messages'"
                ) from None
            context = prompt_text(tokenizer, query(r), fmt)
            fh.write(json.dumps({"context": context, "answer": answer}) + "\n")
            n += 1
    if n == 0:
        raise BadInput(f"lm-eval task {name}: no records")
    stop = [s for s in (tokenizer.eos_token,) if s]
    cfg = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data.resolve())}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{context}}",
        "doc_to_target": "{{answer}}",
        "target_delimiter": "",
        "generation_kwargs": {"until": stop, "do_sample": False, "max_gen_toks": max_new_tokens},
        "metric_list": [
            {"metric": "exact_match", "aggregation": "mean", "higher_is_better": True, "regexes_to_ignore": ["\\s+"]}
        ],
        "metadata": {"version": 1.0},
    }
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_lm_eval(
    checkpoint: str | Path,
    tasks: list[str],
    *,
    include_path: str | Path,
    tokenizer_path: str | Path | None = None,
    batch_size: int = 16,
    limit: int | None = None,
    device: str = "cpu",
    out_dir: str | Path | None = None,
) -> LmEvalResult:
    """Run harness ``tasks`` (defined by YAML under ``include_path``) on a local checkpoint folder."""
    ckpt = Path(checkpoint)
    if not (ckpt / "config.json").is_file():
        raise BadInput(f"checkpoint {ckpt}: not a model folder (no config.json)")
    include = Path(include_path)
    if not include.is_dir():
        raise BadInput(f"lm-eval include_path {include}: not a folder")
    if not tasks:
        raise BadInput("lm-eval tasks: give at least one task name")
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[var] = "1"  # the harness would otherwise try the hub for configs

    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(include), include_defaults=False)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        raise BadInput(f"lm-eval tasks {unknown}: not defined under {include} (found {sorted(manager.all_tasks)[:10]})")
    model_args = {
        "pretrained": str(ckpt),
        "tokenizer": str(tokenizer_path or ckpt),
        "dtype": "float32",
        "trust_remote_code": False,
    }
    out = simple_evaluate(
        model="hf",
        model_args=model_args,
        tasks=list(tasks),
        task_manager=manager,
        batch_size=batch_size,
        device=device,
        limit=limit,
        log_samples=False,
        bootstrap_iters=0,
        write_out=False,
    )
    if out is None:  # only on non-zero ranks of a distributed run
        raise BadInput("lm-eval returned no results (not rank 0)")
    metrics: dict[str, dict[str, float]] = {}
    for task, vals in out["results"].items():
        metrics[task] = {
            k.split(",")[0]: float(v)
            for k, v in vals.items()
            if isinstance(v, (int, float)) and "_stderr" not in k and k not in ("alias", "sample_len")
        }
    n_samples = {
        t: int(v["effective"] if "effective" in v else v.get("original", 0)) if isinstance(v, dict) else int(v)
        for t, v in out.get("n-samples", {}).items()
    }
    result = LmEvalResult(checkpoint=str(ckpt), tasks=metrics, n_samples=n_samples)
    if out_dir is not None:
        p = Path(out_dir)
        p.mkdir(parents=True, exist_ok=True)
        path = p / "lm_eval_results.json"
        path.write_text(
            json.dumps(
                {
                    "results": out["results"],
                    "n-samples": out.get("n-samples", {}),
                    "config": {"model_args": model_args, "tasks": tasks, "limit": limit},
                },
                indent=1,
                default=str,
            )
        )
        result.results_path = str(path)
    return result
