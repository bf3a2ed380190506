"""Where a registered model came from, as an export needs it: the rows to check it on and the facts for its card.

Read from the registry's record and the run that registered it (its task, the ``prepare_corpus`` step's held-out
parts, the configs the trainer got): the sealed test rows and then the dev rows, up to ``CHECK_ROWS``; the task's
answer rule; the answer length the model was judged at. A model no run made (an imported base) has no held-out
rows: the person names a file of rows to check the export on (``--rows``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.contract.train_task import TrainTask
from trainteam.core.errors import BadInput
from trainteam.core.inputfiles import load_yaml
from trainteam.curation.answers import default_answer
from trainteam.curation.demo import read_jsonl
from trainteam.curation.formats import row_kind
from trainteam.trainers.export.export_check import CheckRows
from trainteam.trainers.export.exporter import ExportSource
from trainteam.trainers.export.model_card import CardFacts
from trainteam.trainers.serving.registry import ModelRecord
from trainteam.workflows.engine.store import RunStore
from trainteam.workflows.report.views import sealed_in, trained_in

CHECK_ROWS = 100
DEFAULT_ANSWER_TOKENS = 64


def _step_output(attempts: list[dict[str, Any]], step: str) -> dict[str, Any] | None:
    for a in reversed(attempts):
        out = a.get("output")
        if a["step"] == step and isinstance(out, dict) and out.get("outcome") == "ok":
            return out
    return None


def _answer_rows(paths: list[Path], where: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        if not path.is_file():
            raise BadInput(f"{where}: {path} is missing; restore it, or pass --rows FILE.jsonl to check the export on")
        rows += [r for r in read_jsonl(path) if _answered(r)]
    return rows[:CHECK_ROWS]


def _answered(row: dict[str, Any]) -> bool:
    try:
        return row_kind(row) in ("pair", "chat")
    except (ValueError, AttributeError):
        return False


def _license(base: str | None, lineage: dict[str, Any]) -> str | None:
    """The base model's license: recorded at import, or its folder's card metadata; None when not found."""
    if lineage.get("license"):
        return str(lineage["license"])
    card = Path(base) / "README.md" if base else None
    if card is None or not card.is_file():
        return None
    text = card.read_text(errors="replace")
    if text.startswith("---"):
        try:  # someone else's card: a front matter that does not load means the license is not known here
            meta = load_yaml(text.split("---", 2)[1], str(card)) or {}
        except BadInput:
            return None
        return str(meta["license"]) if isinstance(meta, dict) and meta.get("license") else None
    return None


def _run_rows(record: ModelRecord, run: dict[str, Any], attempts: list[dict[str, Any]]) -> CheckRows:
    task = TrainTask.model_validate(run["task"])
    corpus = _step_output(attempts, "prepare_corpus") or {}
    parts = corpus.get("artifacts") or {}
    paths = [Path(parts[k]) for k in ("test", "eval") if parts.get(k)]
    rows = _answer_rows(paths, f"model {record.id}: the held-out rows of run {run['run_id']}")
    if not rows:
        raise BadInput(f"model {record.id}: run {run['run_id']} kept no answered held-out rows; pass --rows FILE.jsonl")
    return CheckRows(
        rows=rows,
        source=f"the sealed test and dev rows of run {run['run_id']} ({len(rows)})",
        answer=task.answer,
        answer_tokens=int(record.lineage.get("answer_tokens") or DEFAULT_ANSWER_TOKENS),
    )


def given_rows(path: Path, record: ModelRecord) -> CheckRows:
    """Rows a person named (``--rows``): answered chat or prompt/completion rows, checked by exact normalised text."""
    if not path.is_file():
        raise BadInput(f"--rows {path}: no such file")
    rows = _answer_rows([path], f"--rows {path}")
    if not rows:
        raise BadInput(
            f"--rows {path}: no rows with an answer (chat rows ending with the assistant, or prompt/completion)"
        )
    return CheckRows(
        rows=rows,
        source=f"{path} ({len(rows)} rows)",
        answer=default_answer(False),
        answer_tokens=int(record.lineage.get("answer_tokens") or DEFAULT_ANSWER_TOKENS),
    )


def export_source(ws: Any, record: ModelRecord, rows_file: Path | None = None) -> ExportSource:
    """The export's view of ``record``: its folder, the rows to check on, the card's facts."""
    folder = Path(record.path)
    if not folder.is_dir() or not any(folder.glob("*.safetensors")):
        raise BadInput(
            f"model {record.id}: its folder {folder} is missing or holds no weights; restore it or register it again"
        )
    run_id = record.lineage.get("run") or record.lineage.get("run_id")
    runs = RunStore(ws.engine)
    run = runs.get(run_id) if run_id else None
    attempts = runs.attempts(str(run_id)) if run else []
    if rows_file is not None:
        rows = given_rows(rows_file, record)
    elif run is not None:
        rows = _run_rows(record, run, attempts)
    else:
        raise BadInput(
            f"model {record.id} ({record.stage}) was not made by a run here, so it has no held-out rows; "
            "pass --rows FILE.jsonl (answered rows to check the export on)"
        )
    return ExportSource(
        model_id=record.id,
        name=record.name,
        folder=folder,
        content_hash=record.content_hash,
        facts=card_facts(record, run, attempts),
        rows=rows,
    )


def card_facts(record: ModelRecord, run: dict[str, Any] | None, attempts: list[dict[str, Any]]) -> CardFacts:
    """What the model card says: base, license, data, recipe, metrics (dev and sealed test)."""
    task = TrainTask.model_validate(run["task"]) if run else None
    base = record.base or (str(task.model.path) if task and task.model.path else None)
    corpus = _step_output(attempts, "prepare_corpus") or {}
    data = [f"{k}: {v}" for k, v in sorted((corpus.get("artifacts") or {}).items()) if k in ("train", "eval", "test")]
    if task is not None and task.data.path:
        data.insert(0, f"source: {task.data.path}")
    sealed = sealed_in(attempts) or {}
    numbers = {
        k: float(v) for k, v in record.metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    return CardFacts(
        model_id=record.id,
        name=record.name,
        base=base,
        license=_license(base, record.lineage),
        run_id=run["run_id"] if run else None,
        data=data,
        recipe={e["stage"]: e["config"] for e in trained_in(attempts)},
        metrics={k: v for k, v in numbers.items() if not k.startswith("test.")},
        test_metrics={k[5:]: v for k, v in numbers.items() if k.startswith("test.")},
        test_rows=sealed.get("rows"),
        chat_template=record.prompt_format == "chat",
    )
