"""The training loop (``loop.train``): one entry for every method, above the methods (their records build the
trainer), the planning (the pace a run meets, checked against its plan) and the training kit it uses.

Nothing under ``trainers/training``, ``trainers/methods`` or ``trainers/planning`` imports it (ARCHITECTURE.md,
the order inside ``trainers/``).
"""
