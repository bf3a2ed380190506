"""The redaction pass: the shapes it masks (assignments, key shapes, remembered and keyring values), the
ordinary text it leaves alone, and a 1 MB string (it runs on every stored string; its speed against the JSON
encoding every stored string gets anyway is measured by benchmarks/redaction.py, not asserted here)."""

from __future__ import annotations

import random

import pytest

from trainteam.contract import redaction as R
from trainteam.contract.redaction import MARK, redact, redact_text


@pytest.mark.parametrize("text,expected", [
    ("api_key=q0123456789abcdef", "api_key=[REDACTED]"),
    ('OPENAI_API_KEY="abcd1234efgh5678"', 'OPENAI_API_KEY="[REDACTED]"'),
    ('{"token": "abcdef0123456789abcdef"}', '{"token": "[REDACTED]"}'),
    ("token: ZXlKaGJHY2lPaUpJVXpJMU5pSjk", "token: [REDACTED]"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED]"),
    ("headers {'authorization': 'Token 0123abcd4567efgh'}", "headers {'authorization': 'Token [REDACTED]'}"),
    ("x-api-key: abcdefgh12345678", "x-api-key: [REDACTED]"),
    ("password: hunter2hunter2", "password: [REDACTED]"),
    ("client_secret = 'abcdefgh12345'", "client_secret = '[REDACTED]'"),
    ("MY_SERVICE_TOKEN=tok-PLANTED-secret-value-42", "MY_SERVICE_TOKEN=[REDACTED]"),
    ("GET /v1/models?api_key=abcdef123456&limit=1", "GET /v1/models?api_key=[REDACTED]&limit=1"),
    ("the key api_key=sk-proj-abcdefghijklmnop1234 leaked", "the key api_key=[REDACTED] leaked"),
    ("key sk-test-0123456789abcdef0123 and hf_abcdefghijklmnopqrstuvwxyz", f"key {MARK} and {MARK}"),
])
def test_secret_shapes_and_assignments_are_masked_and_stay_masked(text, expected):
    assert redact_text(text, secrets=[]) == expected
    assert redact_text(expected, secrets=[]) == expected  # masking twice changes nothing


ORDINARY = [
    "run tiny-20261201-101010-ab12, then mytask-20261201-101010-ab12 and disk-0123456789abcdef",
    "/work/main/.trainteam/runs/tiny-20261201-101010-ab12/checkpoint-300/model.safetensors",
    "sha256:3f9a0c1e2b4d5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a Model:3f9a0c1e2b4d5f6a",
    "loss=0.8213 lr=1e-3 exact_match=93.5% steps=2,000 seconds: 151.25 budget: 30 minutes",
    "pad_token: <|endoftext|> eos_token=</s> tokens: 1,234,567 max_new_tokens=6 vocab_size: 300",
    "token: tokenization, key: 12345678, secrets: none, the Authorization header is missing",
    "model openai:gpt-4o-2024-08-06 at http://127.0.0.1:8000/v1, a bearer of bad news; sk-8 is a ski",
    'TRAIN_STEPS=300 {"persona": "data_curator", "tool": "prepare_corpus", "visit": 1}',
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_paths_ids_and_numbers_are_left_alone(text):
    assert redact_text(text, secrets=[]) == text


def test_known_values_are_masked_wherever_they_appear(monkeypatch):
    monkeypatch.setenv("SOME_VENDOR_TOKEN", "plain-words-value")
    monkeypatch.setattr(R, "_REMEMBERED", frozenset())
    R.remember("remembered-keyring-value")
    R.remember("tiny")  # too short to mask without masking ordinary words
    out = redact({"a": ["x plain-words-value y", "remembered-keyring-value"], "tiny": "tiny"})
    assert out == {"a": [f"x {MARK} y", MARK], "tiny": "tiny"}


def test_keyring_entries_of_trainteam_are_masked(monkeypatch):
    import keyring  # the test extra installs it
    from keyring.backend import KeyringBackend

    class Memory(KeyringBackend):
        priority = 1
        store = {("trainteam", "eval_judge"): "keyring-held-key-0123"}

        def get_password(self, service, username):
            return self.store.get((service, username))

        def set_password(self, service, username, password):
            self.store[(service, username)] = password

        def delete_password(self, service, username):
            self.store.pop((service, username), None)

    before = keyring.get_keyring()
    keyring.set_keyring(Memory())
    R.keyring_values.cache_clear()
    try:
        monkeypatch.delenv("TRAINTEAM_MODEL", raising=False)
        assert redact_text("a keyring-held-key-0123 b") == "a keyring-held-key-0123 b"  # offline: never read
        R.keyring_values.cache_clear()
        monkeypatch.setenv("TRAINTEAM_MODEL", "openai:gpt-x")  # a provider may take its key from there
        assert redact_text("a keyring-held-key-0123 b") == f"a {MARK} b"
    finally:
        keyring.set_keyring(before)
        R.keyring_values.cache_clear()


def _megabyte() -> str:
    rng = random.Random(0)
    words = ORDINARY + ["the loss fell", "0.8213", "api_key=q0123456789abcdef", '"step": "train#1",', "\n"]
    parts, size = [], 0
    while size < 1_000_000:
        parts.append(rng.choice(words))
        size += len(parts[-1]) + 1
    return " ".join(parts)[:1_000_000]


def test_a_megabyte_is_redacted_whole():
    text = _megabyte()
    out = redact_text(text, R.secret_values())
    assert "q0123456789abcdef" not in out and "tiny-20261201-101010-ab12" in out
    assert out.count("api_key=[REDACTED]") == text.count("api_key=q0123456789abcdef") > 1000


def test_a_dict_value_under_a_secret_name_is_masked_whole():
    data = {"OPENAI_API_KEY": "plain-value-1234", "headers": {"Authorization": "Basic dXNlcjpwYXNz"},
            "pad_token": "<|endoftext|>", "token": "short", "path": "/work/runs/tiny-20261201-101010-ab12"}
    assert redact(data, secrets=[]) == {**data, "OPENAI_API_KEY": MARK, "headers": {"Authorization": MARK}}


def test_a_task_keeps_its_prose_masked_and_refuses_a_secret_in_a_field_the_run_uses():
    task = {"name": "tiny", "description": "my key sk-proj-0123456789abcdef", "data": {"path": "/d/train.jsonl"}}
    assert R.redacted_task(task) == {**task, "description": f"my key {MARK}"}
    with pytest.raises(R.BadInput, match=r"^task: data\.path: holds what looks like a secret"):
        R.redacted_task({**task, "data": {"path": "/d/hf_abcdefghijklmnopqrstuvwx/train.jsonl"}})
    with pytest.raises(R.BadInput, match=r"^task: curation\.extra\[0\]\.api_key: "):
        R.redacted_task({**task, "curation": {"extra": [{"api_key": "abcdefgh12345678"}]}})


def test_the_report_is_written_masked(tmp_path):
    from trainteam.workflows.report.run_report import ReportInput, StepRecord, write_report

    r = ReportInput(run_id="tiny-20261201-101010-ab12", task_name="tiny", status="failed",
                    steps=[StepRecord(name="prepare_corpus", status="failed", seconds=1.0)],
                    notes=["stopped: step prepare_corpus: 401 for key sk-test-0123456789abcdef0123"])
    files = write_report(r, tmp_path / "report")
    text = files.markdown.read_text() + "".join(p.read_text() for p in files.data.values())
    assert "0123456789abcdef0123" not in text and f"key {MARK}" in text and "tiny-20261201-101010-ab12" in text
