"""The data engine: a plain, typed library; imports no agents or workflows."""
