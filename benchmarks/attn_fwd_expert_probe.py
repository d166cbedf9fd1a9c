"""Probe an attention-forward expert on the GPU when `xlang eval` says it is wrong: where the error sits.

Builds the task's expert for Hopper, runs it once per shape, and prints, per output, the max error, the NaN count
and a map of which 16-row x 16-column blocks of the first heads fail (rows down, columns across), so a wrong
descriptor or fragment map shows as a pattern. With --time it also times the expert and cuDNN SDPA with
triton.testing.do_bench at the default shape (a quick figure; the verdict's own timing is `xlang eval`).

Usage: python3 benchmarks/attn_fwd_expert_probe.py LANG TASK [--shape S=300,D=96 ...] [--time]
"""
import argparse
import sys

import torch

from xlang.archs import get_arch
from xlang.backend import build_candidate, get_backend
from xlang.candidate import allocate_outputs, arguments
from xlang.task import get_task, parse_shape


def error_map(got, want, atol, rtol, rows=16, cols=16):
    """'#' for a failing block, '.' for a good one, over one head [S, D]."""
    bad = ~((got.float() - want.float()).abs() <= atol + rtol * want.float().abs())
    lines = []
    for r0 in range(0, got.shape[0], rows):
        lines.append("".join("#" if bad[r0:r0 + rows, c0:c0 + cols].any() else "."
                             for c0 in range(0, got.shape[1], cols)))
    return lines


def probe(task, entry, shape, atol, rtol):
    inputs = task.make_inputs(shape, 1234, "cuda")
    outputs = allocate_outputs(task, shape, "cuda")
    entry(*arguments(task, shape, {**inputs, **outputs}))
    torch.cuda.synchronize()
    ref = task.reference({k: v.clone() for k, v in inputs.items()}, shape)
    print(f"-- shape {shape}")
    all_ok = True
    for name, got in outputs.items():
        want = ref[name].to(got.dtype)
        diff = (got.float() - want.float()).abs()
        ok = diff <= atol + rtol * want.float().abs()
        all_ok = all_ok and bool(ok.all())
        print(f"{name}: max|err| {diff.nan_to_num(float('inf')).max().item():.4g}  nan {got.isnan().sum().item()}  "
              f"failing {(~ok).sum().item()} of {got.numel()}")
        if name == "O" and (~ok).any():
            for b, h in [(0, 0), (0, shape["H"] - 1)]:
                print(f"   O[{b},{h}] 16x16 blocks failing (rows down):")
                for line in error_map(got[b, h], want[b, h], atol, rtol)[:40]:
                    print("     " + line)
        if name == "LSE" and (~ok).any():
            bad_rows = (~ok[0, 0]).nonzero().flatten().tolist()
            print(f"   LSE[0,0] failing rows: {bad_rows[:20]}{' ...' if len(bad_rows) > 20 else ''}")
            print(f"   got {got[0, 0, :4].tolist()} want {want[0, 0, :4].tolist()}")
    return all_ok


def main():
    p = argparse.ArgumentParser()
    p.add_argument("lang")
    p.add_argument("task")
    p.add_argument("--shape", action="append", default=[])
    p.add_argument("--time", action="store_true")
    a = p.parse_args()
    task, arch, backend = get_task(a.task), get_arch("h100"), get_backend(a.lang)
    solution = task.solution(a.lang, arch.generation, backend.suffix)
    shapes = [task.shape(parse_shape(s)) for s in a.shape] or [task.shape({"S": 300, "B": 1, "H": 2, "HKV": 2})]
    build = build_candidate(solution.text, a.lang, task, arch, shapes[0])
    if not build.ok:
        print("build failed:\n" + (build.error or ""))
        sys.exit(1)
    entry = backend.load_entry(build)
    failed = 0
    for shape in shapes:
        try:
            failed += not probe(task, entry, shape, task.tolerance["atol"], task.tolerance["rtol"])
        except Exception as e:  # noqa: BLE001 - report and go on to the next shape
            print(f"-- shape {shape}: {type(e).__name__}: {str(e)[:300]}")
            if "CUDA" in str(e):
                sys.exit(2)
            failed += 1
    if a.time:
        import triton

        shape = task.shape({})
        inputs = task.make_inputs(shape, 1, "cuda")
        outputs = allocate_outputs(task, shape, "cuda")
        args = arguments(task, shape, {**inputs, **outputs})
        flops = task.flops(shape)
        base = task.baseline(inputs, shape)
        for name, fn in (("expert", lambda: entry(*args)), ("cudnn", base), ("expert", lambda: entry(*args))):
            ms = triton.testing.do_bench(fn, warmup=25, rep=200)
            print(f"time {name} {shape}: {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s")
    sys.exit(3 if failed else 0)


if __name__ == "__main__":
    main()
