"""A stand-in for xlang.profiler.evaluate.evaluate in the Ray GPU tasks of tests/test_scaleout.py and
benchmarks/ray_scaleout_sim.py (XLANG_RAY_EVALUATOR=ray_fake_evaluator:evaluate): no GPU needed.

XLANG_FAKE_EVAL_SLEEP   seconds each verdict holds its GPU (default 0; options["sleep"] first)
XLANG_FAKE_KILL_ONCE    (or options["kill_once"]) a file path: the first verdict that finds it absent creates it and SIGKILLs its own
                        worker process (Ray retries the task)
A candidate containing CRASH ends its process with code 3."""

import os
import signal
import time

from xlang.verdict import OK, Verdict


def evaluate(source, lang, task, arch, shape, options):
    marker = options.get("kill_once") or os.environ.get("XLANG_FAKE_KILL_ONCE")
    if marker:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
    if "CRASH" in source:
        os._exit(3)
    start = time.time()
    time.sleep(float(options.get("sleep", os.environ.get("XLANG_FAKE_EVAL_SLEEP", 0))))
    return Verdict(OK, detail=f"pid={os.getpid()} start={start} end={time.time()} "
                              f"gpu={os.environ.get('XLANG_GPUS')} cuda={os.environ.get('CUDA_VISIBLE_DEVICES')}",
                   lang=lang, task=task.name, arch=arch.name, shape=shape, runtime_ran=True,
                   timing={"speedup": 1.25, "candidate_ms": 1.0, "baseline_ms": 1.25},
                   fingerprint={"gpu": "Fake H200", "driver": "test"})
