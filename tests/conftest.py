"""Suite-wide settings: offline, quiet, one torch thread per test process (2 shared cores); the real-model fixture."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRAINTEAM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))  # shared helpers by name: local_http

import pytest  # noqa: E402
from real_model import ensure_real_model  # noqa: E402


@pytest.fixture(scope="session")
def real_model() -> Path:
    """SmolLM2-135M-Instruct as a local safetensors folder (imported once into the test cache: tests/real_model.py)."""
    return ensure_real_model()
