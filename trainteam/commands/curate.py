"""`trainteam curate run|demo|build`: the data engine on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from trainteam.commands.common import console, load_config_file, print_json, workspace
from trainteam.core.errors import BadInput, format_validation_error

curate_app = typer.Typer(help="Curate training data: dedup, decontaminate, filter, version.", no_args_is_help=True)


def _eval_sets(specs: list[str]) -> dict[str, Path]:
    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise BadInput(f"--eval: expected NAME=PATH, got {spec!r}")
        if not Path(path).exists():
            raise BadInput(f"--eval {name}: {path}: no such file")
        out[name] = Path(path)
    return out


def _load_config(path: Optional[Path]):
    from trainteam.curation.pipeline import CurationConfig

    if path is None:
        return CurationConfig()
    return load_config_file(path, CurationConfig, "--config")


@curate_app.command("run")
def run(
    corpus: Path = typer.Argument(..., help=".jsonl / .txt / .parquet file, or a folder of them, or a saved HF dataset"),
    eval_: List[str] = typer.Option([], "--eval", help="NAME=PATH of an eval set to decontaminate against (repeatable)"),
    config: Optional[Path] = typer.Option(None, "--config", help="CurationConfig as YAML or JSON"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="output folder (default: workspace datasets/<version>)"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="skip and count malformed lines instead of stopping"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Run the whole chain and record the result as a DatasetVersion in the knowledge graph."""
    from trainteam.curation.pipeline import planned_version
    from trainteam.workflows.steps.curate import curate_recorded

    if not corpus.exists():
        raise BadInput(f"corpus: {corpus}: no such file or folder")
    cfg = _load_config(config)
    if skip_bad:
        cfg = cfg.model_copy(update={"skip_bad": True})
    evals = _eval_sets(eval_)
    ws = workspace()
    out_dir = out or ws.dir("datasets") / (planned_version(corpus, evals, cfg) or "curated")
    report = curate_recorded(ws.graph, corpus, evals, cfg, out_dir, progress=not as_json)
    if as_json:
        return print_json(report.model_dump(mode="json"))
    console.print(report.summary(), highlight=False)
    if report.node_id:
        console.print(f"  graph node {report.node_id}", highlight=False)


@curate_app.command("demo")
def demo(
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="folder (default: workspace datasets/demo)"),
    docs: int = typer.Option(2000, "--docs", min=1, help="English-like documents (before injected ones)"),
    task: str = typer.Option("addition", "--task", help="addition | subtraction | multiplication"),
    n_train: int = typer.Option(20000, "--n-train", min=0),
    n_eval: int = typer.Option(200, "--n-eval", min=1),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Write the bundled demo data: a text corpus with injected near-dups, leaks and junk,
    its eval sets, and the arithmetic train/eval split."""
    from pydantic import ValidationError

    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
    from trainteam.curation.jsonl import write_jsonl
    from trainteam.curation.synthetic import DemoCorpusConfig, demo_eval_sets, iter_demo_corpus

    try:
        arith = ArithmeticConfig(task=task, n_train=n_train, n_eval=n_eval, seed=seed)
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, "demo")) from None
    folder = out or workspace().dir("datasets") / "demo"
    cfg = DemoCorpusConfig(n_docs=docs, seed=seed)
    evals = demo_eval_sets(cfg)
    paths = {"corpus": write_jsonl(iter_demo_corpus(cfg, evals), folder / "corpus.jsonl")}
    for name, exs in evals.items():
        paths[f"eval:{name}"] = write_jsonl(exs, folder / f"eval_{name}.jsonl")
    train, held_out = generate_arithmetic(arith)
    paths[f"{task}_train"] = write_jsonl(train, folder / f"{task}_train.jsonl")
    paths[f"{task}_eval"] = write_jsonl(held_out, folder / f"{task}_eval.jsonl")
    for name, p in paths.items():
        console.print(f"{name}: {p}", highlight=False)


@curate_app.command("build")
def build(
    kind: str = typer.Argument(..., help="sft | preference | grpo"),
    source: Path = typer.Argument(..., help=".jsonl of traces (sft) or scored samples {prompt, completion, reward}"),
    min_reward: Optional[float] = typer.Option(None, "--min-reward", help="sft: keep traces with at least this reward"),
    min_margin: float = typer.Option(0.0, "--min-margin", help="preference: reward gap a pair needs"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="folder (default: workspace datasets)"),
) -> None:
    """Build an SFT / preference / GRPO dataset, recorded as a DatasetVersion (built once per input and options)."""
    from functools import partial

    from trainteam.curation.builders import build_grpo_groups, build_preference_pairs, build_sft_examples
    from trainteam.curation.jsonl import read_jsonl
    from trainteam.curation.lineage import materialize
    from trainteam.graph.record import recorded_dataset
    from trainteam.workflows.steps.curate import record_built

    builders = {
        "sft": (lambda recs: build_sft_examples(recs, min_reward=min_reward), {"min_reward": min_reward}),
        "preference": (lambda recs: build_preference_pairs(recs, min_margin=min_margin), {"min_margin": min_margin}),
        "grpo": (build_grpo_groups, {}),
    }
    if kind not in builders:
        raise BadInput(f"kind: unknown dataset kind {kind!r} ({', '.join(builders)})")
    if not source.is_file():
        raise BadInput(f"source: {source}: no such file")
    fn, params = builders[kind]
    ws = workspace()
    version, path, built = materialize(kind, {"source": source}, params, lambda: fn(read_jsonl(source)),
                                       out or ws.dir("datasets"), recorded=partial(recorded_dataset, ws.graph))
    if built is not None:
        record_built(ws.graph, built)
    reused = built is None
    n = sum(1 for _ in path.open("rb"))
    console.print(f"{kind} dataset {version}: {n} rows in {path}" + (" (reused)" if reused else ""), highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(curate_app, name="curate")
