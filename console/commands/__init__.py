"""One module per sub-command; see console/cli.py."""
