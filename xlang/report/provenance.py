"""What a report says of where its verdicts come from: the cells whose runtime did not run and why, the harness
versions, the banners over the tables, the environment (toolchain, GPU, isolation) of each run."""

from __future__ import annotations
import re
import pandas as pd
from xlang.report.data import Dataset
from xlang.report.tables import cell_stats


def not_run(ds: Dataset) -> pd.DataFrame:
    """What was not run, and why: runtime on architectures without a device, missing expert solutions,
    runs that never finished, peers that timed no candidate of a cell (not installed, failed, turned off)."""
    rows = []
    stats = cell_stats(ds)
    for r in stats.itertuples(index=False):
        if r.missing:
            rows.append({"what": "candidate", "task": r.task, "arch": r.arch, "lang": r.lang,
                         "reason": f"missing: no expert solution for {r.lang} ({r.model})" if r.model == "reference"
                         else "missing"})
        elif r.n and not r.runtime_ran:
            rows.append({"what": "runtime", "task": r.task, "arch": r.arch, "lang": r.lang,
                         "reason": r.runtime_note or "not run"})
        elif r.n and not r.n_peer_speedup and r.peer_note:
            rows.append({"what": "peer", "task": r.task, "arch": r.arch, "lang": r.lang, "reason": r.peer_note})
        if r.unfinished:
            rows.append({"what": "run", "task": r.task, "arch": r.arch, "lang": r.lang,
                         "reason": f"{r.unfinished} sample run(s) not finished (re-run the same compare to resume)"})
    return pd.DataFrame(rows, columns=["what", "task", "arch", "lang", "reason"])


def harness_versions(ds: Dataset) -> str:
    """The harness versions that judged these verdicts ('4'; '3, 4 (mixed: ...)'), '' where none recorded one.
    Harnesses time differently (xlang.HARNESS_VERSION says how), so a report that mixes them says so."""
    found = sorted({h for h in ds.turns["harness"].dropna().astype(str) if h})
    if len(found) > 1:
        return ", ".join(found) + " (mixed: their timings were taken differently)"
    return ", ".join(found)


def runtime_banners(ds: Dataset) -> list[str]:
    """One line per registered architecture whose runtime was not run (never silent about an architecture that
    archs.toml marks `announce_when_absent`: one whose runtime has never run here)."""
    from xlang.archs import archs

    lines = []
    for arch in archs().values():
        turns = ds.turns[ds.turns["arch"] == arch.name] if not ds.turns.empty else ds.turns
        in_data = not ds.runs.empty and (ds.runs["arch"] == arch.name).any()
        if in_data and len(turns) and turns["runtime_ran"].any():
            continue
        label = f"{arch.name} ({arch.generation.capitalize()}, {arch.sm})"
        if not in_data:
            if arch.extra.get("announce_when_absent"):
                lines.append(f"{label}: not in this comparison; {arch.generation.capitalize()} runtime was not run.")
            continue
        notes = sorted({re.sub(r"^not run\s*", "", n).strip("() ") for n in turns["runtime_note"] if n}) \
            if len(turns) else []
        why = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"{label}: {arch.generation.capitalize()} runtime was not run{why}. "
                     f"Its columns come from compilation and the static SASS census only.")
    return lines


def environment_table(ds: Dataset) -> pd.DataFrame:
    """The distinct environment fingerprints as rows of (fingerprint #, key, value)."""
    rows = []
    for i, env in enumerate(ds.environments, 1):
        for k, v in _flatten(env).items():
            rows.append({"fingerprint": i, "key": k, "value": v})
    return pd.DataFrame(rows, columns=["fingerprint", "key", "value"])


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, name + "."))
        elif isinstance(v, (list, tuple)):
            out[name] = ", ".join(map(str, v))
        else:
            out[name] = "" if v is None else str(v)
    return out
