"""Tasks: one folder per task (PyTorch reference, inputs, tolerance, baseline, contract, expert solutions)."""
