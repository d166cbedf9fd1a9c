"""Shape suites: named lists of shapes a task carries as data (tasks/<task>/suites.toml), e.g. the GEMM shapes of
one model's layers, and the arithmetic of a suite's summary.

A suite file holds one table per suite:

  [NAME]
  title = "..."                       what the shapes are
  source = "..."                      where they come from (a config file's address, with the keys used)
  config = { key = value, ... }       the source's values the shapes are computed from (optional; tests check them)
  sizes = { SIZE = v, ... }           sizes every shape has (optional; e.g. an attention suite's heads)
  sweep = { SIZE = [v, ...] }         sizes every entry is crossed with (optional; e.g. the M set of a GEMM suite)
  shapes = [ { label = "...", SIZE = v, ... }, ... ]

Each shape is an entry's sizes crossed with every sweep value, in order (entries first, then the sweep values);
the task's default shape fills a size none gives, sizes that follow from others (Task.derived_sizes) are computed,
and the task's rules (check_shape) must allow it. A task names its suites file (Task.suites_path): its own
tasks/<task>/suites.toml, or one it shares with tasks of the same sizes (tasks/_attention_suites.toml).

`xlang eval/compare/run --suite NAME`: correctness on every shape of the suite (with the drawn shapes as usual),
each timed against the vendor; the verdict's `suite` field holds the per-shape figures and their summary
(`summarise`). Nothing here imports torch.
"""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from xlang.errors import XlangError

SUITES_FILE = "suites.toml"


@dataclass(frozen=True)
class SuiteShape:
    label: str  # what the shape is (a layer: "qkv_proj")
    shape: dict  # every size of the task


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    source: str
    shapes: tuple[SuiteShape, ...]
    config: dict  # the source's values the shapes come from

    def describe(self) -> dict:
        return {"name": self.name, "title": self.title, "source": self.source,
                "shapes": [{"label": s.label, "shape": dict(s.shape)} for s in self.shapes]}


def load_file(path: Path, task) -> dict[str, Suite]:
    """The suites of one suites.toml for `task` (its sizes, default shape and rules)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise XlangError(f"{path}: not a readable suites file ({e})") from None
    out = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or not entry.get("shapes"):
            raise XlangError(f"{path}: suite '{name}' has no shapes")
        sweep = entry.get("sweep") or {}
        common = entry.get("sizes") or {}  # sizes every shape of the suite has (the model's heads, say)
        for size in [*sweep, *common]:
            if size not in task.default_shape:
                raise XlangError(f"{path}: suite '{name}' sets '{size}' for every shape, which task {task.name} does "
                                 "not have")
        shapes = []
        for item in entry["shapes"]:
            sizes = {k: v for k, v in item.items() if k != "label"}
            for combo in itertools.product(*sweep.values()) if sweep else [()]:
                given = {**common, **sizes, **dict(zip(sweep, combo))}
                unknown = sorted(set(given) - set(task.default_shape))
                if unknown:
                    raise XlangError(f"{path}: suite '{name}' gives '{unknown[0]}', which task {task.name} does not "
                                     "have")
                try:  # Task.shape: the defaults fill the rest, derived sizes follow, the task's rules must allow it
                    shape = task.shape(given)
                except XlangError as e:
                    raise XlangError(f"{path}: suite '{name}': {e}") from None
                shapes.append(SuiteShape(str(item.get("label") or ""), shape))
        out[name] = Suite(name, str(entry.get("title") or name), str(entry.get("source") or ""), tuple(shapes),
                          dict(entry.get("config") or {}))
    return out


_LOADED: dict[tuple, dict[str, Suite]] = {}


def task_suites(task) -> dict[str, Suite]:
    """The task's suites (none when it has no suites file: Task.suites_path); read again when the file changes."""
    path = Path(task.suites_path())
    if not path.is_file():
        return {}
    key = (task.name, str(path), path.stat().st_mtime_ns)
    if key not in _LOADED:
        _LOADED[key] = load_file(path, task)
    return _LOADED[key]


def get_suite(task, name: str) -> Suite:
    suites = task_suites(task)
    if name not in suites:
        known = ", ".join(suites) or "none"
        raise XlangError(f"task {task.name} has no suite '{name}' (its suites: {known}; `xlang tasks --suites` "
                         "lists every task's)")
    return suites[name]


def _text(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


# ---- one shape's figures and a suite's summary (the judge makes them; reports read them back) -----------------

# A kernel faster than the roofline is suspicious (a flag, not a verdict). The ceilings are the architecture's
# datasheet figures, tightened where archs.toml has a figure measured on this workplace's GPU: the measured one
# times ROOFLINE_MARGIN (an honest kernel may beat a measured copy or GEMM a little: a read-only stream moves more
# than a copy, which reads and writes), never above the datasheet (no kernel beats the hardware).
ROOFLINE_MARGIN = 1.1


def roofline(task, shape: dict, figures: dict | None) -> dict:
    """The least time the shape can take (archs.toml figures), and why: the larger of the compute floor (the task's
    FLOPs at the bf16 ceiling) and the memory floor (Task.min_bytes at the bandwidth ceiling), so a memory-bound
    task (decode: G FLOPs per byte, far under the ridge) is judged by its bytes and never by a FLOP ceiling it
    cannot reach. -> {floor_ms, bound ("compute" | "memory" | None), compute_floor_ms, memory_floor_ms,
    tflops_ceiling, bandwidth_ceiling_tbs}; the floors None where a figure or min_bytes is missing."""
    figures = figures or {}

    def ceiling(datasheet: str, measured: str):
        peak, got = figures.get(datasheet), figures.get(measured)
        if peak and got:
            return min(peak, got * ROOFLINE_MARGIN)
        return peak or None

    # The tensor cores' rate in the task's own operand type (Task.math_type: fp8 and fp4 GEMMs run at 2x and 4x
    # bf16's); an architecture with no figure for it (Hopper has no fp4 tensor cores: its kernels decode to bf16)
    # takes bf16's. An fp8 GEMM at 1131 TFLOP/s on an H200 read as "beyond roofline" against bf16's ceiling.
    math = task.math_type if figures.get(f"peak_dense_{task.math_type}_tflops") else "bf16"
    tflops = ceiling(f"peak_dense_{math}_tflops", f"measured_{math}_tflops")
    tbs = ceiling("mem_bandwidth_tbs", "measured_copy_tbs")
    compute = task.flops(shape) / (tflops * 1e12) * 1e3 if tflops else None
    memory = task.min_bytes(shape) / (tbs * 1e12) * 1e3 if tbs and task.min_bytes is not None else None
    floors = {k: v for k, v in (("compute", compute), ("memory", memory)) if v is not None}
    bound = max(floors, key=floors.get) if floors else None
    return {"floor_ms": floors[bound] if bound else None, "bound": bound, "compute_floor_ms": compute,
            "memory_floor_ms": memory, "tflops_ceiling": tflops, "bandwidth_ceiling_tbs": tbs}


def roofline_floor_ms(task, shape: dict, figures: dict | None) -> float | None:
    """The least time the shape can take on an architecture (roofline(): the larger floor), as judge.timing's
    record computes it for the timed shape; None without figures."""
    return roofline(task, shape, figures)["floor_ms"]


def shape_record(task, label: str, shape: dict, candidate: dict | None, baseline: dict | None,
                 floor_ms: float | None = None) -> dict:
    """One timed suite shape: the candidate's and the vendor's medians (ms, from judge.timing.time_calls' stats),
    the speedup (vendor ms / candidate ms), TFLOP/s (the task's FLOPs over the median), GB/s (Task.min_bytes
    over the median; None where the task defines none) and, as for the timed shape, whether the candidate beat the
    roofline floor (suspicious: a flag, not a verdict)."""
    c_ms = (candidate or {}).get("median_ms")
    b_ms = (baseline or {}).get("median_ms")
    flops = task.flops(shape)
    nbytes = task.min_bytes(shape) if task.min_bytes is not None else None

    def per_s(amount, ms, unit):
        return amount / (ms * 1e-3) / unit if amount is not None and ms else None

    return {"label": label, "shape": dict(shape), "candidate_ms": c_ms, "baseline_ms": b_ms,
            "speedup": b_ms / c_ms if c_ms and b_ms else None,
            "tflops": per_s(flops, c_ms, 1e12), "baseline_tflops": per_s(flops, b_ms, 1e12),
            "gbps": per_s(nbytes, c_ms, 1e9), "baseline_gbps": per_s(nbytes, b_ms, 1e9),
            "flops": flops, "min_bytes": nbytes, "roofline_floor_ms": floor_ms,
            "beyond_roofline": bool(floor_ms is not None and c_ms is not None and c_ms < floor_ms),
            "candidate": candidate, "baseline": baseline}


def summarise(shapes: list[dict]) -> dict:
    """A suite's summary from its per-shape records (shape_record): how many shapes were timed, the geometric mean
    of their speedups over the vendor, the worst and best shape, the time-weighted speedup (the vendor's total time
    over the candidate's: what a model running every shape once would see), and the range of TFLOP/s."""
    timed = [s for s in shapes if s.get("speedup")]
    if not timed:
        return {"shapes": len(shapes), "timed": 0, "geomean_speedup": None, "worst": None, "best": None,
                "time_weighted_speedup": None, "tflops_min": None, "tflops_max": None}
    worst = min(timed, key=lambda s: s["speedup"])
    best = max(timed, key=lambda s: s["speedup"])
    tflops = [s["tflops"] for s in timed if s.get("tflops")]
    return {"shapes": len(shapes), "timed": len(timed),
            "geomean_speedup": math.exp(sum(math.log(s["speedup"]) for s in timed) / len(timed)),
            "worst": {"label": worst["label"], "shape": worst["shape"], "speedup": worst["speedup"]},
            "best": {"label": best["label"], "shape": best["shape"], "speedup": best["speedup"]},
            "time_weighted_speedup": sum(s["baseline_ms"] for s in timed) / sum(s["candidate_ms"] for s in timed),
            "tflops_min": min(tflops) if tflops else None, "tflops_max": max(tflops) if tflops else None}


def suite_result(task, suite: dict, candidate: list[dict], baseline: list[dict], figures: dict | None = None) -> dict:
    """The verdict's suite record from the judge's timings (one time_calls result per suite shape and side, in the
    suite's order; a side not timed: an empty list); figures: the architecture's (Arch.figures), for the roofline."""
    shapes = [shape_record(task, s["label"], s["shape"], (candidate[i] if i < len(candidate) else {}).get("stats"),
                           (baseline[i] if i < len(baseline) else {}).get("stats"),
                           roofline_floor_ms(task, s["shape"], figures))
              for i, s in enumerate(suite["shapes"])]
    for i, record in enumerate(shapes):
        # What the timed calls showed of a host round trip (judge/observed.py host_evidence), kept as evidence, as for the timed
        # shape: Nsight Compute's GPU-FLOPs floor (host_compute) is measured at the timed shape only.
        record["candidate_host"] = (candidate[i] if i < len(candidate) else {}).get("host")
    return {"name": suite["name"], "title": suite.get("title", ""), "source": suite.get("source", ""),
            "shapes": shapes, "summary": summarise(shapes),
            "beyond_roofline": [s["label"] + " " + _text(s["shape"]) for s in shapes if s["beyond_roofline"]]}


def worst_text(summary: dict | None) -> str:
    """'down_proj M=1,N=4096,K=14336 0.61×' (or "–")."""
    w = (summary or {}).get("worst")
    if not w:
        return "–"
    return f"{w['label']} {_text(w['shape'])} {w['speedup']:.2f}×".strip()
