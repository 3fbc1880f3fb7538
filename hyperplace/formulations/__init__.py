"""Backend-independent problem data built from the models, and the mapping back to plans."""
