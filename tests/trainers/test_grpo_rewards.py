"""GRPO: verifiable rewards score answers exactly; loss variants and clip-higher reach TRL's config."""

from __future__ import annotations

import pytest

from trainteam.core.errors import BadInput
from trainteam.trainers import TrainConfig, train
from trainteam.trainers.config import GRPOOptions
from trainteam.trainers.methods import grpo_args
from trainteam.curation.rewards import default_rewards


def test_rewards_check_the_answer_and_its_end(tok):
    exact, fmt = default_rewards(tok)
    eos = tok.eos_token_id
    comps = ["46", " 46 ", "47", "4 6"]
    ids = [[50, eos], [50, 51], [50, eos], [50, eos]]
    assert exact(comps, answer=["46"] * 4, completion_ids=ids) == [1.0, 1.0, 0.0, 0.0]
    assert fmt(comps, completion_ids=ids) == [0.2, 0.0, 0.2, 0.0]  # unterminated / malformed get nothing


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo"])
def test_loss_variants_and_clip_higher_map_to_trl(tmp_path, loss_type):
    cfg = TrainConfig(output_dir=tmp_path, per_device_batch_size=6,
                      grpo=GRPOOptions(num_generations=4, loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, beta=0.04))
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
    cfg = TrainConfig(output_dir=tmp_path, max_steps=2, per_device_batch_size=4, learning_rate=1e-4, seq_len=32,
                      grpo=GRPOOptions(num_generations=4, max_completion_length=4, loss_type="dr_grpo"))
    rep = train("grpo", cfg, tiny, arith[0][:8], tokenizer=tok, progress=False)
    assert rep.steps_done == 2
    rewards = [e for e in rep.log_history if "reward" in e]
    assert rewards and all(0.0 <= e["reward"] <= 1.2 for e in rewards)
