"""The one writer of the knowledge graph: a named function for each fact the project records.

Every node and edge the project writes goes through these functions (``graph/knowledge.py``
holds the storage they call); the steps, the engine, the approval queue and the persona
hooks call them with plain values, so the training stack and the data engine never touch
the graph. Node ids, kinds, edges and attributes are those the lineage views and ``graph
export`` read. The graph is append-only and idempotent: recording a fact again is a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainteam.graph.kinds import EdgeKind, NodeKind, node_id
from trainteam.graph.knowledge import KnowledgeGraph, UnknownNode


def _given(**attrs: Any) -> dict[str, Any]:
    """The attributes that were given (None: not known, not recorded)."""
    return {k: v for k, v in attrs.items() if v is not None}


def _existing(graph: KnowledgeGraph, *nodes: str | None) -> list[str]:
    return [n for n in nodes if n is not None and graph.has_node(n)]


# -- runs, steps, personas ----------------------------------------------------------------------


def record_run(graph: KnowledgeGraph, run_id: str, **facts: str | None) -> str:
    """The Run node (``workflow``, ``task`` when known); the first record of a run wins."""
    return graph.add_node(NodeKind.RUN, run_id, **facts)


def record_step(
    graph: KnowledgeGraph,
    run_id: str,
    step: str,
    visit: int,
    *,
    persona: str | None = None,
    tool: str | None = None,
    in_run: bool = True,
) -> str:
    """A step visit, ``part_of`` its run (``in_run``: the Run node exists)."""
    edges = [(EdgeKind.PART_OF, node_id(NodeKind.RUN, run_id))] if in_run else []
    return graph.link(
        NodeKind.STEP,
        f"{run_id}/{step}#{visit}",
        edges,
        run_id=run_id,
        step=step,
        visit=visit,
        **_given(persona=persona, tool=tool),
    )


def record_tool_call(
    graph: KnowledgeGraph, *, run_id: str, segment: str, tool_call_id: str, step_node: str, facts: Mapping[str, Any]
) -> str:
    """A persona's tool call (``facts``: tool, args, status, outcome, already redacted), called_by its step."""
    return graph.link(
        NodeKind.TOOL_CALL, f"{run_id}/{segment}/{tool_call_id}", [(EdgeKind.CALLED_BY, step_node)], **facts
    )


def record_decision(
    graph: KnowledgeGraph, *, run_id: str, segment: str, step_node: str, facts: Mapping[str, Any]
) -> str:
    """A persona's decision at the end of an agent run (already redacted), called_by its step."""
    return graph.link(NodeKind.DECISION, f"{run_id}/{segment}", [(EdgeKind.CALLED_BY, step_node)], **facts)


def record_transcript(
    graph: KnowledgeGraph,
    *,
    run_id: str,
    segment: str,
    step_node: str,
    path: str,
    persona: str,
    tool: str,
    model: str | None,
) -> str:
    """A transcript file that ``records`` its step."""
    return graph.link(
        NodeKind.TRANSCRIPT,
        f"{run_id}/{segment}",
        [(EdgeKind.RECORDS, step_node)],
        path=path,
        persona=persona,
        tool=tool,
        model=model,
    )


# -- approvals ----------------------------------------------------------------------------------


def record_approval_request(
    graph: KnowledgeGraph,
    approval_id: str,
    *,
    run_id: str,
    step: str,
    visit: int,
    action: str,
    proposed: Mapping[str, Any],
    requested_by: str,
) -> str:
    """An approval a step asked for, ``requested_by`` the step visit."""
    step_node = record_step(graph, run_id, step, visit, in_run=False)
    return graph.link(
        NodeKind.APPROVAL,
        approval_id,
        [(EdgeKind.REQUESTED_BY, step_node)],
        action=action,
        step=step,
        run_id=run_id,
        proposed=dict(proposed),
        requested_by=requested_by,
    )


def record_approval(
    graph: KnowledgeGraph,
    approval_id: str,
    *,
    person: str,
    approve: bool,
    note: str | None,
    action: str,
    step: str,
    run_id: str,
) -> str:
    """A person's decision on an approval: the Person, a Decision decided_by them, and the
    Approval approved_by / rejected_by them. Returns the Decision node."""
    person_node = graph.add_node(NodeKind.PERSON, person, name=person)
    status = "approved" if approve else "rejected"
    decision = graph.link(
        NodeKind.DECISION,
        f"approval/{approval_id}",
        [(EdgeKind.DECIDED_BY, person_node)],
        status=status,
        note=note,
        approval=approval_id,
        by=person,
    )
    approval_node = graph.add_node(NodeKind.APPROVAL, approval_id, action=action, step=step, run_id=run_id)
    graph.add_edge(approval_node, person_node, EdgeKind.APPROVED_BY if approve else EdgeKind.REJECTED_BY)
    graph.add_edge(decision, approval_node, EdgeKind.DECIDED_BY)
    return decision


# -- data ---------------------------------------------------------------------------------------


def record_corpus(
    graph: KnowledgeGraph,
    key: str,
    *,
    source: str,
    generator: str | None = None,
    params: Mapping[str, Any] | None = None,
    path: str | None = None,
    eval_path: str | None = None,
) -> str:
    """Where a run's data came from: generated (``generator``, ``params``) or local files."""
    return graph.add_node(
        NodeKind.CORPUS,
        key,
        source=source,
        **_given(generator=generator, params=None if params is None else dict(params), path=path, eval_path=eval_path),
    )


def record_split(
    graph: KnowledgeGraph,
    key: str,
    *,
    corpus: str,
    split: str,
    path: str,
    sha256: str,
    records: int,
    stage: str | None = None,
) -> str:
    """A prepared split (train / eval) as a DatasetVersion ``derived_from`` its corpus."""
    return graph.link(
        NodeKind.DATASET_VERSION,
        key,
        [(EdgeKind.DERIVED_FROM, corpus)],
        split=split,
        path=path,
        sha256=sha256,
        records=records,
        **_given(stage=stage),
    )


def recorded_dataset(graph: KnowledgeGraph, key: str) -> dict[str, Any] | None:
    """The DatasetVersion recorded under ``key`` (its attributes), or None."""
    try:
        return graph.get_node(node_id(NodeKind.DATASET_VERSION, key))
    except UnknownNode:
        return None


def _input_node(graph: KnowledgeGraph, fingerprint: str, name: str) -> str:
    """The node an input stands for: a DatasetVersion whose output has this content, else a Corpus."""
    for node in graph.nodes(NodeKind.DATASET_VERSION):
        if node.get("content_hash") == fingerprint:
            return node["id"]
    return graph.add_node(NodeKind.CORPUS, fingerprint, content_hash=fingerprint, source=name)


def record_dataset(
    graph: KnowledgeGraph,
    key: str,
    *,
    path: str,
    content_hash: str,
    counts: Mapping[str, int],
    params: Mapping[str, Any],
    inputs: Iterable[tuple[str, str]],
    decontaminated_against: Iterable[tuple[str, str]] = (),
    builder: str | None = None,
    report: str | None = None,
) -> str:
    """A built (curated, derived) dataset version. ``inputs`` and ``decontaminated_against`` are
    ``(fingerprint, name)`` of what it was read from and checked against: each becomes the
    DatasetVersion with that content, else a Corpus node."""
    parents = [_input_node(graph, fp, name) for fp, name in inputs]
    against = [_input_node(graph, fp, name) for fp, name in decontaminated_against]
    edges = [(EdgeKind.DERIVED_FROM, p) for p in parents] + [(EdgeKind.DECONTAMINATED_AGAINST, e) for e in against]
    return graph.link(
        NodeKind.DATASET_VERSION,
        key,
        edges,
        path=path,
        content_hash=content_hash,
        counts=dict(counts),
        params=dict(params),
        parents=parents,
        **_given(builder=builder, report=report),
    )


def record_derived_from(graph: KnowledgeGraph, node: str, parent: str) -> None:
    """``node`` derived_from ``parent`` (a curated version from the prepared one it curated)."""
    graph.add_edge(node, parent, EdgeKind.DERIVED_FROM)


# -- training -----------------------------------------------------------------------------------


def record_tokenizer(
    graph: KnowledgeGraph,
    key: str,
    *,
    sources: Sequence[str],
    step_node: str,
    path: str,
    vocab_size: int,
    split_digits: bool,
) -> str:
    """A trained tokenizer, derived_from the dataset versions it was fitted on."""
    edges = [*((EdgeKind.DERIVED_FROM, n) for n in sources), (EdgeKind.PRODUCED_BY, step_node)]
    return graph.link(NodeKind.TOKENIZER, key, edges, path=path, vocab_size=vocab_size, split_digits=split_digits)


def record_fitted_tokenizer(
    graph: KnowledgeGraph,
    key: str,
    *,
    inputs: Iterable[tuple[str, str]],
    path: str,
    vocab_size: int,
    split_digits: bool,
) -> str:
    """A tokenizer fitted outside a run (MCP ``train_tokenizer``): derived_from what it read, ``(fingerprint,
    name)`` each, the DatasetVersion with that content, else a Corpus."""
    edges = [(EdgeKind.DERIVED_FROM, _input_node(graph, fp, name)) for fp, name in inputs]
    return graph.link(NodeKind.TOKENIZER, key, edges, path=path, vocab_size=vocab_size, split_digits=split_digits)


def record_merged_checkpoint(
    graph: KnowledgeGraph,
    key: str,
    *,
    path: str,
    adapters: Sequence[str],
    combination: str,
    density: float,
    weights: Sequence[float],
) -> str:
    """Adapters merged into their base (``key``: the merged weights' hash): a Checkpoint derived_from
    each adapter's recorded Checkpoint (found by its path)."""
    by_path = {str(n.get("path")): n["id"] for n in graph.nodes(NodeKind.CHECKPOINT)}
    edges = [(EdgeKind.DERIVED_FROM, by_path[a]) for a in adapters if a in by_path]
    return graph.link(
        NodeKind.CHECKPOINT,
        key,
        edges,
        path=path,
        stage="merge",
        method=combination,
        adapter=False,
        adapters=list(adapters),
        density=density,
        weights=list(weights),
    )


def record_checkpoint(
    graph: KnowledgeGraph,
    key: str,
    *,
    run_id: str,
    step_node: str,
    trained_on: str,
    tokenizer: str | None,
    derived_from: str | None,
    path: str,
    stage: str,
    metrics: Mapping[str, Any],
    adapter: bool,
    method: str | None = None,
    seq_len: int | None = None,
    prompt_format: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> str:
    """A stage's final weights (``key``: their content hash), produced_by the run and the step,
    trained_on its data, using its tokenizer, derived_from the checkpoint it continued; ``config``: the
    resolved training config the trainer got (TRL's names), recorded with the weights it made."""
    edges = [
        (EdgeKind.PRODUCED_BY, node_id(NodeKind.RUN, run_id)),
        (EdgeKind.PRODUCED_BY, step_node),
        (EdgeKind.TRAINED_ON, trained_on),
    ]
    if tokenizer:
        edges.append((EdgeKind.USES, tokenizer))
    if derived_from:
        edges.append((EdgeKind.DERIVED_FROM, derived_from))
    return graph.link(
        NodeKind.CHECKPOINT,
        key,
        edges,
        path=path,
        stage=stage,
        run_id=run_id,
        metrics=dict(metrics),
        adapter=adapter,
        **_given(
            method=method, seq_len=seq_len, prompt_format=prompt_format, config=None if config is None else dict(config)
        ),
    )


# -- evaluation, gates, models ------------------------------------------------------------------


def record_eval(
    graph: KnowledgeGraph,
    key: str,
    *,
    run_id: str,
    stage: str,
    stage_kind: str,
    metrics: Mapping[str, float],
    n_eval: int,
    decontamination: Mapping[str, Any] | None = None,
    checkpoint_node: str | None = None,
    dataset_node: str | None = None,
    produced_by: str | None = None,
) -> str:
    """A battery's result as an Eval node: evaluates its Checkpoint, evaluated_on its DatasetVersion
    (those that exist), produced_by the step. Facts are immutable: a re-measured stage needs its own key."""
    edges = [
        (kind, node)
        for kind, node in ((EdgeKind.EVALUATES, checkpoint_node), (EdgeKind.EVALUATED_ON, dataset_node))
        if node is not None and graph.has_node(node)
    ]
    decon = decontamination or {}
    node = graph.link(
        NodeKind.EVAL,
        key,
        edges,
        run_id=run_id,
        stage=stage,
        stage_kind=stage_kind,
        metrics=dict(metrics),
        n_eval=n_eval,
        decontaminated=bool(decon.get("checked")),
        contaminated_removed=decon.get("removed", 0),
    )
    if produced_by is not None:
        graph.add_edge(node, produced_by, EdgeKind.PRODUCED_BY)
    return node


def record_gate(
    graph: KnowledgeGraph,
    *,
    run_id: str,
    stage: str,
    passed: bool,
    promote: bool,
    reasons: Sequence[str],
    accepted_by: str | None = None,
    approval_id: str | None = None,
    eval_node: str | None = None,
    produced_by: str | None = None,
) -> str:
    """A gate's decision: decided_by its Eval, and by the approval when a person accepted a failure."""
    approval_node = node_id(NodeKind.APPROVAL, approval_id) if approval_id else None
    edges = [(EdgeKind.DECIDED_BY, n) for n in _existing(graph, eval_node or None, approval_node)]
    key = f"{run_id}/{stage}" + (f"/accepted/{approval_id}" if accepted_by else "")
    node = graph.link(
        NodeKind.GATE,
        key,
        edges,
        run_id=run_id,
        stage=stage,
        passed=passed,
        promote=promote,
        accepted_by=accepted_by,
        reasons=list(reasons),
    )
    if produced_by is not None:
        graph.add_edge(node, produced_by, EdgeKind.PRODUCED_BY)
    return node


def record_diagnosis(
    graph: KnowledgeGraph,
    *,
    run_id: str,
    step_node: str,
    gate_node: str,
    stage: str,
    cause: str,
    summary: str,
    plan: Mapping[str, Any],
    evidence: Mapping[str, Any],
    decided_by: str,
) -> str:
    """The judge's diagnosis of a failed gate (``cause``: under_fit, over_fit, ...) and its retry plan:
    a Decision decided_by the Gate, called_by the gate's step visit (a retry's gate diagnoses again)."""
    key = f"{step_node.split(':', 1)[-1]}/diagnosis"
    return graph.link(
        NodeKind.DECISION,
        key,
        [(EdgeKind.DECIDED_BY, gate_node), (EdgeKind.CALLED_BY, step_node)],
        run_id=run_id,
        stage=stage,
        decision="diagnosis",
        cause=cause,
        summary=summary,
        plan=dict(plan),
        evidence=dict(evidence),
        decided_by=decided_by,
    )


def record_model(
    graph: KnowledgeGraph,
    model_id: str,
    *,
    name: str,
    path: str,
    stage: str,
    base: str | None,
    metrics: Mapping[str, Any],
    content_hash: str,
    checkpoint_node: str | None = None,
    run_id: str | None = None,
    produced_by: str | None = None,
) -> str:
    """A registered model: registers its Checkpoint (recorded here from the registry's values if the
    trainer's is unknown), produced_by its run, derived_from its base model. A model recorded
    already keeps its facts; ``produced_by`` (the registering step) is linked either way."""
    nid = node_id(NodeKind.MODEL, model_id)
    if not graph.has_node(nid):
        if checkpoint_node is None or not graph.has_node(checkpoint_node):
            checkpoint_node = graph.add_node(NodeKind.CHECKPOINT, content_hash[:16], path=path, stage=stage)
        edges = [(EdgeKind.REGISTERS, checkpoint_node)]
        edges += [
            (EdgeKind.PRODUCED_BY, n) for n in _existing(graph, node_id(NodeKind.RUN, run_id) if run_id else None)
        ]
        edges += [(EdgeKind.DERIVED_FROM, n) for n in _existing(graph, node_id(NodeKind.MODEL, base) if base else None)]
        graph.link(
            NodeKind.MODEL,
            model_id,
            edges,
            name=name,
            path=path,
            stage=stage,
            base=base,
            metrics=dict(metrics),
            content_hash=content_hash,
        )
    if produced_by is not None:
        graph.add_edge(nid, produced_by, EdgeKind.PRODUCED_BY)
    return nid


def record_binding(
    graph: KnowledgeGraph, model_id: str | None, *, persona: str, role: str, action: str, by: str | None, at: str
) -> str:
    """A person bound (``action="bind"``) a registered model to a persona's role, or freed the role
    (``"unbind"``, ``model_id`` what it was bound to): the Persona node, the Model ``bound_to`` it
    on a bind, and a Decision decided_by the Person that says which, when and by whom.
    The Model node must exist (``record_model``)."""
    persona_node = graph.add_node(NodeKind.PERSONA, persona, name=persona)
    model_node = node_id(NodeKind.MODEL, model_id) if model_id else None
    if action == "bind" and model_node is not None:
        graph.add_edge(model_node, persona_node, EdgeKind.BOUND_TO, role=role, bound_by=by, bound_at=at)
    edges = [(EdgeKind.DECIDED_BY, graph.add_node(NodeKind.PERSON, by, name=by))] if by else []
    edges += [(EdgeKind.USES, n) for n in _existing(graph, model_node)]
    return graph.link(
        NodeKind.DECISION,
        f"binding/{role}/{at}",
        edges,
        decision=action,
        role=role,
        persona=persona,
        **_given(model=model_id, by=by, at=at),
    )


def record_bound_use(graph: KnowledgeGraph, model_id: str, *, persona: str, role: str) -> str:
    """A persona runs on a bound model: the Model ``bound_to`` the Persona (a no-op once recorded)."""
    persona_node = graph.add_node(NodeKind.PERSONA, persona, name=persona)
    graph.add_edge(node_id(NodeKind.MODEL, model_id), persona_node, EdgeKind.BOUND_TO, role=role)
    return persona_node


def record_decided_by_model(graph: KnowledgeGraph, node: str, model_id: str) -> None:
    """A decision or tool call a registered model made: ``decided_by`` its Model node (when recorded)."""
    model_node = node_id(NodeKind.MODEL, model_id)
    if graph.has_node(node) and graph.has_node(model_node):
        graph.add_edge(node, model_node, EdgeKind.DECIDED_BY)


def record_export(graph: KnowledgeGraph, model_id: str, key: str, **facts: Any) -> str:
    """A registered model written out and read back (``models export``): the Export node (where, format, hash,
    the check's figures) ``exports`` the Model node, which must exist (``record_model``)."""
    return graph.link(
        NodeKind.EXPORT, key, [(EdgeKind.EXPORTS, node_id(NodeKind.MODEL, model_id))], model=model_id, **facts
    )


def recorded_exports(graph: KnowledgeGraph, model_id: str) -> list[dict[str, Any]]:
    """The Export nodes of a model, oldest first (their facts as recorded)."""
    return [n for n in graph.nodes(NodeKind.EXPORT) if n.get("model") == model_id]


# -- the recipe search --------------------------------------------------------------------------


def record_probe(
    graph: KnowledgeGraph, key: str, *, run_id: str, stage: str, step_node: str, facts: Mapping[str, Any]
) -> str:
    """One probe run of a stage's recipe search (Run-like: settings, held-out losses, cost), produced_by its step."""
    return graph.link(NodeKind.PROBE, key, [(EdgeKind.PRODUCED_BY, step_node)], run_id=run_id, stage=stage, **facts)


def record_recipe(
    graph: KnowledgeGraph,
    key: str,
    *,
    run_id: str,
    stage: str,
    step_node: str,
    probe_nodes: Sequence[str],
    facts: Mapping[str, Any],
) -> str:
    """The engineer's choice of a stage's recipe: a Decision decided_by the probes it compared, called_by its step."""
    edges = [(EdgeKind.CALLED_BY, step_node)] + [(EdgeKind.DECIDED_BY, n) for n in probe_nodes]
    return graph.link(NodeKind.DECISION, key, edges, run_id=run_id, stage=stage, decision="recipe", **facts)
