"""Dataset builders and the composite reward, checked against the formats TRL expects."""

import pytest

from trainteam.core.errors import BadInput
from trainteam.curation.builders import (
    build_grpo_groups,
    build_preference_pairs,
    build_sft_examples,
    filter_by_difficulty,
)
from trainteam.curation.rewards import RewardWeights, reward_func, score_reward


def test_sft_from_logs_and_transcripts():
    from trl.data_utils import is_conversational

    traces = [
        {"prompt": "1+1=", "completion": "2", "ok": True},
        {"prompt": "1+1=", "completion": "2"},  # duplicate
        {"prompt": "2+2=", "completion": "5", "ok": False},  # failed
        {"prompt": "3+3=", "completion": "6", "reward": 0.2},
        {
            "messages": [
                {"role": "system", "content": "You curate data."},
                {"role": "user", "content": "dedup corpus.jsonl"},
                {"role": "assistant", "content": "Removed 12 near-duplicates."},
            ]
        },
        {
            "messages": [  # a pydantic-ai message dump
                {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "train on addition"}]},
                {
                    "kind": "response",
                    "parts": [{"part_kind": "tool-call", "tool_name": "plan", "args": {"steps": 100}}],
                },
                {"kind": "request", "parts": [{"part_kind": "tool-return", "content": "ok"}]},
                {"kind": "response", "parts": [{"part_kind": "text", "content": "Planned 100 steps."}]},
            ]
        },
    ]
    out = build_sft_examples(traces, min_reward=None)
    assert out[0] == {"prompt": "1+1=", "completion": "2"}
    assert len(out) == 4  # duplicate and failed trace removed
    assert not is_conversational(out[0])
    chat, agent = out[2], out[3]
    assert is_conversational(chat) and chat["completion"] == [
        {"role": "assistant", "content": "Removed 12 near-duplicates."}
    ]
    assert [m["role"] for m in agent["prompt"]] == ["user", "assistant", "tool"]
    assert agent["completion"][0]["content"] == "Planned 100 steps."
    assert len(build_sft_examples(traces, min_reward=0.5)) == 0  # no trace carries a reward >= 0.5
    with pytest.raises(BadInput, match=r"traces\[0\]: needs"):
        build_sft_examples([{"question": "?"}])


def test_preference_pairs_and_dpo_format():
    from datasets import Dataset
    from trl.data_utils import maybe_extract_prompt

    samples = [
        {"prompt": "12+34=", "completion": "46", "reward": 1.2},
        {"prompt": "12+34=", "completion": "47", "reward": 0.2},
        {"prompt": "12+34=", "completion": "4x6", "reward": 0.0},
        {"prompt": "5+5=", "completion": "10", "reward": 1.0},
        {"prompt": "5+5=", "completion": "10", "reward": 1.0},  # no preference to learn
        {"prompt": "9+9=", "completion": "18", "reward": 1.0},
        {"prompt": "9+9=", "completion": "19", "reward": 0.1, "failure_point": "step 3"},
    ]
    pairs = build_preference_pairs(samples)
    assert pairs[0] == {"prompt": "12+34=", "chosen": "46", "rejected": "4x6", "failure_point": 1}
    assert pairs[1]["failure_point"] == "step 3"
    assert len(pairs) == 2
    ds = Dataset.from_list([{k: p[k] for k in ("prompt", "chosen", "rejected")} for p in pairs])
    assert maybe_extract_prompt(ds[0]) == ds[0]  # explicit-prompt preference format, as DPOTrainer reads it


def test_grpo_groups_have_normalized_advantages():
    samples = [
        {"prompt": "p", "completion": c, "reward": r, "reference": "4"}
        for c, r in [("4", 1.0), ("5", 0.0), ("4", 1.0), ("x", 0.0)]
    ]
    samples += [{"prompt": "q", "completion": "1", "reward": 1.0}, {"prompt": "q", "completion": "1", "reward": 1.0}]
    groups = build_grpo_groups(samples)
    assert len(groups) == 1  # q's group has no variance
    g = groups[0]
    assert g["completion"] == "4" and g["completions"] == ["4", "5", "4", "x"]
    assert abs(sum(g["advantages"])) < 1e-9
    assert g["advantages"][0] > 0 > g["advantages"][1]
    mean_sq = sum(a * a for a in g["advantages"]) / 3  # sample variance of standardized values is 1
    assert abs(mean_sq - 1) < 1e-3
    assert len(build_grpo_groups(samples, drop_flat=False)) == 2


def test_filter_by_difficulty():
    recs = [{"prompt": p} for p in ("easy", "mid", "hard")]
    rates = {"easy": 1.0, "mid": 0.5, "hard": 0.0}
    assert filter_by_difficulty(recs, rates) == [{"prompt": "mid"}]
    assert filter_by_difficulty([{"prompt": "a", "pass_rate": 0.3}], low=0.2, high=0.4) == [
        {"prompt": "a", "pass_rate": 0.3}
    ]
    with pytest.raises(BadInput, match=r"records\[0\]: no pass rate"):
        filter_by_difficulty([{"prompt": "zzz"}], rates)
    with pytest.raises(BadInput, match="low"):
        filter_by_difficulty(recs, rates, low=0.9, high=0.1)


def test_composite_reward():
    right = score_reward(" 46", "46")
    assert (right.exact, right.format, right.length) == (1.0, 1.0, 1.0)
    assert right.total == pytest.approx(1.3)
    wrong = score_reward("47", "46")
    assert wrong.exact == 0.0 and wrong.total == pytest.approx(0.3)
    ramble = score_reward("46 because 40+6", "46")
    assert ramble.format == 0.0 and ramble.length == 0.0
    w = RewardWeights(exact=1.0, format=0.0, length=0.0)
    f = reward_func(w)
    assert f(completions=["46", "45"], answer=["46", "46"], prompts=["a", "b"]) == [1.0, 0.0]
