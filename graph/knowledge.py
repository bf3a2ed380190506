"""Append-only storage of graph facts and their networkx view."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Column, Integer, String, Table, UniqueConstraint, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from trainteam.core.db import JSONText, metadata, utcnow
from trainteam.core.ids import check_ref
from trainteam.graph.kinds import EdgeKind, NodeKind, node_id

if TYPE_CHECKING:  # networkx costs ~0.15 s to import: only queries load it
    import networkx as nx

nodes_table = Table(
    "graph_nodes",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("kind", String(64), nullable=False, index=True),
    Column("attrs", JSONText, nullable=False),
    Column("created_at", String(40), nullable=False),
)

edges_table = Table(
    "graph_edges",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("src", String(255), nullable=False, index=True),
    Column("dst", String(255), nullable=False, index=True),
    Column("kind", String(64), nullable=False),
    Column("attrs", JSONText, nullable=False),
    Column("created_at", String(40), nullable=False),
    UniqueConstraint("src", "dst", "kind", name="uq_graph_edge"),
)


class UnknownNode(KeyError):
    pass


def _jsonable(attrs: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(attrs, default=str))


class KnowledgeGraph:
    """Facts are written once. Writing the same node or edge again is a no-op, so
    steps that re-run after a crash cannot duplicate or rewrite history."""

    def __init__(self, engine: Engine):
        self.engine = engine

    # -- writing -----------------------------------------------------------
    def add_node(self, kind: NodeKind | str, key: str, **attrs: Any) -> str:
        kind = NodeKind(kind)
        nid = node_id(kind, key)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    nodes_table.insert().values(id=nid, kind=kind.value, attrs=_jsonable(attrs), created_at=utcnow())
                )
        except IntegrityError:
            pass  # already recorded: facts are immutable
        return nid

    def add_edge(self, src: str, dst: str, kind: EdgeKind | str, **attrs: Any) -> None:
        kind = EdgeKind(kind)
        for end in (src, dst):
            if not self.has_node(end):
                raise UnknownNode(f"graph edge {kind.value}: node {end!r} does not exist")
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    edges_table.insert().values(
                        src=src, dst=dst, kind=kind.value, attrs=_jsonable(attrs), created_at=utcnow()
                    )
                )
        except IntegrityError:
            pass

    def link(
        self, kind: NodeKind | str, key: str, edges: Iterable[tuple[EdgeKind | str, str]] = (), **attrs: Any
    ) -> str:
        """Add a node and its out-edges in one call: ``link(Checkpoint, k, [(produced_by, run)])``."""
        nid = self.add_node(kind, key, **attrs)
        for edge_kind, dst in edges:
            self.add_edge(nid, dst, edge_kind)
        return nid

    # -- reading -----------------------------------------------------------
    def has_node(self, nid: str) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(select(nodes_table.c.id).where(nodes_table.c.id == nid)).first() is not None

    def get_node(self, nid: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            row = conn.execute(select(nodes_table).where(nodes_table.c.id == nid)).mappings().first()
        if row is None:
            raise UnknownNode(f"graph node {nid!r} does not exist")
        return {"id": row["id"], "kind": row["kind"], "created_at": row["created_at"], **row["attrs"]}

    def nodes(self, kind: NodeKind | str | None = None) -> list[dict[str, Any]]:
        query = select(nodes_table).order_by(nodes_table.c.created_at)
        if kind is not None:
            query = query.where(nodes_table.c.kind == NodeKind(kind).value)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [{"id": r["id"], "kind": r["kind"], "created_at": r["created_at"], **r["attrs"]} for r in rows]

    def to_networkx(self) -> nx.MultiDiGraph:
        import networkx as nx

        g = nx.MultiDiGraph()
        with self.engine.connect() as conn:
            for r in conn.execute(select(nodes_table)).mappings():
                g.add_node(r["id"], kind=r["kind"], created_at=r["created_at"], **r["attrs"])
            for r in conn.execute(select(edges_table).order_by(edges_table.c.seq)).mappings():
                g.add_edge(r["src"], r["dst"], key=r["kind"], kind=r["kind"], **r["attrs"])
        return g

    def resolve(self, ref: str) -> str:
        """Accept a full id (``Model:abc``) or a unique key suffix (``abc``)."""
        if self.has_node(ref):
            return ref
        check_ref(ref, "graph node")
        with self.engine.connect() as conn:
            rows = [
                r
                for r in conn.execute(
                    select(nodes_table.c.id).where(nodes_table.c.id.endswith(f":{ref}", autoescape=True))
                ).all()
                if r[0].endswith(f":{ref}")
            ]
        if len(rows) == 1:
            return rows[0][0]
        if not rows:
            raise UnknownNode(f"graph node {ref!r} does not exist")
        raise UnknownNode(f"graph node {ref!r} is ambiguous: {', '.join(r[0] for r in rows[:5])}")

    def lineage(self, ref: str) -> nx.MultiDiGraph:
        """Every ancestor of a node (what it was derived from, transitively), as a subgraph."""
        import networkx as nx

        nid = self.resolve(ref)
        g = self.to_networkx()
        keep = nx.descendants(g, nid) | {nid}
        return g.subgraph(keep).copy()

    def export(self, path: Path, fmt: str) -> Path:
        import networkx as nx

        g = self.to_networkx()
        if fmt == "graphml":
            # GraphML holds scalars only: nested attributes are written as JSON text.
            flat = nx.MultiDiGraph()
            for n, data in g.nodes(data=True):
                flat.add_node(n, **{k: _scalar(v) for k, v in data.items()})
            for u, v, k, data in g.edges(keys=True, data=True):
                flat.add_edge(u, v, key=k, **{a: _scalar(b) for a, b in data.items()})
            nx.write_graphml(flat, path)
        elif fmt == "json":
            path.write_text(json.dumps(nx.node_link_data(g, edges="edges"), indent=1, default=str))
        else:
            raise ValueError(f"--format: unknown graph export format {fmt!r} (graphml, json)")
        return path


def _scalar(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)):
        return v
    return json.dumps(v, default=str)
