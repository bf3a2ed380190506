"""The bottom layer: errors, ids, bounded input files, hashing and the database handles.

Imports no other trainteam module; every room may import it."""
