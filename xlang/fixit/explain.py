"""`xlang fixit explain`: a model writes a short fix note per pair: what was wrong, what changed, why.

The note goes into the pair (explanation, explained_by); pairs that have one are skipped unless --force. The notes
become the Fixit format's explanation and the retrieval notes (notes.jsonl) of `xlang fixit export`.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from xlang.errors import XlangError
from xlang.fixit import common as C
from xlang.fixit.collect import MANIFEST, PAIRS

SYSTEM = ("You are an expert GPU kernel engineer. You write short, precise fix notes that another engineer (or a "
          "model) can apply to a similar failure: what was wrong, what changed, and why the change fixes it.")
MAX_DIFF = 12000


def explain_messages(pair: dict) -> list[dict]:
    f = C.fence(pair["lang"])
    diff = "".join(difflib.unified_diff((pair["failed_code"] or "").splitlines(True),
                                        (pair["fixed_code"] or "").splitlines(True), "failed", "fixed", n=2))
    if len(diff) > MAX_DIFF:
        diff = diff[:MAX_DIFF] + "\n... (diff cut)\n"
    user = (f"Task: {pair['task']} in {pair['lang']} for {pair['arch']}.\n\n"
            f"A candidate failed with **{pair['category']}**. What the judge said:\n\n{pair['feedback'] or pair['error']}"
            f"\n\nThe failed candidate:\n```{f}\n{(pair['failed_code'] or '').rstrip()}\n```\n\n"
            f"A later candidate fixed it ({pair['fixed_category']}). The change (unified diff):\n```diff\n{diff}```\n\n"
            "Write a fix note of at most 120 words: what was wrong, what changed, why that fixes it. Name the error "
            "and the construct involved so the note can be found from a similar error. Plain text, no code block.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def explain(folder: Path, model: str, *, force: bool = False, limit: int | None = None, on_pair=None) -> dict:
    from xlang.agent.llm import LLMClient, check_environment

    pairs = C.read_jsonl(folder / PAIRS)
    todo = [p for p in pairs if force or not p.get("explanation")]
    if limit is not None:
        todo = todo[:limit]
    check_environment(model)
    client = LLMClient(model)
    stats = {"pairs": len(todo), "explained": 0, "errors": 0, "cost_usd": 0.0}
    for p in todo:
        reply = client.complete(explain_messages(p))
        stats["cost_usd"] += reply.cost_usd or 0.0
        text = (reply.text or "").strip()
        if reply.error or not text:
            stats["errors"] += 1
            if on_pair:
                on_pair(p, reply.error or "empty reply")
            continue
        p["explanation"], p["explained_by"] = text, model
        stats["explained"] += 1
        C.write_jsonl(folder / PAIRS, pairs)  # after each note: an interrupted run keeps what it had
        if on_pair:
            on_pair(p, None)
    manifest = C.read_json(folder / MANIFEST)
    manifest.setdefault("explain", [])
    if not isinstance(manifest["explain"], list):
        raise XlangError(f"{folder / MANIFEST}: 'explain' is not a list")
    manifest["explain"].append({"model": model, **stats})
    C.write_json(folder / MANIFEST, manifest)
    return stats
