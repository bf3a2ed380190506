"""The training methods' names, in the order stages run: the registry's one list.

A built-in name is a file of ``trainers/methods/`` that defines ``METHOD`` (a ``TrainingMethod``); the names sit
here, below the records, because ``TrainConfig`` (``config.py``, beside this) validates a method's name and the
records import ``config``. A method of another
package is one file of its own, named by an entry point of the group ``trainteam.methods`` in that package's
metadata (``[project.entry-points."trainteam.methods"] orpo = "my_pkg.orpo:METHOD"``): its name comes after
the built-in ones. ``method_registry`` loads them all; this module imports no method: an entry point is read
here by its name only.
"""

from importlib.metadata import EntryPoint, entry_points

GROUP = "trainteam.methods"
BUILT_IN: tuple[str, ...] = ("pretrain", "sft", "dpo", "grpo", "kto")
# The methods other installed packages add, by name (their ``trainteam.methods`` entry points), read once: the
# registry loads them from here.
ADDED: dict[str, EntryPoint] = {
    ep.name: ep for ep in sorted(entry_points(group=GROUP), key=lambda ep: ep.name) if ep.name not in BUILT_IN
}
NAMES: tuple[str, ...] = BUILT_IN + tuple(ADDED)
