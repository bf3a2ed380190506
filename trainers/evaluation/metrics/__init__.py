"""The metric registry: each metric declared once, in one file of this folder (``metric_registry`` finds them)."""
