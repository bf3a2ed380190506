"""The data engine: a plain, typed library; imports no agents or workflows.

Nothing here imports torch or transformers at import time: a tokenizer is passed
in where packing needs one, and ``datasets`` / TRL are imported inside the
functions that use them.
"""

from trainteam.curation.builders import (
    build_grpo_groups,
    build_preference_pairs,
    build_sft_examples,
    filter_by_difficulty,
)
from trainteam.curation.decontam import DecontamConfig, EvalIndex, decontaminate
from trainteam.curation.dedup import ExactDeduper, MinHashLSH, NearDupConfig, lsh_params, near_duplicates
from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic, read_jsonl, write_jsonl
from trainteam.curation.packing import pack_sft, pack_texts, pack_token_stream, tokenize_sft
from trainteam.curation.pipeline import CurationConfig, CurationReport, curate
from trainteam.curation.quality import QualityConfig, QualityFilter
from trainteam.curation.rewards import RewardWeights, reward_func, score_reward
from trainteam.curation.sources import iter_records
from trainteam.curation.synthetic import DemoCorpusConfig, demo_eval_sets, iter_demo_corpus

__all__ = [
    "ArithmeticConfig",
    "CurationConfig",
    "CurationReport",
    "DecontamConfig",
    "DemoCorpusConfig",
    "EvalIndex",
    "ExactDeduper",
    "MinHashLSH",
    "NearDupConfig",
    "QualityConfig",
    "QualityFilter",
    "RewardWeights",
    "build_grpo_groups",
    "build_preference_pairs",
    "build_sft_examples",
    "curate",
    "decontaminate",
    "demo_eval_sets",
    "filter_by_difficulty",
    "generate_arithmetic",
    "iter_demo_corpus",
    "iter_records",
    "lsh_params",
    "near_duplicates",
    "pack_sft",
    "pack_texts",
    "pack_token_stream",
    "read_jsonl",
    "reward_func",
    "score_reward",
    "tokenize_sft",
    "write_jsonl",
]
