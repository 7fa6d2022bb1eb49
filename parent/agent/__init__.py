"""The parent agent: its tools and prompt, the task tool, and what runs around its loop."""
