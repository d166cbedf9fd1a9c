"""Reading the results store (xlang.store, SQLite) into the report's records.

One report record per trajectory (a `samples` row): its run's task / lang / arch / model / limits / docs level /
context policy / shape / shape suite, its prompt variant and status, and its turns with their verdicts, tokens (reasoning
included) and cost; a turn whose model call never got a reply (a provider error, kept in the sample's note) is no
candidate and is left out. A store written before a column existed reads as that column empty. The store's `runs.versions_json` and each runtime verdict's fingerprint are
the environment fingerprints printed on the report.
"""

from __future__ import annotations

from pathlib import Path

from xlang.report.data import Dataset, from_records


def sample_id(run_id: str, sample_idx: int) -> str:
    return f"{run_id}#{sample_idx}"


def records_from_store(store, run_ids: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    """(records, environments) from an open xlang.store.Store; only run_ids when given, else every run that was not
    superseded (a compare cell judged again keeps its older run, marked superseded_by the new one)."""
    wanted = set(run_ids) if run_ids is not None else None
    runs = {r["run_id"]: r for r in store.runs() if (r["run_id"] in wanted if wanted is not None
                                                      else not r.get("superseded_by"))}
    turns_by_sample: dict[tuple, list] = {}
    for t in store.turns(messages=False):
        if t["run_id"] in runs:
            turns_by_sample.setdefault((t["run_id"], t["sample_idx"]), []).append(t)
    records, envs = [], []
    for s in store.samples():
        run = runs.get(s["run_id"])
        if run is None:
            continue
        versions = run.get("versions") or {}
        if versions:
            env = {"recorded by": "xlang run", **versions}
            if env not in envs:
                envs.append(env)
        turns = []
        for t in turns_by_sample.get((s["run_id"], s["sample_idx"]), []):
            if t.get("error") and not t.get("category") and not t.get("verdict"):
                continue  # the model never replied (a provider error): nothing was evaluated
            verdict = dict(t.get("verdict") or {})
            if not verdict:
                verdict = {"category": t.get("category") or ""}
            if verdict.get("build") is None and t.get("build"):
                verdict["build"] = t["build"]
            turns.append({"turn": t["turn_idx"], "verdict": verdict, "prompt_tokens": t.get("prompt_tokens"),
                          "completion_tokens": t.get("completion_tokens"),
                          "reasoning_tokens": t.get("reasoning_tokens"), "total_tokens": t.get("total_tokens"),
                          "cost_usd": t.get("cost_usd")})
        records.append({
            "run_id": sample_id(s["run_id"], s["sample_idx"]),
            "task": run["task"], "lang": run["lang"], "arch": run["arch"], "model": run["model"],
            "sample": s["sample_idx"], "turns_limit": run.get("turns_limit") or 1,
            "docs": run.get("docs_level") or "", "prompt_variant": s.get("prompt_variant") or "",
            "context": run.get("context") or "", "shape": run.get("shape") or {},
            "notes": run.get("notes_level") or "none",  # runs stored before fix notes existed had none
            "suite": (run.get("config") or {}).get("suite") or "",  # --suite, kept in runs.config_json ("" none)
            "status": s["status"], "note": s.get("note") or "", "turns": turns,
        })
    return records, envs


def load(store_path: str | Path, run_ids: list[str] | None = None) -> Dataset:
    """The Dataset of a results store, opened read-only: the file is never changed (not even its schema);
    one that is not a store, is damaged, lacks a table or has another schema version is an XlangError.
    Several stores, comma-separated ('gpu0.db,gpu1.db': compares run apart, on other GPUs or machines), read
    as one; a run in two of them is an error, never counted twice."""
    from xlang.errors import XlangError
    from xlang.store import Store

    paths = [p.strip() for p in str(store_path).split(",") if p.strip()] if isinstance(store_path, str) \
        else [store_path]
    records, envs, seen = [], [], {}
    for path in paths:
        with Store(path, readonly=True) as store:
            recs, more = records_from_store(store, run_ids)
        for r in recs:
            if r["run_id"] in seen:
                raise XlangError(f"sample {r['run_id']} is in both {seen[r['run_id']]} and {path}: "
                                 "read each run from one store only")
            seen[r["run_id"]] = path
        records += recs
        envs += [e for e in more if e not in envs]
    return from_records(records, envs, source=",".join(str(p) for p in paths))
