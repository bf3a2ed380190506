"""A request means what it says about its model (issue 32): a model it names is loaded from a folder,
the workspace's registry or the local Hugging Face cache — or refused in one line naming it and the way
out — and never replaced by a model built from random init. The table holds requests as people write
them, each with the plan it gives or its refusal; the world they run in is real: a tiny model saved
with transformers, a Hugging Face cache laid out as huggingface_hub lays it out (pointed at by
HF_HUB_CACHE), a workspace whose registry holds the SmolLM2 that `trainteam models import` imported."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from persona_helpers import cli
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from tool_model import _tokenizer

from trainteam.core.errors import BadInput
from trainteam.trainers.serving.registry import ModelRegistry
from trainteam.workflows.requests.model_sources import ModelSources, hf_cache_dir
from trainteam.workflows.requests.submission import DEMO_REQUEST, parse_request, plan_request
from trainteam.workspace import Workspace

REVISION = "0123456789abcdef0123456789abcdef01234567"
CACHED = (
    "Qwen/Qwen2.5-0.5B-Instruct",
    "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Meta-Llama-3-8B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.2",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "openai-community/gpt2",
)
CONFIG_ONLY = ("google/gemma-2-2b-it", "meta-llama/Llama-2-7b-hf")  # a config fetched, never the weights
IMPORTED = "smollm2-135m-instruct"  # the folder name `trainteam models import` gave it (tests/real_model.py)


def _tiny_model(folder: Path) -> Path:
    """A real model folder: a Llama built from a config by trainteam's own builder, saved with its
    tokenizer by transformers' save_pretrained."""
    from trainteam.trainers.training.config import ModelSpec
    from trainteam.trainers.training.models import build_model

    tok = _tokenizer(["2+2=4", "hello there", "what is 3+5? 8"], vocab_size=300)
    build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=256), tok).save_pretrained(
        str(folder)
    )
    tok.save_pretrained(str(folder))
    return folder


def cache_repo(cache: Path, repo_id: str, source: Path, names: list[str] | None = None) -> Path:
    """``source``'s files as huggingface_hub caches a model: blobs named by their hash, a snapshot of
    symlinks into them, refs/main naming the snapshot."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    for f in sorted(source.iterdir()):
        if names is None or f.name in names:
            blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
            shutil.copyfile(f, blob)
            (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


@dataclass
class World:
    root: Path
    cache: Path
    tiny: Path
    imported: Path  # the registered SmolLM2 folder

    def snapshot(self, repo_id: str) -> Path:
        return self.cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / REVISION


@pytest.fixture(scope="module")
def world(tmp_path_factory, real_model) -> World:
    root = tmp_path_factory.mktemp("requests")
    (root / "data").mkdir()
    chat = {"messages": [{"role": "user", "content": "what is 2+2?"}, {"role": "assistant", "content": "4"}]}
    (root / "data" / "chats.jsonl").write_text((json.dumps(chat) + "\n") * 8)
    (root / "data" / "train.jsonl").write_text((json.dumps({"prompt": "2+2=", "completion": "4"}) + "\n") * 8)
    (root / "data" / "corpus.jsonl").write_text((json.dumps({"text": "two plus two is four."}) + "\n") * 8)
    tiny = _tiny_model(root / "models" / "x")
    shutil.copytree(tiny, root / "base")
    cache = root / "hf" / "hub"
    for repo_id in CACHED:
        cache_repo(cache, repo_id, tiny)
    for repo_id in CONFIG_ONLY:
        cache_repo(cache, repo_id, tiny, names=["config.json"])
    registry = ModelRegistry.of(Workspace.open(root / ".trainteam"))
    registry.register_checkpoint(real_model, stage="imported", name=IMPORTED)
    registry.register_checkpoint(_tiny_model(root / "sums"), stage="sft", name="sums-v1")
    return World(root=root, cache=cache, tiny=tiny, imported=real_model.resolve())


@pytest.fixture
def here(world, monkeypatch) -> World:
    """Requests are read in the world's folder, with its Hugging Face cache and its workspace."""
    monkeypatch.chdir(world.root)
    monkeypatch.setenv("HF_HUB_CACHE", str(world.cache))
    monkeypatch.delenv("TRAINTEAM_HOME", raising=False)
    monkeypatch.delenv("TRAINTEAM_DATABASE_URL", raising=False)
    return world


def cache(repo_id: str):
    return ("hf_cache", repo_id)


def built(**shape):
    return ("built", shape)


SFT, PRE = ["sft"], ["pretrain"]
# (request, expected): expected is (model, stages) for a plan, or the phrases its one-line refusal holds.
TABLE = [
    # hub ids and family + size, found in the local Hugging Face cache
    (
        "fine-tune Qwen2.5-0.5B-Instruct on my data file data/chats.jsonl, budget 20 minutes",
        (cache("Qwen/Qwen2.5-0.5B-Instruct"), SFT),
    ),
    (
        "fine-tune Qwen/Qwen2.5-0.5B-Instruct on data/chats.jsonl, budget 20 minutes",
        (cache("Qwen/Qwen2.5-0.5B-Instruct"), SFT),
    ),
    ("LoRA on qwen2.5 0.5b instruct with data/chats.jsonl for 20 minutes", (cache("Qwen/Qwen2.5-0.5B-Instruct"), SFT)),
    (
        "fine-tune Qwen/Qwen2.5-0.5B-Instruct (the qwen one) on data/chats.jsonl, budget 20 minutes",
        (cache("Qwen/Qwen2.5-0.5B-Instruct"), SFT),
    ),
    ("train llama-3-8b on the addition demo, budget 30 minutes", (cache("meta-llama/Meta-Llama-3-8B"), SFT)),
    (
        "Teach Llama 3 8B Instruct to add numbers, budget 30 minutes",
        (cache("meta-llama/Meta-Llama-3-8B-Instruct"), SFT),
    ),
    (
        "SFT meta-llama/Meta-Llama-3-8B-Instruct on data/train.jsonl, 30 minutes",
        (cache("meta-llama/Meta-Llama-3-8B-Instruct"), SFT),
    ),
    (
        "fine-tune Mistral-7B-Instruct-v0.3 on data/chats.jsonl within an hour",
        (cache("mistralai/Mistral-7B-Instruct-v0.3"), SFT),
    ),
    ("fine-tune gpt2 on data/train.jsonl, 10 minutes", (cache("openai-community/gpt2"), SFT)),
    (
        "continue pretraining Qwen2.5-0.5B-Instruct on data/corpus.jsonl, budget 20 minutes",  # found, not built; a
        ("stages: pretrain starts from random init; model.path is for fine-tuning",),
    ),  # task cannot say it yet
    (
        "mistral 7b instruct on data/chats.jsonl, 1 hour",
        (
            "'mistral 7b instruct' matches 2 models in the local Hugging Face cache",
            "Mistral-7B-Instruct-v0.2",
            "Mistral-7B-Instruct-v0.3",
            "name one",
        ),
    ),
    (
        "fine-tune gpt2-medium on data/train.jsonl, 10 minutes",
        (
            "model: 'gpt2-medium' is not a model registered in this workspace or in the local Hugging Face cache",
            "nothing is downloaded",
            "model.path",
            "trainteam models import FILE.gguf --register",
            "from scratch",
        ),
    ),
    (
        "SFT gemma-2-2b-it on data/chats.jsonl, 20 minutes",
        (
            "model: 'gemma-2-2b-it' is google/gemma-2-2b-it in the local Hugging Face cache",
            "no safetensors weights",
            "nothing is downloaded",
        ),
    ),
    (
        "fine-tune llama on data/train.jsonl, 20 minutes",
        ("model: 'llama' matches 2 models", "Llama-2-7b-hf", "Meta-Llama-3-8B"),
    ),
    ("train a llama on the addition demo, budget 10 minutes", ("model: 'llama' matches 2 models",)),
    (
        "fine-tune phi-3-mini on data/chats.jsonl, budget 20 minutes",
        ("model: 'phi-3-mini' is not a model registered", "nothing is downloaded"),
    ),
    (
        "fine-tune Qwen2.5-0.5B-Instruct and llama-3-8b on data/chats.jsonl, 20 minutes",
        ("model: the request names 2 models ('Qwen2.5-0.5B-Instruct', 'llama-3-8b'); name the one to train",),
    ),
    (
        "download Qwen2.5-0.5B-Instruct from the hub and fine-tune it on data/chats.jsonl, 20 minutes",
        ("model: nothing is downloaded",),
    ),
    # models registered in the workspace
    ("fine-tune the smol model I imported on data/chats.jsonl, budget 20 minutes", (("registered", IMPORTED), SFT)),
    ("SFT my SmolLM2 model I registered on data/chats.jsonl, 30 min", (("registered", IMPORTED), SFT)),
    ("fine-tune SmolLM2-135M-Instruct on data/chats.jsonl, budget 20 minutes", (("registered", IMPORTED), SFT)),
    ("fine-tune registered model sums-v1 on data/train.jsonl, 15 minutes", (("registered", "sums-v1"), SFT)),
    (
        "fine-tune the model I imported on data/chats.jsonl, 20 minutes",
        ("model: 'the model I imported' matches 2 registered models", "'smollm2-135m-instruct'", "'sums-v1'"),
    ),
    (
        "fine-tune my imported model on data/chats.jsonl, 20 minutes",
        ("model: 'my imported model' matches 2 registered models",),
    ),
    (
        "fine-tune the phi model I imported on data/chats.jsonl, 20 minutes",
        (
            "model: 'the phi model I imported': no model registered in the workspace",
            "named like 'phi'",
            "trainteam models import FILE.gguf|FOLDER --register --name N",
        ),
    ),
    # local folders, as today
    ("fine-tune the model in ./models/x on data/chats.jsonl, 20 minutes", (("folder", "models/x"), SFT)),
    ("SFT the model at base on data/train.jsonl within 2 hours", (("folder", "base"), SFT)),
    ("fine-tune models/x on data/train.jsonl, 20 minutes", (("folder", "models/x"), SFT)),
    (
        "fine-tune the model in ./models/x (a SmolLM2-135M) on data/chats.jsonl, 20 minutes",
        (("folder", "models/x"), SFT),
    ),
    (
        "fine-tune the model in ./models/x to answer like GPT-4, data/chats.jsonl, 20 minutes",
        (("folder", "models/x"), SFT),
    ),
    (
        "fine-tune the model in ./models/missing on data/train.jsonl, 20 minutes",
        ("model.path: models/missing does not exist",),
    ),
    (
        "fine-tune NoSuchOrg/NoSuchModel on data/train.jsonl, 20 minutes",
        (
            "model: 'NoSuchOrg/NoSuchModel' is not a folder here, a model registered in this workspace or in the local "
            "Hugging Face cache",
        ),
    ),
    # closed models
    (
        "Pretrain GPT-4 from scratch on the addition demo in 5 minutes",
        ("model: 'GPT-4' is a closed model (OpenAI's weights are not published)",),
    ),
    ("fine-tune ChatGPT on data/chats.jsonl, 20 minutes", ("model: 'ChatGPT' is a closed model",)),
    (
        "fine-tune claude 3 haiku on data/chats.jsonl, budget 1 hour",
        ("model: 'claude 3 haiku' is a closed model (Anthropic's",),
    ),
    (
        "LoRA gemini 1.5 flash on data/train.jsonl, 30 minutes",
        ("model: 'gemini 1.5 flash' is a closed model (Google's",),
    ),
    # built from scratch: as today, at the size said, or refused by the planner
    ("pretrain a tiny llama on the addition demo, budget 20 minutes", (built(arch="llama", hidden_size=128), PRE)),
    (
        "Train a small GPT-2 from scratch on subtraction problems within 1 hour",
        (built(arch="gpt2", hidden_size=256, num_layers=4), PRE),
    ),
    ("teach a tiny qwen2 multiplication; max 45 min", (built(arch="qwen2", hidden_size=128), PRE)),
    ("fine-tune a tiny llama on data/train.jsonl, budget 10 minutes", (built(arch="llama"), ["pretrain", "sft"])),
    (
        "fine-tune a tiny llama on data/train.jsonl (prompt/completion rows), budget 10 minutes",
        (built(arch="llama", hidden_size=128), ["pretrain", "sft"]),
    ),
    (
        "pretrain a 10M llama from scratch on the addition demo for 20 steps, budget 30 minutes",
        (built(arch="llama", hidden_size=448, num_layers=4), PRE),
    ),
    ("pretrain a 7B llama on addition for 100000 steps, budget 10 minutes", ("training.pretrain",)),
    ("pretrain llama-3-8b from scratch on the addition demo, 10 minutes", ("training.pretrain", "GiB")),
    (
        "pretrain mistral 7b from scratch on the addition demo, budget 30 minutes",
        ("model: 'mistral 7b' cannot be built from scratch here", "'a 7B llama from scratch'"),
    ),
    (
        "pretrain Llama 3 from scratch on the addition demo, 30 minutes",
        ("model: 'Llama 3' from scratch names no size",),
    ),
    # a pretrained start with no model named
    ("fine-tune a model on the built-in demo, 10 minutes", ("model: say which model", "never from random init")),
]


def _expected_path(world: World, where: tuple[str, str]) -> Path:
    kind, name = where
    return {
        "hf_cache": lambda: world.snapshot(name),
        "registered": lambda: world.imported if name == IMPORTED else (world.root / "sums").resolve(),
        "folder": lambda: (world.root / name).resolve(),
    }[kind]()


def _covered(plan, task) -> None:
    """Every model, data and stage choice of the plan quotes the words it came from or is a stated default."""
    lines = plan.understood + plan.defaults
    for field in ("model", "data"):
        assert any(line.startswith(f"{field}:") for line in lines), (field, lines)
    for stage in task.stages:
        assert any(line.startswith("stages:") and stage in line for line in lines), (stage, lines)
    assert all("'" in line for line in plan.understood), plan.understood


@pytest.mark.parametrize("text, expected", TABLE, ids=[t[:48] for t, _ in TABLE])
def test_a_named_model_is_loaded_or_refused(here, text, expected):
    if isinstance(expected[0], str):
        with pytest.raises(BadInput) as err:
            parse_request(text)
        message = str(err.value)
        assert "\n" not in message
        for needle in expected:
            assert needle in message, message
        return
    (kind, want), stages = expected
    task = parse_request(text)
    plan = plan_request(task, request=text)
    assert task.stages == stages
    if kind == "built":
        assert task.model.path is None
        assert {k: getattr(task.model, k) for k in want} == want
        assert any(u.startswith("model: '") and "from random init" in u for u in plan.understood), plan.understood
    else:
        assert task.model.path == _expected_path(here, (kind, want))
        line = next(u for u in plan.understood if u.startswith("model: '"))
        assert (want if kind != "folder" else str(task.model.path)) in line, line
        assert "random init" not in plan.text()
    _covered(plan, task)


def test_a_registered_model_by_its_id(here):
    record = next(m for m in ModelRegistry.of(Workspace.open(here.root / ".trainteam")).list() if m.name == "sums-v1")
    text = f"fine-tune model {record.id[:8]} on data/train.jsonl, 15 minutes"
    task = parse_request(text)
    assert task.model.path == Path(record.path)
    assert (
        plan_request(task, request=text)
        .understood[0]
        .startswith(f"model: 'model {record.id[:8]}' → registered model {record.id} 'sums-v1'")
    )


def test_the_table_is_as_wide_as_the_issue_asks():
    plans = [t for t, e in TABLE if not isinstance(e[0], str)]
    assert len(TABLE) >= 30 and len(plans) >= 15 and len(TABLE) - len(plans) >= 15


def test_the_plan_lists_a_model_name_it_does_not_use(here):
    text = "fine-tune the model in ./models/x (a SmolLM2-135M) to answer like GPT-4, data/chats.jsonl, 20 minutes"
    plan = plan_request(parse_request(text), request=text)
    assert plan.ignored == [
        "'SmolLM2-135M': a model name; the model is the folder ./models/x",
        "'GPT-4': a model name; the model is the folder ./models/x",
    ]
    assert "  ignored: 'GPT-4': a model name" in plan.text()


def test_a_model_found_in_the_cache_is_stated_with_its_words_and_revision(here):
    text = "fine-tune Qwen2.5-0.5B-Instruct on data/chats.jsonl, budget 20 minutes"
    plan = plan_request(parse_request(text), request=text)
    assert plan.understood[0] == (
        f"model: 'Qwen2.5-0.5B-Instruct' → Qwen/Qwen2.5-0.5B-Instruct from the local Hugging "
        f"Face cache (revision {REVISION[:12]}, {here.snapshot('Qwen/Qwen2.5-0.5B-Instruct')})"
        ", fine-tuned from its weights"
    )
    assert "stages: 'fine-tune' → sft" in plan.understood
    assert plan.model.startswith(f"local model {here.snapshot('Qwen/Qwen2.5-0.5B-Instruct')}")


def test_the_cache_is_found_where_huggingface_hub_looks(here, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(here.cache.parent))
    assert hf_cache_dir() == here.cache
    assert parse_request("fine-tune gpt2 on data/train.jsonl, 10 minutes").model.path == here.snapshot(
        "openai-community/gpt2"
    )
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache: the same words are refused
    with pytest.raises(BadInput, match=f"model: 'gpt2' is not a model registered .* Hugging Face cache \\({tmp_path}"):
        parse_request("fine-tune gpt2 on data/train.jsonl, 10 minutes")


def test_the_demo_request_plans_as_before_and_quotes_its_words(here):
    task = parse_request(DEMO_REQUEST)
    plan = plan_request(task, request=DEMO_REQUEST)
    assert plan.defaults == [] and plan.ignored == []
    assert plan.understood[0] == (
        "model: 'tiny Llama … hidden size 128 … 2 layers … 4 heads … context 64' → llama from "
        "random init, hidden 128 x 2 layers, 4 heads"
    )
    assert task.model.path is None and task.stages == ["pretrain", "sft", "grpo"]


def _provider_answering(task_fields: dict) -> FunctionModel:
    """Stands in for a configured provider: returns the TrainTask as structured output."""

    def answer(messages, info):
        name = next(t.name for t in info.output_tools if "Refusal" not in t.name)
        return ModelResponse(parts=[ToolCallPart(name, task_fields, tool_call_id="x")])

    return FunctionModel(answer)


NAMED = "fine-tune Qwen2.5-0.5B-Instruct on data/chats.jsonl, budget 20 minutes"
ANSWER = {"name": "chats", "data": {"path": "data/chats.jsonl"}, "budget": {"max_wall_minutes": 20}, "stages": ["sft"]}


def test_a_provider_is_held_to_the_model_the_request_names(here):
    toy = {**ANSWER, "model": {"arch": "qwen2"}, "stages": ["pretrain", "sft"]}
    with pytest.raises(
        BadInput,
        match="model: the request names 'Qwen2.5-0.5B-Instruct' .*; the orchestrator's "
        "answer builds a qwen2 from random init instead",
    ):
        parse_request(NAMED, model=_provider_answering(toy))
    other = {**ANSWER, "model": {"path": "models/x"}}
    with pytest.raises(BadInput, match="model.path: models/x is not the model the request names"):
        parse_request(NAMED, model=_provider_answering(other))
    as_written = {**ANSWER, "model": {"path": "Qwen2.5-0.5B-Instruct"}}
    task = parse_request(NAMED, model=_provider_answering(as_written))
    assert task.model.path == here.snapshot("Qwen/Qwen2.5-0.5B-Instruct")


@pytest.mark.parametrize(
    "text, answer, needle",
    [
        (
            "Pretrain GPT-4 from scratch on the addition demo in 5 minutes",
            {"name": "addition", "model": {}, "data": {"demo": "addition"}, "budget": {"max_wall_minutes": 5}},
            "model: 'GPT-4' is a closed model",
        ),
        (
            "fine-tune gpt2-medium on data/train.jsonl, 10 minutes",
            {
                **ANSWER,
                "data": {"path": "data/train.jsonl"},
                "budget": {"max_wall_minutes": 10},
                "model": {"arch": "gpt2"},
                "stages": ["pretrain", "sft"],
            },
            "model: 'gpt2-medium' is not a model registered",
        ),
        (
            "teach a tiny qwen2 multiplication; max 45 min",
            {
                "name": "multiplication",
                "model": {"arch": "llama"},
                "data": {"demo": "multiplication"},
                "budget": {"max_wall_minutes": 45},
            },
            "model.arch: llama is not the model the request names (a qwen2)",
        ),
        (
            "fine-tune a model on the built-in demo, 10 minutes",
            {
                "name": "addition",
                "model": {},
                "data": {"demo": "addition"},
                "budget": {"max_wall_minutes": 10},
                "stages": ["pretrain", "sft"],
            },
            "model: say which model",
        ),
    ],
)
def test_a_provider_answer_passes_the_same_model_checks(here, text, answer, needle):
    with pytest.raises(BadInput) as err:
        parse_request(text, model=_provider_answering(answer))
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_submit_plans_a_registered_model_and_refuses_an_unknown_one_in_one_line(here, tmp_path):
    imported = cli(
        here.root / ".trainteam",
        "submit",
        "fine-tune the smol model I imported on data/chats.jsonl, budget 20 minutes",
        "--plan-only",
        "--json",
    )
    assert imported.returncode == 0, imported.stderr
    out = json.loads(imported.stdout)
    assert Path(out["task"]["model"]["path"]) == here.imported and out["task"]["stages"] == ["sft"]
    assert out["plan"]["understood"][0].startswith("model: 'the smol model I imported' → registered model m-")
    empty = tmp_path / "ws"
    proc = cli(
        empty,
        "submit",
        "train llama-3-8b on the addition demo, budget 30 minutes",
        "--plan-only",
        env={"HF_HUB_CACHE": str(tmp_path / "none")},
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and proc.stdout == "" and len(lines) == 1, proc.stderr
    assert "model: 'llama-3-8b' is not a model registered" in lines[0] and "Traceback" not in proc.stderr
    assert not empty.exists()  # nothing written: the registry is read only where a workspace exists


def test_sources_read_nothing_into_being(tmp_path):
    sources = ModelSources.find(tmp_path, tmp_path / "no-workspace")
    assert sources.registered == [] and not (tmp_path / "no-workspace").exists()
