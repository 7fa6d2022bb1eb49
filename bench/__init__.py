"""isoagent's benchmark suite: ``python -m bench`` from the repository root (see ``__main__``)."""
