"""Programs the runner sends to hosts (read as text, run there with python3 -c)."""
