"""The verdict's stages, one module each, in the order of xlang.profiler.pipeline.STAGES:

  screen, build, census        static (no GPU): run once, where the candidate is built
  check (+ timing, peers)      the judge's correctness trials, then timing against the vendor and the task's peers
  memcheck, ncu                compute-sanitizer and Nsight Compute, beside the check's trials

and what their judge processes share: launch (the parent starts a judge per stage and reads its result), process
(the candidate's jailed Runner, the tool's jail, who holds the GPU), calls (one call on the judge's buffers),
tools (the judge's side of memcheck and ncu), base (a failure's shape, a Stage's defaults).
"""
