"""The training methods' names, in the order stages run: the registry's one list.

A name here is a file of this folder that defines ``METHOD`` (a ``TrainingMethod``); ``method_registry``
loads them. ``training/config.py`` validates ``TrainConfig.method`` against this list, so this module
imports nothing (the method files import ``config``).
"""

NAMES: tuple[str, ...] = ("pretrain", "sft", "dpo", "grpo", "kto")
