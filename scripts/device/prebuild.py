"""Build experts in parallel before a device call's verdicts, so that each `xlang eval` finds its build cached.

    python3 scripts/device/prebuild.py --arch h100 --jobs 8 gemm:cuda_ptx attn_fwd:triton ...

Each build is the ordinary jailed build (build_candidate at the task's default shape, the shape `xlang eval`
builds at) into the build cache ($XLANG_CACHE): the verdicts that follow get a verified cache hit and spend
the GPU machine's time on the GPU. Builds use CPU only, so they can run while another step uses the GPU.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def build_one(spec: str, arch_name: str) -> str:
    from xlang.archs import get_arch
    from xlang.backend import build_candidate, get_backend
    from xlang.task import get_task

    task_name, lang = spec.split(":")
    task, arch = get_task(task_name), get_arch(arch_name)
    solution = task.solution(lang, arch.generation, get_backend(lang).suffix)
    if solution is None:
        return f"{spec:32s} no expert"
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        result = build_candidate(solution.text, lang, task, arch, workdir=Path(tmp) / "build")
    state = "ok" if result.ok else f"FAILED: {(result.error or '')[:200]}"
    return f"{spec:32s} {time.monotonic() - start:6.1f} s  {state}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="+", help="task:lang")
    ap.add_argument("--arch", default="h100")
    ap.add_argument("--jobs", type=int, default=8)
    args = ap.parse_args()
    start = time.monotonic()
    with ProcessPoolExecutor(args.jobs) as pool:
        for line in pool.map(build_one, args.specs, [args.arch] * len(args.specs)):
            print(line, flush=True)
    print(f"prebuild: {len(args.specs)} builds in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
