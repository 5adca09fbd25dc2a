"""Thin adapters that hand dsonet's lessons to agent frameworks (each an optional extra)."""
