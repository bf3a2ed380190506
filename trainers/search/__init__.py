"""Searching before the big run: the recipe search (learning rate by probes) and the ladder pre-check of data."""
