"""A stand-in for xlang.profiler.evaluate.evaluate, run by the worker's job processes in tests/test_remote*.py:
it answers from markers in the candidate's source (no GPU needed)."""

import os
import time

from xlang.verdict import OK, Verdict


def evaluate(source, lang, task, arch, shape, options):
    if "CRASH" in source:
        os._exit(3)
    if "HANG" in source:
        time.sleep(600)
    start = time.time()
    time.sleep(float(options.get("sleep", 0)))
    return Verdict(OK, detail=f"pid={os.getpid()} start={start} end={time.time()} "
                              f"gpu={os.environ.get('CUDA_VISIBLE_DEVICES')}",
                   lang=lang, task=task.name, arch=arch.name, shape=shape, runtime_ran=True,
                   timing={"speedup": 1.25, "candidate_ms": 1.0, "baseline_ms": 1.25},
                   fingerprint={"gpu": "Fake H200", "driver": "test"})
