"""The demo's natural-language request and the bundled task file describe the same run."""

from importlib import resources
from pathlib import Path

from trainteam.agents.orchestrator import DEMO_REQUEST, parse_request
from trainteam.workflows.task import load_task_file


def test_demo_request_parses_to_the_bundled_task():
    with resources.as_file(resources.files("trainteam.workflows").joinpath("examples/addition.yaml")) as path:
        bundled = load_task_file(Path(path)).model_dump(mode="json", exclude={"description"})
    parsed = parse_request(DEMO_REQUEST).model_dump(mode="json", exclude={"description"})
    assert parsed == bundled


def test_examples_task_is_the_bundled_one():
    root = Path(__file__).resolve().parents[2]
    bundled = root / "workflows" / "examples" / "addition.yaml"
    assert (root / "examples" / "tasks" / "addition.yaml").read_text() == bundled.read_text()
