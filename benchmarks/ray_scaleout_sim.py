#!/usr/bin/env python3
"""CPU simulation of the Ray scale-out (issues 15 and 19): does the scheduler keep 1, 2 and 4 GPUs busy?

For each GPU count n, a local Ray declares n fake GPUs and {"sm_90a": n}; JOBS verdicts go through xlang's own
Ray runtime (xlang.scaleout.ray_runtime: the GPU task with num_gpus=1 and the SM resource, the tracker, the
driver-side bookkeeping), submitted from as many driver threads as `compare --ray` runs cells (2 per GPU). The
verdict is tests/ray_fake_evaluator.py sleeping SLEEP_S seconds in place of evaluate(). Printed: wall time,
speed-up over one GPU, and busy share (verdict-seconds / (n x wall)). Worker processes are warmed first (their
start is seconds on a 2-core box and is not what is measured).

    python3 benchmarks/ray_scaleout_sim.py [--jobs 24] [--sleep 0.75] [--gpus 1,2,4]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(ray, n: int, jobs: int, sleep_s: float) -> dict:
    from xlang import scaleout
    from xlang.archs import get_arch
    from xlang.task import get_task

    ray.init(num_cpus=2, num_gpus=n, resources={"sm_90a": n}, include_dashboard=False, log_to_driver=False)
    try:
        scaleout._state.clear()
        scaleout.MONITOR.__init__()
        scaleout.connect("local")
        h100, gemm = get_arch("h100"), get_task("gemm")
        runtime = scaleout.ray_runtime("ray", h100)

        def one(s):
            return runtime.evaluate("src", None, "cuda_ptx", gemm, h100, {}, {"sleep": s})

        with ThreadPoolExecutor(max(2, 2 * n)) as pool:  # warm-up: one worker process per GPU
            list(pool.map(one, [0.2] * n))
            scaleout.MONITOR.done.clear()
            t0 = time.monotonic()
            verdicts = list(pool.map(one, [sleep_s] * jobs))
            wall = time.monotonic() - t0
        gpus = {re.search(r"gpu=(\S+)", v["detail"]).group(1) for v in verdicts}
        return {"n": n, "wall": wall, "busy": jobs * sleep_s / (n * wall), "gpus_used": len(gpus),
                "per_gpu": dict(scaleout.MONITOR.snapshot()["done"])}
    finally:
        ray.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=24)
    ap.add_argument("--sleep", type=float, default=0.75)
    ap.add_argument("--gpus", default="1,2,4")
    args = ap.parse_args()
    os.environ["XLANG_RAY_EVALUATOR"] = "ray_fake_evaluator:evaluate"
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
    import ray

    rows = [measure(ray, int(n), args.jobs, args.sleep) for n in args.gpus.split(",")]
    print(f"{args.jobs} verdicts of {args.sleep:.2f} s each (sleep-based evaluator), Ray {ray.__version__}")
    print(f"{'GPUs':>4}  {'wall s':>7}  {'speed-up':>8}  {'ideal':>5}  {'busy':>5}  per GPU")
    for r in rows:
        print(f"{r['n']:>4}  {r['wall']:>7.2f}  {rows[0]['wall'] / r['wall']:>7.2f}x"
              f"  {r['n'] / rows[0]['n']:>4.0f}x  {r['busy']:>5.0%}  "
              + ", ".join(f"{k.split()[-1]}:{v}" for k, v in sorted(r["per_gpu"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
