"""A task checked and planned: its curriculum, the checks before a run, the stage plan, the answer length."""
