"""Dataset versions in the knowledge graph.

A version's key is a hash of what determines its content: the fingerprints of its
inputs and the parameters. The same inputs and parameters therefore name the same
version, and a caller that finds the version already recorded (with its file still
on disk and unchanged) can skip the work.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from trainteam.core.errors import BadInput

if TYPE_CHECKING:  # the graph pulls in SQLAlchemy: imported only when a graph is used
    from trainteam.graph import KnowledgeGraph

_CHUNK = 1 << 20


def file_fingerprint(path: str | Path) -> str:
    """BLAKE2b of a file's bytes, or of a folder's file names and bytes (sorted)."""
    path = Path(path)
    h = hashlib.blake2b(digest_size=16)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode() + b"\0")
        with f.open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
    return h.hexdigest()


def records_fingerprint(records: Iterable[Mapping[str, Any]]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for rec in records:
        h.update(json.dumps(rec, sort_keys=True, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()


def source_fingerprint(source: Any) -> str | None:
    """A content fingerprint known before reading the source, or None (a one-shot stream)."""
    if isinstance(source, (str, Path)):
        return file_fingerprint(source)
    fp = getattr(source, "_fingerprint", None)  # datasets.Dataset
    if isinstance(fp, str):
        return f"hf-{fp}"
    if isinstance(source, (list, tuple)):
        return records_fingerprint(r if isinstance(r, Mapping) else {"text": r} for r in source)
    return None


def version_key(kind: str, inputs: Mapping[str, str], params: Mapping[str, Any]) -> str:
    blob = json.dumps({"kind": kind, "inputs": dict(inputs), "params": params}, sort_keys=True, default=str)
    return f"{kind}-{hashlib.blake2b(blob.encode(), digest_size=10).hexdigest()}"


def existing_version(graph: KnowledgeGraph, key: str) -> dict[str, Any] | None:
    """The recorded version if its output file is still there and unchanged."""
    from trainteam.graph import NodeKind, node_id
    from trainteam.graph.knowledge import UnknownNode

    try:
        node = graph.get_node(node_id(NodeKind.DATASET_VERSION, key))
    except UnknownNode:
        return None
    path = node.get("path")
    if not path or not Path(path).exists() or file_fingerprint(path) != node.get("content_hash"):
        return None
    return node


def input_node(graph: KnowledgeGraph, fingerprint: str, name: str) -> str:
    """The node an input stands for: a DatasetVersion whose output has this content, else a Corpus."""
    from trainteam.graph import NodeKind

    for node in graph.nodes(NodeKind.DATASET_VERSION):
        if node.get("content_hash") == fingerprint:
            return node["id"]
    return graph.add_node(NodeKind.CORPUS, fingerprint, content_hash=fingerprint, source=name)


def record_version(
    graph: "KnowledgeGraph",
    key: str,
    *,
    path: Path,
    counts: Mapping[str, int],
    params: Mapping[str, Any],
    parents: Iterable[str] = (),
    decontaminated_against: Iterable[str] = (),
    **attrs: Any,
) -> str:
    """Write the DatasetVersion node and its edges (derived_from parents, decontaminated_against eval sets)."""
    from trainteam.graph import EdgeKind, NodeKind

    parents, against = list(parents), list(decontaminated_against)
    edges = [(EdgeKind.DERIVED_FROM, p) for p in parents]
    edges += [(EdgeKind.DECONTAMINATED_AGAINST, e) for e in against]
    return graph.link(
        NodeKind.DATASET_VERSION,
        key,
        edges=edges,
        path=str(path),
        content_hash=file_fingerprint(path),
        counts=dict(counts),
        params=dict(params),
        parents=parents,
        **attrs,
    )


def materialize(
    graph: "KnowledgeGraph | None",
    kind: str,
    inputs: Mapping[str, Any],
    params: Mapping[str, Any],
    build: Callable[[], Iterable[Mapping[str, Any]]],
    out_dir: str | Path,
) -> tuple[str, Path, bool]:
    """Build a derived dataset once: ``(version, path, reused)``.

    ``inputs`` are the sources (paths, record lists, saved datasets) the build reads;
    their fingerprints and ``params`` name the version. When the graph already holds
    that version with its file intact, ``build`` is not called; otherwise its records
    are written to ``out_dir/<version>.jsonl`` and a DatasetVersion node is recorded,
    derived from the input nodes."""
    from trainteam.curation.jsonl import write_jsonl

    fps = {}
    for name, src in inputs.items():
        fp = source_fingerprint(src)
        if fp is None:
            raise BadInput(f"{kind} input {name!r}: a one-shot stream cannot be versioned; pass a file or a list")
        fps[name] = fp
    key = version_key(kind, fps, params)
    if graph is not None:
        node = existing_version(graph, key)
        if node is not None:
            return key, Path(node["path"]), True
    path = write_jsonl(build(), Path(out_dir) / f"{key}.jsonl")
    if graph is not None:
        parents = [input_node(graph, fp, str(inputs[name]) if isinstance(inputs[name], (str, Path)) else name) for name, fp in fps.items()]
        n = sum(1 for _ in path.open("rb"))
        record_version(graph, key, path=path, counts={"output": n}, params=params, parents=parents, builder=kind)
    return key, path, False
