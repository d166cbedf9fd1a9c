"""Build times of the expert solutions, cold (empty build cache) and warm (the same build again), per language.

    python3 benchmarks/build_times.py [--task gemm] [--arch h100] [--repeat 3]

Cold: build_candidate with a fresh, empty build cache (XLANG_BUILD_CACHE in a temporary folder): the compiler
runs. Warm: the same call again: a verified cache hit. Also the wall clock of a whole warm `xlang build` command
(process start, imports and printing included). Goals (issue 16): cold <= 2 s for cuda_ptx, warm <= 0.2 s for
every language. Needs no GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="gemm")
    ap.add_argument("--arch", default="h100")
    ap.add_argument("--langs", default="cuda_ptx,triton,cutedsl")
    ap.add_argument("--repeat", type=int, default=3, help="cold builds per language (each with an empty cache)")
    args = ap.parse_args()

    os.environ["XLANG_BUILD_CACHE"] = tempfile.mkdtemp(prefix="xlang-bench-cache-")
    from xlang import build_cache
    from xlang.archs import get_arch
    from xlang.backend import build_candidate, get_backend
    from xlang.task import get_task

    task, arch = get_task(args.task), get_arch(args.arch)
    print(f"build times: {task.name} experts for {arch.name} ({arch.sm}); cold = empty build cache, warm = again")
    print(f"{'lang':<9} {'cold s (median, min-max)':>26} {'warm s':>8} {'warm xlang build s':>19}  goal")
    for lang in args.langs.split(","):
        solution = task.solution(lang, arch.generation, get_backend(lang).suffix)
        if solution is None:
            print(f"{lang:<9} no expert solution")
            continue
        cold, warm, failed = [], [], None
        for _ in range(args.repeat):
            os.environ["XLANG_BUILD_CACHE"] = tempfile.mkdtemp(prefix="xlang-bench-cache-")
            with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
                r = build_candidate(solution.text, lang, task, arch, workdir=Path(a))
                if not r.ok:
                    failed = (r.error or "").splitlines()[0][:100]
                    break
                cold.append(r.seconds)
                r = build_candidate(solution.text, lang, task, arch, workdir=Path(b))
                assert r.ok and r.cached
                warm.append(r.seconds)
        if failed:
            print(f"{lang:<9} the build failed: {failed}")
            continue
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "xlang", "build", str(solution.path), "-l", lang, "-t", task.name,
                        "-a", arch.name], check=True, capture_output=True)
        cli = time.monotonic() - start
        goal_cold = 2.0 if lang == "cuda_ptx" else None
        verdict = [f"warm {'met' if max(warm) <= 0.2 else 'MISSED'}"]
        if goal_cold:
            verdict.append(f"cold {'met' if statistics.median(cold) <= goal_cold else 'MISSED'}")
        print(f"{lang:<9} {statistics.median(cold):>9.2f} ({min(cold):.2f}-{max(cold):.2f}){'':>6} "
              f"{statistics.median(warm):>8.3f} {cli:>19.2f}  {', '.join(verdict)}")
    print(f"(cache entries under {build_cache.cache_root()} are temporary; remove at will)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
