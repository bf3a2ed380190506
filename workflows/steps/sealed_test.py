"""eval_judge's last measurement: the registered weights on the sealed test part, scored once.

The held-out rows were cut at ``prepare_corpus`` into a dev part, which every deciding step reads (the gates,
the judge's diagnosis, the recipe search's choice, a retry), and a sealed test part (``curation.splits.
seal_test``), which no deciding step reads: agents overfit what they select on, so the figure to trust is one
nothing was chosen by. This step runs after the final gate, on the weights ``register_model`` will register,
with the same battery and answer length as the final evaluation, and records the test figures with the
dev-test gap. What follows it only records: the registry keeps the figures beside the dev ones.
"""

from __future__ import annotations

from pathlib import Path

from trainteam.agents.pairwise_judge import PairwiseResult, configured, pairwise_judge
from trainteam.contract.step_io import StepResult, ToolContext
from trainteam.contract.step_outputs import CorpusOutput, SealedOutput, TrainOutput
from trainteam.curation.demo import read_jsonl
from trainteam.curation.formats import example, query
from trainteam.trainers.evaluation.battery import greedy_generations
from trainteam.trainers.evaluation.metrics.metric_spec import prompt_words
from trainteam.trainers.training.models import load_model
from trainteam.trainers.training.tokenizer import load_tokenizer
from trainteam.workflows.steps.corpus import sealed_test_set
from trainteam.workflows.steps.judge import measure_stage, stage_of

SHOWN = ("exact_match", "rouge_l", "chrf", "form_rate", "heldout_loss")
PAIRWISE_PROMPTS = 20


def _trained_on(ctx: ToolContext) -> list[Path]:
    """Every file the weights trained on (the train and align steps' record), for a battery without curation."""
    return [Path(p) for name in ("train", "align") if (out := ctx.ran(name)) for p in TrainOutput.of(out).trained_on]


def sealed_test(ctx: ToolContext) -> StepResult:
    """The final weights (``inputs.of``, default ``final_eval``) on the sealed test rows, once."""
    final = ctx.output(ctx.inputs.of or "final_eval")
    found, cut = sealed_test_set(ctx), CorpusOutput.of(ctx.output("prepare_corpus")).sealed_test
    if found is None:
        why = cut or "no sealed test part"
        return StepResult(outcome="skipped", summary=f"no sealed test: {why}")
    path, data_node = found
    stage = stage_of(ctx, final.stage or "")
    node, result = measure_stage(
        ctx,
        stage,
        final.checkpoint,
        final.tokenizer,
        final.checkpoint_node,
        f"{ctx.run_id}/sealed_test",
        _trained_on(ctx),
        eval_set=("test", path, data_node),
    )
    pairwise = _pairwise(ctx, path, result.answers, result.answer_tokens)
    test, dev = result.metrics, final.metrics
    gap = {k: round(test[k] - dev[k], 5) for k in test if k in dev}
    shown = ", ".join(f"{k} {test[k]:.3g} (dev {dev[k]:.3g})" for k in SHOWN if k in test and k in dev)
    return StepResult(
        summary=f"sealed test, {result.n_eval} rows scored once: {shown}; {pairwise.line()}",
        metrics=test,
        nodes={"test_eval": node, "checkpoint": final.checkpoint_node},
        artifacts={"checkpoint": str(final.checkpoint), "tokenizer": final.artifacts["tokenizer"]},
        details=SealedOutput(
            stage=stage.name,
            n_test=result.n_eval,
            dev=dev,
            gap=gap,
            sizing=cut or "",
            pairwise=pairwise.model_dump(mode="json"),
        ).model_dump(mode="json"),
    )


def _pairwise(ctx: ToolContext, path: Path, answers: list[str], tokens: int | None) -> PairwiseResult:
    """The eval_judge's model comparing the trained and the input model's answers on the test prompts, in both
    orders (``agents.pairwise_judge``): beside the metrics, never a gate. Off, and said so, without a provider
    for eval_judge (the input model is then not even loaded), or where the run has no input model (random
    init) or its answers do not line up with the rows."""
    if not configured("eval_judge"):
        return pairwise_judge([], [], [])  # off, and its note says why
    rows = read_jsonl(path)
    base = ctx.task.model.path
    if base is None or len(rows) != len(answers) or not tokens:
        return _not_run(base, rows, answers)
    rows, answers = rows[:PAIRWISE_PROMPTS], answers[:PAIRWISE_PROMPTS]  # the input model answers only these
    tokenizer = load_tokenizer(ctx.output(ctx.inputs.of or "final_eval").tokenizer)
    model = load_model(Path(base))
    baseline = greedy_generations(model, tokenizer, [query(r) for r in rows], max_new_tokens=tokens, batch_size=16)
    pairs = [example(r) for r in rows]
    return pairwise_judge(
        [prompt_words(p) for p, _ in pairs],
        answers,
        [g["text"] for g in baseline],
        [ref for _, ref in pairs],
        n=len(rows),
    )


def _not_run(base: Path | None, rows: list[dict], answers: list[str]) -> PairwiseResult:
    why = (
        "the run started from random init: no input model"
        if base is None
        else (f"{len(answers)} answers for {len(rows)} rows")
    )
    return PairwiseResult(ran=False, note=f"pairwise judge: not run ({why})")
