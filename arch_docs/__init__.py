"""Per-architecture knowledge given to models (data files; nothing to import)."""
