"""`xlang fixit reason`: a reasoning teacher writes the reasoning trace that leads to each kept kernel.

For a pair (Fixit) the teacher is shown the task, the failed candidate, what the judge said and the fixed candidate,
and writes the reasoning an engineer would go through from the failure and the feedback to the fix; for a final
kernel (KernelGen, direct generation) the task and the kernel, and the reasoning that designs it. The trace is
written as if the fix were not yet known (it becomes the `<think>` part of the answer in the ptxbench format,
xlang.fixit.formats), at most --max-words words: a reply over the bound is not cut, it is left out and counted
(over_limit), so every stored trace is whole. A reply that holds the layout's own tags (<think>, </think>) is left
out too (it would break the record). Traces are kept per teacher model (row["reasoning"][model]), so one collection
serves datasets whose reasoning different teachers wrote.
"""

from __future__ import annotations

import re
from pathlib import Path

from xlang.errors import XlangError
from xlang.fixit import common as C
from xlang.fixit.collect import KERNELS, MANIFEST, PAIRS

DEFAULT_MAX_WORDS = 600
SYSTEM = ("You are an expert GPU kernel engineer. You write the reasoning a careful engineer goes through before "
          "writing a kernel: what the task and the hardware need, what went wrong and why, and what to change. "
          "Plain prose and short lists; no final code.")
_TAGS = re.compile(r"</?think>", re.I)


def words(text: str) -> int:
    return len(text.split())


def fix_messages(pair: dict, max_words: int) -> list[dict]:
    f = C.fence(pair["lang"])
    user = (C.failure_context(pair)
            + f"## The corrected candidate (for you only)\n\n```{f}\n{pair['fixed_code'].rstrip()}\n```\n\n"
            f"Write the reasoning that goes from the failed candidate and the judge's feedback to the corrected one, "
            f"as the engineer who is about to write the correction: read the feedback, find the cause, decide the "
            f"change. Do not say that you have seen the corrected candidate and do not copy it. At most {max_words} "
            f"words.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def direct_messages(kern: dict, max_words: int) -> list[dict]:
    f = C.fence(kern["lang"])
    user = (f"{kern['task_prompt']}\n\n## A correct kernel for this task (for you only)\n\n```{f}\n"
            f"{kern['code'].rstrip()}\n```\n\nWrite the reasoning that leads to this kernel, as the engineer who is "
            f"about to write it: what the task and the architecture need, the decomposition, the instructions used "
            f"and the pitfalls avoided. Do not say that you have seen the kernel and do not copy it. At most "
            f"{max_words} words.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def reason(folder: Path, model: str, *, max_words: int = DEFAULT_MAX_WORDS, what: tuple[str, ...] = ("pairs", "kernels"),
           force: bool = False, limit: int | None = None, on_row=None) -> dict:
    """Write traces by `model` for the pairs and / or kernels of a fixit folder that have none by it (all with
    force). Returns {rows, written, over_limit, rejected, errors, cost_usd}; the run is noted in collect.json."""
    from xlang.agent.llm import LLMClient, check_environment

    if max_words < 1:
        raise XlangError("--max-words must be at least 1")
    unknown = [w for w in what if w not in ("pairs", "kernels")]
    if unknown:
        raise XlangError(f"reason: {', '.join(unknown)}: name pairs and / or kernels")
    manifest = C.read_json(folder / MANIFEST)
    files = {"pairs": (folder / PAIRS, fix_messages), "kernels": (folder / KERNELS, direct_messages)}
    check_environment(model)
    client = LLMClient(model)
    stats = {"rows": 0, "written": 0, "over_limit": 0, "rejected": 0, "errors": 0, "cost_usd": 0.0}
    budget = limit
    for name in what:
        path, make = files[name]
        rows = C.read_jsonl(path, missing_ok=True)
        for row in rows:
            if budget is not None and budget <= 0:
                break
            if not force and model in (row.get("reasoning") or {}):
                continue
            if budget is not None:
                budget -= 1
            stats["rows"] += 1
            reply = client.complete(make(row, max_words))
            stats["cost_usd"] += reply.cost_usd or 0.0
            text = (reply.text or "").strip()
            n = words(text)
            problem = (reply.error or ("empty reply" if not text else None)
                       or (f"{n} words, over the bound of {max_words}" if n > max_words else None)
                       or ("holds a <think> tag" if _TAGS.search(text) else None))
            if problem:
                stats["errors" if reply.error or not text else "over_limit" if n > max_words else "rejected"] += 1
                if on_row:
                    on_row(name, row, problem)
                continue
            row.setdefault("reasoning", {})[model] = {"text": text, "words": n, "max_words": max_words,
                                                      "hidden_reasoning": bool(reply.reasoning)}
            stats["written"] += 1
            C.write_jsonl(path, rows)  # after each trace: an interrupted run keeps what it had
            if on_row:
                on_row(name, row, None)
    manifest = C.read_json(folder / MANIFEST)  # as written by now (repair may have run in between)
    manifest.setdefault("reasoning", [])
    manifest["reasoning"].append({"model": model, "max_words": max_words, "what": list(what), **stats})
    C.write_json(folder / MANIFEST, manifest)
    return stats
