"""The bad-input suite: every generated hostile input (hostile_cases.py) gets one clear line.

Each case runs the real CLI in a subprocess on its own copy of a used workspace (a completed
run and a run waiting for a person) and must exit 2 with exactly one line on stderr, no
traceback, by itself (a process still running after hostile_cases.LIMIT_S is a hang), leaving
every table of trainteam.db and dbos.sqlite, every file of the workspace and the working folder
as they were — and the line must name what is wrong.
The cases run three at a time once per module; each is then asserted on its own.
"""

from __future__ import annotations

import re
from collections import Counter

import hostile_cases as hc
import pytest

RUN_ID, APPROVAL_ID = "done-run-0001", "wait-run-0001.prepare_corpus.1.run_step"
CASES = hc.all_cases(RUN_ID, APPROVAL_ID)
IDS = [f"{c.kind}-{i:03d}-{re.sub(r'[^A-Za-z0-9]+', '_', c.name)[:40]}" for i, c in enumerate(CASES)]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    ws, run_id, approval_id = hc.build_workspace(root)
    assert (run_id, approval_id) == (RUN_ID, APPROVAL_ID)
    results = hc.run_all(CASES, ws, root / "cases")
    print("\n" + hc.table(results))  # the table, per kind (pytest -s shows it)
    return dict(zip(IDS, results, strict=True))


def test_the_suite_is_broad():
    kinds = Counter(c.kind for c in CASES)
    assert len(CASES) >= 300 and set(kinds) == set(hc.KINDS), kinds


@pytest.mark.parametrize("case_id", IDS)
def test_one_clear_line(case_id, outcomes):
    o = outcomes[case_id]
    assert o.verdict == "clear", (
        f"{o.case.kind}: {o.case.name}: {o.verdict} ({o.why}); rc {o.rc}, {o.seconds:.1f} s; stderr: {o.stderr[-600:]}"
    )
