"""Multi-process and multi-node training: launch files and commands, the worker, the supervisor."""
