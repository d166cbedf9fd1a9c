"""The judge: what runs in the trusted judge process, one per GPU stage: `python -m xlang.profiler.judge SPEC.json`
(__main__.py; main.py reads the spec and writes the result). Nothing here imports the parent's side
(xlang.profiler.stages, evaluate, pipeline): the parent imports down into this package, never the other way.

It never imports the candidate. It allocates the task's inputs and outputs (xlang.profiler.buffers), starts
the candidate's process in its jail (xlang.sandbox.Jail; xlang.profiler.runner), shares exactly those buffers
with it, tells it when to call its entry point, and decides from what it reads itself:

  check     correctness on the shapes the parent drew for this evaluation, every trial with fresh inputs
            of a value kind the task declares (not only N(0,1)), outputs poisoned with NaN, the slack around
            every buffer poisoned and checked, inputs compared with the judge's private copy, the fp32
            reference computed here; then timing (after the gate: memcheck and Nsight Compute have left the
            GPU): every timed call gets fresh inputs (a fixed seed sequence, never repeating), the L2 is
            flushed before it, its GPU time is the span of the candidate process's kernels as the CUPTI
            observer recorded them (every stream and thread; the candidate's Python cannot switch it off),
            and a secret random subset of timed calls, the last one included, is verified afterwards. Then the
            candidate's process tree is killed and the vendor baseline is timed the same way, in a process of
            its own, with no candidate process alive (NVML lists the GPU's processes to prove it), and after it
            each of the task's peers that is installed (time_peers), the same way, one process each. With a
            suite (plan.suite, --suite), its shapes are among the correctness trials, and each is timed after
            the timed shape, the candidate's and then the vendor's in the same processes (the peers: the timed
            shape only); result["suite"] holds the per-shape figures and the summary (xlang.suites).
  memcheck  the runner under compute-sanitizer memcheck (its log goes to the judge's folder), one trial on
            each memcheck shape.
  ncu       the runner under Nsight Compute, one call on the timed shape; every kernel of that process.

In every stage the buffers lie between unmapped guard ranges with canaries in their slack (xlang.profiler.buffers:
an access outside faults, memory_error), a poller watches the GPU's processes while the candidate's code runs
(xlang.profiler.gpuwatch: a second GPU process of the candidate's is forbidden_call), and the tail of the
candidate process's stdout and stderr is kept (candidate_output).

The report (plan.out, JSON in the judge's own folder, which the candidate cannot reach) carries a status:
ok | incorrect | runtime_error | memory_error | forbidden_call | timeout | harness_error.
"""
