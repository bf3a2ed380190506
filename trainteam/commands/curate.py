"""`trainteam curate run|demo|build`: the data engine on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from trainteam.commands.common import console, load_config_file, print_json, workspace
from trainteam.core.errors import BadInput, format_validation_error

if TYPE_CHECKING:
    from trainteam.curation.formats import RowKind

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


def _load_config(path: Path | None, kind: RowKind = "text"):
    from trainteam.curation.pipeline import CurationConfig
    from trainteam.workflows.steps.curate import default_config

    defaults = default_config(kind)  # text: every stage; chat/pair/preference rows: the row checks instead
    if path is None:
        return defaults
    given = load_config_file(path, CurationConfig, "--config").model_dump(exclude_unset=True)
    return CurationConfig.model_validate({**defaults.model_dump(), **given})  # what the file says, over them


def _corpus_rows(corpus: Path, skip_bad: bool = False):
    """``(kind, what curate reads)``: a text corpus as it is; chat, pair or preference rows read as
    canonical rows (``curation.rows``) into the records the row checks and dedup compare."""
    from trainteam.curation.formats import row_kind
    from trainteam.curation.row_checks import row_records
    from trainteam.curation.rows import read_rows
    from trainteam.curation.sources import iter_items

    # a device, an empty file, a first row over the bound: refused before the workspace opens
    next(iter_items(corpus, skip_bad=skip_bad), None)
    try:
        first = read_rows(corpus, limit=1)
    except BadInput:
        return "text", corpus  # not rows curation.rows reads: the text path says what is wrong
    kind = row_kind(first[0]) if first else "text"
    if kind == "text":
        return kind, corpus
    return kind, list(row_records(read_rows(corpus), corpus.name))


def _check_split(kind: str, rows, by: str, fraction: float, seed: int, corpus: Path) -> None:
    """The split is possible on the input (its field on every row, two groups at least), before anything is stored."""
    from trainteam.curation.row_checks import row_of
    from trainteam.curation.splits import split_by_group

    if kind == "text":
        raise BadInput(f"--heldout-by: splits chat, prompt/completion or preference rows; {corpus} holds text")
    split_by_group([row_of(r) for r in rows], by, fraction, seed, where=f"--heldout-by {by}: {corpus}")


def _split(report, by: str, fraction: float, seed: int) -> dict:
    """The curated rows split by ``by`` (whole groups held out): train.jsonl and heldout.jsonl beside them."""
    from trainteam.curation.jsonl import read_jsonl, write_jsonl
    from trainteam.curation.row_checks import row_of
    from trainteam.curation.splits import split_by_group

    rows = [{"id": r["id"], **row_of(r)} for r in read_jsonl(Path(report.output))]
    train, held = split_by_group(rows, by, fraction, seed, where=report.output)
    folder = Path(report.output).parent
    paths = {
        "train": write_jsonl(train, folder / "train.jsonl"),
        "heldout": write_jsonl(held, folder / "heldout.jsonl"),
    }
    return {
        "by": by,
        "fraction": fraction,
        "seed": seed,
        "train_rows": len(train),
        "heldout_rows": len(held),
        "heldout_groups": sorted({r[by] for r in held}),
        **{k: str(v) for k, v in paths.items()},
    }


@curate_app.command("run")
def run(
    corpus: Path = typer.Argument(
        ..., help=".jsonl / .txt / .parquet file, or a folder of them, or a saved HF dataset"
    ),
    eval_: list[str] = typer.Option(
        [], "--eval", help="NAME=PATH of an eval set to decontaminate against (repeatable)"
    ),
    config: Path | None = typer.Option(None, "--config", help="CurationConfig as YAML or JSON"),
    out: Path | None = typer.Option(None, "--out", "-o", help="output folder (default: workspace datasets/<version>)"),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="skip and count malformed lines instead of stopping"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    heldout_by: str | None = typer.Option(
        None,
        "--heldout-by",
        help="hold out whole groups of rows by this "
        "field (run_id: no run on both sides), after dedup: writes "
        "train.jsonl and heldout.jsonl beside the curated rows; for transcripts set "
        "near_dedup: null, as one step's turns in two runs are near duplicates",
    ),
    heldout_fraction: float = typer.Option(
        0.2, "--heldout-fraction", min=0.0, max=1.0, help="share of the groups held out (at least one, never all)"
    ),
    seed: int = typer.Option(0, "--seed", help="which groups are held out"),
) -> None:
    """Run the whole chain and record the result as a DatasetVersion in the knowledge graph.
    Text is filtered for quality; chat, prompt/completion and preference rows get the row checks (a
    --config file sets fields over those defaults)."""
    from trainteam.curation.pipeline import NothingKept, planned_version
    from trainteam.workflows.steps.curate import curate_recorded

    if not corpus.exists():
        raise BadInput(f"corpus: {corpus}: no such file or folder")
    kind, rows = _corpus_rows(corpus, skip_bad)
    cfg = _load_config(config, kind)
    if heldout_by:
        _check_split(kind, rows, heldout_by, heldout_fraction, seed, corpus)
    if skip_bad:
        cfg = cfg.model_copy(update={"skip_bad": True})
    evals = _eval_sets(eval_)
    ws = workspace()
    out_dir = out or ws.dir("datasets") / (planned_version(rows, evals, cfg) or "curated")
    try:
        report = curate_recorded(ws.graph, rows, evals, cfg, out_dir, progress=not as_json)
    except NothingKept as exc:  # the rows were read into memory: name the file they came from
        raise BadInput(f"{corpus}: {exc.reason}; see --config for the rules") from None
    split = _split(report, heldout_by, heldout_fraction, seed) if heldout_by else None
    if as_json:
        return print_json({**report.model_dump(mode="json"), **({"split": split} if split else {})})
    console.print(report.summary(), highlight=False)
    if report.node_id:
        console.print(f"  graph node {report.node_id}", highlight=False)
    if split:
        console.print(
            f"  held out by {heldout_by}: {split['heldout_rows']} rows of {len(split['heldout_groups'])} "
            f"({', '.join(split['heldout_groups'])}) → {split['heldout']}; {split['train_rows']} → "
            f"{split['train']}",
            highlight=False,
        )


@curate_app.command("demo")
def demo(
    out: Path | None = typer.Option(None, "--out", "-o", help="folder (default: workspace datasets/demo)"),
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
    min_reward: float | None = typer.Option(None, "--min-reward", help="sft: keep traces with at least this reward"),
    min_margin: float = typer.Option(0.0, "--min-margin", help="preference: reward gap a pair needs"),
    out: Path | None = typer.Option(None, "--out", "-o", help="folder (default: workspace datasets)"),
) -> None:
    """Build an SFT / preference / GRPO dataset, recorded as a DatasetVersion (built once per input and options)."""
    from trainteam.workflows.improve.built_datasets import BuildOptions, build_recorded, planned_build

    opts = BuildOptions(min_reward=min_reward, min_margin=min_margin)
    planned_build(kind, source, opts)  # a bad kind or a missing source: one line, before the workspace opens
    ws = workspace()
    built = build_recorded(ws.graph, kind, source, opts, out or ws.dir("datasets"))
    console.print(
        f"{kind} dataset {built.version}: {built.rows} rows in {built.path}" + (" (reused)" if built.reused else ""),
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(curate_app, name="curate")
