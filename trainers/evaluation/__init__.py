"""Evaluation and judging: the eval battery, lm-eval, gates, a stage's gate, the judge's diagnosis, answer length."""
