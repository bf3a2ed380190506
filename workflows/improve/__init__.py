"""The team's self-improvement loop and the datasets built from its traces."""
