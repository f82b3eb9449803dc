"""Data package: the optimization catalog and NCU metric guide, loaded with importlib.resources."""
