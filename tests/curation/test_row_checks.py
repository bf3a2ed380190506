"""Curation that fits the data: chat, prompt/completion and preference rows get row-level checks.

A user's 150 short instruction rows went 150 -> 0 under the text-quality filters (Gopher's
50-word minimum). Each rule here is shown on real rows read from real files: what it drops, the
count and the examples the report gives, and what it must leave alone.
"""

from __future__ import annotations

import json

import pytest
from instruction_rows import as_chat, instruction_rows

from trainteam.contract.train_task import TrainTask
from trainteam.core.errors import BadInput
from trainteam.curation.jsonl import read_jsonl, write_jsonl
from trainteam.curation.pipeline import CurationConfig, NothingKept, curate, planned_version
from trainteam.curation.row_checks import RowChecksConfig, row_records, token_lengths
from trainteam.trainers.training.config import TokenizerConfig
from trainteam.trainers.training.tokenizer import load_tokenizer, train_tokenizer
from trainteam.workflows.steps.curate import curation_config, default_config, trained_seq_len

SYSTEM = ("You are a careful, friendly assistant for a language school. Answer in as few words as the "
          "question needs, and never add anything the student did not ask for.")


def _files(tmp_path, rows, evals):
    """The rows as a user's JSONL files, read back as curate reads them."""
    train = write_jsonl(rows, tmp_path / "train.jsonl")
    held = write_jsonl(evals, tmp_path / "eval.jsonl")
    return read_jsonl(train), {"eval": held}


def _curate(rows, evals, config, tokenizer=None):
    return curate(list(row_records(rows)), evals, config, progress=False, tokenizer=tokenizer)


@pytest.mark.parametrize("shape", ["pair", "chat"])
def test_150_short_instruction_rows_survive_default_curation(tmp_path, shape):
    rows, evals = instruction_rows(150), instruction_rows(30, start=150)
    if shape == "chat":  # every row with the same long system prompt: not near duplicates of each other
        rows, evals = as_chat(rows, SYSTEM), as_chat(evals, SYSTEM)
    rows, eval_sets = _files(tmp_path, rows, evals)
    report = _curate(rows, eval_sets, default_config(shape))
    assert report.counts["input"] == 150 and report.counts["output"] == 150, report.removed()
    assert [r["id"] for r in report.records] == [r["id"] for r in rows]
    assert report.removed() == {}
    # the text defaults (for pretraining prose) are what deleted them before: they still apply to text
    # (a version of 0 rows is refused, saying which rule removed them)
    with pytest.raises(NothingKept, match=r"no row is left of 150 after curation \(quality.min_words 150\)") as kept:
        texts = [{"id": r["id"], "text": rec["text"]} for r, rec in zip(rows, row_records(rows), strict=True)]
        _curate(texts, eval_sets, default_config("text"))
    assert kept.value.report.removed()["quality.min_words"]["count"] == 150


def test_each_structural_rule_drops_its_rows_with_a_count_and_examples(tmp_path):
    good = as_chat(instruction_rows(40))
    bad = [
        {"id": "blank-user", "messages": [{"role": "user", "content": "   "}, {"role": "assistant", "content": "Hi"}]},
        {"id": "ends-on-user", "messages": [{"role": "user", "content": "Tell me a story about a fox."},
                                            {"role": "assistant", "content": "Once upon a time,"},
                                            {"role": "user", "content": "Go on."}]},
        {"id": "ends-on-call", "messages": [
            {"role": "user", "content": "What is the weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                "name": "weather", "arguments": {"city": "Oslo"}}}]}]},
        {"id": "blank-reply", "messages": [{"role": "user", "content": "Name a prime number."},
                                           {"role": "assistant", "content": "\n\t "}]},
        {"id": "blank-completion", "prompt": "Name a colour.", "completion": " "},
        {"id": "same-sides", "prompt": "Say yes.", "chosen": "Yes.", "rejected": "  Yes. "},
        {"id": "blank-rejected", "prompt": "Say no.", "chosen": "No.", "rejected": ""},
    ]
    rows, evals = _files(tmp_path, good + bad, instruction_rows(10, start=150))
    report = _curate(rows, evals, default_config("chat"))
    assert report.counts["output"] == 40
    assert report.row_dropped == {"empty_turn": 1, "truncated": 2, "empty_answer": 3, "same_chosen_rejected": 1}
    whys = {e.id: e.why for examples in report.row_examples.values() for e in examples}
    assert whys == {
        "blank-user": "turn 1 (user) is blank",
        "ends-on-user": "the conversation ends on a user turn (turn 3), before the answer",
        "ends-on-call": "the conversation ends on an assistant tool call (turn 2), before the answer",
        "blank-reply": "the conversation: the last assistant reply (turn 2) is blank",
        "blank-completion": "the completion is blank",
        "same-sides": "chosen and rejected are the same text",
        "blank-rejected": "rejected is blank",
    }
    removed = report.removed()
    assert {rule: r["count"] for rule, r in removed.items()} == {
        "rows.empty_turn": 1, "rows.truncated": 2, "rows.empty_answer": 3, "rows.same_chosen_rejected": 1}
    assert removed["rows.truncated"]["examples"] == [f"ends-on-user: {whys['ends-on-user']}",
                                                     f"ends-on-call: {whys['ends-on-call']}"]
    # the report on disk says the same
    out = curate(list(row_records(rows)), evals, default_config("chat"), out_dir=tmp_path / "out", progress=False)
    on_disk = json.loads((tmp_path / "out" / "report.json").read_text())
    assert on_disk["row_dropped"] == report.row_dropped and out.counts == report.counts


def test_what_is_not_evidence_of_truncation_is_kept(tmp_path):
    rows = [
        {"id": "no-stop", "messages": [{"role": "user", "content": "Capital of Peru?"},
                                       {"role": "assistant", "content": "Lima"}]},
        {"id": "mid-word", "prompt": "Continue: 'The quick brown fox jum'", "completion": "ps over the lazy dog"},
        {"id": "code", "prompt": "A Python line that prints hi", "completion": "print('hi')"},
        {"id": "tool-then-answer", "messages": [
            {"role": "user", "content": "What is the weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                "name": "weather", "arguments": {"city": "Oslo"}}}]},
            {"role": "tool", "content": ""},
            {"role": "assistant", "content": "The service returned nothing for Oslo right now"}]},
        {"id": "multi-turn", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                                          {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
        {"id": "chat-pref", "prompt": [{"role": "user", "content": "Pick a fruit"}],
         "chosen": [{"role": "assistant", "content": "An apple"}],
         "rejected": [{"role": "assistant", "content": "A rock"}]},
    ]
    rows, evals = _files(tmp_path, rows, instruction_rows(5, start=150))
    report = _curate(rows, evals, default_config("chat"))
    assert report.counts["output"] == len(rows), report.removed()


def test_exact_and_near_duplicates_of_whole_conversations(tmp_path):
    story = ("Once upon a time a small fox lived at the edge of a great forest with her two brothers and "
             "every morning she ran to the river to watch the herons fish among the reeds")
    rows = as_chat(instruction_rows(30), SYSTEM) + [
        # the same conversation again: case, punctuation and spacing aside; another system prompt
        {"id": "again", "messages": [{"role": "user", "content": "what is the CAPITAL of france"},
                                     {"role": "assistant", "content": "  paris!"}]},
        # same question, another answer: not a duplicate
        {"id": "other-answer", "messages": [{"role": "user", "content": "What is the capital of France?"},
                                            {"role": "assistant", "content": "It is Paris, on the Seine."}]},
        {"id": "story", "messages": [{"role": "user", "content": "Tell me a story about a fox."},
                                     {"role": "assistant", "content": story}]},
        {"id": "story-2", "messages": [{"role": "user", "content": "Tell me a story about a fox."},
                                       {"role": "assistant", "content": story.replace("reeds", "rushes")}]},
    ]
    rows, evals = _files(tmp_path, rows, instruction_rows(5, start=150))
    report = _curate(rows, evals, default_config("chat"))
    assert report.exact_duplicates == [("again", "q000")]
    assert [(d, k) for d, k, _ in report.near_duplicates] == [("story-2", "story")]
    assert report.counts["output"] == 32
    assert {"other-answer", "story"} <= {r["id"] for r in report.records}
    assert report.removed()["near_duplicates"]["examples"][0].startswith("story-2 (~story, Jaccard 0.")


def test_eval_leaks_are_found_on_the_prompt_side(tmp_path):
    evals = as_chat(instruction_rows(10, start=150), SYSTEM)  # the eval rows share the system prompt too
    asked = evals[3]["messages"][1]["content"]
    rows = as_chat(instruction_rows(30), SYSTEM) + [
        {"id": "leak", "messages": [{"role": "user", "content": f"Quick one: {asked} Thanks!"},
                                    {"role": "assistant", "content": "I am not sure"}]},
        # an eval row's answer in a training answer is not a leak of the question
        {"id": "same-answer", "messages": [{"role": "user", "content": "Name a word that reads the same twice"},
                                           {"role": "assistant", "content": evals[3]["messages"][2]["content"]}]},
    ]
    rows, eval_sets = _files(tmp_path, rows, evals)
    report = _curate(rows, eval_sets, default_config("chat"))
    assert report.leak_dropped_ids == ["leak"] and report.counts["leak_cut"] == 0
    assert report.leaked_eval_examples == {"eval": [evals[3]["id"]]}
    assert report.counts["output"] == 31
    assert report.removed()["eval_leaks"] == {"count": 1, "examples": ["leak"]}


@pytest.fixture(scope="module")
def plain_tokenizer(tmp_path_factory):
    """A from-scratch tokenizer as the project trains one (no chat template: the plain format)."""
    texts = [f"{r['prompt']} {r['completion']}" for r in instruction_rows(180)]
    return load_tokenizer(train_tokenizer(texts, TokenizerConfig(vocab_size=400), tmp_path_factory.mktemp("tok")))


def test_over_length_rows_are_dropped_and_counted_with_the_tokenizer(tmp_path, plain_tokenizer):
    tok = plain_tokenizer
    long_answer = " ".join(["the fox ran to the river and back"] * 12)
    rows = instruction_rows(20) + [{"id": "long", "prompt": "Tell me about the fox.", "completion": long_answer}]
    rows, evals = _files(tmp_path, rows, instruction_rows(5, start=150))
    n_long = token_lengths(tok, [rows[-1]])[0]
    expected = len(tok(tok.bos_token + "Tell me about the fox." + long_answer + tok.eos_token,
                       add_special_tokens=False)["input_ids"])
    assert n_long == expected  # counted as the plain format trains on it: bos + prompt + answer + eos
    limit = max(token_lengths(tok, rows[:-1])) + 1
    assert limit < n_long
    config = default_config("pair").model_copy(update={"rows": RowChecksConfig(max_tokens=limit)})
    report = _curate(rows, evals, config, tokenizer=tok)
    assert report.row_dropped["over_length"] == 1 and report.counts["output"] == 20
    assert report.row_examples["over_length"][0].why == f"{n_long} tokens > {limit} (the stage's seq_len)"
    # the tokenizer is part of the version; when to ask a person is not
    assert planned_version(rows, evals, config, tok) != planned_version(rows, evals, config)
    asks_later = config.model_copy(update={"max_drop_fraction": 0.9})
    assert planned_version(rows, evals, asks_later, tok) == planned_version(rows, evals, config, tok)
    with pytest.raises(BadInput, match=r"^curation\.rows\.max_tokens: .*tokenizer, and there is none"):
        _curate(rows, evals, config)


def test_over_length_counts_the_chat_template_tokens(real_model):
    tok = load_tokenizer(real_model)
    assert tok.chat_template
    chat = as_chat(instruction_rows(3), SYSTEM)
    pref = {"prompt": "Pick a fruit", "chosen": "An apple, fresh from the tree", "rejected": "A rock"}
    got = token_lengths(tok, chat + [pref])
    want = [len(tok.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"]) for r in chat]
    want.append(len(tok.apply_chat_template([{"role": "user", "content": pref["prompt"]},
                                             {"role": "assistant", "content": pref["chosen"]}],
                                            tokenize=True, return_dict=True)["input_ids"]))
    assert got == want


def test_short_text_rows_still_meet_the_quality_filters(tmp_path):
    prose = ("The river bends twice before it reaches the town, and in spring the water rises over the low "
             "fields where the farmers have planted their barley. Children walk along the banks after school "
             "and count the herons, which stand so still that they look like wooden posts in the shallows.")
    rows = [{"id": "prose", "text": prose}, {"id": "stub", "text": "Buy now! Click here."}]
    rows, evals = _files(tmp_path, rows, [{"id": "e", "text": "An unrelated held-out sentence about trains."}])
    report = _curate(rows, evals, default_config("text"))
    assert [r["id"] for r in report.records] == ["prose"]
    assert report.removed()["quality.min_words"] == {"count": 1, "examples": ["stub"]}


def _task(**changes) -> TrainTask:
    base = {"name": "t", "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64},
            "data": {"demo": "addition"}, "stages": ["pretrain", "sft"], "budget": {"max_wall_minutes": 5},
            "training": {"pretrain": {"seq_len": 64}, "sft": {"seq_len": 48}}}
    return TrainTask.model_validate({**base, **changes})


def test_defaults_follow_the_kind_of_rows_and_the_task_settings_win(tmp_path):
    for kind in ("pair", "chat", "preference"):
        c = default_config(kind)
        assert c.quality is None and c.rows is not None and c.near_dedup is not None
        assert c.decontam.mode == "drop" and c.max_drop_fraction == 0.5
    assert default_config("text") == CurationConfig()
    demo = default_config("pair", demo=True)
    assert demo.max_drop_fraction is None and demo.near_dedup is None and demo.rows.leaks_on == "row"

    train = write_jsonl(instruction_rows(5), tmp_path / "t.jsonl")
    held = write_jsonl(instruction_rows(5, start=150), tmp_path / "e.jsonl")
    user = {"data": {"path": str(train), "eval_path": str(held)}}
    assert trained_seq_len(_task(**user), None) == 48  # SFT cuts at its seq_len; pretraining packs
    c = curation_config(_task(**user), "chat", max_tokens=48)
    assert c.rows.max_tokens == 48 and c.quality is None
    # a setting the task gives wins, the rest stay the kind's defaults
    c = curation_config(_task(**user, curation={"max_drop_fraction": 0.9}), "chat", max_tokens=48)
    assert c.max_drop_fraction == 0.9 and c.rows.max_tokens == 48 and c.quality is None
    c = curation_config(_task(**user, curation={"rows": {"max_tokens": None, "truncated": False}}), "chat",
                        max_tokens=48)
    assert c.rows.max_tokens is None and c.rows.truncated is False and c.rows.empty_turn is True
    c = curation_config(_task(**user, curation={"quality": {"min_words": 3}}), "pair")
    assert c.quality.min_words == 3 and c.rows is not None


def test_a_kto_stage_cuts_rows_at_its_seq_len_too(tmp_path):
    """KTO's trainer cuts a longer sequence at max_length, as SFT's and DPO's do (its record's cuts_rows): the
    task's split is kept to the shortest seq_len of the stages that read it."""
    train = write_jsonl(instruction_rows(5), tmp_path / "t.jsonl")
    held = write_jsonl(instruction_rows(5, start=150), tmp_path / "e.jsonl")
    task = _task(data={"path": str(train), "eval_path": str(held)}, stages=["pretrain", "sft", "kto"],
                 training={"pretrain": {"seq_len": 64}, "sft": {"seq_len": 48}, "kto": {"seq_len": 40}})
    assert trained_seq_len(task, None) == 40


def test_the_demo_is_curated_as_before_across_tasks(tmp_path):
    """The bundled arithmetic through the row path keeps exactly the rows the text path kept
    (prompt + completion as one text): ``08+05=`` / ``13`` is no leak of ``08-05=`` / ``03``."""
    from trainteam.curation.decontam import DecontamConfig
    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic

    add, add_eval = generate_arithmetic(ArithmeticConfig(task="addition", n_train=300, n_eval=16, max_operand=20))
    sub, sub_eval = generate_arithmetic(ArithmeticConfig(task="subtraction", n_train=300, n_eval=16, max_operand=20))
    add += [{**ex, "id": f"leak-{ex['id']}", "leak_of": ex["id"]} for ex in add_eval[:5]]
    evals = {"eval": write_jsonl(add_eval, tmp_path / "a.jsonl"),
             "mid.eval": write_jsonl(sub_eval, tmp_path / "s.jsonl")}
    before = CurationConfig(quality=None, near_dedup=None,
                            decontam=DecontamConfig(ngram=3, min_words=3, mode="drop"))
    reports = []
    for rows in (add, sub):
        old = curate([{**r, "text": r["prompt"] + r["completion"]} for r in rows], evals, before, progress=False)
        new = _curate(rows, evals, default_config("pair", demo=True))
        assert [r["id"] for r in new.records] == [r["id"] for r in old.records]
        assert new.counts == {**old.counts, "row_dropped": 0}
        reports.append(new)
    assert reports[0].injected["leaks"].model_dump() == {"injected": 5, "caught": 5}
    assert all(r.counts["exact_duplicates"] > 0 for r in reports)
