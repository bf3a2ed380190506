"""The training stack on transformers, TRL, PEFT and accelerate; imports no agents or workflows."""
