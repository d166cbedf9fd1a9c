"""`xlang fixit export`: JSONL (and Parquet) for supervised fine-tuning, a data card, and the retrieval notes.

  fixit.jsonl      one record per pair: messages [system, user: task + failed code + the judge's feedback,
                   assistant: explanation + fixed code] and meta (schemas/fixit.schema.json)
  kernelgen.jsonl  one record per final correct kernel: messages [system, user: task, assistant: the kernel]
                   (schemas/kernelgen.schema.json)
  notes.jsonl      one note per explained pair, what `xlang run --notes ... --notes-store` retrieves from
                   (schemas/note.schema.json)
  *.parquet        the same records (messages as a list of {role, content}; meta as JSON text), with pyarrow
  datacard.json    counts per bucket, source stores, models, verdict / harness versions, collection parameters
                   (schemas/datacard.schema.json); DATACARD.md the same for people
With --format ptxbench and / or sharegpt (xlang.fixit.formats), also fixit/ and kernelgen/ holding ptxbench.jsonl
(the five- / three-message layout with a loss mask per message) and sharegpt.json, and dataset_info.json (the
LLaMA-Factory entries): rows whose --reasoning-model trace is missing are left out of those (counted). With
--max-tokens, records longer than that (the whole composed chat, counted with --tokenizer) are left out of every
format.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from xlang.fixit import common as C
from xlang.fixit.common import FORMAT_VERSION, KERNEL_META, PAIR_META, fixit_assistant, fixit_user
from xlang.fixit.collect import KERNELS, MANIFEST, PAIRS

def _meta(row: dict, keys) -> dict:
    return {k: row.get(k) for k in keys}




def fixit_record(pair: dict) -> dict:
    return {"id": pair["id"], "format": "fixit", "format_version": FORMAT_VERSION,
            "messages": [{"role": "system", "content": pair["system"]},
                         {"role": "user", "content": fixit_user(pair)},
                         {"role": "assistant", "content": fixit_assistant(pair)}],
            "meta": _meta(pair, PAIR_META)}


def kernelgen_record(kern: dict) -> dict:
    f = C.fence(kern["lang"])
    return {"id": kern["id"], "format": "kernelgen", "format_version": FORMAT_VERSION,
            "messages": [{"role": "system", "content": kern["system"]},
                         {"role": "user", "content": kern["task_prompt"]},
                         {"role": "assistant", "content": f"```{f}\n{kern['code'].rstrip()}\n```"}],
            "meta": _meta(kern, KERNEL_META)}


def note_record(pair: dict) -> dict:
    return {"id": pair["id"], "category": pair["category"], "task": pair["task"], "lang": pair["lang"],
            "arch": pair["arch"], "error": pair["error"] or pair["feedback"], "note": pair["explanation"].strip(),
            "fixed_code": pair["fixed_code"], "failed_code": pair["failed_code"],
            "fixed_category": pair["fixed_category"], "origin": pair["origin"], "explained_by": pair["explained_by"]}


def _parquet(rows: list[dict], path: Path) -> bool:
    try:
        import pandas as pd
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    frame = pd.DataFrame([{"id": r["id"], "format": r["format"], "format_version": r["format_version"],
                           "messages": r["messages"], "meta": json.dumps(r["meta"], sort_keys=True, default=str)}
                          for r in rows], columns=["id", "format", "format_version", "messages", "meta"])
    tmp = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)
    return True


def _counts(rows, key) -> dict:
    return dict(sorted(Counter(C.bucket_name(key(r)) for r in rows).items()))


def export(folder: Path, out: Path, *, require_explanation: bool = True, formats=("chat",),
           reasoning_model: str | None = None, max_tokens: int | None = None,
           tokenizer: str = "litellm:gpt-4o") -> dict:
    from xlang.fixit import formats as F  # export -> formats/recipe only: they read the shared parts from common
    from xlang.fixit.recipe import _records, write_dataset

    formats = F.check_formats(formats)
    layouts = [f for f in formats if f != "chat"]
    if layouts and not reasoning_model:
        from xlang.errors import XlangError

        raise XlangError(f"--format {', '.join(layouts)}: the answer is a reasoning trace in <think>: name the "
                         f"teacher that wrote it with --reasoning-model (xlang fixit reason)")
    counter = F.TokenCounter(tokenizer) if max_tokens or layouts else None
    manifest = C.read_json(folder / MANIFEST)
    pairs = C.read_jsonl(folder / PAIRS)
    kernels = C.read_jsonl(folder / KERNELS, missing_ok=True)
    usable = [p for p in pairs if p.get("explanation") or not require_explanation]
    too_long = {"fixit": 0, "kernelgen": 0}
    if max_tokens:
        def fits(kind, messages):
            long = counter.count(messages) > max_tokens
            too_long[kind] += long
            return not long

        usable = [p for p in usable if fits("fixit", fixit_record(p)["messages"])]
        kernels = [k for k in kernels if fits("kernelgen", kernelgen_record(k)["messages"])]
    extra = {}
    for kind, mode, rows in (("fixit", "fix", pairs), ("kernelgen", "direct", C.read_jsonl(folder / KERNELS,
                                                                                           missing_ok=True))):
        if not layouts:
            break
        ds = {"name": kind, "mode": mode, "reasoning": reasoning_model, "formats": layouts}
        kept, messages, tokens, left = _records(rows, ds, counter, max_tokens)
        files = write_dataset(out / kind, ds, kept, messages, tokens, tokenizer)
        extra[kind] = {"files": {f: f"{kind}/{name}" for f, name in files.items()}, "records": len(kept),
                       "no_trace": len(left["no_trace"]), "too_long": len(left["too_long"])}
    if "sharegpt" in layouts:
        C.write_json(out / "dataset_info.json", {**F.dataset_info("xlang_fixit", "fixit/sharegpt.json"),
                                                 **F.dataset_info("xlang_kernelgen", "kernelgen/sharegpt.json")})
    fixit = [fixit_record(p) for p in usable]
    kernelgen = [kernelgen_record(k) for k in kernels]
    notes = [note_record(p) for p in pairs if p.get("explanation")]
    out.mkdir(parents=True, exist_ok=True)
    C.write_jsonl(out / "fixit.jsonl", fixit)
    C.write_jsonl(out / "kernelgen.jsonl", kernelgen)
    C.write_jsonl(out / "notes.jsonl", notes)
    parquet = _parquet(fixit, out / "fixit.parquet") and _parquet(kernelgen, out / "kernelgen.parquet")
    from xlang import HARNESS_VERSION, __version__

    def versions(rows, *keys):
        return sorted({str(r.get(k)) for r in rows for k in keys if r.get(k) is not None})

    card = {
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "format_version": FORMAT_VERSION,
        "xlang": __version__, "harness": HARNESS_VERSION,
        "files": {"fixit": "fixit.jsonl", "kernelgen": "kernelgen.jsonl", "notes": "notes.jsonl",
                  "parquet": ["fixit.parquet", "kernelgen.parquet"] if parquet else []},
        "counts": {"fixit": len(fixit), "kernelgen": len(kernelgen), "notes": len(notes), "pairs": len(pairs),
                   "pairs_without_explanation": len(pairs) - len(notes),
                   "pairs_left_out": len(pairs) - len(usable)},
        "buckets": {"fixit": _counts(usable, C.bucket_key),
                    "fixit_by_origin": dict(sorted(Counter(p["origin"] for p in usable).items())),
                    "kernelgen": _counts(kernels, lambda r: C.bucket_key(r, False))},
        "sources": {"stores": manifest["stores"]},
        "models": {"trajectories": sorted({p["model"] for p in usable} | {k["model"] for k in kernels}),
                   "fixes": sorted({p["fix_model"] for p in usable}),
                   "teacher": sorted({p["fix_model"] for p in usable if p["origin"] == "repair"}),
                   "explanations": sorted({p["explained_by"] for p in usable if p.get("explained_by")})},
        "versions": {"harness": versions(usable + kernels, "harness_version", "fix_harness_version"),
                     "xlang": versions(usable + kernels, "xlang_version")},
        "collection": {k: manifest.get(k) for k in ("accept", "categories", "cap", "dedup", "dedup_method", "seed",
                                                    "found", "after_dedup", "kept", "buckets")},
        "repairs": manifest.get("repairs") or [],
        "explain": manifest.get("explain") or [],
        "require_explanation": require_explanation,
        "layouts": {"formats": formats, "reasoning_model": reasoning_model, "max_tokens": max_tokens,
                    "tokenizer": tokenizer if counter else None, "chat_too_long": too_long, **extra},
    }
    C.write_json(out / "datacard.json", card)
    C.write_text(out / "DATACARD.md", datacard_markdown(card))
    return card


def datacard_markdown(card: dict) -> str:
    c = card["counts"]
    lines = ["# Fixit data card", "",
             f"xlang {card['xlang']} (harness {card['harness']}), format {card['format_version']}, "
             f"made {card['created_at']}.", "",
             f"- Fixit records: {c['fixit']} (pairs {c['pairs']}, left out for want of an explanation "
             f"{c['pairs_left_out']})", f"- KernelGen records: {c['kernelgen']}", f"- notes: {c['notes']}", "",
             "## Fixit per bucket (category / task / lang / arch)", ""]
    lines += [f"- {k}: {v}" for k, v in card["buckets"]["fixit"].items()] or ["- none"]
    lines += ["", "## KernelGen per bucket (task / lang / arch)", ""]
    lines += [f"- {k}: {v}" for k, v in card["buckets"]["kernelgen"].items()] or ["- none"]
    lines += ["", "## Sources", ""]
    lines += [f"- {s['path']} (sha256 {s['sha256'][:12]}…, {s['runs']} runs, {s['turns']} turns)"
              for s in card["sources"]["stores"]]
    lines += ["", "## Models", ""] + [f"- {k}: {', '.join(v) or '-'}" for k, v in card["models"].items()]
    col = card["collection"]
    lines += ["", "## Collection", "",
              f"- accept: {col['accept']}; cap per bucket: {col['cap']}; dedup: {col['dedup']} ({col['dedup_method']})",
              f"- found {col['found']}, after dedup {col['after_dedup']}, kept {col['kept']}",
              f"- verdict harness versions: {', '.join(card['versions']['harness']) or 'not recorded'}"]
    lay = card.get("layouts") or {}
    if lay.get("max_tokens"):
        lines.append(f"- length filter: {lay['max_tokens']} tokens ({lay['tokenizer']}); chat records left out as too "
                     f"long: {lay['chat_too_long']}")
    for kind in ("fixit", "kernelgen"):
        if lay.get(kind):
            x = lay[kind]
            lines.append(f"- {kind} layouts {', '.join(x['files'].values())}: {x['records']} records, reasoning by "
                         f"{lay['reasoning_model']} ({x['no_trace']} rows without its trace, {x['too_long']} too long)")
    return "\n".join(lines) + "\n"
