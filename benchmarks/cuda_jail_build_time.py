"""The cuda_ptx build before and after issue 46: nvcc as the judge (the old build) against nvcc in the jail.

    python3 benchmarks/cuda_jail_build_time.py [--task gemm] [--arch h100] [--repeat 3]

"before": the backend's own nvcc command, run directly by this process as its user, with the repository's template
folders on the include path: how every cuda_ptx build ran until issue 46. "after": build_candidate with the
build cache off, i.e. the jailed build (a fresh build uid, the judge's copy of the templates, the limits), followed
by the census both always had. The two alternate, so drift of the machine falls on both. Needs no GPU.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from xlang.archs import get_arch
from xlang.backend import build_candidate, get_backend
from xlang.task import get_task


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="gemm")
    ap.add_argument("--arch", default="h100")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    task, arch, backend = get_task(args.task), get_arch(args.arch), get_backend("cuda_ptx")
    solution = task.solution("cuda_ptx", arch.generation, backend.suffix)
    expert = Path(solution.path)
    times: dict[str, list[float]] = {"before (nvcc as the judge)": [], "after (nvcc in the jail)": []}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = backend.nvcc_command(expert, Path(tmp) / "candidate.so", arch)
            start = time.monotonic()
            subprocess.run(cmd, cwd=tmp, check=True, capture_output=True, timeout=600)
            times["before (nvcc as the judge)"].append(time.monotonic() - start)
        with tempfile.TemporaryDirectory() as tmp:
            start = time.monotonic()
            result = build_candidate(solution.text, "cuda_ptx", task, arch, workdir=Path(tmp) / "build", cache=False,
                                     timeout_s=600)
            times["after (nvcc in the jail)"].append(time.monotonic() - start)
            if not result.ok:
                raise SystemExit(f"the jailed build failed: {result.error}")
    print(f"cuda_ptx build of {expert.name} ({task.name}, {arch.name}), {args.repeat} runs each, seconds:")
    for what, values in times.items():
        print(f"  {what:28s} median {statistics.median(values):6.2f}   runs {', '.join(f'{v:.2f}' for v in values)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
