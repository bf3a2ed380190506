"""`examples/tasks/addition.yaml` (what the README shows) is the task the package bundles."""

from pathlib import Path


def test_examples_task_is_the_bundled_one():
    root = Path(__file__).resolve().parents[2]
    bundled = root / "workflows" / "examples" / "addition.yaml"
    assert (root / "examples" / "tasks" / "addition.yaml").read_text() == bundled.read_text()
