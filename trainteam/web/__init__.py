"""The web console (``trainteam web``): runs, their curves and steps, approvals, lineage pictures.

A person's front door, beside the CLI: the pages read the run store and the knowledge graph, and a
decision goes through ``trainteam.workflows.engine.approvals.decide`` like ``trainteam approvals approve``.
No agent toolbox holds anything from this package.
"""
