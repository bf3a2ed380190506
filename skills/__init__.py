"""SKILL.md documents that personas load when a task needs them (data)."""
