"""xlang: how well can each kernel language reach a GPU architecture's own instructions?

Importing this package is cheap on purpose: torch, triton, CuTe DSL and litellm are imported only by the
code paths that need them (a GPU worker, a backend's build, the agent loop).
"""

__version__ = "0.1.0"
# Bumped whenever a change can alter a verdict or a timing; stored with every result.
# 3: judge/runner split, jail, CUPTI observer, drawn shapes. 4: a timed call's span starts after the runner's
# primer (judge/timing.py without_primer), so the observer's stall after the first launch after a flush is no longer in it.
# 5 (issue 31, 40): buffers between unmapped guard ranges with canaries after every call, a GPU-process watch in
# every stage, attention kinds large_v / scaled and long drawn sequences, LSE checked absolutely, fp16
# accumulators incorrect, provenance by code under Nsight Compute, the 80% share rule and the GPU-FLOPs floor.
# 6 (issue 36): the verdict pipeline as stages (xlang/profiler/pipeline.py, stages/), and one static path: without a
# runtime the agent loop now concludes as `xlang eval` does (fp16 accumulators incorrect, eval's texts); host CPU
# evidence on warm calls only, provenance comparing operand multisets (both found on the H200 under 5).
# 7 (issues 46, 47): nvcc builds in the jail with the judge's copy of the templates; resource limits and a keyring
# seccomp filter on every jailed child, a fresh uid per build; harness_error (a GPU another process held: retried
# once); the block-scaled GEMMs' per-element error bound; the prefill baseline is FA2's varlen forward.
HARNESS_VERSION = "7"
