"""The report's data: one row per sample run and one per evaluated turn, as pandas DataFrames.

Everything in a report is computed from these two frames, and they are built from plain records
(`from_records`), so the tables, plots and pages do not depend on how the store lays out its tables;
`load(store_path)` (in xlang.report.source) turns the SQLite store into those records.

A run record:
  {run_id, task, lang, arch, model, sample, turns_limit, docs, status, note, environment: {...},
   turns: [{turn, verdict: Verdict.to_dict()}, ...]}
status: "done" (finished), "missing" (no expert solution for a reference run), or anything else (not finished).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from xlang.verdict import COMPILE_ERROR, CORRECT, CORRECT_WITH_ARCH, NO_CODE

RUN_COLUMNS = ["run_id", "task", "lang", "arch", "model", "sample", "turns_limit", "docs", "status", "note"]
TURN_COLUMNS = ["run_id", "task", "lang", "arch", "model", "sample", "turn", "category", "compiled", "census_ok",
                "runtime_ran", "runtime_note", "correct", "correct_with_arch", "speedup", "tflops", "detail"]

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

    @property
    def empty(self) -> bool:
        return self.runs.empty

    def archs(self) -> list[str]:
        return _ordered(self.runs["arch"].unique(), _arch_order())

    def langs(self) -> list[str]:
        from xlang.backend import LANGS

        return _ordered(self.runs["lang"].unique(), LANGS)

    def tasks(self) -> list[str]:
        return sorted(self.runs["task"].unique())


def _arch_order() -> list[str]:
    from xlang.archs import archs

    return list(archs())


def _ordered(values, order) -> list[str]:
    values = [str(v) for v in values]
    return [v for v in order if v in values] + sorted(v for v in values if v not in order)


def _turn_row(run: dict, turn: dict) -> dict:
    v = turn.get("verdict") or {}
    category = v.get("category", "")
    build = v.get("build") or {}
    census = build.get("census") or {}
    timing = v.get("timing") or {}
    compiled = bool(build.get("ok")) if build else category not in ("", NO_CODE, COMPILE_ERROR)
    return {
        "run_id": run["run_id"], "task": run["task"], "lang": run["lang"], "arch": run["arch"],
        "model": run.get("model", ""), "sample": run.get("sample", 0), "turn": int(turn.get("turn", 1)),
        "category": category,
        "compiled": compiled,
        "census_ok": bool(compiled and census and not census.get("missing")),
        "runtime_ran": bool(v.get("runtime_ran")),
        "runtime_note": v.get("runtime_note") or "",
        "correct": category in CORRECT,
        "correct_with_arch": category in CORRECT_WITH_ARCH,
        "speedup": timing.get("speedup") if category in CORRECT else None,
        "tflops": timing.get("tflops") if category in CORRECT else None,
        "detail": (v.get("detail") or "")[:300],
    }


def _opcodes(verdict: dict) -> dict:
    census = ((verdict or {}).get("build") or {}).get("census") or {}
    total = Counter()
    for k in census.get("kernels", []):
        total.update(k.get("opcodes") or {})
    return dict(total)


def from_records(records: list[dict], environments: list[dict] | None = None, source: str = "") -> Dataset:
    runs, turns, opcodes = [], [], {}
    envs = list(environments or [])
    for r in records:
        runs.append({c: r.get(c) for c in RUN_COLUMNS})
        if r.get("environment") and r["environment"] not in envs:
            envs.append(r["environment"])
        for t in r.get("turns", []):
            row = _turn_row(r, t)
            turns.append(row)
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
        runs_df = runs_df.sort_values(["task", "arch", "lang", "model", "sample"], kind="stable").reset_index(drop=True)
    if not turns_df.empty:
        turns_df["speedup"] = pd.to_numeric(turns_df["speedup"], errors="coerce")
        turns_df["tflops"] = pd.to_numeric(turns_df["tflops"], errors="coerce")
    return Dataset(runs_df, turns_df, opcodes, envs, source)
