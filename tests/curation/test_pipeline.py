"""curate(): the whole chain on the demo corpus, lineage in a real workspace, and the CLI."""

import json
import os
import subprocess
import sys

import pytest

from trainteam.core.errors import BadInput
from trainteam.curation.decontam import EvalIndex, decontaminate
from trainteam.curation.jsonl import read_jsonl, write_jsonl
from trainteam.curation.pipeline import CurationConfig, curate, planned_version
from trainteam.curation.synthetic import DemoCorpusConfig, demo_eval_sets, iter_demo_corpus


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo")
    cfg = DemoCorpusConfig(n_docs=1200, seed=3)
    evals = demo_eval_sets(cfg)
    corpus = write_jsonl(iter_demo_corpus(cfg, evals), folder / "corpus.jsonl")
    eval_paths = {name: write_jsonl(exs, folder / f"{name}.jsonl") for name, exs in evals.items()}
    return corpus, eval_paths


def test_every_injected_defect_is_caught_and_nothing_clean_is_lost(demo):
    corpus, evals = demo
    records = read_jsonl(corpus)
    report = curate(corpus, evals, progress=False)
    for kind in ("duplicates", "leaks", "junk"):
        assert report.injected[kind].injected > 0
    # leaks and junk are found deterministically; near-dups through LSH (p >= 0.98 a pair at 0.8)
    assert report.injected["leaks"].caught == report.injected["leaks"].injected
    assert report.injected["junk"].caught == report.injected["junk"].injected
    assert report.injected["duplicates"].caught >= 0.98 * report.injected["duplicates"].injected
    out = report.records
    out_ids = {r["id"] for r in out}
    clean = [r["id"] for r in records if not r["meta"]]
    assert set(clean) <= out_ids  # no false removals
    missed = report.injected["duplicates"].injected - report.injected["duplicates"].caught
    assert len(out) == report.counts["output"] == len(clean) + 2 * report.counts["leak_cut"] + missed
    injected_leaks = {r["meta"]["leak_of"] for r in records if "leak_of" in r["meta"]}
    reported = {f"{s}/{i}" for s, ids in report.leaked_eval_examples.items() for i in ids}
    assert reported == injected_leaks
    index = EvalIndex.build({n: read_jsonl(p) for n, p in evals.items()})
    assert all(o.action == "clean" for o in decontaminate(out, index))  # the output is clean
    c = report.counts
    assert c["input"] == len(records)
    assert (
        c["input"]
        - c["exact_duplicates"]
        - c["quality_dropped"]
        - c["leak_dropped"]
        - c["near_duplicates"]
        + c["leak_cut"]
        == c["output"]
    )
    assert report.lsh["bands"] * report.lsh["rows"] <= 128 and report.lsh["verified_pairs"] >= c["near_duplicates"]
    assert len(report.near_duplicates) == c["near_duplicates"]
    assert all(s >= 0.8 and dropped not in out_ids and kept in out_ids for dropped, kept, s in report.near_duplicates)


def test_lineage_same_inputs_same_version_no_work_twice(demo, tmp_path):
    from trainteam.graph import EdgeKind, NodeKind
    from trainteam.workflows.steps.curate import curate_recorded
    from trainteam.workspace import Workspace

    corpus, evals = demo
    graph = Workspace.open(tmp_path / "ws").graph

    def curate(corpus, evals, config=None, *, out_dir, progress):  # as the curate step and `curate run` call it
        return curate_recorded(graph, corpus, evals, config, out_dir, progress=progress)

    first = curate(corpus, evals, out_dir=tmp_path / "v1", progress=False)
    assert first.version == planned_version(corpus, evals)
    node = graph.get_node(first.node_id)
    assert node["kind"] == NodeKind.DATASET_VERSION.value and node["counts"]["output"] == first.counts["output"]
    assert json.loads((tmp_path / "v1" / "report.json").read_text())["node_id"] == first.node_id
    mtime = os.stat(first.output).st_mtime_ns
    n_nodes = len(graph.nodes())
    again = curate(corpus, evals, out_dir=tmp_path / "elsewhere", progress=False)
    assert again.reused and again.version == first.version and again.output == first.output
    assert not (tmp_path / "elsewhere").exists() and os.stat(first.output).st_mtime_ns == mtime
    assert len(graph.nodes()) == n_nodes
    # other parameters: another version; curating the output again: a child version
    other = curate(corpus, evals, CurationConfig(near_dedup=None), out_dir=tmp_path / "v2", progress=False)
    assert other.version != first.version and not other.reused
    child = curate(first.output, evals, out_dir=tmp_path / "v3", progress=False)
    lineage = graph.lineage(child.node_id)
    assert first.node_id in lineage
    kinds = {(u, v, k) for u, v, k in lineage.edges(keys=True)}
    assert (child.node_id, first.node_id, EdgeKind.DERIVED_FROM.value) in kinds
    assert sum(1 for u, _, k in kinds if u == child.node_id and k == EdgeKind.DECONTAMINATED_AGAINST.value) == 2
    # a changed output file is not silently reused
    with open(first.output, "a") as fh:
        fh.write(json.dumps({"id": "tampered", "text": "x"}) + "\n")
    redo = curate(corpus, evals, out_dir=tmp_path / "v1", progress=False)
    assert not redo.reused


def test_streams_malformed_input_and_graph_without_folder(tmp_path):
    good = {"id": "a", "text": "The cat and the dog sat with the bird. " * 10}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n{broken\n")
    with pytest.raises(BadInput, match=r"bad\.jsonl:2"):
        curate(bad, progress=False)
    report = curate(bad, config=CurationConfig(skip_bad=True, quality=None), progress=False)
    assert report.counts["skipped_bad"] == 1 and report.counts["output"] == 1
    assert "bad.jsonl:2" in report.skipped_examples[0]
    streamed = curate(
        (r for r in [good, good]), config=CurationConfig(quality=None), progress=False
    )  # a one-shot stream
    assert streamed.counts["exact_duplicates"] == 1 and streamed.version.startswith("curated-")
    with pytest.raises(BadInput, match="out_dir"):
        curate([good], recorded=lambda key: None, progress=False)


def test_cli_demo_then_curate(tmp_path, capsys):
    from trainteam.cli import main

    ws = tmp_path / "ws"
    with pytest.raises(SystemExit) as done:
        main(["-w", str(ws), "curate", "demo", "--docs", "300", "--n-train", "50", "--n-eval", "20"])
    assert done.value.code == 0
    folder = ws / "datasets" / "demo"
    assert len(read_jsonl(folder / "addition_train.jsonl")) == 50
    run = subprocess.run(  # a real process, as a person runs it
        [
            sys.executable,
            "-m",
            "trainteam.cli",
            "-w",
            str(ws),
            "curate",
            "run",
            str(folder / "corpus.jsonl"),
            "--eval",
            f"passages={folder / 'eval_passages.jsonl'}",
            "--eval",
            f"addition={folder / 'eval_addition.jsonl'}",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["node_id"].startswith("DatasetVersion:") and report["injected"]["leaks"]["caught"] > 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        main(["-w", str(ws), "curate", "run", str(folder / "corpus.jsonl"), "--eval", "nonsense"])
    assert bad.value.code == 2 and "--eval: expected NAME=PATH" in capsys.readouterr().err


def test_builders_are_versioned_once(tmp_path, capsys):
    from functools import partial

    from trainteam.cli import main
    from trainteam.curation.lineage import materialize
    from trainteam.graph.record import recorded_dataset
    from trainteam.workflows.steps.curate import record_built
    from trainteam.workspace import Workspace

    samples = [{"prompt": "1+1=", "completion": c, "reward": r} for c, r in (("2", 1.0), ("3", 0.0))]
    src = write_jsonl(samples, tmp_path / "samples.jsonl")
    graph = Workspace.open(tmp_path / "ws").graph
    calls = []

    def build():
        calls.append(1)
        from trainteam.curation.builders import build_preference_pairs

        return build_preference_pairs(read_jsonl(src))

    recorded = partial(recorded_dataset, graph)
    v1, path, built = materialize("preference", {"source": src}, {"min_margin": 0.0}, build, tmp_path / "out", recorded)
    assert record_built(graph, built) == f"DatasetVersion:{v1}"
    v2, path2, again = materialize(
        "preference", {"source": src}, {"min_margin": 0.0}, build, tmp_path / "out", recorded
    )
    assert (v1, path) == (v2, path2) and built is not None and again is None and len(calls) == 1
    assert read_jsonl(path)[0]["chosen"] == "2"
    node = graph.get_node(f"DatasetVersion:{v1}")
    assert node["builder"] == "preference" and len(node["parents"]) == 1
    with pytest.raises(SystemExit) as done:
        main(["-w", str(tmp_path / "ws"), "curate", "build", "preference", str(src)])
    assert done.value.code == 0 and "(reused)" in capsys.readouterr().out  # same input and options as above


def test_two_processes_building_the_same_version_in_one_folder_both_succeed(tmp_path):
    """Two runs of one workspace may curate the same data at once (seen: the second failed renaming the
    first's half-written `.stage1.jsonl`); both finish, with the one output, and leave no staging files."""
    rows = [
        {"id": str(i), "text": f"Record number {i} says the cat and the dog sat with the bird. " * 6}
        for i in range(3000)
    ]
    corpus = tmp_path / "corpus.jsonl"
    write_jsonl(rows + rows[:500], corpus)
    script = (
        "import sys; from trainteam.curation.pipeline import CurationConfig, curate; "
        "r = curate(sys.argv[1], config=CurationConfig(quality=None), out_dir=sys.argv[2], progress=False); "
        "print(r.counts['output'])"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(corpus), str(tmp_path / "v")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["3000", "3000"]
    assert len(read_jsonl(tmp_path / "v" / "data.jsonl")) == 3000
    assert sorted(p.name for p in (tmp_path / "v").iterdir()) == ["data.jsonl", "report.json"]
