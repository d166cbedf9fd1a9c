"""`xlang fixit repair`: a teacher model repairs the failures that have no fix in the stores.

Each unfixed failure (unfixed.jsonl) gets up to --attempts conversations with the teacher (any litellm model), each
of up to --turns turns: the first message holds the task prompt, the failed code and the feedback its turn got;
after a reply that does not count, the judge's feedback on it (xlang.agent.feedback.feedback_text, the text the
agent loop sends) is the next message, so the teacher repairs with what the judge said, as a model does in the
loop. Every reply is judged by the agent loop's own judge (xlang.agent.runtime.assess: build, static census, then
the runtime from --profiler, the same profiler path as `xlang run`) before it counts: it becomes a pair only when
its verdict fixes the failure per --accept (`ok`, `static_ok`, or `category`: it passed the stage that failed).
Every reply, accepted or not, is appended to repairs.jsonl with its attempt, turn, verdict and the feedback it got;
failures already attempted there are skipped, so a repair run can be resumed.
"""

from __future__ import annotations

import time
from pathlib import Path

from xlang.errors import XlangError
from xlang.fixit import common as C
from xlang.fixit.collect import KERNELS, MANIFEST, PAIRS, REPAIRS, UNFIXED

def repair_messages(failure: dict) -> list[dict]:
    f = C.fence(failure["lang"])
    user = (f"{failure['task_prompt']}\n\n## A candidate that failed\n\n```{f}\n{failure['failed_code'].rstrip()}\n```"
            f"\n\n## What the judge said ({failure['category']})\n\n{failure['feedback'] or failure['error']}\n\n"
            f"Repair this candidate: keep what is right, fix what failed, and reply with the complete corrected "
            f"source in one ```{f} block.")
    return [{"role": "system", "content": failure["system"]}, {"role": "user", "content": user}]


def repair(folder: Path, model: str, *, profiler: str = "local", accept: str = "ok", attempts: int = 1,
           turns: int = 1, limit: int | None = None, on_attempt=None) -> dict:
    from xlang.agent import prompt as P
    from xlang.agent.feedback import feedback_text
    from xlang.agent.llm import LLMClient, check_environment
    from xlang.agent.runtime import assess, make_runtime
    from xlang.archs import get_arch
    from xlang.backend import get_backend
    from xlang.task import get_task

    C.check_accept(accept)
    if attempts < 1:
        raise XlangError("--attempts must be at least 1")
    if turns < 1:
        raise XlangError("--turns must be at least 1")
    manifest = C.read_json(folder / MANIFEST)
    failures = C.read_jsonl(folder / UNFIXED)
    done = {r["failure_id"] for r in C.read_jsonl(folder / REPAIRS, missing_ok=True)}
    todo = [f for f in failures if f["id"] not in done]
    if limit is not None:
        todo = todo[:limit]
    check_environment(model)  # before any work: provider, key, endpoint
    client = LLMClient(model)
    runtimes: dict[str, object] = {}
    pairs = C.read_jsonl(folder / PAIRS, missing_ok=True)
    kernels = C.read_jsonl(folder / KERNELS, missing_ok=True)
    stats = {"failures": len(todo), "attempts": 0, "accepted": 0, "rejected": 0, "errors": 0, "cost_usd": 0.0}
    for f in todo:
        arch = get_arch(f["arch"])
        if f["arch"] not in runtimes:
            runtimes[f["arch"]] = make_runtime(profiler, arch)
        runtime = runtimes[f["arch"]]
        task, backend = get_task(f["task"]), get_backend(f["lang"])
        shape = task.shape(f.get("shape") or {})
        fixed = False
        for attempt in range(1, attempts + 1):
            messages = repair_messages(f)
            for turn in range(1, turns + 1):
                stats["attempts"] += 1
                reply = client.complete(messages, seed=attempt)
                stats["cost_usd"] += reply.cost_usd or 0.0
                row = {"failure_id": f["id"], "attempt": attempt, "turn": turn, "turns": turns, "model": model,
                       "reply_model": reply.model, "profiler": profiler, "runtime": runtime.name,
                       "runtime_note": runtime.note, "accept": accept, "targeted": f["category"],
                       "cost_usd": reply.cost_usd, "total_tokens": reply.total_tokens, "created_at": time.time()}
                if reply.error:
                    stats["errors"] += 1
                    C.append_jsonl(folder / REPAIRS, {**row, "accepted": False, "error": reply.error, "category": None})
                    break
                ex = P.extract_code(reply.text, backend)
                workdir = folder / "repair-work" / f["id"] / (f"a{attempt}" if turns == 1 else f"a{attempt}t{turn}")
                j = assess(ex.code, f["lang"], task, arch, shape, runtime, workdir, ex.note, {"seed": attempt})
                v = j.verdict
                ok = ex.code is not None and C.fixes(f["category"], v.category, accept)
                # What the teacher is told next (none after its last turn): the loop's own feedback text.
                feedback = None if ok or turn == turns else feedback_text(
                    v, turn_idx=turn, turns=turns, backend=backend, arch=arch, extract_note=ex.note, code=ex.code)
                C.append_jsonl(folder / REPAIRS, {**row, "accepted": ok, "category": v.category, "detail": v.detail,
                                                  "speedup": v.speedup, "code": ex.code, "verdict": v.to_dict(),
                                                  "feedback": feedback})
                if on_attempt:
                    on_attempt(f, attempt, v.category, ok)
                if not ok:
                    stats["rejected"] += 1
                    if feedback is not None:
                        messages = [*messages, {"role": "assistant", "content": reply.text or ""},
                                    {"role": "user", "content": feedback}]
                    continue
                stats["accepted"] += 1
                _add_repair(f, ex.code, v, model, accept, attempt, turn, runtime, manifest, pairs, kernels)
                fixed = True
                break
            if fixed or reply.error:
                break
        C.write_jsonl(folder / PAIRS, pairs)  # after each failure: an interrupted repair keeps what it had
        C.write_jsonl(folder / KERNELS, kernels)
    history = list(manifest.get("repairs") or [])
    history.append({"model": model, "profiler": profiler, "accept": accept, "attempts": attempts, "turns": turns,
                    "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **stats})
    manifest["repair"] = history[-1]
    manifest["repairs"] = history
    C.write_json(folder / MANIFEST, manifest)
    return stats



def _add_repair(f: dict, code: str, v, model: str, accept: str, attempt: int, turn: int, runtime, manifest: dict,
                pairs: list, kernels: list) -> None:
    """An accepted repair: a pair (the failure and the teacher's code), and a KernelGen kernel when it is ok and no
    near-duplicate of a kept one."""
    harness = (v.fingerprint or {}).get("harness_version")
    pair = {**f, "origin": "repair", "fixed_turn": None, "fixed_code": code, "fixed_category": v.category,
            "fixed_speedup": v.speedup, "fix_model": model, "fix_harness_version": harness,
            "accept": accept, "explanation": None,
            "explained_by": None, "repair_attempt": attempt, "repair_turn": turn, "repair_profiler": runtime.name}
    pair["id"] = C.digest("pair", f["task"], f["lang"], f["arch"], f["failed_code"], code)
    pairs.append(pair)
    if C.kernel_ok(v.category, manifest.get("accept", "ok")):
        kern = {k: f[k] for k in ("store", "run_id", "sample_idx", "task", "lang", "arch", "shape", "model",
                                  "docs_level", "system", "task_prompt", "xlang_version")}
        kern.update(turn=None, category=v.category, code=code, speedup=v.speedup, kernel_model=model,
                    harness_version=harness, origin="repair")
        kern["id"] = C.digest("kernel", f["task"], f["lang"], f["arch"], code)
        dd = C.Deduper(manifest.get("dedup") or 1.0)  # as collect: no near-duplicate of a kept kernel
        for k in kernels:
            dd.remember(C.bucket_key(k, False), k["id"], k["code"])
        if dd.seen(C.bucket_key(kern, False), code) is None:
            kernels.append(kern)
