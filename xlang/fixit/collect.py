"""`xlang fixit collect`: failure -> fix pairs from one or more results stores.

Per trajectory (a sample of a run), each failed turn (its category one of the failure categories asked for; no_code
is left out by default: there is no code to fix) is paired with the first later turn of the same sample that fixed it
(--accept: `ok`, `static_ok` (ok or static_ok) or `category` (passed the stage that failed)). Failures with no such
turn are the unfixed ones `xlang fixit repair` works on. The final correct kernel of each sample (its last ok turn;
static_ok too with --accept static_ok) is kept for KernelGen.

Near-duplicate failed code (normalised-token shingles, Jaccard >= --dedup) within a bucket (category, task, lang,
arch) is dropped (the first one in store / run / sample / turn order is kept), across stores too; then each bucket
is capped (--cap, a seeded choice). Everything read, dropped and kept is recorded in collect.json.
"""

from __future__ import annotations

import time
from pathlib import Path

from xlang.errors import XlangError
from xlang.fixit import common as C

PAIRS, UNFIXED, KERNELS, MANIFEST, REPAIRS = "pairs.jsonl", "unfixed.jsonl", "kernels.jsonl", "collect.json", \
    "repairs.jsonl"


def _first_prompt(turns: list[dict]) -> tuple[str, str]:
    """(system, task prompt) of a trajectory: its first turn's messages (always [system, user])."""
    msgs = (turns[0].get("messages") or []) if turns else []
    system = next((m["content"] for m in msgs if m.get("role") == "system"), "")
    user = next((m["content"] for m in msgs if m.get("role") == "user"), "")
    return system, user


def _harness(verdict: dict | None) -> str | None:
    fp = (verdict or {}).get("fingerprint") or {}
    value = fp.get("harness_version") or fp.get("harness")
    return str(value) if value is not None else None


def _base(store: str, run: dict, t: dict, system: str, prompt: str) -> dict:
    return {"store": store, "run_id": run["run_id"], "sample_idx": t["sample_idx"], "task": run["task"],
            "lang": run["lang"], "arch": run["arch"], "shape": run.get("shape") or {}, "model": run["model"],
            "docs_level": run.get("docs_level"), "system": system, "task_prompt": prompt,
            "xlang_version": (run.get("versions") or {}).get("xlang")}


def _failure(base: dict, t: dict) -> dict:
    verdict = t.get("verdict") or {}
    return {**base, "failed_turn": t["turn_idx"], "category": t["category"], "error": verdict.get("detail") or "",
            "feedback": t.get("feedback") or "", "failed_code": t.get("code"), "failed_model": t.get("model"),
            "harness_version": _harness(verdict)}


def scan_store(path: str, accept: str, categories: tuple[str, ...]) -> tuple[list, list, list, dict]:
    """(pairs, unfixed, kernels, info) of one store, unfiltered, in run / sample / turn order."""
    from xlang.store import Store

    pairs, unfixed, kernels = [], [], []
    with Store(path, readonly=True) as db:
        runs = {r["run_id"]: r for r in db.runs()}
        by_sample: dict[tuple, list] = {}
        for t in db.turns():
            by_sample.setdefault((t["run_id"], t["sample_idx"]), []).append(t)
    n_turns = sum(len(v) for v in by_sample.values())
    for (run_id, k), turns in sorted(by_sample.items()):
        run = runs[run_id]
        turns.sort(key=lambda t: t["turn_idx"])
        system, prompt = _first_prompt(turns)
        base = _base(str(path), run, turns[0], system, prompt)
        for i, t in enumerate(turns):
            if t["category"] not in categories or not t.get("code"):
                continue
            fail = _failure(base, t)
            fix = next((u for u in turns[i + 1:] if u.get("code") and C.fixes(t["category"], u["category"], accept)),
                       None)
            if fix is None:
                fail["id"] = C.digest("failure", fail["task"], fail["lang"], fail["arch"], fail["failed_code"])
                unfixed.append(fail)
                continue
            pair = {**fail, "origin": "trajectory", "fixed_turn": fix["turn_idx"], "fixed_code": fix["code"],
                    "fixed_category": fix["category"], "fixed_speedup": fix.get("speedup"),
                    "fix_model": fix.get("model") or run["model"], "fix_harness_version": _harness(fix.get("verdict")),
                    "accept": accept, "explanation": None, "explained_by": None}
            pair["id"] = C.digest("pair", pair["task"], pair["lang"], pair["arch"], pair["failed_code"],
                                  pair["fixed_code"])
            pairs.append(pair)
        final = next((t for t in reversed(turns) if t.get("code") and C.kernel_ok(t["category"], accept)), None)
        if final is not None:
            kern = {**base, "turn": final["turn_idx"], "category": final["category"], "code": final["code"],
                    "speedup": final.get("speedup"), "kernel_model": final.get("model") or run["model"],
                    "harness_version": _harness(final.get("verdict"))}
            kern["id"] = C.digest("kernel", kern["task"], kern["lang"], kern["arch"], kern["code"])
            kernels.append(kern)
    info = {"path": str(Path(path).resolve()), "sha256": C.file_sha256(Path(path)), "runs": len(runs),
            "samples": len(by_sample), "turns": n_turns,
            "models": sorted({r["model"] for r in runs.values()})}
    return pairs, unfixed, kernels, info


def _dedup(rows: list[dict], dd: C.Deduper, code_key: str, with_category: bool = True) -> tuple[list, list]:
    kept, dropped = [], []
    for r in rows:
        key = C.bucket_key(r, with_category)
        dup = dd.seen(key, r[code_key])
        if dup is not None:
            dropped.append({"id": r["id"], "duplicate_of": dup})
            continue
        dd.remember(key, r["id"], r[code_key])
        kept.append(r)
    return kept, dropped


def collect(stores: list[str], out: Path, *, accept: str = "ok", categories: list[str] | None = None,
            cap: int | None = 200, dedup: float = 0.9, seed: int = 0) -> dict:
    C.check_accept(accept)
    if not stores:
        raise XlangError("name at least one results store (--store PATH, repeatable)")
    if cap is not None and cap < 1:
        raise XlangError("--cap must be at least 1")
    cats = tuple(categories) if categories else tuple(c for c in C.FAILURES if c not in C.DEFAULT_SKIP)
    bad = [c for c in cats if c not in C.FAILURES]
    if bad:
        raise XlangError(f"--categories: {', '.join(bad)} not a failure category (one of: {', '.join(C.FAILURES)})")
    pairs, unfixed, kernels, infos = [], [], [], []
    for s in stores:
        p, u, k, info = scan_store(s, accept, cats)
        pairs += p
        unfixed += u
        kernels += k
        infos.append(info)
    found = {"pairs": len(pairs), "unfixed": len(unfixed), "kernels": len(kernels)}
    # Near-duplicates: pairs by their failed code; unfixed failures also against the pairs' failed code (a failure
    # fixed elsewhere needs no repair); kernels by their code, per (task, lang, arch).
    dd = C.Deduper(dedup)
    pairs, pair_dups = _dedup(pairs, dd, "failed_code")
    unfixed, unfixed_dups = _dedup(unfixed, dd, "failed_code")
    kernels, kernel_dups = _dedup(kernels, C.Deduper(dedup), "code", with_category=False)
    after_dedup = {"pairs": len(pairs), "unfixed": len(unfixed), "kernels": len(kernels)}
    pairs, pair_buckets = C.rebalance(pairs, cap, seed)
    unfixed, unfixed_buckets = C.rebalance(unfixed, cap, seed)
    kernels, kernel_buckets = C.rebalance(kernels, cap, seed, with_category=False)
    out.mkdir(parents=True, exist_ok=True)
    C.write_jsonl(out / PAIRS, pairs)
    C.write_jsonl(out / UNFIXED, unfixed)
    C.write_jsonl(out / KERNELS, kernels)
    (out / REPAIRS).unlink(missing_ok=True)  # a new collection: earlier repair attempts belong to the old one
    from xlang import HARNESS_VERSION, __version__

    manifest = {
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "xlang": __version__, "harness": HARNESS_VERSION,
        "stores": infos, "accept": accept, "categories": list(cats), "cap": cap, "dedup": dedup,
        "dedup_method": f"Jaccard of {C.SHINGLE}-token shingles of comment-free normalised tokens, per bucket",
        "seed": seed, "found": found, "after_dedup": after_dedup,
        "kept": {"pairs": len(pairs), "unfixed": len(unfixed), "kernels": len(kernels)},
        "duplicates": {"pairs": pair_dups, "unfixed": unfixed_dups, "kernels": kernel_dups},
        "buckets": {"pairs": pair_buckets, "unfixed": unfixed_buckets, "kernels": kernel_buckets},
        "repair": None,
    }
    C.write_json(out / MANIFEST, manifest)
    return manifest

