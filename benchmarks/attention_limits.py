"""What limits each attention kernel on the H200 (issue 49, item 2): Nsight Compute on one call per side.

    python3 benchmarks/attention_limits.py --tasks attn_fwd,attn_bwd --langs cuda_ptx,cutedsl,triton,gluon \
        [--out DIR] [--budget-s 230] [--clock-control base]

For each task at its default shape (B4 H48 S4096 D128) and each side: the vendor (cuDNN, the task's baseline), FA4
(the task's peer, when flash-attn-4 is importable: the .cutedsl carry) and each language's expert (built with its
backend through the build cache; builds start at once in parallel, on the CPU, while the vendor and FA4 are
profiled). A side runs in a child process under Nsight Compute: warm-up calls (JIT, autotuning, the vendor's setup),
then ONE call between cudaProfilerStart and cudaProfilerStop (`--profile-from-start off`), so every kernel of that
call is profiled, whatever thread launches it (autograd runs the vendor's and FA4's backward on its own thread, which
an NVTX push/pop range would miss) and however many launches the warm-up made. Kernel replay,
`--cache-control all` (caches flushed before each pass), `--clock-control base`.

Clocks: ncu locks the SM clock to base (the JSON records the clock it saw), while the harness times at boost clocks
with no lock. The milliseconds here are for weighing a call's kernels against each other (each kernel's share), not
for speed: compare speed with the harness's verdicts.

The table: one row per kernel (a side's heaviest first, the others indented with their share of the call); then one
"limited by" line per side, from its heaviest kernel, by LIMIT_RULE below. A side that cannot run (FA4 or a
language's toolchain absent, a build that failed, a child that failed, the time budget spent) is a row
"not run: <reason>" with no figures. Exit 0 once the table is printed. Details (every metric ncu printed, per
kernel; the commands; the ncu logs and reports) go under --out (default $OUT/limits, else ./attention_limits_out).

On the H200 (a device call carrying .cutedsl, for FA4 and the CuTe DSL experts; .whl's bubblewrap only makes the
builds' jail stronger):

    source scripts/cutedsl_on_gpu/unpack.sh .cutedsl /tmp/site && \
    python3 benchmarks/attention_limits.py --tasks attn_fwd,attn_bwd --langs cuda_ptx,cutedsl,triton,gluon --out $OUT/limits

Estimated (not measured) 10-25 s a side, 12 sides: about 150-240 s; a side that would start after --budget-s is
"not run" (so the table always prints in time).

Never run on a GPU yet: written on a CPU box (2026-12-05); the CSV parser is tested on a hand-written sample of
the documented `ncu --csv --page raw` layout (tests/test_attention_limits.py).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]  # xlang, and expert_module beside this file

from expert_module import build_expert  # noqa: E402

from xlang.backend import get_backend, jit_env  # noqa: E402
from xlang.errors import XlangError  # noqa: E402
from xlang.task import get_task  # noqa: E402
from xlang.toolchain import find_tool  # noqa: E402

SEED = 1
WARMUP_CALLS = 3

# Sections (their metrics are right for the installed ncu by construction) and single metrics on top. Sections:
# SpeedOfLight (duration, SM and DRAM throughput), LaunchStats (registers, shared memory), Occupancy (achieved
# warps, what limits blocks per SM), SchedulerStats (issue slots), WarpStateStats (cycles per issued instruction
# stalled, by reason).
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "SchedulerStats", "WarpStateStats")
# Tensor pipe: wgmma on Hopper counts in the gmma pipe, mma.sync in the hmma pipe; sm__pipe_tensor_cycles_active is
# both. Asked only when ncu --query-metrics lists them (an unknown name would fail the whole profile).
TENSOR_METRICS = ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                  "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                  "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")
EXTRA_METRICS = TENSOR_METRICS + (
    "smsp__issue_active.avg.pct_of_peak_sustained_active",  # issue slots busy (SchedulerStats has it too)
    "sm__inst_issued.avg.per_cycle_active",  # instructions issued per SM cycle (at most 4: one per scheduler)
    "sm__warps_active.avg.per_cycle_active",  # resident warps per SM
    "sm__cycles_elapsed.avg.per_second",  # the SM clock ncu ran at
    "lts__t_sector_hit_rate.pct",  # L2 hit rate
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
)

# Stall metrics, by family (the first family present in a kernel's metrics is used): cycles per issued instruction
# that warps spent stalled for each reason (WarpStateStats), the older latency form, or PC-sampling counts.
STALL_FAMILIES = (re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
                  re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+?)\.ratio$"),
                  re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+)$"))
NOT_A_STALL = ("selected",)  # the warp issued: it is in the total, never a "top stall"
STALL_GLOSS = {
    "long_scoreboard": "waiting for an L1TEX result (global / local memory)",
    "short_scoreboard": "waiting for an MIO result (shared memory, MUFU)",
    "barrier": "waiting at a CTA / named barrier",
    "membar": "waiting on a memory fence",
    "wait": "fixed-latency dependency wait",
    "math_pipe_throttle": "the math pipe it needs is busy",
    "mio_throttle": "MIO queue full (shared memory, special instructions)",
    "lg_throttle": "local/global memory queue full",
    "tex_throttle": "texture queue full",
    "dispatch_stall": "the dispatcher could not issue",
    "no_instruction": "no instruction fetched (instruction cache, after a branch)",
    "sleeping": "warp asleep (nanosleep or a suspended wait)",
    "not_selected": "eligible, another warp issued (the scheduler had work)",
    "branch_resolving": "branch target being resolved",
    "drain": "draining memory stores at exit",
    "imc_miss": "constant cache miss",
    "misc": "miscellaneous",
}

TENSOR_BOUND, DRAM_BOUND, ISSUE_BOUND = 80.0, 80.0, 80.0
LIMIT_RULE = (f"on the side's heaviest kernel: tensor% >= {TENSOR_BOUND:g} -> 'tensor pipe'; else DRAM% >= "
              f"{DRAM_BOUND:g} -> 'DRAM bandwidth'; else issue% >= {ISSUE_BOUND:g} -> 'issue slots'; else the "
              f"largest stall reason (share of all warp cycles per issued instruction, 'selected' excluded)")

TIME_UNITS_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
                 "second": 1e3, "s": 1e3}
BYTE_UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "KB": 1e3, "MB": 1e6, "Kibyte": 1024, "KiB": 1024,
              "Mibyte": 1 << 20, "MiB": 1 << 20}


# ---- ncu's raw page ------------------------------------------------------------------------------------------

@dataclass
class Launch:
    """One profiled kernel launch from `ncu -i R --page raw --csv`: its metrics as printed (value text, unit)."""
    id: str
    kernel: str
    values: dict[str, str] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)

    def number(self, name: str) -> float | None:
        return to_number(self.values.get(name))


def to_number(text: str | None) -> float | None:
    """'1,234.5' -> 1234.5; '', 'n/a', a tuple like '(128, 1, 1)' or a word -> None."""
    text = (text or "").strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def parse_raw_page(text: str) -> list[Launch]:
    """The raw page, wide form: a header row ("ID", "Process ID", ..., "Kernel Name", ..., then one column per
    metric), a row of units (its ID cell empty), one row per launch. Lines of ncu's own (==PROF==, ==WARNING==) are
    dropped. The long form (one row per launch and metric: "Metric Name", "Metric Unit", "Metric Value", as the
    details page prints) is read too."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    launches: dict[str, Launch] = {}
    header: list[str] | None = None
    units: list[str] = []
    for row in rows:
        if row and row[0].strip() == "ID" and "Kernel Name" in row:
            header, units = [c.strip() for c in row], []
            continue
        if header is None:
            continue
        rec = dict(zip(header, row))
        if not rec.get("ID", "").strip():  # the units row of the wide form
            units = row
            continue
        launch = launches.setdefault(rec["ID"].strip(), Launch(rec["ID"].strip(), rec.get("Kernel Name", "").strip()))
        if "Metric Name" in header and "Metric Value" in header:  # long form
            name = rec.get("Metric Name", "").strip()
            launch.values[name] = rec.get("Metric Value", "")
            launch.units[name] = rec.get("Metric Unit", "").strip()
            continue
        start = header.index("Kernel Name") + 1
        for i in range(start, len(header)):
            if "__" in header[i] and i < len(row):  # metric columns: unit__counter...; not Context, Stream, CC
                launch.values[header[i]] = row[i]
                launch.units[header[i]] = units[i].strip() if i < len(units) else ""
    return list(launches.values())


def stall_shares(launch: Launch) -> dict[str, float]:
    """{reason: share of the summed stall figures}, from the first stall family the launch has; 'selected' stays in
    the total (a warp that issued spent that cycle issuing) so shares are of all warp cycles per issued
    instruction."""
    for family in STALL_FAMILIES:
        found: dict[str, float] = {}
        for name in launch.values:
            m = family.match(name)
            if m and not m.group(1).endswith("not_issued"):
                value = launch.number(name)
                if value is not None:
                    found[m.group(1)] = found.get(m.group(1), 0.0) + value
        total = sum(found.values())
        if total > 0:
            return {reason: v / total for reason, v in sorted(found.items(), key=lambda kv: -kv[1])}
    return {}


def _in_units(launch: Launch, name: str, table: dict[str, float], default: str) -> float | None:
    value = launch.number(name)
    if value is None:
        return None
    unit = launch.units.get(name) or default  # `--print-units base`: ncu's base units when a unit is missing
    return value * table[unit] if unit in table else None


def figures(launch: Launch) -> dict:
    """The table's figures of one launch (None where ncu gave none)."""
    tensor = {m: launch.number(m) for m in TENSOR_METRICS if launch.number(m) is not None}
    smem = [_in_units(launch, f"launch__shared_mem_per_block_{k}", BYTE_UNITS, "byte") for k in ("static", "dynamic")]
    clock = launch.number("sm__cycles_elapsed.avg.per_second")
    issue = launch.number("smsp__issue_active.avg.pct_of_peak_sustained_active")
    return {
        "ms": _in_units(launch, "gpu__time_duration.sum", TIME_UNITS_MS, "nsecond"),
        "sm_pct": launch.number("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        "tensor_pct": max(tensor.values()) if tensor else None,
        "tensor_metrics": tensor,
        "issue_pct": issue,
        "ipc": launch.number("sm__inst_issued.avg.per_cycle_active"),
        "regs": launch.number("launch__registers_per_thread"),
        "smem_kib": sum(s for s in smem if s is not None) / 1024 if any(s is not None for s in smem) else None,
        "warps_per_sm": launch.number("sm__warps_active.avg.per_cycle_active"),
        "occupancy_pct": launch.number("sm__warps_active.avg.pct_of_peak_sustained_active"),
        "occupancy_limits": {k.removeprefix("launch__occupancy_limit_"): launch.number(k) for k in launch.values
                             if k.startswith("launch__occupancy_limit_")},
        "dram_pct": launch.number("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "l2_hit_pct": launch.number("lts__t_sector_hit_rate.pct"),
        "sm_clock_mhz": clock / 1e6 if clock else None,
        "grid": launch.values.get("launch__grid_size"),
        "block": launch.values.get("launch__block_size"),
        "stalls": stall_shares(launch),
    }


def limited_by(fig: dict) -> str:
    """LIMIT_RULE on one kernel's figures."""
    tensor, dram, issue = fig.get("tensor_pct"), fig.get("dram_pct"), fig.get("issue_pct")
    if tensor is not None and tensor >= TENSOR_BOUND:
        return f"tensor pipe ({tensor:.0f}% busy)"
    if dram is not None and dram >= DRAM_BOUND:
        return f"DRAM bandwidth ({dram:.0f}% of peak)"
    if issue is not None and issue >= ISSUE_BOUND:
        return f"issue slots ({issue:.0f}% of cycles issue)"
    stalls = [(r, s) for r, s in (fig.get("stalls") or {}).items() if r not in NOT_A_STALL]
    if stalls:
        reason, share = max(stalls, key=lambda rs: rs[1])
        gloss = STALL_GLOSS.get(reason)
        return f"{reason} stalls ({share:.0%} of warp cycles)" + (f": {gloss}" if gloss else "")
    return "undetermined (ncu gave no tensor, DRAM, issue or stall figures)"


def side_result(task: str, side: str, launches: list[Launch]) -> dict:
    """A profiled side: its kernels, heaviest first, each with its share of the call's kernel time."""
    kernels = [{"kernel": ln.kernel, "id": ln.id, **figures(ln), "metrics": ln.values, "units": ln.units}
               for ln in launches]
    if not kernels:
        return not_run(task, side, "ncu profiled no kernel in the call")
    kernels.sort(key=lambda k: -(k["ms"] or 0.0))
    total = sum(k["ms"] or 0.0 for k in kernels)
    for k in kernels:
        k["share"] = (k["ms"] or 0.0) / total if total else None
    return {"task": task, "side": side, "status": "ok", "total_ms": total or None, "kernels": kernels,
            "limited_by": limited_by(kernels[0])}


def not_run(task: str, side: str, reason: str) -> dict:
    return {"task": task, "side": side, "status": "not_run", "reason": reason, "kernels": []}


# ---- the table -----------------------------------------------------------------------------------------------

def _f(value, fmt: str) -> str:
    """format(value, fmt), or '-' as wide as the format."""
    return format(value, fmt) if value is not None else "-".rjust(int(re.match(r"\d*", fmt).group() or 0))


def _stalls_text(stalls: dict[str, float], n: int = 3) -> str:
    top = [(r, s) for r, s in stalls.items() if r not in NOT_A_STALL][:n]
    return " ".join(f"{r} {s:.0%}" for r, s in top) or "-"


HEADER = (f"{'task':<9}{'side':<10}{'kernel':<34}{'share':>6}{'ms':>8}{'SM%':>5}{'TC%':>5}{'iss%':>5}{'regs':>5}"
          f"{'smemKiB':>8}{'w/SM':>5}{'DRAM%':>6}{'L2hit':>6}  top-3 stalls (share of warp cycles)")


def table(results: list[dict]) -> str:
    out = [HEADER]
    for r in results:
        if r["status"] != "ok":
            out.append(f"{r['task']:<9}{r['side']:<10}not run: {r['reason']}")
            continue
        for i, k in enumerate(r["kernels"]):
            name = k["kernel"] if len(k["kernel"]) <= 32 else k["kernel"][:31] + "~"
            label = (f"{r['task']:<9}{r['side']:<10}" if i == 0 else " " * 19) + ("" if i == 0 else "+ ")
            share = "-" if k["share"] is None else f"{100 * k['share']:.0f}%"
            out.append(f"{label}{name:<{34 - (0 if i == 0 else 2)}}{share:>6}"
                       f"{_f(k['ms'], '8.3f')}{_f(k['sm_pct'], '5.0f')}{_f(k['tensor_pct'], '5.0f')}"
                       f"{_f(k['issue_pct'], '5.0f')}{_f(k['regs'], '5.0f')}{_f(k['smem_kib'], '8.1f')}"
                       f"{_f(k['warps_per_sm'], '5.1f')}{_f(k['dram_pct'], '6.0f')}{_f(k['l2_hit_pct'], '6.0f')}"
                       f"  {_stalls_text(k['stalls'])}")
    out.append("")
    out.append("limited by (" + LIMIT_RULE + "):")
    for r in results:
        if r["status"] == "ok":
            many = f", {len(r['kernels'])} kernels, {r['total_ms']:.3f} ms in all" if len(r["kernels"]) > 1 else ""
            out.append(f"  {r['task']:<9}{r['side']:<10}{r['limited_by']}{many}")
    clocks = sorted({round(k["sm_clock_mhz"]) for r in results for k in r["kernels"] if k.get("sm_clock_mhz")})
    out.append(f"SM clock under ncu: {', '.join(map(str, clocks)) or '-'} MHz (clock control as asked; the harness "
               f"times at boost clocks, unlocked): ms here weigh kernels against each other, not speed.")
    return "\n".join(out)


# ---- the sides ----------------------------------------------------------------------------------------------

@dataclass
class Side:
    task: str
    name: str  # what the table shows: "cuDNN", "FA4", a language
    kind: str  # "vendor", "peer" or "lang"
    key: str  # the peer's name or the language
    reason: str | None = None  # why it cannot run, known before any GPU work


def plan_sides(task, langs: list[str]) -> list[Side]:
    """The sides of a task in table order: the vendor, each peer, each language's expert; a side that cannot run
    here carries its reason."""
    sides = [Side(task.name, "cuDNN", "vendor", "vendor")]
    for peer in task.peers:
        why = peer.missing()
        sides.append(Side(task.name, peer.display, "peer", peer.name,
                          f"{why} (carry .cutedsl: scripts/cutedsl_on_gpu/)" if why else None))
    for lang in langs:
        sides.append(Side(task.name, lang, "lang", lang, lang_problem(task, lang)))
    return sides


def lang_problem(task, lang: str) -> str | None:
    """Why this language's expert cannot be built here (no backend, its packages or tools absent, no expert)."""
    try:
        backend = get_backend(lang)
    except XlangError as e:
        return str(e)
    absent = backend.absent_packages()
    if absent:
        return f"{lang} needs {', '.join(absent)}, not installed" + (" (carry .cutedsl)" if lang == "cutedsl" else "")
    tools = [t for t in backend.tools if find_tool(t) is None]
    if tools:
        return f"{lang} needs {', '.join(tools)}, not found"
    if task.solution(lang, "hopper", backend.suffix) is None:
        return f"no {lang} expert for {task.name} on Hopper"
    return None


def _side_call(task, side: dict):
    """The side's entry point over the judge's buffers (inputs first, then outputs, then sizes)."""
    from xlang.profiler.runner import _baseline_entry

    if side["kind"] == "vendor":
        return _baseline_entry(task, task.baseline)
    if side["kind"] == "peer":
        peer = next(p for p in task.peers if p.name == side["key"])
        peer.load()
        return _baseline_entry(task, peer.call)
    backend = get_backend(side["key"])
    build = build_expert(side["key"], task)
    if not build.ok:
        raise RuntimeError("build failed: " + (build.error or "")[:400])
    # As the judge's runner does: a home of its own with every language's JIT variables, seeded with the build's
    # JIT cache (Triton / Gluon: no second compile of the same kernels under ncu).
    home = Path(tempfile.mkdtemp(prefix="attn-limits-home-"))
    os.environ.update(jit_env(home))
    seed = backend.seed_cache(build)
    if seed is not None and backend.jit_cache:
        shutil.copytree(seed, home / backend.jit_cache, dirs_exist_ok=True)
    return backend.load_entry(build)


def child(spec_file: Path) -> int:
    """Under ncu: warm-up calls, then one call between cudaProfilerStart and Stop. Writes {ok, error?} to the spec's
    status file."""
    # torch here, not at the top: only this child touches the GPU (the parent and the CPU tests stay light).
    import torch

    from xlang.candidate import allocate_outputs, arguments

    spec = json.loads(spec_file.read_text())
    status: dict = {"ok": False}
    try:
        task = get_task(spec["task"])
        shape = task.shape({})
        entry = _side_call(task, spec)
        buffers = {**task.make_inputs(shape, SEED, "cuda"), **allocate_outputs(task, shape, "cuda")}
        args = arguments(task, shape, buffers)
        start = time.monotonic()
        for _ in range(WARMUP_CALLS):
            entry(*args)
        torch.cuda.synchronize()
        status["warmup_s"] = round(time.monotonic() - start, 2)
        torch.cuda.profiler.start()
        entry(*args)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        status["ok"] = True
    except Exception as e:  # noqa: BLE001 - any failure of the side is its row's reason
        status["error"] = f"{type(e).__name__}: {e}"[:600]
    Path(spec["status"]).write_text(json.dumps(status))
    return 0 if status["ok"] else 1


def prebuild(task_name: str, lang: str, status_file: Path) -> int:
    """A build into the cache (CPU only), so that the profiled child finds it built."""
    start = time.monotonic()
    try:
        build = build_expert(lang, get_task(task_name))
        status = {"ok": build.ok, "error": None if build.ok else (build.error or "")[:600]}
    except Exception as e:  # noqa: BLE001
        status = {"ok": False, "error": f"{type(e).__name__}: {e}"[:600]}
    status["seconds"] = round(time.monotonic() - start, 1)
    status_file.write_text(json.dumps(status))
    return 0 if status["ok"] else 1


# ---- ncu ----------------------------------------------------------------------------------------------------

def available_metrics(ncu: str) -> set[str] | None:
    """Base metric names `ncu --query-metrics` lists for this GPU (None when the query fails)."""
    try:
        out = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = {m.group(1) for m in re.finditer(r"^([a-z0-9]+__[a-z0-9_]+)\s", out, re.M)}
    return names or None


def extra_metrics(known: set[str] | None) -> list[str]:
    """EXTRA_METRICS that this ncu knows (all of them when the query failed: a failed profile then retries
    without them)."""
    return [m for m in EXTRA_METRICS if known is None or m.split(".")[0] in known]


def profile_command(ncu: str, report: Path, metrics: list[str], clock: str, spec_file: Path) -> list[str]:
    cmd = [ncu, "--target-processes", "application-only", "--profile-from-start", "off", "--replay-mode", "kernel",
           "--cache-control", "all", "--clock-control", clock, "-f", "-o", str(report)]
    for s in SECTIONS:
        cmd += ["--section", s]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    return cmd + [sys.executable, str(Path(__file__).resolve()), "--child", str(spec_file)]


def raw_page_command(ncu: str, report_file: Path) -> list[str]:
    return [ncu, "-i", str(report_file), "--page", "raw", "--csv", "--print-units", "base",
            "--print-kernel-base", "function"]


def _tail(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[-400:]


def run_side(ncu: str, side: Side, out: Path, metrics: list[str], clock: str, timeout_s: float) -> dict:
    """One side under ncu -> its result row."""
    tag = f"{side.task}_{side.key}"
    spec_file, status_file, report = out / f"{tag}.spec.json", out / f"{tag}.status.json", out / f"{tag}"
    spec_file.write_text(json.dumps({"task": side.task, "kind": side.kind, "key": side.key,
                                     "status": str(status_file)}))
    attempts = [metrics, []] if metrics else [[]]
    why = "no attempt"
    for attempt in attempts:
        status_file.unlink(missing_ok=True)
        report_file = report.with_suffix(".ncu-rep")
        report_file.unlink(missing_ok=True)
        cmd = profile_command(ncu, report, attempt, clock, spec_file)
        start = time.monotonic()
        # A session of its own: on a timeout the whole group (ncu and the python it started) goes, so that no
        # process of this side is left on the GPU beside the next one.
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            log, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            log, _ = proc.communicate()
            (out / f"{tag}.ncu.log").write_text(" ".join(cmd) + "\n" + (log or ""))
            return not_run(side.task, side.name, f"over its {timeout_s:.0f} s limit under ncu")
        (out / f"{tag}.ncu.log").write_text(" ".join(cmd) + f"\n[{time.monotonic() - start:.1f} s]\n" + log)
        status = json.loads(status_file.read_text()) if status_file.is_file() else {}
        if status and not status.get("ok"):  # the side itself failed: no other metric set helps
            return not_run(side.task, side.name, status.get("error") or "the child failed")
        if report_file.is_file():
            page = subprocess.run(raw_page_command(ncu, report_file), capture_output=True, text=True, timeout=120)
            (out / f"{tag}.raw.csv").write_text(page.stdout)
            result = side_result(side.task, side.name, parse_raw_page(page.stdout))
            result["seconds"] = round(time.monotonic() - start, 1)
            result["metrics_asked"] = list(SECTIONS) + attempt
            result["warmup_s"] = status.get("warmup_s")
            return result
        why = f"ncu wrote no report (exit {proc.returncode}): {_tail(log)}"
    return not_run(side.task, side.name, why)


def ncu_version(ncu: str) -> str | None:
    try:
        return _tail(subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=30).stdout, 1)
    except (OSError, subprocess.TimeoutExpired):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", default="attn_fwd,attn_bwd")
    ap.add_argument("--langs", default="cuda_ptx,cutedsl,triton,gluon")
    ap.add_argument("--out", type=Path, default=None, help="default $OUT/limits, else ./attention_limits_out")
    ap.add_argument("--budget-s", type=float, default=230.0, help="sides not started by then are 'not run'")
    ap.add_argument("--side-timeout-s", type=float, default=120.0)
    ap.add_argument("--clock-control", default="base", choices=("base", "none", "reset"))
    ap.add_argument("--ncu", default=None, help="the ncu binary (default: found as xlang finds it)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--prebuild", nargs=3, metavar=("TASK", "LANG", "STATUS"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(a.child)
    if a.prebuild:
        return prebuild(a.prebuild[0], a.prebuild[1], Path(a.prebuild[2]))

    t0 = time.monotonic()
    out = (a.out or (Path(os.environ["OUT"]) / "limits" if os.environ.get("OUT") else Path("attention_limits_out")))
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    tasks = [get_task(t) for t in a.tasks.split(",") if t]
    langs = [x for x in a.langs.split(",") if x]
    sides = [s for task in tasks for s in plan_sides(task, langs)]

    ncu = a.ncu or (str(find_tool("ncu")) if find_tool("ncu") else None)
    ncu_problem = None if ncu and Path(ncu).is_file() else f"ncu (Nsight Compute) not found{f' at {ncu}' if ncu else ''}"

    # Builds start now, in parallel (CPU only), while the vendor and the peers are profiled.
    builds: dict[tuple[str, str], tuple[subprocess.Popen, Path]] = {}
    if ncu_problem is None:
        for s in sides:
            if s.kind == "lang" and s.reason is None:
                status = out / f"{s.task}_{s.key}.build.json"
                status.unlink(missing_ok=True)
                cmd = [sys.executable, str(Path(__file__).resolve()), "--prebuild", s.task, s.key, str(status)]
                builds[(s.task, s.key)] = (subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                                            stderr=subprocess.DEVNULL), status)
    known = available_metrics(ncu) if ncu_problem is None else None
    metrics = extra_metrics(known)

    results: dict[int, dict] = {}
    order = sorted(range(len(sides)), key=lambda i: sides[i].kind == "lang")  # vendor, peers first: builds run
    for i in order:
        s = sides[i]
        left = a.budget_s - (time.monotonic() - t0)
        if s.reason or ncu_problem:
            results[i] = not_run(s.task, s.name, s.reason or ncu_problem)
            continue
        if left < 15:
            results[i] = not_run(s.task, s.name, f"the {a.budget_s:.0f} s budget was spent before it started")
            continue
        if (s.task, s.key) in builds:
            proc, status = builds[(s.task, s.key)]
            try:
                proc.wait(timeout=max(1.0, left - 15))
            except subprocess.TimeoutExpired:
                results[i] = not_run(s.task, s.name, "its build was still running when the budget was spent")
                continue
            built = json.loads(status.read_text()) if status.is_file() else {"ok": False, "error": "no build status"}
            if not built.get("ok"):
                results[i] = not_run(s.task, s.name, "build failed: " + _tail(built.get("error") or "", 2))
                continue
            left = a.budget_s - (time.monotonic() - t0)
        print(f"[{time.monotonic() - t0:6.1f} s] {s.task} {s.name} under ncu", file=sys.stderr, flush=True)
        results[i] = run_side(ncu, s, out, metrics, a.clock_control, min(a.side_timeout_s, max(15.0, left)))
    for proc, _ in builds.values():
        if proc.poll() is None:
            proc.kill()  # a build we started and no longer need
    rows = [results[i] for i in range(len(sides))]

    print(table(rows))
    (out / "attention_limits.json").write_text(json.dumps({
        "tasks": [{"task": t.name, "shape": t.shape({})} for t in tasks], "langs": langs,
        "ncu": ncu, "ncu_version": ncu_version(ncu) if ncu_problem is None else None,
        "clock_control": a.clock_control, "sections": list(SECTIONS), "metrics": metrics,
        "metrics_known_to_ncu": known is not None, "rule": LIMIT_RULE,
        "note": "ncu ran at the clock shown per kernel (sm_clock_mhz); the harness times at boost clocks. The ms "
                "weigh a call's kernels against each other; speed comes from the verdicts.",
        "seconds": round(time.monotonic() - t0, 1), "results": rows}, indent=1, default=str))
    print(f"details: {out / 'attention_limits.json'} ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
