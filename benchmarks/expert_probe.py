"""Probe an expert on the GPU outside the judge: where its error sits, how it compares with the vendor's own error,
and a quick speed figure. For debugging and for checking a task's tolerance; the verdict is `xlang eval`'s.

Builds the task's expert for Hopper (or FILE with --file), runs it once per shape and input kind, and prints per
output the max error, the NaN count, the failing count and the worst margin against the task's tolerance
(max of |err| - (atol + rtol |ref|): negative passes). With --vendor the vendor baseline's outputs (cuDNN SDPA,
cuBLAS) are checked the same way against the same fp32 reference: the yardstick for the tolerance. For a 4-D
output [B, H, S, D] that fails, a map of the failing 16x16 blocks of the first and last head (rows down) shows a
wrong descriptor or fragment map as a pattern. With --time it times the expert and the vendor with
triton.testing.do_bench at the default shape (a quick figure, not the harness's method). With --kernels it profiles
single calls of the expert, the vendor and the task's installed peers at the default shape (torch.profiler, CUDA activity) and prints each
kernel's duration and the idle gaps inside the call: where a call's span goes.

Usage: python3 benchmarks/expert_probe.py LANG TASK [--shape default --shape S=300,D=96 ...] [--kinds normal,flat]
       [--seeds 3] [--vendor] [--time] [--kernels]
"""
import argparse
import itertools
import sys

import torch

from expert_module import build_entry, default_shape_calls
from xlang.candidate import allocate_outputs, arguments
from xlang.task import get_task, parse_shape


def error_map(bad, rows=16, cols=16):
    """'#' for a block with a failing element, '.' for a good one, over one [S, D] head."""
    return ["".join("#" if bad[r0:r0 + rows, c0:c0 + cols].any() else "." for c0 in range(0, bad.shape[1], cols))
            for r0 in range(0, bad.shape[0], rows)]


def check(label, got, want, atol, rtol, maps=False):
    got, want = got.float(), want.float()
    diff = (got - want).abs()
    limit = atol + rtol * want.abs()
    ok = diff <= limit
    margin = (diff - limit).nan_to_num(float("inf")).max().item()
    print(f"   {label}: max|err| {diff.nan_to_num(float('inf')).max().item():.4g}  worst margin {margin:+.4g}  "
          f"nan {got.isnan().sum().item()}  failing {(~ok).sum().item()} of {got.numel()}")
    if maps and got.dim() == 4 and (~ok).any():
        for b, h in [(0, 0), (0, got.shape[1] - 1)]:
            print(f"     [{b},{h}] 16x16 blocks failing (rows down):")
            for line in error_map(~ok[b, h])[:40]:
                print("       " + line)
    return bool(ok.all())


def vendor_outputs(task, inputs, shape, names):
    """The vendor baseline's outputs by the task's output names (SDPA gives O only; its backward dQ, dK, dV)."""
    out = task.baseline(inputs, shape)()
    out = out if isinstance(out, (tuple, list)) else (out,)
    return dict(zip(names, out))


def probe(task, entry, shape, kind, seed, vendor):
    inputs = task.make_inputs(shape, seed, "cuda", kind)
    outputs = allocate_outputs(task, shape, "cuda")
    entry(*arguments(task, shape, {**inputs, **outputs}))
    torch.cuda.synchronize()
    ref = task.reference({k: v.clone() for k, v in inputs.items()}, shape)
    print(f"-- shape {shape} kind {kind} seed {seed}")
    ok = all([check(name, got, ref[name], *task.tolerance_for(name, kind), maps=True) for name, got in outputs.items()])
    if vendor:
        for name, got in vendor_outputs(task, inputs, shape, list(outputs)).items():
            check(f"vendor {name}", got, ref[name], *task.tolerance_for(name, kind))
    return ok


def kernel_breakdown(label, fn, calls=3):
    """Per-kernel GPU time of single calls of fn (the fastest of `calls` by span): name, ms, and the idle time
    between the call's kernels, so a span can be split into kernels and gaps."""
    from torch.profiler import ProfilerActivity, profile

    best = None
    for _ in range(calls):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        spans = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                       if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start)
        if spans and (best is None or spans[-1][1] - spans[0][0] < best[-1][1] - best[0][0]):
            best = spans
    if not best:
        print(f"kernels {label}: no GPU activity recorded")
        return
    total = best[-1][1] - best[0][0]
    busy = sum(e - s for s, e, _ in best)
    print(f"kernels {label}: span {total / 1e3:.3f} ms, GPU busy {busy / 1e3:.3f} ms, idle {(total - busy) / 1e3:.3f} ms")
    for s, e, name in best:
        print(f"   {(e - s) / 1e3:8.3f} ms  at {(s - best[0][0]) / 1e3:7.3f}  {name[:110]}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("lang")
    p.add_argument("task")
    p.add_argument("--file", help="a candidate file instead of the task's expert")
    p.add_argument("--shape", action="append", default=[], help="size overrides; 'default' for the task's shape")
    p.add_argument("--seeds", type=int, default=1, help="input seeds per shape and kind")
    p.add_argument("--kinds", default="normal", help="input kinds, comma-separated, or 'all' (the task's)")
    p.add_argument("--vendor", action="store_true", help="check the vendor baseline's error the same way")
    p.add_argument("--time", action="store_true")
    p.add_argument("--kernels", action="store_true", help="per-kernel durations of one call, expert and vendor")
    a = p.parse_args()
    task = get_task(a.task)
    shapes = [task.shape({} if s == "default" else parse_shape(s)) for s in a.shape] or [task.shape({})]
    kinds = task.input_kinds if a.kinds == "all" else a.kinds.split(",")
    entry = build_entry(a.lang, task, a.file, shapes[0])
    failed = 0
    for n, shape in enumerate(shapes):
        for kind, seed in itertools.product(kinds, range(a.seeds)):
            try:
                failed += not probe(task, entry, shape, kind, 1234 + 100 * n + seed, a.vendor)
            except Exception as e:  # noqa: BLE001 - report and go on to the next shape
                print(f"-- shape {shape} kind {kind}: {type(e).__name__}: {str(e)[:600]}")
                if "CUDA" in str(e):
                    sys.exit(2)
                failed += 1
    if a.time or a.kernels:
        import triton

        calls, shape = default_shape_calls(task, entry)
        flops = task.flops(shape)
        for name, fn in calls[:2] + calls[:1] if a.time else ():  # the expert again after the vendor
            ms = triton.testing.do_bench(fn, warmup=25, rep=200)
            print(f"time {name} {shape}: {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s")
        for name, fn in calls if a.kernels else ():
            kernel_breakdown(name, fn)
    print(f"PROBE {a.lang} {a.task}: {'all correct' if not failed else f'{failed} failing'}")
    sys.exit(3 if failed else 0)


if __name__ == "__main__":
    main()
