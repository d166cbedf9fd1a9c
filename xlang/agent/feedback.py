"""What goes back to the model after a turn: one category and the detail it can act on.

The profiler's Verdict fields (correctness, memcheck, executed, timing) are read defensively: whatever of the
documented content is there is shown, and verdict.detail (written for a person or a model) always is.
"""

from __future__ import annotations

import json

from xlang import verdict as V
from xlang.agent.buildinfo import memcheck_source_lines, resources_text
from xlang.suites import worst_text
from xlang.task import ENTRY_POINT

# Best first: what "best candidate" means when no candidate is ok.
RANK = (V.OK, V.NOT_EXECUTED, V.MEMORY_ERROR, V.STATIC_OK, V.HOST_COMPUTE, V.INCORRECT, V.TIMEOUT, V.RUNTIME_ERROR,
        V.MISSING_INSTRUCTIONS, V.FORBIDDEN_CALL, V.COMPILE_ERROR, V.NO_CODE, V.HARNESS_ERROR)

HEADLINES = {
    V.NO_CODE: "no code block found",
    V.COMPILE_ERROR: "compile error",
    V.FORBIDDEN_CALL: "forbidden call",
    V.MISSING_INSTRUCTIONS: "required instruction families missing (static SASS census)",
    V.RUNTIME_ERROR: "runtime error",
    V.TIMEOUT: "timeout",
    V.INCORRECT: "incorrect result",
    V.HOST_COMPUTE: "computed off the GPU",
    V.MEMORY_ERROR: "memory error: an access outside the buffers (a guard-range fault, a changed canary, or memcheck)",
    V.NOT_EXECUTED: "required instructions not executed at run time",
    V.OK: "correct",
    V.STATIC_OK: "compiled with the required instruction families (not run)",
    V.HARNESS_ERROR: "not judged: the harness could not judge this candidate fairly (not your code's doing)",
}


def rank_key(category: str | None, speedup: float | None, verdict: dict | None = None) -> tuple:
    """Sort key, smaller is better: correct with the target instructions, then correct (read from the verdict
    when given, else from the category), then the category's rank, then higher speedup. A candidate that is
    correct without the required families (missing_instructions) ranks above one that is not correct."""
    sc = V.scores(verdict if verdict else {"category": category or ""})
    tier = 0 if sc["correct_with_target"] else 1 if sc["correct"] else 2
    r = RANK.index(category) if category in RANK else len(RANK)
    return (tier, r, -(speedup or 0.0))


def _fmt(x, digits=3) -> str:
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _dig(d, *paths):
    """First value found at any of the dotted paths in a nested dict."""
    for path in paths:
        cur = d
        for part in path.split("."):
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                cur = None
                break
        if cur is not None:
            return cur
    return None


def _compact(obj, limit: int = 1500) -> str:
    text = json.dumps(obj, default=str, indent=None)
    return text if len(text) <= limit else text[:limit] + " ..."


def census_text(build: dict | None) -> str:
    census = (build or {}).get("census") or {}
    if not census:
        return ""
    lines = [f"Required: {', '.join(census.get('required', [])) or '-'}; present: "
             f"{', '.join(census.get('present', [])) or 'none'}; missing: {', '.join(census.get('missing', [])) or 'none'}."]
    for k in census.get("kernels", [])[:8]:
        fams = ", ".join(f"{n}={c}" for n, c in k.get("families", {}).items() if c) or "no architecture family"
        top = sorted(k.get("opcodes", {}).items(), key=lambda kv: -kv[1])[:8]
        lines.append(f"- kernel {k.get('name', '?')[:80]}: {fams}; {k.get('instructions', 0)} SASS instructions "
                     f"(most frequent: {', '.join(f'{o} {n}' for o, n in top)})")
    ptx = {n: c for n, c in (census.get("ptx") or {}).items() if c}
    lines.append(f"PTX evidence: {', '.join(f'{n}={c}' for n, c in ptx.items()) or 'none'}.")
    return "\n".join(lines)


def timing_text(timing: dict | None) -> str:
    if not timing:
        return ""
    ms = _dig(timing, "ms", "median_ms", "candidate_ms", "candidate.median_ms", "candidate.ms")
    base = _dig(timing, "baseline_ms", "baseline.median_ms", "baseline.ms")
    tflops = _dig(timing, "tflops", "tflop_s", "candidate_tflops", "candidate.tflops")
    speedup = _dig(timing, "speedup")
    parts = []
    if ms is not None:
        parts.append(f"time {_fmt(ms)} ms")
    if tflops is not None:
        parts.append(f"{_fmt(tflops)} TFLOP/s")
    if base is not None:
        parts.append(f"baseline {_fmt(base)} ms")
    if speedup is not None:
        parts.append(f"speedup {_fmt(speedup)}x over the baseline")
    return ", ".join(parts) if parts else _compact(timing)


def output_text(output: dict | None, lines: int = 20, chars: int = 1500) -> str:
    """What the candidate's process printed at run time (verdict.output), shortened: the last `lines` lines and
    `chars` characters of each stage's stderr and stdout, a text already shown in an earlier stage left out."""
    blocks = [f"What your code printed on {stream} ({stage} stage, the end):\n```\n{text}\n```"
              for stage, stream, text in V.output_tails(output, lines, chars)]
    return "\n\n".join(blocks)


def feedback_text(verdict: V.Verdict, *, turn_idx: int, turns: int, backend, arch, extract_note: str = "",
                  best: tuple[int, str, float | None] | None = None, code: str | None = None) -> str:
    """The message sent after turn turn_idx. best: (turn, category, speedup) of the best candidate so far;
    code: the candidate (memcheck's source lines are quoted from it)."""
    cat = verdict.category
    sc = V.scores(verdict.to_dict())
    fence = backend.fences[0] if backend.fences else ""
    head = f"Result of turn {turn_idx}/{turns}: **{cat}** ({HEADLINES.get(cat, cat)})."
    body: list[str] = []
    ask = "Fix it and reply with the complete corrected source in one ```{fence} block."
    if cat == V.NO_CODE:
        body.append(extract_note or "No code block was found in your reply.")
        ask = (f"Reply with the complete {backend.title} source file in one ```{fence} code block that defines "
               f"`{ENTRY_POINT}`.")
    elif cat == V.COMPILE_ERROR:
        body.append(f"The build for {arch.sm} failed. Compiler output:\n```\n{(verdict.detail or '').strip()}\n```")
    elif cat == V.FORBIDDEN_CALL:
        body += [verdict.detail or "The source calls something that is not allowed.",
                 "The result must come from your own kernels."]
    elif cat == V.MISSING_INSTRUCTIONS:
        body += [f"It compiled, but the SASS for {arch.sm} lacks required instruction families. "
                 + (verdict.detail or ""), census_text(verdict.build)]
        if sc["correct"]:
            t = timing_text(verdict.timing)
            body.append("At run time it computed the correct result" + (f" ({t})" if t else "")
                        + ", but without the required instructions it does not count as correct for this target.")
        ask = ("Rewrite the kernel so that it uses the missing families (see the architecture section) and reply "
               f"with the complete source in one ```{fence} block.")
    elif cat in (V.RUNTIME_ERROR, V.TIMEOUT):
        body.append(verdict.detail or "The candidate failed at run time.")
    elif cat == V.INCORRECT:
        body.append(verdict.detail or "The output does not match the reference.")
        if verdict.correctness:
            body.append("Correctness check: " + _compact(verdict.correctness))
    elif cat == V.HOST_COMPUTE:
        body += [verdict.detail or "The outputs match, but the GPU did not compute them.",
                 "The kernel must compute the result on the GPU: your own kernels must do the task's arithmetic. "
                 "Copying inputs to the host and computing there (numpy, .cpu(), a host loop, cudaMemcpy back "
                 "and forth) does not count as correct, whatever the outputs."]
        ask = ("Compute the whole result in your GPU kernels and reply with the complete source in one "
               f"```{fence} block.")
    elif cat == V.MEMORY_ERROR:
        body.append(verdict.detail or "compute-sanitizer memcheck reported errors.")
        lines = memcheck_source_lines(verdict.memcheck, code)
        if lines:
            body.append(lines)
        if verdict.memcheck:
            body.append("memcheck: " + _compact(verdict.memcheck))
    elif cat == V.NOT_EXECUTED:
        body.append(verdict.detail or "The required instructions are in the binary but were not executed.")
        if verdict.executed:
            body.append("Executed (threads, per family): " + _compact(verdict.executed))
        ask = f"Make the work go through the required instructions and reply with the complete source in one ```{fence} block."
    elif cat == V.OK:
        t = timing_text(verdict.timing)
        body.append(f"Correct and executing the required instructions{': ' + t if t else ''}.")
        if verdict.detail:
            body.append(verdict.detail)
        summary = (getattr(verdict, "suite", None) or {}).get("summary")
        if summary and summary.get("geomean_speedup"):  # --suite: how it does across the suite's shapes
            body.append(f"Across the {summary['timed']} shapes of suite {verdict.suite['name']}: geomean speedup "
                        f"{_fmt(summary['geomean_speedup'])}x over the baseline, worst {worst_text(summary)}.")
        ask = (f"Make it faster (tiling, pipelining depth, warp specialisation, persistent scheduling, epilogue). "
               f"Reply with the complete improved source in one ```{fence} block.")
    elif cat == V.STATIC_OK:
        body += [f"It compiled for {arch.sm} and its SASS contains the required families "
                 f"({', '.join(((verdict.build or {}).get('census') or {}).get('present', [])) or 'all'}). "
                 f"Runtime evaluation: {verdict.runtime_note or 'not run'}; correctness and speed are unverified.",
                 census_text(verdict.build)]
        ask = (f"Check correctness carefully (tails, every output element written) and make it faster. "
               f"Reply with the complete improved source in one ```{fence} block.")
    else:
        body.append(verdict.detail or "")
    if sc["compiled"] and cat not in (V.COMPILE_ERROR, V.FORBIDDEN_CALL):
        body.append(resources_text((verdict.build or {}).get("resources")))
    body.append(output_text(verdict.output))
    if verdict.runtime_note and cat in (V.RUNTIME_ERROR, V.TIMEOUT, V.INCORRECT, V.HOST_COMPUTE, V.MEMORY_ERROR,
                                        V.NOT_EXECUTED):
        body.append(f"Runtime: {verdict.runtime_note}")
    if best is not None and best[0] != turn_idx:
        b_turn, b_cat, b_speed = best
        body.append(f"Best so far: turn {b_turn} ({b_cat}{f', speedup {_fmt(b_speed)}x' if b_speed else ''}).")
    return "\n\n".join([head, *[b for b in body if b], ask.format(fence=fence)])
