"""`xlang diff OLD.db NEW.db`: what another toolchain changed on the same candidates, and `xlang readiness`
(the commands and the files they write: xlang/diff_commands.py).

Candidates are matched across the two stores by what was judged: task, language, architecture, shape and the
candidate's code (its digest; the reply's when no code was extracted), so a store judged again by `xlang rejudge`,
or two compares of the experts under two toolchains, pair up candidate for candidate. Superseded runs are left out.

Per candidate: the category transition (old -> new); each instruction family's SASS count, and which families were
gained (0 -> >0) or lost (>0 -> 0; both builds compiled: a new compile error is counted as one); the instruction total; registers, spill bytes and static shared memory where
the build recorded them (a build stopped by its time limit is a time-out, not a compile error; ptxas -v or cuobjdump -res-usage, the most of any kernel; spills summed); the SASS mix
shift (total variation distance between the two opcode distributions: 0 the same mix, 1 nothing in common); the
compile time (a build reused from the build cache has none); and, where both verdicts ran and were timed, the
speed change: the ratio of the two speedups over the vendor (each verdict times its vendor the same way, so the
ratio is free of the GPU's state), with the range given by each side's 20th-80th percentile of timed calls.
Per language x architecture: counts of candidates that gained or lost each family, new and fixed compile errors,
category changes and the geomean speed change with a 95% bootstrap interval over the candidates (scipy.stats).

`--fail-on` rules (comma-separated) make the exit code 1 when one fires: lost-family (a candidate lost one of its
architecture's required families), compile-error (a candidate that compiled no longer does), slower:X% (a timed
candidate got more than X% slower), unmatched (a candidate of OLD is not in NEW).

Readiness (per language, architecture and toolchain, of one or more stores): the share of the corpus that
compiles, that carries the architecture's required families in SASS, that executed them at run time (of those whose
runtime ran), and the experts' (model reference) geomean speed against the vendor.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from xlang.archs import get_arch
from xlang.backend import build_timed_out, get_backend
from xlang.errors import XlangError
from xlang.identity import stored_identity
from xlang.store import Store
from xlang.verdict import scores

RULES = ("lost-family", "compile-error", "slower", "unmatched")
_NOT_TOOLCHAIN = ("harness", "torch", "cuobjdump", "runtime", "driver", "ptxas", "legacy")


# ---------------------------------------------------------------------------------------------- reading a store

def _resources(build: dict) -> dict:
    res = build.get("resources") or []
    regs = [r["registers"] for r in res if r.get("registers") is not None]
    spills = [r.get("spill_stores", 0) + r.get("spill_loads", 0) if "spill_stores" in r else r.get("local", 0)
              for r in res]
    shared = [r["shared"] for r in res if r.get("shared") is not None]
    return {"registers": max(regs) if regs else None, "spill_bytes": sum(spills) if res else None,
            "shared_bytes": max(shared) if shared else None}


def toolchain_label(lang: str, toolchain: dict | None) -> str:
    """'triton 3.6.0', 'nvcc V13.0.88', ...: the language's own packages and tools of a cell identity."""
    items = [f"{k} {v}" for k, v in (toolchain or {}).items() if k not in _NOT_TOOLCHAIN and v is not None]
    return ", ".join(items) or "unknown toolchain"


def _run_toolchain(run: dict, verdict: dict) -> dict:
    tc = stored_identity(run)
    if tc.get("legacy"):  # a run from before identities: its language's packages and tools from its versions
        backend = get_backend(run["lang"])
        have = {**((verdict.get("fingerprint") or {}).get("toolchain") or {}), **(run.get("versions") or {})}
        tc = {k: have.get(k) for k in (*backend.distributions, *backend.tools) if k in have}
    return tc


def candidates(store_path: str | Path) -> pd.DataFrame:
    """One row per judged candidate (turn) of a store's current runs."""
    rows = []
    with Store(store_path, readonly=True) as store:
        runs = {r["run_id"]: r for r in store.runs() if not r.get("superseded_by")}
        for t in store.turns(messages=False):
            run = runs.get(t["run_id"])
            if run is None:
                continue
            v = t.get("verdict") or {"category": t.get("category")}
            build = v.get("build") or t.get("build") or {}
            census = build.get("census") or {}
            text = t.get("code") if t.get("code") is not None else t.get("reply") or ""
            config = run.get("config") or {}
            origin = config.get("file")
            opcodes: dict = {}
            for k in census.get("kernels") or []:
                for op, n in (k.get("opcodes") or {}).items():
                    opcodes[op] = opcodes.get(op, 0) + n
            sc = scores(v)
            timed_out = not sc["compiled"] and build_timed_out(build.get("error") or v.get("detail"))
            timing = v.get("timing") or {}
            tc = _run_toolchain(run, v)
            rows.append({
                "task": run["task"], "lang": run["lang"], "arch": run["arch"],
                "shape": json.dumps(run.get("shape") or v.get("shape") or {}, sort_keys=True),
                "code_sha": hashlib.sha256(str(text).encode()).hexdigest()[:16],
                "expert": t.get("model") == "reference",
                "name": Path(origin).name if origin else "expert" if t.get("model") == "reference" else
                f"{t['run_id']} s{t['sample_idx']} t{t['turn_idx']}",
                "run_id": t["run_id"], "category": v.get("category") or t.get("category") or "",
                "compiled": sc["compiled"], "census_ok": sc["census_ok"], "executed_ok": sc["executed_ok"],
                "correct": sc["correct"], "runtime_ran": sc["runtime_ran"], "build_timed_out": timed_out,
                "required": list(census.get("required") or []), "families": dict(census.get("families") or {}),
                "instructions": sum(k.get("instructions", 0) for k in census.get("kernels") or []) or None,
                "opcodes": opcodes, **_resources(build),
                "compile_s": None if build.get("cached") or not build else build.get("seconds"),
                "speedup": sc["speedup"], "speedup_lo": _speed_bound(timing, "q80_ms", "q20_ms"),
                "speedup_hi": _speed_bound(timing, "q20_ms", "q80_ms"),
                "toolchain": toolchain_label(run["lang"], tc), "toolchain_full": tc,
            })
    return pd.DataFrame(rows)


def _speed_bound(timing: dict, cand_q: str, base_q: str) -> float | None:
    """The speedup at the ends of the timed calls' 20-80% ranges (slow candidate over fast vendor, or the reverse)."""
    c, b = (timing.get("candidate") or {}).get(cand_q), (timing.get("baseline") or {}).get(base_q)
    return b / c if c and b else None


# ---------------------------------------------------------------------------------------------- the diff

def _mix_shift(a: dict, b: dict) -> float | None:
    ta, tb = sum(a.values()), sum(b.values())
    if not ta or not tb:
        return None
    return 0.5 * sum(abs(a.get(op, 0) / ta - b.get(op, 0) / tb) for op in set(a) | set(b))


def _top_changes(a: dict, b: dict, n: int = 4) -> str:
    """The opcodes whose counts changed most, 'LDGSTS 48->6, LDG 10->52'."""
    if not a or not b:
        return ""
    ops = sorted(set(a) | set(b), key=lambda op: (-abs(b.get(op, 0) - a.get(op, 0)), op))
    return ", ".join(f"{op} {a.get(op, 0)}->{b.get(op, 0)}" for op in ops[:n] if a.get(op, 0) != b.get(op, 0))


def _pair(old: pd.DataFrame, new: pd.DataFrame) -> tuple[list[tuple[dict, dict | None]], list[dict]]:
    """(old, new) pairs by (task, lang, arch, shape, code), the n-th duplicate with the n-th; and NEW's leftovers."""
    key = ["task", "lang", "arch", "shape", "code_sha"]
    pool: dict[tuple, list[dict]] = {}
    for r in (new.to_dict("records") if not new.empty else []):
        pool.setdefault(tuple(r[k] for k in key), []).append(r)
    pairs = []
    for r in (old.to_dict("records") if not old.empty else []):
        found = pool.get(tuple(r[k] for k in key)) or []
        pairs.append((r, found.pop(0) if found else None))
    return pairs, [r for rs in pool.values() for r in rs]


def candidate_rows(pairs) -> pd.DataFrame:
    rows = []
    for a, b in pairs:
        fams = list(get_arch(a["arch"]).families)
        row = {"task": a["task"], "lang": a["lang"], "arch": a["arch"], "candidate": a["name"],
               "expert": a["expert"], "old toolchain": a["toolchain"], "new toolchain": b["toolchain"] if b else "",
               "old": a["category"], "new": b["category"] if b else "(not in new)"}
        if b is None:
            rows.append(row)
            continue
        fa, fb = a["families"] or {}, b["families"] or {}
        gained = [f for f in fams if not fa.get(f) and fb.get(f)] if a["compiled"] and b["compiled"] else []
        lost = [f for f in fams if fa.get(f) and not fb.get(f)] if a["compiled"] and b["compiled"] else []
        ratio = b["speedup"] / a["speedup"] if a["speedup"] and b["speedup"] else None
        lo = b["speedup_lo"] / a["speedup_hi"] if ratio and b["speedup_lo"] and a["speedup_hi"] else None
        hi = b["speedup_hi"] / a["speedup_lo"] if ratio and b["speedup_hi"] and a["speedup_lo"] else None
        row.update({
            "gained": ", ".join(gained), "lost": ", ".join(lost),
            "family counts changed": ", ".join(f"{f} {fa.get(f, 0)}->{fb.get(f, 0)}" for f in fams
                                               if fa.get(f, 0) != fb.get(f, 0)) if a["compiled"] and b["compiled"] else "",
            "lost required": ", ".join(f for f in lost if f in (a["required"] or [])),
            "new compile error": bool(a["compiled"] and not b["compiled"] and not b["build_timed_out"]),
            "new build time-out": bool(a["compiled"] and b["build_timed_out"]),
            "fixed compile error": bool(not a["compiled"] and b["compiled"]),
            **{f"{f} old": fa.get(f, 0) for f in fams}, **{f"{f} new": fb.get(f, 0) for f in fams},
            "instructions old": a["instructions"], "instructions new": b["instructions"],
            "registers old": a["registers"], "registers new": b["registers"],
            "spill bytes old": a["spill_bytes"], "spill bytes new": b["spill_bytes"],
            "shared bytes old": a["shared_bytes"], "shared bytes new": b["shared_bytes"],
            "SASS mix shift": _mix_shift(a["opcodes"] or {}, b["opcodes"] or {}),
            "top opcode changes": _top_changes(a["opcodes"] or {}, b["opcodes"] or {}),
            "compile s old": a["compile_s"], "compile s new": b["compile_s"],
            "speed ratio": ratio, "speed ratio lo": lo, "speed ratio hi": hi,
        })
        rows.append(row)
    return pd.DataFrame(rows)


def _geomean_interval(ratios: list[float]) -> tuple[float | None, float | None, float | None]:
    if not ratios:
        return None, None, None
    logs = [math.log(r) for r in ratios]
    point = math.exp(sum(logs) / len(logs))
    if len(logs) < 2:
        return point, None, None
    from scipy.stats import bootstrap  # lazy: scipy's import is slow, and only intervals need it

    res = bootstrap((logs,), lambda x, axis=-1: x.mean(axis=axis), n_resamples=2000, method="percentile",
                    confidence_level=0.95, random_state=0)
    return point, math.exp(res.confidence_interval.low), math.exp(res.confidence_interval.high)


def summary_rows(cands: pd.DataFrame) -> pd.DataFrame:
    rows = []
    if cands.empty:
        return pd.DataFrame(rows)
    for (lang, arch), g in cands.groupby(["lang", "arch"], sort=False):
        matched = g[g["new"] != "(not in new)"]
        sm = get_arch(arch).sm
        row = {"lang": lang, "arch": arch, "sm": sm,
               "toolchain": _transition(g["old toolchain"], matched["new toolchain"]),
               "candidates": len(g), "matched": len(matched)}
        for f in get_arch(arch).families:
            row[f"gained {f}"] = int(sum(f in str(x).split(", ") for x in matched.get("gained", [])))
            row[f"lost {f}"] = int(sum(f in str(x).split(", ") for x in matched.get("lost", [])))
        row["new compile errors"] = int(matched.get("new compile error", pd.Series(dtype=bool)).fillna(False).sum())
        row["new build time-outs"] = int(matched.get("new build time-out", pd.Series(dtype=bool)).fillna(False).sum())
        row["fixed compile errors"] = int(matched.get("fixed compile error", pd.Series(dtype=bool)).fillna(False).sum())
        row["category changed"] = int((matched["old"] != matched["new"]).sum())
        row["family counts changed"] = int((matched.get("family counts changed", pd.Series(dtype=str))
                                            .fillna("") != "").sum())
        shifts = [x for x in matched.get("SASS mix shift", []) if x is not None and not pd.isna(x)]
        row["mean SASS mix shift"] = sum(shifts) / len(shifts) if shifts else None
        ratios = [x for x in matched.get("speed ratio", []) if x is not None and not pd.isna(x)]
        point, lo, hi = _geomean_interval(ratios)
        row.update({"timed": len(ratios), "geomean speed": point, "geomean speed lo": lo, "geomean speed hi": hi})
        comp = [(o, n) for o, n in zip(matched.get("compile s old", []), matched.get("compile s new", []))
                if o and n and not pd.isna(o) and not pd.isna(n)]
        inst = [(o, n) for o, n in zip(matched.get("instructions old", []), matched.get("instructions new", []))
                if o and n and not pd.isna(o) and not pd.isna(n)]
        row["instructions compared"] = len(inst)
        row["geomean instructions"] = math.exp(sum(math.log(n / o) for o, n in inst) / len(inst)) if inst else None
        regs = [(o, n) for o, n in zip(matched.get("registers old", []), matched.get("registers new", []))
                if o and n and not pd.isna(o) and not pd.isna(n)]
        row["registers fewer"] = sum(n < o for o, n in regs)
        row["registers more"] = sum(n > o for o, n in regs)
        row["geomean compile time"] = math.exp(sum(math.log(n / o) for o, n in comp) / len(comp)) if comp else None
        rows.append(row)
    return pd.DataFrame(rows)


def _transition(old, new) -> str:
    a = ", ".join(dict.fromkeys(x for x in old if x))
    b = ", ".join(dict.fromkeys(x for x in new if x))
    return a if a == b else f"{a} -> {b or '(nothing matched)'}"


def sentence(row: dict) -> str:
    """'triton 3.6.0 -> triton 3.9.0, sm_100a: 14 candidates gained tcgen05, 2 lost tma, 3 new compile errors,
    geomean speed +4% [+1%, +7%]' (parts with nothing to say are left out)."""
    parts = []
    row = {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}  # other archs' families
    if not row["matched"]:
        return f"{row['toolchain']}, {row['sm']} ({row['lang']}, 0/{row['candidates']} candidates matched): no " \
               "candidate of the new store has the same task, language, architecture, shape and code"
    for k, v in row.items():
        if (k.startswith("gained ") or k.startswith("lost ")) and v:
            verb, fam = k.split(" ", 1)
            parts.append(f"{v} {'candidate' if v == 1 else 'candidates'} {verb} {fam}")
    if row.get("new compile errors"):
        parts.append(f"{row['new compile errors']} new compile error(s)")
    if row.get("new build time-outs"):
        parts.append(f"{row['new build time-outs']} build(s) stopped by the build's time limit (not a compile "
                     "error)")
    if row.get("fixed compile errors"):
        parts.append(f"{row['fixed compile errors']} compile error(s) fixed")
    if row.get("category changed"):
        parts.append(f"{row['category changed']} category change(s)")
    if row.get("family counts changed"):
        parts.append(f"family counts changed in {row['family counts changed']}")
    if row.get("geomean instructions") is not None:
        parts.append(f"SASS instructions {_pct(row['geomean instructions'])} (geomean of "
                     f"{row['instructions compared']})")
    if row.get("registers fewer") or row.get("registers more"):
        parts.append(f"registers fewer in {row['registers fewer']}, more in {row['registers more']}")
    if row.get("geomean speed") is not None:
        text = f"geomean speed {_pct(row['geomean speed'])} over {row['timed']} timed"
        if row.get("geomean speed lo") is not None:
            text += f" [95% {_pct(row['geomean speed lo'])}, {_pct(row['geomean speed hi'])}]"
        parts.append(text)
    else:
        parts.append("speed not measured (no candidate timed on both sides)")
    if not any(k.startswith(("gained", "lost")) and v for k, v in row.items()) and not row.get("new compile errors"):
        parts.insert(0, "no family gained or lost")
    return f"{row['toolchain']}, {row['sm']} ({row['lang']}, {row['matched']}/{row['candidates']} candidates " \
           f"matched): " + ", ".join(parts)


def _pct(x: float) -> str:
    return f"{(x - 1) * 100:+.1f}%"


# ---------------------------------------------------------------------------------------------- rules

def parse_rules(text: str | None) -> list[tuple[str, float | None]]:
    out = []
    for item in [s.strip() for s in (text or "").split(",") if s.strip()]:
        name, _, arg = item.partition(":")
        if name not in RULES:
            raise XlangError(f"--fail-on {item}: unknown rule (known: lost-family, compile-error, slower:X%, "
                             "unmatched)")
        if name == "slower":
            try:
                out.append((name, float(arg.rstrip("%")) / 100))
            except ValueError:
                raise XlangError(f"--fail-on {item}: expected slower:X% (e.g. slower:5%)") from None
        else:
            out.append((name, None))
    return out


def fired(cands: pd.DataFrame, rules) -> list[str]:
    """One line per rule that fires, naming the candidates."""
    out = []
    if cands.empty:
        return out
    matched = cands[cands["new"] != "(not in new)"]
    for name, arg in rules:
        if name == "unmatched":
            hit = cands[cands["new"] == "(not in new)"]
        elif matched.empty:
            continue
        elif name == "lost-family":
            hit = matched[matched["lost required"].fillna("") != ""]
        elif name == "compile-error":
            hit = matched[matched["new compile error"].fillna(False).astype(bool)]
        else:
            ratio = pd.to_numeric(matched["speed ratio"], errors="coerce")
            hit = matched[ratio < 1 - arg]
        if len(hit):
            label = name if arg is None else f"{name}:{arg * 100:g}%"
            names = ", ".join(f"{r.task}/{r.lang}/{r.arch}/{r.candidate}" for r in hit.itertuples())
            out.append(f"{label}: {len(hit)} candidate(s): {names}")
    return out


# ---------------------------------------------------------------------------------------------- readiness

def readiness(frames: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """Per store and (language, architecture, toolchain), of (store name, candidates) pairs: the share that compiles, carries the required families in SASS,
    executed them at run time (of those whose runtime ran), and the experts' geomean speed over the vendor."""
    named = [f.assign(store=Path(str(name)).name) for name, f in frames if not f.empty]
    allc = pd.concat(named, ignore_index=True) if named else pd.DataFrame()
    rows = []
    if allc.empty:
        return pd.DataFrame(rows)
    for (store, lang, arch, tc), g in allc.groupby(["store", "lang", "arch", "toolchain"], sort=False):
        ran = g[g["runtime_ran"]]
        experts = [x for x in g[g["expert"]]["speedup"] if x is not None and not pd.isna(x)]
        point, lo, hi = _geomean_interval(experts)
        rows.append({
            "store": store, "lang": lang, "arch": arch, "toolchain": tc, "candidates": len(g),
            "compiles": g["compiled"].mean(), "required families in SASS": (g["census_ok"] == True).mean(),  # noqa: E712
            "runtime ran": len(ran),
            "executes them": (ran["executed_ok"] == True).mean() if len(ran) else None,  # noqa: E712
            "experts timed": len(experts), "experts' speed vs vendor": point,
            "experts' speed lo": lo, "experts' speed hi": hi,
        })
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- the output

@dataclass
class Diff:
    old: str
    new: str
    candidates: pd.DataFrame
    summary: pd.DataFrame
    readiness: pd.DataFrame
    only_new: list = field(default_factory=list)

    def sentences(self) -> list[str]:
        return [sentence(r) for r in self.summary.to_dict("records")]

    @property
    def matched(self) -> int:
        return int((self.candidates["new"] != "(not in new)").sum()) if not self.candidates.empty else 0

    def unmatched_text(self) -> str:
        """'' when every candidate of each store has its match in the other; else what is unmatched."""
        old = len(self.candidates) - self.matched
        if not old and not self.only_new:
            return ""
        return (f"{self.matched} of {len(self.candidates)} candidates of {self.old} matched one in {self.new} (by "
                f"task, language, architecture, shape and code): {old} of the old store and {len(self.only_new)} of "
                "the new one have no match")


def diff(old: str | Path, new: str | Path) -> Diff:
    a, b = candidates(old), candidates(new)
    if a.empty:
        raise XlangError(f"{old} holds no judged candidate")
    pairs, only_new = _pair(a, b)
    cands = candidate_rows(pairs)
    return Diff(str(old), str(new), cands, summary_rows(cands), readiness([(old, a), (new, b)]), only_new)
