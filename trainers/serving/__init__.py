"""Serving and the model registry: the OpenAI-compatible endpoint, tool calls, registered models, GGUF import."""
