"""The persona runtime on pydantic-ai (issue 5)."""
