"""Check, start, resume and serve runs: where the engine is launched with the step tools (``runner.py``).

Above ``steps``, ``task`` and ``engine`` (ARCHITECTURE.md, the order inside ``workflows/``): the engine imports
no step, and this folder hands it the catalog (``steps.STEPS``) at launch.
"""
