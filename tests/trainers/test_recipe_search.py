"""The recipe search's rules: the rates it tries, its rungs and lengths, its pick, and real probe runs."""

from __future__ import annotations

import pytest

from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
from trainteam.trainers.config import ModelSpec, TokenizerConfig, TrainConfig
from trainteam.trainers.models import build_model
from trainteam.trainers.recipe_search import (
    Probe,
    SearchReport,
    best_trial,
    default_batch,
    make_scorer,
    final_steps,
    lr_space,
    probe_length,
    release,
    rung_steps,
    run_probes,
    split_rows,
    wasted_tops,
)
from trainteam.trainers.tokenizer import load_tokenizer, train_tokenizer


def test_rates_are_log_spaced_per_kind_of_training():
    scratch = lr_space("pretrain", from_scratch=True, lora=False, n=6)
    assert scratch[0] == 1e-4 and scratch[-1] == 1e-2 and len(scratch) == 6
    ratios = [b / a for a, b in zip(scratch, scratch[1:])]
    assert max(ratios) / min(ratios) < 1.02  # evenly spaced on a log scale
    assert lr_space("sft", from_scratch=False, lora=True, n=4)[-1] == 5e-3
    assert lr_space("sft", from_scratch=False, lora=False, n=4)[0] == 3e-5


def test_rungs_lengths_and_batches():
    assert rung_steps(90) == [10, 90]
    assert rung_steps(9) == [1, 9]
    # 6 trials to a ninth of the top, 2 on to the top, the winner's steps kept: 6/9 + 16/9 - 1 top rungs wasted
    assert abs(wasted_tops(6) - 13 / 9) < 1e-9
    # 60 s at 0.1 s a step for 6 trials: the steps the run does not keep fit the time
    top = probe_length(60, 0.1, 6)
    assert 9 <= top and top * wasted_tops(6) * 0.1 <= 60
    assert probe_length(0, 0.1, 6) == 3  # no time: the shortest top rung
    # a model folder's fine-tune: at most 3 passes; from scratch: what the time affords
    assert final_steps(100, 0.01, rows=160, batch=8, grad_accum=1, max_epochs=3, probe_steps=10) == 60
    assert final_steps(100, 0.01, rows=160, batch=8, grad_accum=1, max_epochs=None, probe_steps=10) == 8500
    assert final_steps(0, 0.01, rows=160, batch=8, grad_accum=1, max_epochs=None, probe_steps=10) == 10
    assert [default_batch(n) for n in (50, 800, 3000, 100_000)] == [8, 8, 32, 64]


def test_validation_rows_are_cut_from_training_rows_seeded():
    rows = [{"text": str(i)} for i in range(500)]
    train, val = split_rows(rows, seed=3)
    assert len(val) == 50 and len(train) == 450
    assert not {r["text"] for r in val} & {r["text"] for r in train}
    assert split_rows(rows, seed=3)[1] == val and split_rows(rows, seed=4)[1] != val


def _report(probes):
    return SearchReport(stage="sft", method="sft", space=[1e-4, 1e-3], probe_steps=9, rungs=[1, 3, 9],
                        budget_s=10, probes=probes)


def test_the_pick_is_the_lowest_loss_at_the_highest_rung_and_never_an_unstable_probe():
    probes = [Probe(trial=0, learning_rate=1e-2, per_device_batch_size=8, steps=9, values={1: 2.0, 3: 1.0, 9: 0.1},
                    unstable=True),
              Probe(trial=1, learning_rate=1e-3, per_device_batch_size=8, steps=9, values={1: 2.0, 3: 1.2, 9: 0.9}),
              Probe(trial=2, learning_rate=1e-4, per_device_batch_size=8, steps=3, values={1: 1.5, 3: 1.4},
                    pruned=True)]
    assert best_trial(_report(probes)) == 1  # compared where both stood (step 3), the unstable one left out
    assert best_trial(_report(probes[:1])) is None
    # the first trial runs to the top unopposed; a later one, better where both stood, ran out of budget: it wins
    cut = [Probe(trial=0, learning_rate=1e-3, per_device_batch_size=8, steps=9, values={1: 2.0, 3: 1.5, 9: 1.0}),
           Probe(trial=1, learning_rate=3e-3, per_device_batch_size=8, steps=5, values={1: 1.8, 3: 1.2})]
    assert best_trial(_report(cut)) == 1
    tie = [Probe(trial=i, learning_rate=lr, per_device_batch_size=8, steps=9, values={9: 1.0})
           for i, lr in enumerate((1e-3, 1e-4))]
    assert best_trial(_report(tie)) == 0  # a tie goes to the higher rate: short probes undervalue it
    near = [Probe(trial=i, learning_rate=lr, per_device_batch_size=8, steps=9, values={9: v})
            for i, (lr, v) in enumerate(((1e-4, 0.90), (1e-3, 0.93), (3e-3, 0.99)))]
    em = _report(near).model_copy(update={"objective": "1 - exact_match + 0.01 heldout_loss", "validation_rows": 128})
    assert best_trial(em) == 1  # 3 points of exact match on 128 rows is noise; 9 points is not


def test_real_probes_halve_repeat_exactly_and_the_winner_goes_on_as_if_it_had_never_stopped(tmp_path):
    """Six real probe runs of a tiny Llama on addition text towards a 54-step run: all to step 6, the best two
    to 18, the same numbers twice; the winner's checkpoint, resumed to 54, ends where one run of 54 steps ends."""
    from trainteam.trainers.training import train

    train_rows, _ = generate_arithmetic(ArithmeticConfig(n_train=400, n_eval=20, max_operand=20, seed=0))
    rows = [{"text": r["prompt"] + r["completion"]} for r in train_rows]
    train_tokenizer((r["text"] for r in rows), TokenizerConfig(vocab_size=300), tmp_path / "tok")
    tok = load_tokenizer(tmp_path / "tok")
    spec = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=32)
    cfg = TrainConfig(method="pretrain", seq_len=32, threads=1, max_steps=54, per_device_batch_size=8, warmup_steps=3)
    probe_rows, val = split_rows(rows, seed=0)

    def search(folder):
        report = SearchReport(stage="pretrain", method="pretrain", space=lr_space("pretrain", from_scratch=True,
                              lora=False, n=6), probe_steps=18, rungs=rung_steps(18), budget_s=600)
        run_probes(report, cfg, lambda: build_model(spec, tok), probe_rows, make_scorer(tok, val)[1], tok,
                   seed=0, work_dir=tmp_path / folder)
        return report

    first, second = search("a"), search("b")
    assert len(first.probes) == 6
    assert sorted(p.steps for p in first.probes) == [2, 2, 2, 2, 18, 18]  # the best third went on
    at_top = [p for p in first.probes if 18 in p.values]
    stable = [p for p in first.probes if 2 in p.values and not p.unstable]
    assert max(stable, key=lambda p: p.learning_rate) in at_top  # the highest stable rate always goes on
    assert [(p.learning_rate, p.values) for p in first.probes] == [(p.learning_rate, p.values) for p in second.probes]
    best = best_trial(first)
    assert best == best_trial(second) and best in {p.trial for p in at_top}
    assert sorted(p.name for p in (tmp_path / "a").glob("probe-*")) == sorted(f"probe-{p.trial}" for p in at_top)
    release(first, tmp_path / "a", keep=best)
    winner = next(p for p in first.probes if p.trial == best)
    assert [p.name for p in (tmp_path / "a").glob("probe-*")] == [f"probe-{best}"]

    # the winner goes on from its step-18 checkpoint to 54; one uninterrupted run of 54 steps at its rate
    go_on = train("pretrain", cfg.model_copy(update={"learning_rate": winner.learning_rate, "output_dir": tmp_path / "on",
                  "resume": winner.checkpoint}), build_model(spec, tok), probe_rows, tokenizer=tok, progress=False)
    whole = train("pretrain", cfg.model_copy(update={"learning_rate": winner.learning_rate, "output_dir": tmp_path / "one"}),
                  build_model(spec, tok), probe_rows, tokenizer=tok, progress=False)
    assert go_on.steps_done == whole.steps_done == 54 and go_on.losses[0][0] == 19
    assert abs(go_on.losses[-1][1] - whole.losses[-1][1]) <= 1e-3 * whole.losses[-1][1]
    with pytest.raises(ValueError):
        Probe(trial=0, learning_rate="fast", per_device_batch_size=8, steps=1)


def test_a_searched_length_stops_when_the_held_out_loss_stops_improving(tmp_path):
    """A run that cannot learn (a learning rate of 1e-9) is stopped after PATIENCE flat checks, not trained to its end."""
    from trainteam.trainers.recipe_search import PATIENCE, Plateau
    from trainteam.trainers.training import train

    train_rows, _ = generate_arithmetic(ArithmeticConfig(n_train=200, n_eval=20, max_operand=20, seed=0))
    rows = [{"text": r["prompt"] + r["completion"]} for r in train_rows]
    train_tokenizer((r["text"] for r in rows), TokenizerConfig(vocab_size=300), tmp_path / "tok")
    tok = load_tokenizer(tmp_path / "tok")
    model = build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=32), tok)
    fit, val = split_rows(rows, seed=0)
    report = SearchReport(stage="pretrain", method="pretrain", space=[1e-9], probe_steps=9, rungs=[1, 3, 9], budget_s=1)
    cfg = TrainConfig(method="pretrain", seq_len=32, threads=1, max_steps=400, learning_rate=1e-9,
                      per_device_batch_size=8, output_dir=tmp_path / "run")
    result = train("pretrain", cfg, model, fit, tokenizer=tok, progress=False,
                   callbacks=[Plateau(report, make_scorer(tok, val)[1], every=5)])
    assert report.stopped_early_at == 5 * (PATIENCE + 1) == result.steps_done
    assert sorted(report.heldout_curve) == list(range(5, 5 * (PATIENCE + 2), 5))
