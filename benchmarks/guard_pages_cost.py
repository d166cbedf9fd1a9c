"""What the guard ranges cost (issue 31 item 3), on the GPU: each task's buffers allocated, imported (as the runner
does) and released with and without guard ranges, the vendor's call timed on each set, and the canary check the
judge now makes after every call.

  guarded   the layout of xlang/profiler/buffers.py: guard + mapping + guard reserved, the buffer at the end of
            its mapping (start aligned to the largest power of two <= 256 dividing its size, >= 16 bytes)
  unguarded the layout before issue 31: the buffer at a 256-byte start at the end of its mapping, one unmapped
            granule after it, nothing reserved before it

Figures are medians over --reps (allocation: wall clock; the vendor's call: CUDA events, L2 flushed before each).
Usage: python3 benchmarks/guard_pages_cost.py [--tasks gemm,attn_fwd,attn_bwd] [--reps 30]
Needs a GPU (not run yet: written on a CPU box, 2026-12-01).
"""
import argparse
import os
import statistics
import time

import torch

from xlang.profiler import buffers
from xlang.task import get_task

GUARDED = buffers.layout


def unguarded(nbytes: int, granularity: int):
    body = -(-max(nbytes, 1) // 256) * 256
    size = -(-body // granularity) * granularity
    return size, size - body, 0, size + granularity


def tensors(task, shape):
    from xlang.candidate import torch_dtype

    return [(t.name, t.dims(shape), torch_dtype(t.dtype)) for t in task.contract.tensors]


def allocate_set(specs):
    shared = [buffers.allocate(name, dims, dtype, "cuda") for name, dims, dtype in specs]
    mapped = [buffers.Mapped(s.meta.to_dict(), os.dup(s.fd)) for s in shared]  # the runner's side, here
    torch.cuda.synchronize()
    return shared, mapped


def release_set(shared, mapped):
    for m in mapped:
        m.close()
    for s in shared:
        s.close()


def median_ms(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def vendor_ms(task, shape, shared, reps, flush):
    inputs = {s.meta.name: s.tensor for s in shared[: len(task.contract.inputs)]}
    for s in shared[: len(task.contract.inputs)]:
        s.tensor.copy_(torch.randn(s.tensor.shape, device="cuda").to(s.tensor.dtype) * 0.5)
    call = task.baseline(inputs, shape)
    call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        flush.zero_()
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="gemm,attn_fwd,attn_bwd")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    torch.cuda.init()
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.int8, device="cuda")
    print(f"{'task':10} {'layout':10} {'alloc+import+free ms':>21} {'vendor call ms':>15} {'canary check ms':>16}")
    for name in args.tasks.split(","):
        task = get_task(name)
        shape = task.shape()
        specs = tensors(task, shape)
        for label, layout in (("unguarded", unguarded), ("guarded", GUARDED)):
            buffers.layout = layout
            try:
                alloc = median_ms(lambda: release_set(*allocate_set(specs)), args.reps)
                shared, mapped = allocate_set(specs)
                try:
                    call = vendor_ms(task, shape, shared, args.reps, flush)
                    for s in shared:
                        s.poison_slack()
                    check = median_ms(lambda: [s.slack_damage() for s in shared], args.reps)
                finally:
                    release_set(shared, mapped)
            finally:
                buffers.layout = GUARDED
            print(f"{name:10} {label:10} {alloc:21.3f} {call:15.4f} {check:16.3f}")


if __name__ == "__main__":
    main()
