"""Persona cards and Jinja2 instruction templates (data, read with importlib.resources)."""
