"""`trainteam mcp`: the team's curation and training tools, run and approval listings and lineage
queries over the Model Context Protocol (the ``mcp`` SDK's ``MCPServer``), plan-first.

No tool here decides an approval or raises a budget: those stay with a person
(``trainteam approvals``, the web console).
"""
