"""A node's lineage in the knowledge graph as an SVG picture, laid out by networkx on the server.

The node stands in the left column; each column to its right holds what the one before was derived
from, trained on, decided by ... (``KnowledgeGraph.lineage``: edges point from a fact to its
ancestors). Graphviz is not needed: networkx's ``multipartite_layout`` places the columns.
"""

from __future__ import annotations

from html import escape

import networkx as nx
from markupsafe import Markup

COLOURS = {
    "Run": "#dbeafe",
    "Step": "#e0e7ff",
    "Decision": "#fde68a",
    "Person": "#fecaca",
    "Approval": "#fed7aa",
    "Checkpoint": "#bbf7d0",
    "Eval": "#d9f99d",
    "Gate": "#a7f3d0",
    "Model": "#86efac",
    "DatasetVersion": "#e9d5ff",
    "Corpus": "#f5d0fe",
    "Tokenizer": "#c7d2fe",
    "Transcript": "#e5e7eb",
    "ToolCall": "#f3f4f6",
    "Probe": "#cffafe",
    "Telemetry": "#f1f5f9",
}
BOX_W, BOX_H, COL_GAP, ROW_GAP = 230, 38, 90, 16
MAX_NODES = 200


def _columns(sub: nx.MultiDiGraph, root: str) -> dict[str, int]:
    """Each node's distance from ``root`` along lineage edges (its longest, so arrows point right)."""
    simple = nx.DiGraph(sub)
    if nx.is_directed_acyclic_graph(simple):
        depth = {root: 0}
        for node in nx.topological_sort(simple):
            for nxt in simple.successors(node):
                depth[nxt] = max(depth.get(nxt, 0), depth.get(node, 0) + 1)
        return {n: depth.get(n, 0) for n in simple}
    return nx.single_source_shortest_path_length(simple, root)


def picture(sub: nx.MultiDiGraph, root: str, href=lambda node: "#") -> Markup:
    """The SVG; ``href(node)`` gives the link each box leads to."""
    nodes = list(sub.nodes)[:MAX_NODES]
    sub = sub.subgraph(nodes)
    column = _columns(sub, root)
    for n in sub.nodes:
        sub.nodes[n]["layer"] = column.get(n, 0)
    pos = nx.multipartite_layout(sub, subset_key="layer", align="vertical") if len(sub) > 1 else {root: (0.0, 0.0)}
    per_column: dict[int, list[str]] = {}
    for n in sorted(sub.nodes, key=lambda n: (column.get(n, 0), -pos[n][1], n)):
        per_column.setdefault(column.get(n, 0), []).append(n)
    xy = {
        n: (c * (BOX_W + COL_GAP) + 10, r * (BOX_H + ROW_GAP) + 10)
        for c, col in per_column.items()
        for r, n in enumerate(col)
    }
    width = (max(per_column) + 1) * (BOX_W + COL_GAP) + 20
    height = max(len(col) for col in per_column.values()) * (BOX_H + ROW_GAP) + 20
    parts = [
        f'<svg class="lineage" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="lineage of {escape(root)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#64748b"/></marker></defs>',
    ]
    parts += [_edge(xy[u], xy[v], kind) for u, v, kind in sub.edges(keys=True) if u in xy and v in xy]
    parts += [_box(n, sub.nodes[n], xy[n], n == root, href(n)) for n in sub.nodes]
    parts.append("</svg>")
    return Markup("".join(parts))


def _edge(a: tuple[int, int], b: tuple[int, int], kind: str) -> str:
    x1: float
    x2: float
    x1, y1 = a[0] + BOX_W, a[1] + BOX_H / 2
    x2, y2 = b[0], b[1] + BOX_H / 2
    if x2 <= x1:  # an edge back to the same or an earlier column
        x1, x2 = a[0] + BOX_W / 2, b[0] + BOX_W / 2
    mid = (x1 + x2) / 2
    return (
        f'<g class="edge"><path d="M {x1:.0f} {y1:.0f} C {mid:.0f} {y1:.0f}, {mid:.0f} {y2:.0f}, {x2:.0f} {y2:.0f}" '
        f'fill="none" stroke="#94a3b8" marker-end="url(#arrow)"/>'
        f'<text x="{mid:.0f}" y="{(y1 + y2) / 2 - 3:.0f}" font-size="10" fill="#475569" '
        f'text-anchor="middle">{escape(kind)}</text></g>'
    )


def _box(node: str, attrs: dict, at: tuple[int, int], is_root: bool, link: str) -> str:
    kind = str(attrs.get("kind", node.split(":", 1)[0]))
    key = node.split(":", 1)[1] if ":" in node else node
    label = key if len(key) <= 34 else key[:16] + "…" + key[-16:]
    detail = _detail(kind, attrs)
    x, y = at
    return (
        f'<a href="{escape(link)}" class="node" data-node="{escape(node)}"><g>'
        f"<title>{escape(node)}</title>"
        f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{COLOURS.get(kind, "#f8fafc")}" '
        f'stroke="{"#0f172a" if is_root else "#64748b"}" stroke-width="{2.5 if is_root else 1}"/>'
        f'<text x="{x + 8}" y="{y + 15}" font-size="11" font-weight="bold">{escape(kind)}'
        f"{' · ' + escape(detail) if detail else ''}</text>"
        f'<text x="{x + 8}" y="{y + 30}" font-size="11">{escape(label)}</text></g></a>'
    )


def _detail(kind: str, attrs: dict) -> str:
    """One short fact on the box: a decision's status and author, a gate's verdict, a step's persona."""
    if kind == "Decision" and attrs.get("status"):
        return f"{attrs['status']} by {attrs.get('by') or '?'}"
    if kind == "Gate" and "passed" in attrs:
        return "passed" if attrs["passed"] else "failed"
    if kind == "Step" and attrs.get("persona"):
        return str(attrs["persona"])
    return ""
