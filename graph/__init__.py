"""The knowledge graph: typed, append-only facts about runs, data and models.

Stored in the workspace database; loaded as a networkx MultiDiGraph for queries.
Edges point from the dependent fact to what it depends on
(``Checkpoint --produced_by--> Run``), so a node's lineage is everything
reachable along its out-edges.
"""

from trainteam.graph.kinds import EdgeKind, NodeKind, node_id
from trainteam.graph.knowledge import KnowledgeGraph

__all__ = ["EdgeKind", "KnowledgeGraph", "NodeKind", "node_id"]
