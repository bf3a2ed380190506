"""The training loop and what it needs: configs, tokenizer, models, methods, checkpoints, spike monitor, telemetry."""
