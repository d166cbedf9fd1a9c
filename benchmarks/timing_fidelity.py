"""Timing fidelity (issue 35, item 1): does the harness's timing equal a measurement without it?

    python3 benchmarks/timing_fidelity.py --task attn_fwd --langs triton,cuda_ptx [--out DIR] [--within 1]

For each side of a task (the vendor, every installed peer, the expert of each language) three medians at the task's
default shape, on a GPU:
  harness   `xlang eval expert` (isolation on, the CUPTI observer, no memcheck / ncu): the candidate's, the
            vendor's and the peers' medians from the verdict's timing record (their GPU span per call);
  events    this process, no observer: the same calls on buffers filled with fresh inputs before every call
            (seed per call, as time_calls), the L2 flushed and the same rest, timed by CUDA events around the call;
  do_bench  triton.testing.do_bench on the same call (its own L2 flush, same inputs every call), the method of
            the independent cross-checks quoted in issue 35.
The harness is faithful for a side when |harness / events - 1| <= --within percent; a side outside it is printed
as `timing_suspect`. Events bracket the launch too (a few microseconds a call that the observer's span leaves
out), so short calls read slightly longer by events. Exit code 1 when any side is suspect.

Never run: written on a CPU box in a session without GPU time (2026-12-02). Reads the verdict JSON of
`xlang eval --json`; the expert is built with the language's own backend (benchmarks/expert_module.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # expert_module beside this file


def harness_medians(task: str, lang: str, rest_ms: float, seed: int) -> dict[str, float]:
    """{side: median ms} from one `xlang eval expert` verdict: the expert (its language), the vendor, the peers."""
    cmd = [sys.executable, "-m", "xlang", "eval", "expert", "--task", task, "--lang", lang, "--arch", "auto", "--json", "--no-memcheck",
           "--no-ncu", "--seed", str(seed), "--timing-rest-ms", str(rest_ms)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    try:
        verdict = json.loads(res.stdout[res.stdout.index("{"):])
    except ValueError:
        raise SystemExit(f"{' '.join(cmd)} printed no verdict (exit {res.returncode}):\n{res.stderr[-2000:]}")
    timing = verdict.get("timing") or {}
    if verdict.get("category") != "ok" or not timing.get("candidate_ms"):
        raise SystemExit(f"{task} {lang}: the expert's verdict is {verdict.get('category')}: {verdict.get('detail')}")
    out = {lang: timing["candidate_ms"], "vendor": timing["baseline_ms"]}
    out.update({p["display"]: p["ms"] for p in timing.get("peers") or [] if p.get("ran")})
    return out


def plain_medians(task, calls: dict, rest_ms: float, seed: int, reps: int) -> dict[str, dict]:
    """{side: {"events": median ms, "do_bench": median ms}} in this process, without the observer."""
    import torch
    import triton.testing

    from xlang.candidate import allocate_outputs, arguments

    shape = task.shape({})
    flush = torch.empty(max(256 << 20, 2 * torch.cuda.get_device_properties(0).L2_cache_size), dtype=torch.int8,
                        device="cuda")
    buffers = {**task.make_inputs(shape, seed, "cuda"), **allocate_outputs(task, shape, "cuda")}
    args = arguments(task, shape, buffers)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = {}
    for side, make in calls.items():
        fn = make(args)
        for _ in range(3):  # JIT, autotuning, module loads
            fn()
        torch.cuda.synchronize()
        times = []
        for k in range(reps):
            fresh = task.make_inputs(shape, seed + 3 + k, "cuda")
            for name, t in fresh.items():
                buffers[name].copy_(t)
            flush.zero_()
            torch.cuda.synchronize()
            if rest_ms:
                time.sleep(rest_ms / 1e3)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        out[side] = {"events": statistics.median(times),
                     "do_bench": triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--langs", default="triton,cuda_ptx")
    ap.add_argument("--within", type=float, default=1.0, help="percent the harness may differ from events")
    ap.add_argument("--rest-ms", type=float, default=0.0)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=20_261_202)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    from expert_module import build_entry

    from xlang.profiler.runner import _baseline_entry
    from xlang.task import get_task

    task = get_task(a.task)
    langs = [x for x in a.langs.split(",") if x]
    harness: dict[str, float] = {}
    for lang in langs:
        harness.update(harness_medians(a.task, lang, a.rest_ms, a.seed))  # vendor / peers: the last verdict's
    calls = {"vendor": lambda args: (lambda e=_baseline_entry(task, task.baseline): e(*args))}
    for peer in task.peers:
        if not peer.missing():
            peer.load()
            calls[peer.display] = lambda args, p=peer: (lambda e=_baseline_entry(task, p.call): e(*args))
    for lang in langs:
        calls[lang] = lambda args, e=build_entry(lang, task): (lambda: e(*args))
    plain = plain_medians(task, calls, a.rest_ms, a.seed, a.reps)

    rows, suspect = [], []
    for side, p in plain.items():
        h = harness.get(side)
        ratio = h / p["events"] if h else None
        bad = ratio is not None and abs(ratio - 1) * 100 > a.within
        suspect += [side] if bad else []
        rows.append({"side": side, "harness_ms": h, "events_ms": p["events"], "do_bench_ms": p["do_bench"],
                     "harness_over_events": ratio, "verdict": "timing_suspect" if bad else "ok"})
    print(f"{a.task} at {task.shape({})} (within {a.within:g}%):")
    print(f"{'side':<14}{'harness ms':>12}{'events ms':>12}{'do_bench ms':>13}{'h/e':>8}  verdict")
    for r in rows:
        h = f"{r['harness_ms']:.4f}" if r["harness_ms"] else "-"
        ratio = f"{r['harness_over_events']:.3f}" if r["harness_over_events"] else "-"
        print(f"{r['side']:<14}{h:>12}{r['events_ms']:>12.4f}{r['do_bench_ms']:>13.4f}{ratio:>8}  {r['verdict']}")
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / f"timing_fidelity_{a.task}.json").write_text(json.dumps(rows, indent=1))
    return 1 if suspect else 0


if __name__ == "__main__":
    sys.exit(main())
