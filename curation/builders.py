"""Dataset builders: traces and scored samples in, TRL-shaped datasets out.

- SFT: ``{"prompt", "completion"}`` strings (TRL prompt-completion; our trainers add
  the separator and EOS), or the conversational form (lists of role/content
  messages) for agent transcripts.
- Preference (DPO): ``{"prompt", "chosen", "rejected", "failure_point"}``.
- GRPO groups: one row per prompt with its sampled completions, rewards and
  group-normalized advantages ``(r - mean) / (std + eps)``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from trainteam.core.errors import BadInput

_PART_ROLES = {"system-prompt": "system", "user-prompt": "user", "tool-return": "tool", "retry-prompt": "user"}


def _content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def transcript_messages(messages: list[Mapping[str, Any]], where: str) -> list[dict[str, str]]:
    """Role/content messages from either chat messages (``role``) or pydantic-ai message
    dumps (``kind`` request/response with typed parts)."""
    out: list[dict[str, str]] = []
    for k, msg in enumerate(messages):
        if "role" in msg:
            out.append({"role": str(msg["role"]), "content": _content(msg.get("content", ""))})
            continue
        kind = msg.get("kind")
        if kind not in ("request", "response"):
            raise BadInput(f"{where}.messages[{k}]: neither a chat message (role) nor a pydantic-ai message (kind)")
        for part in msg.get("parts", []):
            pk = part.get("part_kind")
            if kind == "request" and pk in _PART_ROLES:
                out.append({"role": _PART_ROLES[pk], "content": _content(part.get("content", ""))})
            elif kind == "response" and pk == "text":
                out.append({"role": "assistant", "content": _content(part.get("content", ""))})
            elif kind == "response" and pk == "tool-call":
                call = {"tool": part.get("tool_name"), "args": part.get("args")}
                out.append({"role": "assistant", "content": _content(call)})
    return out


def _succeeded(trace: Mapping[str, Any], min_reward: float | None) -> bool:
    if trace.get("ok") is False or trace.get("success") is False:
        return False
    if min_reward is not None:
        reward = trace.get("reward")
        return reward is not None and float(reward) >= min_reward
    return True


def build_sft_examples(traces: Iterable[Mapping[str, Any]], *, min_reward: float | None = None) -> list[dict]:
    """SFT examples from successful traces, exact duplicates removed.

    A prompt/completion log gives ``{"prompt", "completion"}``; an agent transcript
    (``messages``) gives the conversational prompt-completion form: every message
    before the last assistant turn as ``prompt``, that turn as ``completion``.
    Failed traces (``ok``/``success`` false, or ``reward`` below ``min_reward``) are skipped."""
    out: list[dict] = []
    seen: set[str] = set()
    for i, trace in enumerate(traces):
        where = f"traces[{i}]"
        if not _succeeded(trace, min_reward):
            continue
        if "messages" in trace:
            msgs = transcript_messages(trace["messages"], where)
            last = max((k for k, m in enumerate(msgs) if m["role"] == "assistant"), default=None)
            if last is None or last == 0:
                continue  # nothing the model said, or nothing it answered
            example: dict = {"prompt": msgs[:last], "completion": [msgs[last]]}
        elif "prompt" in trace and "completion" in trace:
            example = {"prompt": str(trace["prompt"]), "completion": str(trace["completion"])}
        else:
            raise BadInput(f"{where}: needs 'messages' or 'prompt' and 'completion'")
        key = json.dumps(example, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(example)
    return out


def _group(samples: Iterable[Mapping[str, Any]], need: tuple[str, ...]) -> dict[str, list[Mapping[str, Any]]]:
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for i, s in enumerate(samples):
        missing = [f for f in need if f not in s]
        if missing:
            raise BadInput(f"samples[{i}]: missing field {missing[0]!r}")
        groups[str(s["prompt"])].append(s)
    return groups


def divergence(a: str, b: str) -> int:
    """Index of the first character where two strings differ."""
    n = min(len(a), len(b))
    return next((k for k in range(n) if a[k] != b[k]), n)


def build_preference_pairs(samples: Iterable[Mapping[str, Any]], *, min_margin: float = 0.0) -> list[dict]:
    """One pair per prompt: the best-rewarded completion against the worst, when their
    rewards differ by more than ``min_margin``. ``failure_point`` is the rejected sample's
    own, if it carries one (e.g. the failing step of a trace), else the character where
    the rejected completion departs from the chosen one."""
    pairs = []
    for prompt, group in _group(samples, ("prompt", "completion", "reward")).items():
        ranked = sorted(group, key=lambda s: float(s["reward"]), reverse=True)
        best, worst = ranked[0], ranked[-1]
        if float(best["reward"]) - float(worst["reward"]) <= min_margin or best["completion"] == worst["completion"]:
            continue
        chosen, rejected = str(best["completion"]), str(worst["completion"])
        point = worst.get("failure_point", divergence(chosen, rejected))
        pairs.append({"prompt": prompt, "chosen": chosen, "rejected": rejected, "failure_point": point})
    return pairs


def build_grpo_groups(
    samples: Iterable[Mapping[str, Any]], *, min_group: int = 2, eps: float = 1e-4, drop_flat: bool = True
) -> list[dict]:
    """Group samples by prompt; advantages are the rewards standardized within the group
    (sample std, as TRL's GRPO). Groups whose rewards are all equal teach nothing and are
    dropped unless ``drop_flat=False``. A ``answer`` / reference ``completion`` of the
    prompt, when given as ``reference``, is kept as ``completion`` for reward functions."""
    rows = []
    for prompt, group in _group(samples, ("prompt", "completion", "reward")).items():
        if len(group) < min_group:
            continue
        rewards = [float(s["reward"]) for s in group]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)) if len(rewards) > 1 else 0.0
        if drop_flat and std == 0.0:
            continue
        row = {
            "prompt": prompt,
            "completions": [str(s["completion"]) for s in group],
            "rewards": rewards,
            "advantages": [(r - mean) / (std + eps) for r in rewards],
        }
        ref = next((s["reference"] for s in group if "reference" in s), None)
        if ref is not None:
            row["completion"] = str(ref)
        rows.append(row)
    return rows


def filter_by_difficulty(
    records: Iterable[Mapping[str, Any]],
    pass_rates: Mapping[str, float] | None = None,
    *,
    low: float = 0.1,
    high: float = 0.9,
    key: str = "prompt",
) -> list[dict]:
    """Keep the records a model sometimes solves (``low <= pass rate <= high``): always-solved
    and never-solved prompts give GRPO groups with no reward variance. The rate comes
    from ``pass_rates[record[key]]`` or the record's own ``pass_rate``."""
    if not 0.0 <= low <= high <= 1.0:
        raise BadInput(f"difficulty band: need 0 <= low <= high <= 1, got low={low} high={high}")
    kept = []
    for i, rec in enumerate(records):
        rate = pass_rates.get(str(rec.get(key))) if pass_rates is not None else rec.get("pass_rate")
        if rate is None:
            raise BadInput(f"records[{i}]: no pass rate for {key}={rec.get(key)!r}")
        if low <= float(rate) <= high:
            kept.append(dict(rec))
    return kept
