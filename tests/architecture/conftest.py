"""The architecture tests share the source scanner of ``test_layering.py``; it is imported by name."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
