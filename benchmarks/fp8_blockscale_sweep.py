"""Configurations of the gemm_fp8_blockscale experts (Triton; cuda_ptx Hopper with its compile-time switches) against
the task's vendor (torch._scaled_mm, cuBLASLt block-scaled), on one H200, in one command:

    python3 benchmarks/fp8_blockscale_sweep.py --out $OUT/fp8sweep [--budget 170] [--m 4096] [--jobs 8]

Shapes: the task's default (4096 x 4096 x 7168) and three DeepSeek-V3 layers of the gemm suites file (the fp8 task
reads tasks/gemm/suites.toml): qkv_a_proj (N 2112, K 7168), q_b_proj (24576, 1536), o_proj (7168, 16384), at M = --m.
Inputs: the task's make_inputs (seed 1, kind 'normal'; 'structured' too at the default shape).

Per configuration and shape: C poisoned with NaN, one call, checked against the task's fp32 reference with the task's
own rule (atol / rtol and its error bound, xlang.profiler.judge.verify.compare_output); a configuration that fails or
does not build is dropped from the ranking (and listed). Then timed by triton.testing.do_bench (median, L2 flushed
before every call), the vendor beside it in the same process.

* cuda_ptx: tasks/gemm_fp8_blockscale/solutions/cuda_ptx_hopper.cu with #defines set before its #ifndef defaults
  (FP8GEMM_PERSISTENT, FP8GEMM_SCALES_AHEAD, FP8GEMM_STAGES), built by the cuda_ptx backend's own nvcc command,
  loaded with ctypes as its load_entry does. It runs in a child process with a time limit, so a variant that hangs costs its limit, not the
  call.
* Triton: tasks/gemm_fp8_blockscale/solutions/triton.py's launch(config=...) over GRID (BK is the scale block, 128,
  in every configuration: the kernel's design). Compiled first by --jobs worker processes into Triton's on-disk
  cache (the JIT's 1-3 s per configuration is most of the time), then timed in this process.
Stops starting new work at --budget seconds. Writes results.json (every row) under --out and prints a ranked table
per shape, then the summary: per expert the default's and the best configuration's x vendor at every shape.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402

from backends.cuda_ptx.backend import BACKEND  # noqa: E402
from xlang.archs import get_arch  # noqa: E402
from xlang.candidate import load_module  # noqa: E402
from xlang.profiler.judge.verify import compare_output  # noqa: E402
from xlang.task import get_task  # noqa: E402

TASK = get_task("gemm_fp8_blockscale")
SUITE_LAYERS = ("qkv_a_proj", "q_b_proj", "o_proj")  # of [deepseek-v3] in tasks/gemm/suites.toml
TRITON_FILE = TASK.solution("triton", "hopper", ".py").path
CUDA_FILE = TASK.solution("cuda_ptx", "hopper", ".cu").path

# cuda_ptx variants: name -> #defines, each switch set but the default's (the expert as it is: the kernel judged at
# 0.829x in harness 7, also named explicitly)
CUDA_VARIANTS = {
    "default": {},
    "harness7_nonpersistent_stages4": {"FP8GEMM_PERSISTENT": 0, "FP8GEMM_STAGES": 4, "FP8GEMM_SCALES_AHEAD": 0},
    "stages6": {"FP8GEMM_PERSISTENT": 0, "FP8GEMM_STAGES": 6, "FP8GEMM_SCALES_AHEAD": 0},
    "scales_ahead": {"FP8GEMM_PERSISTENT": 0, "FP8GEMM_STAGES": 4, "FP8GEMM_SCALES_AHEAD": 1},
    "persistent": {"FP8GEMM_PERSISTENT": 1, "FP8GEMM_STAGES": 4},
    "persistent_stages5": {"FP8GEMM_PERSISTENT": 1, "FP8GEMM_STAGES": 5},
    "persistent_stages6": {"FP8GEMM_PERSISTENT": 1, "FP8GEMM_STAGES": 6},
}


def triton_grid() -> list[dict]:
    """The Triton configurations, most promising first (the budget cuts from the end). BM 64 runs one warpgroup
    (4 warps; 8 split N); BM 128 two (8 warps): one warpgroup at BM 128 would hold 2 x 128 fp32 registers
    (accumulator and partial) per thread. BN divides 128 (one SB row block per tile)."""
    grid = []

    def add(BM, BN, warps, stages, persistent=False, group=8):
        # a persistent grid of 64-row programs: two per SM where their shared memory fits (2 x 113 KiB at most)
        per_sm = 2 if persistent and BM == 64 and stages <= 4 else 1
        grid.append({"BM": BM, "BN": BN, "GROUP_M": group, "num_warps": warps, "num_stages": stages,
                     "PERSISTENT": persistent, "PROGRAMS_PER_SM": per_sm})

    for persistent in (False, True):
        for stages in (3, 4, 2, 5):
            add(64, 128, 4, stages, persistent)
    for persistent in (False, True):
        for stages in (4, 3, 5):
            add(128, 128, 8, stages, persistent)
    for group in (1, 16, 32):
        add(64, 128, 4, 3, group=group)
    add(64, 128, 8, 3)
    add(64, 128, 8, 4)
    add(128, 64, 4, 4)
    add(64, 64, 4, 4)
    add(64, 64, 4, 6)
    add(128, 128, 8, 4, group=16)
    return grid


def config_name(cfg: dict) -> str:
    return (f"{cfg['BM']}x{cfg['BN']} w{cfg['num_warps']} s{cfg['num_stages']} g{cfg['GROUP_M']}"
            + (f" persistent x{cfg['PROGRAMS_PER_SM']}" if cfg["PERSISTENT"] else ""))


def shapes(m: int) -> list[tuple[str, dict]]:
    suite = tomllib.loads((ROOT / "tasks" / TASK.suites_file).read_text())["deepseek-v3"]
    by_label = {s["label"]: s for s in suite["shapes"]}
    out = [("default", TASK.shape({}))]
    for label in SUITE_LAYERS:
        out.append((f"dsv3 {label}", {"M": m, "N": by_label[label]["N"], "K": by_label[label]["K"]}))
    return out


class Shape:
    """One shape's inputs, outputs, reference and bound, and the vendor's call."""

    def __init__(self, label: str, shape: dict):
        self.label, self.shape = label, shape
        self.flops = TASK.flops(shape)
        self.kinds = {}
        for kind in ("normal", "structured") if label == "default" else ("normal",):
            x = TASK.make_inputs(shape, 1, "cuda", kind)
            ref = TASK.reference(x, shape)["C"]
            self.kinds[kind] = (x, ref, TASK.bound_for("C", x, shape))
        self.x = self.kinds["normal"][0]
        self.C = torch.empty(shape["M"], shape["N"], dtype=torch.bfloat16, device="cuda")
        self.vendor = TASK.baseline(self.x, shape)

    def args(self, x):
        s = self.shape
        return (x["A"], x["SA"], x["B"], x["SB"], self.C, s["M"], s["N"], s["K"])

    def check(self, call) -> dict:
        """call(*args) on every kind: the worst ratio to the task's allowance and the first failure, if any."""
        worst = {"max_ratio": 0.0}
        for kind, (x, ref, bound) in self.kinds.items():
            self.C.fill_(float("nan"))
            call(*self.args(x))
            torch.cuda.synchronize()
            atol, rtol = TASK.tolerance_for("C", kind)
            stats = compare_output("C", self.C, ref, atol, rtol, bound=bound)
            if "failure" in stats:
                return {"ok": False, "kind": kind, **stats}
            worst = max(worst, stats, key=lambda s: s["max_ratio"])
        return {"ok": True, "max_ratio": worst["max_ratio"]}

    def time_ms(self, fn) -> float:
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def measure(shape: Shape, name: str, call, row: dict) -> dict:
    """Check, then time, one configuration at one shape; row gets its figures (or its failure)."""
    row.update({"shape": shape.label, **shape.shape, "name": name})
    try:
        row.update(shape.check(call))
        if row["ok"]:
            args = shape.args(shape.x)
            row["ms"] = shape.time_ms(lambda: call(*args))
            row["tflops"] = shape.flops / row["ms"] / 1e9
    except Exception as e:  # noqa: BLE001 - a configuration that cannot run is reported, not fatal
        row.update({"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    return row


# ----------------------------------------------------------------------------- cuda_ptx (in a child)
def build_cuda_variant(name: str, defines: dict, folder: Path):
    """The expert with `defines` in front, built by the backend's nvcc command -> its entry point (ctypes)."""
    src = folder / f"fp8_{name}.cu"
    src.write_text("".join(f"#define {k} {v}\n" for k, v in defines.items()) + CUDA_FILE.read_text())
    so = folder / f"fp8_{name}.so"
    proc = subprocess.run(BACKEND.nvcc_command(src, so, get_arch("h100")), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc: {(proc.stderr or proc.stdout)[-600:]}")
    spills = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines()
              if "spill" in ln and "0 bytes spill stores, 0 bytes spill loads" not in ln]
    return BACKEND.load_entry(SimpleNamespace(load_path=str(so))), spills


def cuda_child(m: int, results: Path) -> None:
    """The cuda_ptx variants at every shape; one JSON line per row into `results` as it goes."""
    folder = Path(tempfile.mkdtemp())
    with ThreadPoolExecutor(len(CUDA_VARIANTS)) as pool:
        builds = {n: pool.submit(build_cuda_variant, n, d, folder) for n, d in CUDA_VARIANTS.items()}
    entries = {}
    with results.open("a") as out:
        for n, fut in builds.items():
            try:
                entries[n], spills = fut.result()
                out.write(json.dumps({"expert": "cuda_ptx", "name": n, "build": "ok", "spills": spills}) + "\n")
            except Exception as e:  # noqa: BLE001
                out.write(json.dumps({"expert": "cuda_ptx", "name": n, "ok": False, "shape": "build",
                                      "error": str(e)[:600]}) + "\n")
        out.flush()
        for label, shape in shapes(m):
            s = Shape(label, shape)
            out.write(json.dumps({"expert": "vendor", "part": "cuda_ptx", "name": "cuBLASLt", "shape": label,
                                  **shape, "ok": True, "ms": s.time_ms(s.vendor)}) + "\n")
            for n, entry in entries.items():
                out.write(json.dumps(measure(s, n, entry, {"expert": "cuda_ptx", "part": "cuda_ptx",
                                                         "defines": CUDA_VARIANTS[n]}))
                          + "\n")
                out.flush()
            del s
            torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- Triton
_worker = {}


def _compile_one(cfg: dict) -> tuple[str, str | None, float]:
    """In a worker: one launch of cfg at the default shape (the JIT writes the kernel to Triton's cache)."""
    t0 = time.time()
    try:
        if not _worker:
            _worker["mod"] = load_module(TRITON_FILE, name="fp8_triton_expert")
            shape = TASK.shape({})
            x = TASK.make_inputs(shape, 1, "cuda")
            C = torch.empty(shape["M"], shape["N"], dtype=torch.bfloat16, device="cuda")
            _worker["args"] = (x["A"], x["SA"], x["B"], x["SB"], C, shape["M"], shape["N"], shape["K"])
        _worker["mod"].launch(*_worker["args"], config=cfg)
        torch.cuda.synchronize()
        return config_name(cfg), None, time.time() - t0
    except Exception as e:  # noqa: BLE001
        return config_name(cfg), f"{type(e).__name__}: {str(e)[:300]}", time.time() - t0


def triton_sweep(m: int, jobs: int, deadline: float, rows: list) -> None:
    grid = triton_grid()
    t0 = time.time()
    compile_errors = {}
    if jobs > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for name, err, _ in pool.imap_unordered(_compile_one, grid):
                if err:
                    compile_errors[name] = err
    print(f"triton: {len(grid)} configurations compiled by {jobs} workers in {time.time() - t0:.0f} s "
          f"({len(compile_errors)} failed)", flush=True)
    mod = load_module(TRITON_FILE, name="fp8_triton_expert")
    defaults = {config_name(mod.FASTEST_SWEPT): "fastest of the 2026-12-04 sweep",
                config_name(mod.CONFIG): "default (judged, harness 7)"}
    for label, shape in shapes(m):
        s = Shape(label, shape)
        rows.append({"expert": "vendor", "part": "triton", "name": "cuBLASLt", "shape": label, **shape, "ok": True,
                     "ms": s.time_ms(s.vendor)})
        for cfg in grid:
            name = config_name(cfg)
            row = {"expert": "triton", "part": "triton", "config": cfg, "role": defaults.get(name, "")}
            if name in compile_errors:
                rows.append({**row, "shape": label, "name": name, "ok": False, "error": compile_errors[name]})
            elif time.time() > deadline:
                rows.append({**row, "shape": label, "name": name, "ok": False, "error": "skipped: out of time"})
            else:
                rows.append(measure(s, name, lambda *a, c=cfg: mod.launch(*a, config=c), row))
        print(f"triton: {label} done at {time.time() - t0:.0f} s", flush=True)
        del s
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- report
def report(rows: list, out: Path) -> None:
    # each part (the cuda_ptx child, the Triton sweep) timed the vendor itself: x vendor is against its own
    vendor = {(r["part"], r["shape"]): r["ms"] for r in rows if r["expert"] == "vendor"}
    for r in rows:
        if r.get("ms") and (r.get("part"), r["shape"]) in vendor:
            r["x_vendor"] = vendor[(r["part"], r["shape"])] / r["ms"]
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    labels = list(dict.fromkeys(r["shape"] for r in rows if r["expert"] == "vendor"))
    for label in labels:
        ok = sorted((r for r in rows if r["shape"] == label and r.get("ms") and r["expert"] != "vendor"),
                    key=lambda r: r["ms"])
        r0 = next(r for r in rows if r["shape"] == label and r["expert"] == "vendor")
        times = ", ".join(f"{part} part {ms * 1e3:.1f} us" for (part, lab), ms in vendor.items() if lab == label)
        print(f"\n{label}: M={r0['M']} N={r0['N']} K={r0['K']}  vendor (cuBLASLt): {times}")
        for r in ok:
            print(f"  {r['expert']:8s} {r['name']:34s} {r['ms'] * 1e3:8.1f} us {r.get('tflops', 0):6.0f} TFLOP/s "
                  f"{r['x_vendor']:6.3f}x  err/allowed {r['max_ratio']:.2f} {r.get('role', '')}")
    dropped = [r for r in rows if r.get("ok") is False]
    if dropped:
        print("\ndropped (wrong, failed or skipped):")
        for r in dropped:
            print(f"  {r['expert']} {r['name']} @ {r['shape']}: {r.get('failure') or r.get('error')}"[:220])
    # summary: per expert, its default and its best (by geometric mean x vendor over the shapes it ran on all)
    print("\nSUMMARY (x vendor; geomean over shapes)")
    print(f"  {'expert':8s} {'configuration':34s} " + " ".join(f"{lab[:14]:>14s}" for lab in labels) + "  geomean")
    for expert, default_name in (("triton", None), ("cuda_ptx", "default")):
        by_name = {}
        for r in rows:
            if r["expert"] == expert and r.get("x_vendor"):
                by_name.setdefault(r["name"], {})[r["shape"]] = r["x_vendor"]
        full = {n: v for n, v in by_name.items() if len(v) == len(labels)}
        if not full:
            continue
        geo = {n: math.exp(sum(math.log(x) for x in v.values()) / len(v)) for n, v in full.items()}
        if default_name is None:
            default_name = next((r["name"] for r in rows if r.get("role") == "default"), None)
        picks = [("best", max(geo, key=geo.get)), ("default", default_name)]
        picks += [("best at default shape", max(full, key=lambda n: full[n]["default"]))]
        for role, name in picks:
            if name in full:
                print(f"  {expert:8s} {name:34s} " + " ".join(f"{full[name][lab]:14.3f}" for lab in labels)
                      + f"  {geo[name]:.3f}  ({role})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "fp8sweep"))
    ap.add_argument("--budget", type=float, default=170.0, help="seconds after which no new work starts")
    ap.add_argument("--m", type=int, default=4096, help="M of the DeepSeek-V3 suite shapes")
    ap.add_argument("--jobs", type=int, default=min(6, os.cpu_count() or 1), help="Triton compile workers")
    ap.add_argument("--cuda-limit", type=float, default=75.0, help="seconds for the cuda_ptx child")
    ap.add_argument("--skip", choices=("cuda", "triton"), action="append", default=[])
    ap.add_argument("--cuda-child", help=argparse.SUPPRESS)  # internal: the child's results file
    a = ap.parse_args()
    if a.cuda_child:
        cuda_child(a.m, Path(a.cuda_child))
        return 0
    t0 = time.time()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    if "cuda" not in a.skip:
        lines = out / "cuda_ptx.jsonl"
        lines.write_text("")
        cmd = [sys.executable, __file__, "--cuda-child", str(lines), "--m", str(a.m)]
        try:
            proc = subprocess.run(cmd, timeout=a.cuda_limit, capture_output=True, text=True)
            if proc.returncode != 0:
                print("cuda_ptx child failed:\n" + proc.stderr[-2000:])
        except subprocess.TimeoutExpired:
            print(f"cuda_ptx child ran past {a.cuda_limit:.0f} s (a hung variant?): rows so far kept")
        got = [json.loads(ln) for ln in lines.read_text().splitlines() if ln.strip()]
        rows += [r for r in got if "shape" in r]
        for r in got:
            if r.get("spills"):
                print(f"cuda_ptx {r['name']}: {r['spills']}")
        print(f"cuda_ptx: {len(rows)} rows at {time.time() - t0:.0f} s", flush=True)
    if "triton" not in a.skip:
        try:
            triton_sweep(a.m, a.jobs, t0 + a.budget, rows)
        except Exception:  # noqa: BLE001 - keep what the cuda_ptx part measured
            traceback.print_exc()
    report(rows, out)
    print(f"\ntotal {time.time() - t0:.0f} s; rows in {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
