"""Backends: one folder per kernel language (prompt section, build, verification hooks)."""
