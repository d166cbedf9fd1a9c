"""Does a kernel slow down under sustained load, and why? Times the task's expert, its vendor baseline and its
installed peers at the default shape two ways, with NVML sampling the SM clock, the board power and the clock
throttle reasons every few milliseconds:

  cold       single calls after 0.5 s of idle GPU (CUDA events around the call, L2 flushed before it, the call's
             host work done while a spinning kernel holds the start event back);
  sustained  after --sustain-s of back-to-back calls (as the harness's warm-up does), --reps calls with the L2
             flushed before each (CUDA events), the GPU kept busy in between (the host queues ahead, so
             host work before a call's first kernel is not timed unless the host is the bottleneck).

A kernel whose sustained time grows more than the others' while the SM clock drops and a power-cap reason is
set is power-bound: its energy per call, not its instruction schedule alone, sets its speed under the harness.
For explaining harness figures; the verdict is `xlang eval`'s.

Usage: python3 benchmarks/sustained_clocks.py LANG TASK [--file FILE] [--sustain-s 1.0] [--reps 40]
"""
import argparse
import statistics
import time

import torch

from expert_module import build_entry, default_shape_calls
from xlang.profiler.gpu import PowerSampler
from xlang.task import get_task

def timed(fn, flush, lead_cycles=0):
    """Events around one call, the L2 flushed before it. lead_cycles: a spinning kernel between the flush and the
    start event, so that a call's host work before its first kernel (cuDNN's is about 0.9 ms) is done while the GPU
    spins and is not timed (the harness's CUPTI span does not count it either)."""
    flush.zero_()
    if lead_cycles:
        torch.cuda._sleep(lead_cycles)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    return a, b


def describe(power) -> str:
    if not power:
        return "no NVML samples"
    return (f"SM {power['sm_clock_mhz']} MHz (min {power['sm_clock_min_mhz']}), power {power['power_w']:.0f} W "
            f"(max {power['power_max_w']:.0f}), slowdown reasons: {'+'.join(power['throttle']) or 'none'}")


def measure(name, fn, flush, sustain_s, reps):
    cold = []
    for _ in range(5):
        torch.cuda.synchronize()
        time.sleep(0.5)
        a, b = timed(fn, flush, lead_cycles=4_000_000)  # ~2 ms at 1.98 GHz
        torch.cuda.synchronize()
        cold.append(a.elapsed_time(b))
    t_end = time.perf_counter() + sustain_s
    while time.perf_counter() < t_end:  # back to back: the host queues ahead, the GPU never idles
        fn()
    with PowerSampler(period_s=0.002) as power:
        events = [timed(fn, flush) for _ in range(reps)]
        torch.cuda.synchronize()
    hot = [a.elapsed_time(b) for a, b in events]
    c, h = statistics.median(cold), statistics.median(hot)
    print(f"{name:10s} cold {c:.3f} ms   sustained {h:.3f} ms   ({h / c - 1:+.1%})   while sustained: "
          f"{describe(power.summary())}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("lang")
    p.add_argument("task")
    p.add_argument("--file", help="a candidate file instead of the task's expert")
    p.add_argument("--sustain-s", type=float, default=1.0)
    p.add_argument("--reps", type=int, default=40)
    a = p.parse_args()
    task = get_task(a.task)
    sides, shape = default_shape_calls(task, build_entry(a.lang, task, a.file), label=a.lang)
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.int8, device="cuda")
    for _, fn in sides:  # JIT, autotuning, module loads
        fn()
    torch.cuda.synchronize()
    print(f"{task.name} {shape} on {torch.cuda.get_device_name()}; sustain {a.sustain_s} s, {a.reps} timed calls")
    for name, fn in sides:
        measure(name, fn, flush, a.sustain_s, a.reps)


if __name__ == "__main__":
    main()
