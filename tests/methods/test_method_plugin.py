"""A method added in one file: a made-up fine-tuning method ("nft") that another package registers through the
``trainteam.methods`` entry point group (``trainers/training/method_names.py``), with no edit to trainteam. Installed on
the path of real subprocesses, it is found everywhere a method is asked for: the registry and ``validate``,
the planner and the recipe search (``trainteam validate``'s plan and recipe lines), curation (the seq_len its
rows are cut at), the plain-words request reader and the MCP tools (``trainteam mcp`` through the SDK's client).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from spine_helpers import _env

METHOD_FILE = '''
"""nft: a made-up fine-tuning method, TRL's SFT underneath, added by a package of its own."""
from trainteam.trainers.methods import sft
from trainteam.trainers.methods.base import TrainingMethod

METHOD = TrainingMethod(
    name="nft",
    kind="train",
    trl_config="trl.SFTConfig",
    build=sft.build,
    shape=sft.shape,
    columns=(("prompt", "completion"), ("messages",)),
    row_kinds=("pair", "chat"),
    row_tokens=sft.row_tokens,
    words=r"\\bnft\\b|nudge[- ]tun\\w*",
    cuts_rows=True,
    searched=True,
    calibrated=True,
    tool_doc="Nudge fine-tuning (a test's made-up method) on prompt/completion rows.",
)
'''
TASK = """\
name: nft-probe
model: {hidden_size: 32, num_layers: 1, num_heads: 2, max_position_embeddings: 64}
data: {demo: addition}
stages: [pretrain, nft]
training: {nft: {max_length: 48}}
budget: {max_wall_minutes: 5}
"""
IN_PROCESS = """
import json
from trainteam.contract.train_task import TrainTask
from trainteam.trainers.methods.method_registry import get_method, train_methods
from trainteam.workflows.requests.request_rules import read_request
from trainteam.workflows.steps.curate import trained_seq_len
import yaml
task = TrainTask.model_validate(yaml.safe_load(open("task.yaml")))
request = read_request("nudge-tune ./model on ./rows.jsonl for 10 minutes")
print(json.dumps({
    "train_methods": list(train_methods()),
    "kind": get_method("nft").kind,
    "seq_len": trained_seq_len(task, None),
    "searched": task.search.stages,
    "request_stages": request.fields.get("stages"),
}))
"""


def _plugin(tmp_path: Path) -> dict[str, str]:
    """The method's file and its package's metadata (an entry point), on PYTHONPATH."""
    site = tmp_path / "site"
    info = site / "trainteam_nft-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "nft_method.py").write_text(METHOD_FILE)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trainteam-nft\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[trainteam.methods]\nnft = nft_method:METHOD\n")
    return {**_env(), "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def test_a_method_registered_in_one_file_is_found_everywhere(tmp_path):
    env = _plugin(tmp_path)
    (tmp_path / "task.yaml").write_text(TASK)
    cli = [sys.executable, "-m", "trainteam.cli", "-w", str(tmp_path / "ws")]

    checked = subprocess.run(
        [*cli, "validate", "task.yaml"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    lines = checked.stdout
    assert "stages pretrain, nft" in lines
    assert "✓ plan (nft):" in lines  # the planner
    assert "✓ recipe (nft): learning_rate, max_steps" in lines  # the search takes it (its record: searched)

    ran = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(IN_PROCESS)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    assert seen["train_methods"] == ["pretrain", "sft", "nft"] and seen["kind"] == "train"
    assert seen["seq_len"] == 48  # curation keeps rows the method cuts at its max_length
    assert "nft" in seen["searched"]
    assert seen["request_stages"][-1] == "nft"  # its record's words name it in a plain-words request

    async def tools() -> dict:
        params = StdioServerParameters(command=sys.executable, args=[*cli[1:], "mcp"], env=env)
        async with Client(params) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    listed = anyio.run(tools)
    assert "train_nft" in listed and "test's made-up method" in listed["train_nft"].description
    before = listed["train_nft"].input_schema["properties"]["before"]["items"]
    assert before.get("enum", [before.get("const")]) == ["pretrain"]  # it may follow training from random init

    # without the package the name is refused, as any unknown method
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    refused = subprocess.run(
        [*cli, "validate", "task.yaml"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert refused.returncode == 2 and "nft" in refused.stderr + refused.stdout
