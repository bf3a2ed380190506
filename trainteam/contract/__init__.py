"""The typed contract below the personas: what a step takes and returns, the task, redaction."""
