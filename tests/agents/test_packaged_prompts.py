"""The persona cards, templates and skills ship in the wheel and load from it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_carries_every_card_template_and_skill(tmp_path):
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    wheel = next(out.glob("trainteam-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, package in (("prompts", "trainteam/prompts"), ("skills", "trainteam/skills")):
        for f in (ROOT / folder).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts:
                assert f"{package}/{f.relative_to(ROOT / folder).as_posix()}" in names, f
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from trainteam.agents import cards\n"
        "assert cards.__file__.startswith(sys.argv[1]), cards.__file__\n"
        "for p in cards.PERSONAS:\n"
        "    c = cards.load_card(p)\n"
        "    [cards.load_skill(s) for s in c.skills]\n"
        "    cards.template_env().get_template(c.template)\n"
        "print(cards.render('request.md.j2', workflow='train_model').split()[3])\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, str(site)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "**ml_orchestrator**"
