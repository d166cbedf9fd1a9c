"""`xlang fixit build RECIPE`: the datasets of a training study (PTXBench's s0-s6 style) from results stores, by a
TOML recipe.

A recipe names the sources once and any number of datasets made from them; each dataset chooses direct generation
(KernelGen: task -> kernel) or fix-based data (Fixit: failure + feedback -> fix), balanced (a cap per category, or
per task / lang / arch for direct data) or not, and which reasoning teacher's traces are its `<think>` part:

    name = "study"
    out = "study-data"                 # the output folder (relative paths: from the recipe's folder)
    formats = ["ptxbench", "chat", "sharegpt"]
    max_tokens = 16384                 # the length filter (0 or absent: none), counted with `tokenizer`
    tokenizer = "litellm:gpt-4o"       # or hf:PATH/tokenizer.json (xlang.fixit.formats.TokenCounter)
    seed = 0

    [sources]
    stores = ["runs/a.db", "runs/b.db"]
    accept = "ok"                      # as `xlang fixit collect`
    categories = ["compile_error", "incorrect"]   # default: every failure but no_code
    dedup = 0.9

    [teachers]
    code = "openai/gpt-5"              # repairs the failures no later turn fixed (absent: no repair)
    reasoning = ["anthropic/claude-sonnet-4-5", "deepseek/deepseek-reasoner"]   # the traces' writers
    max_words = 600                    # the bound of a trace (xlang.fixit.reason)
    repair_turns = 4                   # the repair loop's turn limit, with the judge's feedback between turns
    repair_attempts = 1
    profiler = "local"                 # the judge of every repair (as xlang run)

    [[datasets]]
    name = "s1"
    mode = "fix"                       # fix | direct
    reasoning = "anthropic/claude-sonnet-4-5"   # one of teachers.reasoning; absent: no trace (chat only)
    origins = ["trajectory", "repair"] # fix: pairs from later turns of a trajectory and / or from the code teacher
    cap = 50                           # balance: at most this many per category (direct: per task/lang/arch)
    caps = { compile_error = 100 }     # per-category caps over `cap`
    formats = ["ptxbench"]             # this dataset's formats (default: the recipe's)

The build: collect into OUT/collection (once; again only when a store's content or a source setting changes, and
then the repairs and traces of the old collection are not kept: they are asked for again), repair
with the code teacher when a dataset takes repaired pairs, write the traces each dataset's reasoning teacher owes
(resumable: rows that have a trace by that model are skipped), then per dataset: the rows of its mode and origins,
less those without its teacher's trace, less those over max_tokens, then capped (a seeded choice) -> OUT/NAME/
{ptxbench.jsonl, chat.jsonl, sharegpt.json}, OUT/dataset_info.json (LLaMA-Factory) and OUT/summary.json +
SUMMARY.md: what went in, what was left out and why, per dataset.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
import tomllib
from collections import Counter
from pathlib import Path

from xlang.errors import XlangError
from xlang.fixit import common as C
from xlang.fixit.common import FORMAT_VERSION, KERNEL_META, PAIR_META
from xlang.fixit import formats as F
from xlang.fixit.collect import KERNELS, MANIFEST, PAIRS

MODES = ("fix", "direct")
ORIGINS = ("trajectory", "repair")
_TOP = {"name", "out", "formats", "max_tokens", "tokenizer", "seed", "sources", "teachers", "datasets"}
_SOURCES = {"stores", "accept", "categories", "dedup"}
_TEACHERS = {"code", "reasoning", "max_words", "repair_turns", "repair_attempts", "profiler"}
_DATASET = {"name", "mode", "reasoning", "origins", "cap", "caps", "formats"}


def _unknown(section: str, got: dict, known: set) -> None:
    extra = sorted(set(got) - known)
    if extra:
        raise XlangError(f"recipe {section}: unknown key(s) {', '.join(extra)} (known: {', '.join(sorted(known))})")


def load_recipe(path: Path) -> dict:
    """The recipe, checked and with defaults filled in; relative paths resolved from the recipe's folder."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise XlangError(f"{path}: no such recipe") from None
    except tomllib.TOMLDecodeError as e:
        raise XlangError(f"{path}: not TOML ({e})") from None
    _unknown("(top level)", raw, _TOP)
    base = path.resolve().parent
    src, teach = dict(raw.get("sources") or {}), dict(raw.get("teachers") or {})
    _unknown("[sources]", src, _SOURCES)
    _unknown("[teachers]", teach, _TEACHERS)
    stores = [str((base / s).resolve()) for s in src.get("stores") or []]
    if not stores:
        raise XlangError("recipe [sources]: name at least one store (stores = [\"runs/a.db\"])")
    missing = [s for s in stores if not Path(s).is_file()]
    if missing:
        raise XlangError(f"recipe [sources]: no such store: {', '.join(missing)}")
    accept = src.get("accept", "ok")
    C.check_accept(accept)
    categories = list(src.get("categories") or [c for c in C.FAILURES if c not in C.DEFAULT_SKIP])
    bad = [c for c in categories if c not in C.FAILURES]
    if bad:
        raise XlangError(f"recipe [sources] categories: {', '.join(bad)} not a failure category "
                         f"(one of: {', '.join(C.FAILURES)})")
    reasoning = teach.get("reasoning") or []
    reasoning = [reasoning] if isinstance(reasoning, str) else list(reasoning)
    recipe = {
        "name": str(raw.get("name") or path.stem), "path": str(path.resolve()),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "out": str((base / str(raw.get("out") or f"{path.stem}-data")).resolve()),
        "formats": F.check_formats(raw.get("formats") or ["ptxbench", "chat", "sharegpt"]),
        "max_tokens": int(raw.get("max_tokens") or 0) or None, "tokenizer": str(raw.get("tokenizer") or
                                                                               F.DEFAULT_TOKENIZER),
        "seed": int(raw.get("seed") or 0),
        "sources": {"stores": stores, "accept": accept, "categories": categories,
                    "dedup": float(src.get("dedup", 0.9))},
        "teachers": {"code": teach.get("code"), "reasoning": reasoning,
                     "max_words": int(teach.get("max_words") or 600),
                     "repair_turns": int(teach.get("repair_turns") or 1),
                     "repair_attempts": int(teach.get("repair_attempts") or 1),
                     "profiler": str(teach.get("profiler") or "local")},
        "datasets": [],
    }
    for d in raw.get("datasets") or []:
        recipe["datasets"].append(_dataset(d, recipe))
    if not recipe["datasets"]:
        raise XlangError("recipe: no [[datasets]] (each names a dataset to build)")
    names = [d["name"] for d in recipe["datasets"]]
    if len(set(names)) != len(names):
        raise XlangError(f"recipe: dataset names repeat ({', '.join(names)})")
    return recipe


def _dataset(d: dict, recipe: dict) -> dict:
    _unknown(f"[[datasets]] {d.get('name', '?')}", d, _DATASET)
    name = str(d.get("name") or "")
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name in ("collection", ".", ".."):
        raise XlangError(f"recipe dataset name {name!r}: letters, digits, - _ . only (and not 'collection')")
    mode = d.get("mode", "fix")
    if mode not in MODES:
        raise XlangError(f"recipe dataset {name}: mode {mode!r} (one of: {', '.join(MODES)})")
    origins = list(d.get("origins") or ORIGINS)
    if any(o not in ORIGINS for o in origins):
        raise XlangError(f"recipe dataset {name}: origins {origins} (any of: {', '.join(ORIGINS)})")
    if mode == "fix" and "repair" in origins and not recipe["teachers"]["code"] and d.get("origins"):
        raise XlangError(f"recipe dataset {name}: origins name repair but [teachers] has no code teacher")
    reasoning = d.get("reasoning")
    if reasoning is not None and reasoning not in recipe["teachers"]["reasoning"]:
        raise XlangError(f"recipe dataset {name}: reasoning {reasoning!r} is not one of [teachers] reasoning "
                         f"({', '.join(recipe['teachers']['reasoning']) or 'none'})")
    formats = F.check_formats(d.get("formats") or recipe["formats"])
    if reasoning is None and set(formats) - {"chat"}:
        raise XlangError(f"recipe dataset {name}: formats {', '.join(f for f in formats if f != 'chat')} put the "
                         f"reasoning teacher's trace in <think>: name reasoning = MODEL, or formats = [\"chat\"]")
    cap = d.get("cap")
    caps = {str(k): int(v) for k, v in (d.get("caps") or {}).items()}
    if (cap is not None and int(cap) < 1) or any(v < 1 for v in caps.values()):
        raise XlangError(f"recipe dataset {name}: caps must be at least 1")
    if mode == "fix":
        bad = [c for c in caps if c not in recipe["sources"]["categories"]]
        if bad:
            raise XlangError(f"recipe dataset {name}: caps for {', '.join(bad)}, not a category of [sources]")
    return {"name": name, "mode": mode, "reasoning": reasoning, "origins": origins if mode == "fix" else [],
            "cap": int(cap) if cap is not None else None, "caps": caps, "formats": formats}


# ------------------------------------------------------------------------------------------ the build


def _collection_matches(folder: Path, recipe: dict) -> bool:
    """The collection there was made from these stores (same content) with these source settings."""
    if not (folder / MANIFEST).is_file():
        return False
    m = C.read_json(folder / MANIFEST)
    src = recipe["sources"]
    stored = [(s["path"], s["sha256"]) for s in m.get("stores") or []]
    now = [(str(Path(s).resolve()), C.file_sha256(Path(s))) for s in src["stores"]]
    return (stored == now and m.get("accept") == src["accept"] and m.get("categories") == src["categories"]
            and m.get("dedup") == src["dedup"] and m.get("cap") is None and m.get("seed") == recipe["seed"])


def _bucket(row: dict, mode: str) -> str:
    return row["category"] if mode == "fix" else C.bucket_name(C.bucket_key(row, False))


def _cap(rows: list[dict], ds: dict, seed: int) -> tuple[list[dict], dict]:
    """At most the dataset's cap per bucket (fix: category; direct: task/lang/arch), a seeded choice by id."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(_bucket(r, ds["mode"]), []).append(r)
    keep, stats = set(), {}
    for key, members in sorted(groups.items()):
        cap = ds["caps"].get(key, ds["cap"])
        chosen = members if cap is None or len(members) <= cap else \
            sorted(members, key=lambda r: C.digest(seed, r["id"]))[:cap]
        keep.update(r["id"] for r in chosen)
        stats[key] = {"available": len(members), "kept": len(chosen), "cap": cap}
    return [r for r in rows if r["id"] in keep], stats


def _records(rows: list[dict], ds: dict, counter: F.TokenCounter, max_tokens: int | None):
    """(rows kept, {row id: {layout: messages}}, tokens per kept row, left out {no_trace, too_long}: ids)."""
    make = F.fix_messages if ds["mode"] == "fix" else F.direct_messages
    kept, messages, tokens, left = [], {}, {}, {"no_trace": [], "too_long": []}
    for r in rows:
        layouts = {"ptxbench": make(r, ds["reasoning"], "ptxbench"), "chat": make(r, ds["reasoning"], "chat")}
        if ds["reasoning"] is not None and layouts["ptxbench"] is None:
            left["no_trace"].append(r["id"])
            continue
        # The length of the whole composed chat: the five (three) messages of the ptxbench layout where the
        # dataset has a trace, else the chat layout's.
        n = counter.count(layouts["ptxbench"] or layouts["chat"])
        if max_tokens is not None and n > max_tokens:
            left["too_long"].append(r["id"])
            continue
        kept.append(r)
        messages[r["id"]] = layouts
        tokens[r["id"]] = n
    return kept, messages, tokens, left


def _meta(row: dict, ds: dict, tokens: int, tokenizer: str) -> dict:

    keys = PAIR_META if ds["mode"] == "fix" else KERNEL_META
    trace = (row.get("reasoning") or {}).get(ds["reasoning"]) if ds["reasoning"] else None
    return {**{k: row.get(k) for k in keys}, "dataset": ds["name"], "mode": ds["mode"],
            "reasoning_model": ds["reasoning"], "reasoning_words": trace["words"] if trace else None,
            "reasoning_max_words": trace["max_words"] if trace else None, "tokens": tokens, "tokenizer": tokenizer}


def write_dataset(folder: Path, ds: dict, rows: list[dict], messages: dict, tokens: dict, tokenizer: str) -> dict:
    """The dataset's files in its formats under folder; {format: file name}."""

    folder.mkdir(parents=True, exist_ok=True)
    kind = "fixit" if ds["mode"] == "fix" else "kernelgen"
    files = {}
    for fmt in ds["formats"]:
        if fmt == "sharegpt":
            body = [{"id": r["id"], **F.sharegpt(messages[r["id"]]["ptxbench"])} for r in rows]
            C.write_text(folder / "sharegpt.json", json.dumps(body, ensure_ascii=False, indent=1) + "\n")
            files[fmt] = "sharegpt.json"
            continue
        recs = [{"id": r["id"], "format": kind if fmt == "chat" else f"{kind}-ptxbench", "format_version":
                 FORMAT_VERSION, "messages": messages[r["id"]][fmt], "meta": _meta(r, ds, tokens[r["id"]], tokenizer)}
                for r in rows]
        C.write_jsonl(folder / f"{fmt}.jsonl", recs)
        files[fmt] = f"{fmt}.jsonl"
    return files


def _token_stats(values: list[int]) -> dict:
    if not values:
        return {"min": None, "median": None, "max": None, "total": 0}
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "total": sum(values)}


def build(recipe_path: Path, *, on_step=None) -> dict:
    """Build every dataset of a recipe (module docstring). Returns the summary (also OUT/summary.json)."""
    from xlang import HARNESS_VERSION, __version__
    from xlang.fixit.collect import collect
    from xlang.fixit.reason import reason
    from xlang.fixit.repair import repair

    step = on_step or (lambda text: None)
    recipe = load_recipe(recipe_path)
    counter = F.TokenCounter(recipe["tokenizer"])
    out = Path(recipe["out"])
    folder = out / "collection"
    src, teach = recipe["sources"], recipe["teachers"]
    if _collection_matches(folder, recipe):
        step(f"collection: {folder} (the same stores and settings: kept)")
    else:
        m = collect(src["stores"], folder, accept=src["accept"], categories=src["categories"], cap=None,
                    dedup=src["dedup"], seed=recipe["seed"])
        step(f"collection: {m['kept']['pairs']} pairs, {m['kept']['unfixed']} unfixed, {m['kept']['kernels']} "
             f"kernels from {len(src['stores'])} store(s)")
    repairs = None
    wants_repair = any(d["mode"] == "fix" and "repair" in d["origins"] for d in recipe["datasets"])
    if teach["code"] and wants_repair:
        repairs = repair(folder, teach["code"], profiler=teach["profiler"], accept=src["accept"],
                         attempts=teach["repair_attempts"], turns=teach["repair_turns"])
        step(f"repair by {teach['code']}: {repairs['accepted']} of {repairs['failures']} failures repaired "
             f"({repairs['attempts']} replies)")
    traces = {}
    for model in dict.fromkeys(d["reasoning"] for d in recipe["datasets"] if d["reasoning"]):
        what = tuple(dict.fromkeys("pairs" if d["mode"] == "fix" else "kernels" for d in recipe["datasets"]
                                   if d["reasoning"] == model))
        traces[model] = reason(folder, model, max_words=teach["max_words"], what=what)
        step(f"reasoning by {model}: {traces[model]['written']} traces written, {traces[model]['over_limit']} over "
             f"{teach['max_words']} words")
    pairs = C.read_jsonl(folder / PAIRS, missing_ok=True)
    kernels = C.read_jsonl(folder / KERNELS, missing_ok=True)
    summary = {"recipe": {k: recipe[k] for k in ("name", "path", "sha256", "formats", "max_tokens", "tokenizer",
                                                 "seed", "sources", "teachers")},
               "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "xlang": __version__, "harness": HARNESS_VERSION,
               "collection": {k: C.read_json(folder / MANIFEST).get(k) for k in ("stores", "found", "after_dedup",
                                                                                  "kept", "repairs", "reasoning")},
               "repair": repairs, "reasoning": traces, "datasets": {}}
    info = {}
    for ds in recipe["datasets"]:
        if ds["mode"] == "fix":
            rows = [p for p in pairs if p["origin"] in ds["origins"] and p["category"] in src["categories"]]
        else:
            rows = list(kernels)
        available = len(rows)
        rows, messages, tokens, left = _records(rows, ds, counter, recipe["max_tokens"])
        rows, buckets = _cap(rows, ds, recipe["seed"])
        files = write_dataset(out / ds["name"], ds, rows, messages, tokens, recipe["tokenizer"])
        if "sharegpt" in files:
            info.update(F.dataset_info(f"{recipe['name']}_{ds['name']}", f"{ds['name']}/{files['sharegpt']}"))
        summary["datasets"][ds["name"]] = {
            "mode": ds["mode"], "reasoning": ds["reasoning"], "origins": ds["origins"],
            "code_teacher": teach["code"] if "repair" in ds["origins"] else None,
            "balance": {"cap": ds["cap"], "caps": ds["caps"]}, "formats": files,
            "counts": {"available": available, "no_trace": len(left["no_trace"]), "too_long": len(left["too_long"]),
                       "capped_out": sum(b["available"] - b["kept"] for b in buckets.values()), "kept": len(rows)},
            "buckets": buckets,
            "by_origin": dict(sorted(Counter(r.get("origin") or "trajectory" for r in rows).items())),
            "by_cell": dict(sorted(Counter(C.bucket_name(C.bucket_key(r, False)) for r in rows).items())),
            "tokens": _token_stats([tokens[r["id"]] for r in rows]),
        }
        c = summary["datasets"][ds["name"]]["counts"]
        step(f"{ds['name']} ({ds['mode']}, reasoning {ds['reasoning'] or 'none'}): {c['kept']} of {c['available']} "
             f"rows ({c['no_trace']} without a trace, {c['too_long']} over {recipe['max_tokens']} tokens, "
             f"{c['capped_out']} over a cap)")
    if info:
        C.write_json(out / "dataset_info.json", info)
    C.write_json(out / "summary.json", summary)
    C.write_text(out / "SUMMARY.md", summary_markdown(summary))
    return summary


def summary_markdown(s: dict) -> str:
    r = s["recipe"]
    lines = [f"# Fixit datasets: {r['name']}", "",
             f"xlang {s['xlang']} (harness {s['harness']}), made {s['created_at']} from recipe {r['path']} "
             f"(sha256 {r['sha256'][:12]}…).", "",
             f"- sources: {', '.join(r['sources']['stores'])} (accept {r['sources']['accept']}, dedup "
             f"{r['sources']['dedup']})",
             f"- code teacher: {r['teachers']['code'] or 'none'} (repair loop of {r['teachers']['repair_turns']} "
             f"turns with the judge's feedback, {r['teachers']['repair_attempts']} attempt(s), profiler "
             f"{r['teachers']['profiler']})",
             f"- reasoning teachers: {', '.join(r['teachers']['reasoning']) or 'none'} (traces of at most "
             f"{r['teachers']['max_words']} words; longer replies left out)",
             f"- length filter: {r['max_tokens'] or 'none'} tokens ({r['tokenizer']})", "",
             "| dataset | mode | reasoning | origins | available | no trace | too long | over a cap | kept | "
             "tokens (median / max) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, d in s["datasets"].items():
        c, t = d["counts"], d["tokens"]
        lines.append(f"| {name} | {d['mode']} | {d['reasoning'] or '–'} | {', '.join(d['origins']) or '–'} | "
                     f"{c['available']} | {c['no_trace']} | {c['too_long']} | {c['capped_out']} | {c['kept']} | "
                     f"{t['median'] if t['median'] is not None else '–'} / {t['max'] if t['max'] is not None else '–'} |")
    for name, d in s["datasets"].items():
        lines += ["", f"## {name}", "", f"files: {', '.join(f'{name}/{f}' for f in d['formats'].values())}", ""]
        lines += [f"- {k}: {v['kept']}/{v['available']}" + (f" (cap {v['cap']})" if v["cap"] else "")
                  for k, v in d["buckets"].items()] or ["- none"]
    return "\n".join(lines) + "\n"
