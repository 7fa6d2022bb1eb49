"""Workspace trust: what of a workspace's own files a run may use (``workspace.py``),
isoagent's record of it (``record.py``) and Claude Code's (``claude_record.py``)."""
