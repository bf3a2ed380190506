"""One grammar for the ids a person types: run ids, approval ids, model ids, task names.

Ids end up as folder names (``checkpoints/<run>``), as database keys and in commands a
person copies from a table, so each is checked here before it is used: letters, digits
and ``_ . -`` (``:`` too inside approval and graph ids), starting with a letter or digit —
no ``/``, no ``..``, no wildcard, nothing a shell or SQL ``LIKE`` would read. Lookups are
exact, or by a *literal* unique prefix (``prefix_of``: a case-sensitive ``substr``
comparison, never ``LIKE``), and a prefix must be long enough to mean something.

A leaf module: stdlib and trainteam.core.errors only, so graph/ and the read-only twins use it.
"""

from __future__ import annotations

import re

from trainteam.core.errors import BadInput

RUN_ID_MAX = 64  # the runs table's key length
REF_MAX = 160  # approval ids are <run>.<step>.<visit>.<action>
MIN_PREFIX = 6  # a shorter prefix is not a reference, just a guess
_RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


def check_run_id(value: str, what: str = "run id") -> str:
    """A run id a person chose (``--run-id``) or typed; BadInput naming it otherwise."""
    if not isinstance(value, str) or not value:
        raise BadInput(f"{what}: empty")
    if len(value) > RUN_ID_MAX:
        raise BadInput(f"{what}: {len(value)} characters; at most {RUN_ID_MAX}")
    if not _RUN.fullmatch(value) or ".." in value:
        raise BadInput(
            f"{what}: {_shown(value)} is not an id (letters, digits, '_', '.', '-'; starting with a letter or digit)"
        )
    return value


def check_ref(value: str, what: str) -> str:
    """An approval, model or graph id (or a prefix of one) as typed on a command line."""
    if not isinstance(value, str) or not value:
        raise BadInput(f"{what}: empty")
    if len(value) > REF_MAX:
        raise BadInput(f"{what}: {len(value)} characters; at most {REF_MAX}")
    if not _REF.fullmatch(value):
        raise BadInput(f"{what}: {_shown(value)} is not an id (letters, digits, '_', '.', ':', '-')")
    return value


def prefix_allowed(ref: str) -> bool:
    """Whether ``ref`` may name something by a prefix: long enough, and in the id grammar."""
    return MIN_PREFIX <= len(ref) <= REF_MAX and _REF.fullmatch(ref) is not None


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "…")
