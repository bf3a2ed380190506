"""GRPO: verifiable rewards score answers by the task's AnswerSpec (numbers or text); loss variants
and clip-higher reach TRL's config."""

from __future__ import annotations

import pytest

from trainteam.core.errors import BadInput
from trainteam.curation.answers import NUMERIC, AnswerSpec
from trainteam.curation.rewards import default_rewards, score_reward
from trainteam.trainers import TrainConfig, train
from trainteam.trainers.methods.grpo import grpo_args
from trainteam.trainers.training.config import GRPOOptions


def test_rewards_check_the_answer_and_its_end(tok):
    exact, fmt = default_rewards(tok)
    eos = tok.eos_token_id
    comps = ["46", " 46 ", "47", "4 6"]
    ids = [[50, eos], [50, 51], [50, eos], [50, eos]]
    assert exact(comps, answer=["46"] * 4, completion_ids=ids) == [1.0, 1.0, 0.0, 0.0]
    assert fmt(comps, completion_ids=ids) == [0.2, 0.0, 0.2, 0.0]  # unterminated / malformed get nothing


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo"])
def test_loss_variants_and_clip_higher_map_to_trl(tmp_path, loss_type):
    cfg = TrainConfig(
        output_dir=tmp_path,
        per_device_batch_size=6,
        grpo=GRPOOptions(num_generations=4, loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, beta=0.04),
    )
    args = grpo_args(cfg, tmp_path)
    assert args.loss_type == loss_type and args.epsilon_high == 0.28 and args.epsilon == 0.2 and args.beta == 0.04
    assert args.per_device_train_batch_size % args.num_generations == 0  # rounded up from 6 to 8
    assert args.bf16 is False and args.use_cpu is True and args.use_vllm is False


def test_vllm_server_needs_vllm(tmp_path):
    from trl.import_utils import is_vllm_available

    cfg = TrainConfig(output_dir=tmp_path, grpo=GRPOOptions(vllm_server_url="http://10.0.0.5:8000"))
    if is_vllm_available():
        args = grpo_args(cfg, tmp_path)
        assert args.use_vllm and args.vllm_mode == "server" and args.vllm_server_base_url == "http://10.0.0.5:8000"
    else:
        with pytest.raises(BadInput, match="grpo.vllm_server_url"):
            grpo_args(cfg, tmp_path)


def test_grpo_dr_grpo_variant_trains(tmp_path, tiny, tok, arith):
    cfg = TrainConfig(
        output_dir=tmp_path,
        max_steps=2,
        per_device_batch_size=4,
        learning_rate=1e-4,
        seq_len=32,
        grpo=GRPOOptions(num_generations=4, max_completion_length=4, loss_type="dr_grpo"),
    )
    rep = train("grpo", cfg, tiny, arith[0][:8], tokenizer=tok, progress=False)
    assert rep.steps_done == 2
    rewards = [e for e in rep.log_history if "reward" in e]
    assert rewards and all(0.0 <= e["reward"] <= 1.2 for e in rewards)


def test_text_answers_get_reward_signal(tok):
    """A text task: the old numeric rule scored every answer 0; the task's AnswerSpec tells them apart,
    on plain completions and on chat completions (TRL's assistant turns)."""
    eos = tok.eos_token_id
    comps = ["Paris", " paris. ", "Rome", "Paris is nice"]
    ids = [[50, eos]] * 4
    refs = ["Paris"] * 4
    exact, fmt = default_rewards(tok, AnswerSpec())
    assert exact(comps, answer=refs, completion_ids=ids) == [1.0, 1.0, 0.0, 0.0]
    chat = [[{"role": "assistant", "content": c}] for c in comps]
    assert exact(chat, answer=refs, completion_ids=ids) == [1.0, 1.0, 0.0, 0.0]
    assert fmt(chat, completion_ids=ids) == [0.2] * 4
    old_exact, old_fmt = default_rewards(tok, NUMERIC)
    assert set(old_exact(comps, answer=refs)) == {0.0} and set(old_fmt(comps, completion_ids=ids)) == {0.0}
    _, choice_fmt = default_rewards(tok, AnswerSpec(kind="choice", labels=["odd", "even"]))
    assert choice_fmt(["odd", "even!", "odd or even", "seven"], completion_ids=ids) == [0.2, 0.2, 0.0, 0.0]
    assert (
        score_reward("Paris", "paris", answer=AnswerSpec()).total
        > score_reward("Rome", "paris", answer=AnswerSpec()).total
    )


def test_grpo_on_a_text_task_gets_signal(tmp_path, tiny, tok, arith):
    """Real GRPO steps on a text task (is the sum odd or even?) after a short SFT: the rewards the
    task's AnswerSpec gives vary within groups, so the advantages are not all zero."""
    rows = [
        {"prompt": r["prompt"], "completion": "even" if int(r["completion"]) % 2 == 0 else "odd"}
        for r in arith[0][:128]
    ]
    sft = train(
        "sft",
        TrainConfig(
            output_dir=tmp_path / "sft", max_steps=60, per_device_batch_size=16, learning_rate=1e-2, seq_len=32
        ),
        tiny,
        rows,
        tokenizer=tok,
        progress=False,
    )
    seen: list[str] = []

    def spy(completions, **_):
        seen.extend(completions)
        return [0.0] * len(completions)

    spec = AnswerSpec(kind="choice", labels=["odd", "even"])
    cfg = TrainConfig(
        output_dir=tmp_path / "grpo",
        max_steps=3,
        per_device_batch_size=8,
        learning_rate=1e-4,
        seq_len=32,
        grpo=GRPOOptions(num_generations=4, max_completion_length=6),
    )
    rep = train(
        "grpo",
        cfg,
        sft.final_dir,
        rows[:24],
        tokenizer=tok,
        progress=False,
        reward_funcs=default_rewards(tok, spec) + [spy],
    )
    logs = [e for e in rep.log_history if "rewards/exact_answer/mean" in e]
    assert rep.steps_done == 3 and logs
    assert any(e["rewards/exact_answer/mean"] > 0 for e in logs)
    assert any(e["reward_std"] > 0 for e in logs)  # rewards differ inside a group: GRPO has something to learn
    assert any(spec.well_formed(c) for c in seen)
    assert not any(NUMERIC.well_formed(c) for c in seen)  # the numeric rule would have scored them all 0
