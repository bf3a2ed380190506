"""A registered model leaves: a Hugging Face folder, a GGUF file, an Ollama folder, each read back before it is done."""
