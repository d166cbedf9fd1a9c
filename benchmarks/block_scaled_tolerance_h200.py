"""The block-scaled GEMM tasks' baselines and the fp8 tensor core's own accumulation against the tasks' rule, on a GPU
(written for the H200; the lead runs it, one command, well under 120 s):

    python3 benchmarks/block_scaled_tolerance_h200.py

For gemm_fp8_blockscale, gemm_mxfp8 and gemm_nvfp4 at the default shape 4096x4096x7168 and 3 shapes drawn as an
evaluation draws them, every input kind, fresh seeds (printed): the task's baseline (gemm_fp8_blockscale: torch
_scaled_mm, cuBLASLt 1x128 / 128x128, with use_fast_accum off and on where cuBLASLt takes it), and the fp8 tensor
core promoted per scale block as DeepGEMM does (one torch._scaled_mm per K block, unit scales, fp32 out, each
partial times its scales added to an fp32 accumulator in torch: 128-wide blocks for 1d2d, 32-wide for MXFP8, the path
Hopper kernels must take). Each is judged as the judge does (xlang.profiler.judge.verify.compare_output with the
task's atol, rtol and Task.error_bound): worst |err| / allowed and the count outside, under the new rule and the old
(atol / rtol alone). A ratio of 1 or more fails; honest hardware should sit at 0.5 or less. Details as JSON under
$OUT (block_scaled_tolerance.json) when OUT is set. The experts are judged by `xlang eval` itself.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xlang.profiler.judge.verify import compare_output  # noqa: E402
from xlang.task import get_task  # noqa: E402

TASKS = ("gemm_fp8_blockscale", "gemm_mxfp8", "gemm_nvfp4")
DRAWN = 3


def _unit():
    return torch.ones((), dtype=torch.float32, device="cuda")


def _promoted(A, B, block, scale_of, fast):
    """One fp8 GEMM per K block (torch._scaled_mm, unit scales, fp32 out), each partial times its scales [M, N]
    (scale_of(kb)) added to an fp32 accumulator; bf16 out."""
    M, K = A.shape
    Mp = -(-M // 16) * 16  # cuBLASLt's fp8 GEMM wants every dimension a multiple of 16: zero rows pad A
    A = torch.cat([A, torch.zeros(Mp - M, K, dtype=A.dtype, device=A.device)]) if Mp > M else A
    C = torch.zeros(M, B.shape[0], dtype=torch.float32, device=A.device)
    for kb in range(K // block):
        k = slice(kb * block, (kb + 1) * block)
        P = torch._scaled_mm(A[:, k].contiguous(), B[:, k].contiguous().t(), _unit(), _unit(),
                             out_dtype=torch.float32, use_fast_accum=fast)
        C += P[:M] * scale_of(kb)
    return C.to(torch.bfloat16)


def candidates(name, task, x, shape):
    """{label: a function returning C (bf16)} for one task's inputs."""
    out = {}
    if name == "gemm_fp8_blockscale":
        def baseline(fast):
            def run():
                C = task.baseline(x, shape)()
                if fast:  # the same call with fast accumulation, where cuBLASLt takes it for block scales
                    A, B, SA, SB = x["A"], x["B"], x["SA"], x["SB"]
                    KB, NB = SA.shape[1], SB.shape[0]
                    padded = torch.zeros(NB, -(-KB // 4) * 4, dtype=torch.float32, device=SB.device)
                    padded[:, :KB] = SB
                    C = torch._scaled_mm(A, B.t(), SA.t().contiguous().t(), padded[:, :KB].t(),
                                         out_dtype=torch.bfloat16, use_fast_accum=True)
                return C
            return run

        sb = x["SB"].repeat_interleave(128, 0)[: shape["N"]]
        out["baseline cuBLASLt, fast_accum off"] = baseline(False)
        out["baseline cuBLASLt, fast_accum on"] = baseline(True)
        for fast in (False, True):
            out[f"per-128-block _scaled_mm fp32 promote, fast {'on' if fast else 'off'}"] = (
                lambda fast=fast: _promoted(x["A"], x["B"], 128,
                                            lambda kb: x["SA"][:, kb:kb + 1] * sb[:, kb][None, :], fast))
    elif name == "gemm_mxfp8":
        sa, sb = (x["SA"].float() - 127).exp2(), (x["SB"].float() - 127).exp2()
        out["baseline (fallback: dequantise to bf16, cuBLAS)"] = lambda: _run_baseline(task, x, shape)
        for fast in (False, True):
            out[f"per-32-block _scaled_mm fp32 promote, fast {'on' if fast else 'off'}"] = (
                lambda fast=fast: _promoted(x["A"], x["B"], 32,
                                            lambda kb: sa[:, kb:kb + 1] * sb[:, kb][None, :], fast))
    else:
        out["baseline (fallback: dequantise to bf16, cuBLAS)"] = lambda: _run_baseline(task, x, shape)
    return out


def _run_baseline(task, x, shape):
    return task.baseline(x, shape)()  # every one of these baselines returns its C


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 2
    t0 = time.time()
    rng = random.SystemRandom()
    rows, details = [], []
    for name in TASKS:
        task = get_task(name)
        shapes = task.draw_shapes(task.default_shape, random.Random(rng.randrange(1 << 30)), DRAWN)
        for i, shape in enumerate(shapes):
            for kind in task.input_kinds:
                seed = rng.randrange(1, 1 << 30)
                x = task.make_inputs(shape, seed, "cuda", kind)
                ref = task.reference(x, shape)["C"]
                bound = task.bound_for("C", x, shape)
                atol, rtol = task.tolerance_for("C", kind)
                for label, run in candidates(name, task, x, shape).items():
                    try:
                        got = run()
                        torch.cuda.synchronize()
                    except Exception as e:  # noqa: BLE001  (a path cuBLASLt refuses: say so, go on)
                        rows.append((name, "x".join(map(str, shape.values())), f"{kind}/{seed}", label, None, None, None,
                                     None))
                        details.append({"task": name, "shape": shape, "kind": kind, "seed": seed, "candidate": label,
                                        "error": f"{type(e).__name__}: {str(e)[:300]}"})
                        continue
                    new = compare_output("C", got, ref, atol, rtol, bound)
                    old = compare_output("C", got, ref, atol, rtol)
                    rows.append((name, "x".join(map(str, shape.values())), f"{kind}/{seed}", label, new["max_ratio"],
                                 new["mismatches"], old["max_ratio"], old["mismatches"]))
                    details.append({"task": name, "shape": shape, "kind": kind, "seed": seed, "candidate": label,
                                    "default_shape": i == 0, "new": new, "old": old,
                                    "bound_max": float(bound.max()), "bound_median": float(bound.median())})
                del x, ref, bound
                torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "block_scaled_tolerance.json").write_text(json.dumps(details, indent=1))
    print(f"\n{time.time() - t0:.0f} s; ratio = worst |err| / allowed (1 fails; honest target <= 0.5); "
          "new = atol + rtol|ref| + the task's error bound, old = atol + rtol|ref|")
    print(f"{'task':20s} {'shape':16s} {'kind/seed':21s} {'candidate':52s} {'new':>8s} {'bad':>6s} {'old':>8s} {'bad':>6s}")
    for r in rows:
        if r[4] is None:
            print(f"{r[0]:20s} {r[1]:16s} {r[2]:21s} {r[3]:52s} refused (see the JSON)")
        else:
            print(f"{r[0]:20s} {r[1]:16s} {r[2]:21s} {r[3]:52s} {r[4]:8.3f} {r[5]:6d} {r[6]:8.3f} {r[7]:6d}")
    worst = max((r[4] for r in rows if r[4] is not None), default=float("nan"))
    print(f"worst new-rule ratio over every candidate: {worst:.3f} ({'within' if worst <= 0.5 else 'OVER'} 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
