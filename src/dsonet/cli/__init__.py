"""The `dso` command. Each command is a thin wrapper over one Python API call."""
