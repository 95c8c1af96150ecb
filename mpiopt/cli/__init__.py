"""Command line: a registry of small commands over the public API."""
