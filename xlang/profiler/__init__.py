"""The GPU profiler: judge a candidate in an isolated worker process (correctness, memcheck, executed instructions, timing)."""
