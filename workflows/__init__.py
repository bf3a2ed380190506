"""trainteam.workflows"""
