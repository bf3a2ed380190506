"""What a person changes when a plan does not fit its budget, and how the estimate was made. No torch.

A refusal that only says "93.6 min, over the 20 min budget" leaves the person to guess (issue 31):
which number to change, to what, and whether to trust the estimate at all. ``over_budget`` reads
a plan's stages (``workflows.stageplan.StageVerdict`` as a dict, as a plan-first tool returns it)
and names both ways out: ``budget.max_wall_minutes`` to at least what the plan needs, or the
longest stage's ``training.<stage>.max_steps`` to at most what the budget left affords at the
estimated pace, with the estimate's own source ("measured 160 tokens/s at load 0.3 of 2 cores on
2026-12-04 ..." or "a FLOP guess: ..."). A stage whose length the recipe search chooses is never
told to shorten: the search fits it to the budget itself.
"""

from __future__ import annotations

import math
from typing import Any


def _left_of(entry: dict[str, Any]) -> float:
    """The minutes a stage still needs: its estimate less the share its finished steps took."""
    steps = entry.get("max_steps") or 0
    done = entry.get("steps_done") or 0
    return float(entry.get("est_minutes") or 0.0) * (max(0.0, 1.0 - done / steps) if steps else 1.0)


def over_budget(
    stages: dict[str, dict[str, Any]], est_minutes: float, left_minutes: float, budget_minutes: float
) -> str:
    """The change that makes ``est_minutes`` fit ``left_minutes`` of a ``budget_minutes`` budget, as one
    clause: the budget to raise, the steps to cut (the stage needing most time, if its length is the
    task's), and how each stage's estimate was made."""
    need = budget_minutes + max(0.0, est_minutes - left_minutes)
    out = [f"raise budget.max_wall_minutes to at least {math.ceil(need * 10) / 10:g}"]
    runnable = {name: e for name, e in stages.items() if e.get("runnable", True) and e.get("est_minutes")}
    if runnable:
        name, entry = max(runnable.items(), key=lambda kv: _left_of(kv[1]))
        pace = float(entry.get("step_seconds") or 0.0)
        room = left_minutes - (est_minutes - _left_of(entry))
        steps = (entry.get("steps_done") or 0) + (math.floor(room * 60 / pace) if pace > 0 and room > 0 else 0)
        searched = "max_steps" in ((entry.get("searched") or {}).get("settings") or [])
        if not searched and pace > 0 and steps > (entry.get("steps_done") or 0):
            out.append(
                f"lower training.{name}.max_steps to at most {steps} (from {entry.get('max_steps')}; "
                f"{pace:.2f} s a step)"
            )
    notes = [f"{n}: {e['estimate_note']}" for n, e in runnable.items() if e.get("estimate_note")]
    text = " or ".join(out)
    return text + (f"; the estimate: {'; '.join(notes)}" if notes else "")
