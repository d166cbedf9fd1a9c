"""The report's data: one row per sample run and one per evaluated turn, as pandas DataFrames.

Everything in a report is computed from these two frames, and they are built from plain records
(`from_records`), so the tables, plots and pages do not depend on how the store lays out its tables;
`load(store_path)` (in xlang.report.source) turns the SQLite store into those records.

A run record (one sample, i.e. one trajectory):
  {run_id, task, lang, arch, model, sample, turns_limit, docs, prompt_variant, context, notes (fix-note level:
   none | bm25 | bm25+kernel), shape: {size: int}, suite (the shape suite of --suite, "" none),
   status, note, environment: {...},
   turns: [{turn, verdict: Verdict.to_dict(), prompt_tokens, completion_tokens, reasoning_tokens, total_tokens,
            cost_usd}, ...]}
status: "done" (finished), "missing" (no expert solution for a reference run), or anything else (not finished).

The report's axes are columns of the runs frame (AXES); each turn's scoring fields come from
xlang.verdict.scores (read from the verdict, or derived from an old row's category).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from xlang.errors import XlangError
from xlang.suites import worst_text
from xlang.verdict import peer_note, scores

RUN_COLUMNS = ["run_id", "task", "lang", "arch", "model", "sample", "turns_limit", "docs", "prompt_variant",
               "context", "notes", "suite", "shape", "D", "gqa", "status", "note"]
TURN_COLUMNS = ["run_id", "task", "lang", "arch", "model", "sample", "turn", "category", "compiled", "census_ok",
                "executed_ok", "runtime_ran", "runtime_note", "correct", "correct_with_arch", "speedup", "peer_speedup",
                "peer_note", "tflops", "gbps", "sm_clock_mhz", "vendor_sm_clock_mhz", "timing_rest_ms", "idle_ms",
                "vendor_idle_ms", "harness", "suite_geomean", "suite_worst", "prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens",
                "cost_usd", "detail"]
# What a report can group by and filter on (run columns), with the names the command line also accepts.
AXES = ("task", "arch", "lang", "model", "docs", "prompt_variant", "context", "notes", "suite", "shape", "D", "gqa",
        "turns_limit")
# One row per shape of a correct, timed candidate's suite (Verdict.suite): what the per-shape tables read.
SUITE_SHAPE_COLUMNS = ["run_id", "turn", "task", "arch", "lang", "model", "suite", "label", "shape", "correct_with_arch",
                       "candidate_ms", "baseline_ms", "speedup", "tflops", "baseline_tflops", "gbps"]
AXIS_ALIASES = {"prompt": "prompt_variant", "variant": "prompt_variant", "docs_level": "docs", "head_dim": "D",
                "d": "D", "gqa_group": "gqa", "group": "gqa", "language": "lang", "notes_level": "notes"}

DONE = "done"
MISSING = "missing"


@dataclass
class Dataset:
    runs: pd.DataFrame
    turns: pd.DataFrame
    # (run_id, turn) -> {base opcode: count} summed over the candidate's kernels (static census)
    opcodes: dict = field(default_factory=dict)
    environments: list = field(default_factory=list)  # distinct environment fingerprints (dicts)
    source: str = ""  # where the data came from (the store's path)
    cache: dict = field(default_factory=dict, repr=False, compare=False)  # tables.per_sample by turn limit
    suite_shapes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SUITE_SHAPE_COLUMNS))

    @property
    def empty(self) -> bool:
        return self.runs.empty

    def archs(self) -> list[str]:
        return _ordered(self.runs["arch"].unique(), _arch_order())

    def langs(self) -> list[str]:
        from xlang.backend import lang_names

        return _ordered(self.runs["lang"].unique(), lang_names())

    def tasks(self) -> list[str]:
        return sorted(self.runs["task"].unique())

    def filter(self, where: dict[str, list[str]] | None) -> "Dataset":
        """Only the runs whose axis values are among the given ones ({axis: [value, ...]}, values as text)."""
        if not where or self.runs.empty:
            return self
        keep = pd.Series(True, index=self.runs.index)
        for axis, values in where.items():
            keep &= self.runs[axis].astype(str).isin([str(v) for v in values])
        runs = self.runs[keep].reset_index(drop=True)
        ids = set(runs["run_id"])
        turns = self.turns[self.turns["run_id"].isin(ids)].reset_index(drop=True)
        opcodes = {k: v for k, v in self.opcodes.items() if k[0] in ids}
        suite_shapes = self.suite_shapes[self.suite_shapes["run_id"].isin(ids)].reset_index(drop=True)
        return Dataset(runs, turns, opcodes, self.environments, self.source, suite_shapes=suite_shapes)


def axis_name(name: str) -> str:
    """The report axis a command-line name means (aliases accepted); XlangError for an unknown one."""
    key = name.strip()
    key = AXIS_ALIASES.get(key, AXIS_ALIASES.get(key.lower(), key))
    if key not in AXES:
        raise XlangError(f"unknown report axis '{name}' (known: {', '.join(AXES)}; also "
                         f"{', '.join(sorted(AXIS_ALIASES))})")
    return key


def parse_where(text: str | None) -> dict[str, list[str]]:
    """'model=a|b,docs=params' -> {'model': ['a', 'b'], 'docs': ['params']} (| separates alternatives)."""
    out: dict[str, list[str]] = {}
    for item in [x for x in (text or "").split(",") if x.strip()]:
        key, sep, value = item.partition("=")
        if not sep or not value.strip():
            raise XlangError(f"bad filter '{item}': expected AXIS=VALUE (e.g. model=openai/gpt-5,docs=params)")
        out.setdefault(axis_name(key), []).extend(v.strip() for v in value.split("|") if v.strip())
    return out


def parse_axes(text: str | None) -> list[str]:
    """'task,arch,lang' -> ['task', 'arch', 'lang'] (aliases accepted; 'turns' is the turn-limit axis)."""
    out = []
    for item in [x.strip() for x in (text or "").split(",") if x.strip()]:
        out.append("turns" if item in ("turns", "turn_limit", "turn-limit") else axis_name(item))
    return list(dict.fromkeys(out))


def _arch_order() -> list[str]:
    from xlang.archs import archs

    return list(archs())


def _ordered(values, order) -> list[str]:
    values = [str(v) for v in values]
    return [v for v in order if v in values] + sorted(v for v in values if v not in order)


def _gbps(run: dict, verdict: dict, ms) -> float | None:
    """GB/s of a timed candidate: the fewest bytes its task must move (Task.min_bytes, where the task defines one)
    at the verdict's shape, over its median time. None where either is unknown."""
    from xlang.task import get_task

    try:
        task = get_task(run["task"])
        shape = task.shape({**(run.get("shape") or {}), **(verdict.get("shape") or {})})
        if task.min_bytes is None or not ms:
            return None
        return task.min_bytes(shape) / (float(ms) * 1e-3) / 1e9
    except Exception:  # noqa: BLE001 - a task no longer known, a shape it refuses: no figure
        return None


def _turn_row(run: dict, turn: dict) -> dict:
    v = turn.get("verdict") or {}
    sc = scores(v)
    timing = v.get("timing") or {}
    return {
        "run_id": run["run_id"], "task": run["task"], "lang": run["lang"], "arch": run["arch"],
        "model": run.get("model", ""), "sample": run.get("sample", 0), "turn": int(turn.get("turn", 1)),
        "category": v.get("category") or "",
        "compiled": sc["compiled"],
        "census_ok": sc["census_ok"] is True,
        "executed_ok": sc["executed_ok"],
        "runtime_ran": sc["runtime_ran"],
        "runtime_note": v.get("runtime_note") or "",
        "correct": sc["correct"],
        "correct_with_arch": sc["correct_with_target"],
        "speedup": sc["speedup"],
        "peer_speedup": sc["peer_speedup"],
        "peer_note": peer_note(v) if sc["correct"] else "",  # why a timed, correct candidate has no peer speedup
        "tflops": timing.get("tflops") if sc["correct"] else None,
        "gbps": _gbps(run, v, timing.get("candidate_ms")) if sc["correct"] else None,
        # the card's mean SM clock while the candidate and the vendor were timed (None before it was recorded)
        "sm_clock_mhz": (timing.get("candidate_power") or {}).get("sm_clock_mhz"),
        "vendor_sm_clock_mhz": (timing.get("baseline_power") or {}).get("sm_clock_mhz"),
        "timing_rest_ms": timing.get("rest_ms"),
        # the GPU idle inside a timed call's span (median; None before call profiles were recorded), and the
        # harness that timed it (harness 4 leaves the observer's stall out of the span)
        "idle_ms": (timing.get("candidate_profile") or {}).get("idle_ms"),
        "vendor_idle_ms": (timing.get("baseline_profile") or {}).get("idle_ms"),
        "harness": str((v.get("fingerprint") or {}).get("harness_version") or ""),
        # --suite: the geomean speedup over the vendor across the suite's shapes and the worst shape, when correct
        "suite_geomean": ((v.get("suite") or {}).get("summary") or {}).get("geomean_speedup") if sc["correct"] else None,
        "suite_worst": worst_text((v.get("suite") or {}).get("summary")) if sc["correct"] and v.get("suite") else "",
        "prompt_tokens": turn.get("prompt_tokens"), "completion_tokens": turn.get("completion_tokens"),
        "reasoning_tokens": turn.get("reasoning_tokens"), "total_tokens": turn.get("total_tokens"),
        "cost_usd": turn.get("cost_usd"),
        "detail": (v.get("detail") or "")[:300],
    }


def _shape_axes(shape: dict | None) -> dict:
    """The shape variant axes of a run: shape (its sizes as text), D (head dim) and gqa (query heads per key/value
    head, H // HKV); "" where the task has no such size."""
    shape = shape or {}
    h, hkv = shape.get("H"), shape.get("HKV")
    return {"shape": ",".join(f"{k}={v}" for k, v in shape.items()),
            "D": str(shape["D"]) if "D" in shape else "",
            "gqa": str(h // hkv) if h and hkv else ""}


def _opcodes(verdict: dict) -> dict:
    census = ((verdict or {}).get("build") or {}).get("census") or {}
    total = Counter()
    for k in census.get("kernels", []):
        total.update(k.get("opcodes") or {})
    return dict(total)


def _suite_rows(run: dict, row: dict, verdict: dict) -> list[dict]:
    """The per-shape rows of a turn's suite (Verdict.suite), when the candidate is correct and was timed."""
    suite = verdict.get("suite") or {}
    if not row["correct"] or not suite.get("shapes"):
        return []
    out = []
    for s in suite["shapes"]:
        if not s.get("speedup"):
            continue
        out.append({"run_id": row["run_id"], "turn": row["turn"], "task": row["task"], "arch": row["arch"],
                    "lang": row["lang"], "model": row["model"], "suite": suite.get("name") or run.get("suite") or "",
                    "label": s.get("label") or "", "shape": ",".join(f"{k}={v}" for k, v in (s.get("shape") or {}).items()),
                    "correct_with_arch": row["correct_with_arch"],
                    **{k: s.get(k) for k in ("candidate_ms", "baseline_ms", "speedup", "tflops", "baseline_tflops",
                                             "gbps")}})
    return out


def from_records(records: list[dict], environments: list[dict] | None = None, source: str = "") -> Dataset:
    runs, turns, opcodes, suite_rows = [], [], {}, []
    envs = list(environments or [])
    for r in records:
        runs.append({**{c: r.get(c) for c in RUN_COLUMNS}, **_shape_axes(r.get("shape"))})
        if r.get("environment") and r["environment"] not in envs:
            envs.append(r["environment"])
        for t in r.get("turns", []):
            row = _turn_row(r, t)
            turns.append(row)
            suite_rows += _suite_rows(r, row, t.get("verdict") or {})
            ops = _opcodes(t.get("verdict"))
            if ops:
                opcodes[(r["run_id"], row["turn"])] = ops
            fp = (t.get("verdict") or {}).get("fingerprint")
            if fp:
                gpu = {k: fp[k] for k in fp if k not in ("seeds", "shapes", "seed", "shape")}
                if gpu and gpu not in envs:
                    envs.append(gpu)
    runs_df = pd.DataFrame(runs, columns=RUN_COLUMNS)
    turns_df = pd.DataFrame(turns, columns=TURN_COLUMNS)
    if not runs_df.empty:
        runs_df["sample"] = runs_df["sample"].fillna(0).astype(int)
        runs_df["turns_limit"] = runs_df["turns_limit"].fillna(1).astype(int)
        runs_df["notes"] = runs_df["notes"].fillna("none").replace("", "none")
        for col in ("docs", "prompt_variant", "context", "model", "suite"):
            runs_df[col] = runs_df[col].fillna("").astype(str)
        runs_df = runs_df.sort_values(["task", "arch", "lang", "model", "sample"], kind="stable").reset_index(drop=True)
    if not turns_df.empty:
        turns_df["speedup"] = pd.to_numeric(turns_df["speedup"], errors="coerce")
        turns_df["peer_speedup"] = pd.to_numeric(turns_df["peer_speedup"], errors="coerce")
        for col in ("tflops", "gbps", "sm_clock_mhz", "vendor_sm_clock_mhz", "timing_rest_ms", "suite_geomean", "prompt_tokens",
                    "completion_tokens", "reasoning_tokens", "total_tokens", "cost_usd"):
            turns_df[col] = pd.to_numeric(turns_df[col], errors="coerce")
    suites_df = pd.DataFrame(suite_rows, columns=SUITE_SHAPE_COLUMNS)
    return Dataset(runs_df, turns_df, opcodes, envs, source, suite_shapes=suites_df)
