"""CuTe DSL backend pieces (static build on a CPU box)."""
