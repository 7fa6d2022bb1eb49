"""One module per ``isoagent`` command."""
