"""Training methods: one file per method (its ``TrainingMethod`` record, trainer builder and data shaper),
their names in ``trainers/training/method_names.py`` and the registry in ``method_registry.py`` (``get_method``,
``methods``, ``align_methods``). Everything else asks the registry instead of naming a method.

This ``__init__`` imports nothing: ``training/config.py`` reads ``method_names.py`` while the method files
import ``config``, so importing the package must not load the methods.
"""
