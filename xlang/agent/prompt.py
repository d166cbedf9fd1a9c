"""Prompt assembly (each part from its owner) and code extraction from a model's reply.

Turn 1:  [system, user(task + architecture + language section + architecture docs + reply format)]
Turn n:  what the context policy (CONTEXT_POLICIES, `--context`) keeps of the earlier turns:
  trimmed      (default) the same two, then for each earlier turn an assistant message (the reply) and a user
               message (its feedback); replies older than the last KEEP_FULL_REPLIES are shortened to a one-line
               stub so the context stays bounded; the latest code is always there in full
  full         every earlier reply and feedback in full
  latest-pair  only the latest reply and its feedback after the first two messages
  single-user  one user message: the task, then the latest reply and its feedback (no assistant messages)

Prompt variants (PROMPT_VARIANTS, `--prompt-variants`): named rewordings of the first user message's closing
request, one per sample (sample k gets variant k mod the number of variants), recorded with the sample.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from xlang import resources
from xlang.task import ENTRY_POINT, format_shape

DOCS_LEVELS = ("none", "params", "templates", "contracts")
KEEP_FULL_REPLIES = 2
CONTEXT_POLICIES = ("trimmed", "full", "latest-pair", "single-user")

# Built-in prompt variants: text added at the end of the first user message ("base" adds nothing).
PROMPT_VARIANTS = {
    "base": "",
    "plan": ("## Before the code\nStart with a short plan (at most ten lines): the tile shape, the pipeline depth, "
             "which of the required instructions move the data and which do the math, and what each warp or warp "
             "group does. Then give the code."),
    "terse": ("## Reply length\nReply with the code block only: no explanation before or after it. Put anything "
              "a reader must know in comments."),
}

SYSTEM = (
    "You are an expert GPU kernel engineer. You write correct, fast kernels that use the target architecture's "
    "own instructions (its tensor-core MMA, its asynchronous copy engines, its barriers) rather than generic code. "
    "Each of your replies must contain the complete source of one file in a single fenced code block; you may "
    "reason briefly before it. Your code is compiled for the target, its SASS is inspected for the required "
    "instruction families, and it is checked against the reference and timed against the vendor library."
)


# ------------------------------------------------------------------------------------------------ parts


# Every language's prompt gets the contract from task_section, so the rule is said once, here (issue 40).
GPU_COMPUTE_RULE = ("- Compute the result on the GPU, in your own kernels: a candidate whose kernels execute far "
                    "less arithmetic than the task needs (the outputs computed on the host, e.g. with numpy, "
                    ".cpu() / .tolist(), or a host loop between cudaMemcpy calls) is judged `host_compute` and "
                    "is not correct, whatever its outputs.")


def task_section(task, shape: dict) -> str:
    c = task.contract
    lines = [
        f"# Task: {task.title} (`{task.name}`)",
        "",
        "## PyTorch reference (computed in fp32)",
        "```python",
        task.reference_source().rstrip(),
        "```",
        "",
        "## Contract",
        "The entry point takes the tensors in this order, then the sizes (destination-passing: the harness "
        "allocates the outputs).",
        f"- Python languages: `{c.python_signature()}`",
        f"- CUDA C++: `{c.c_signature()}`",
        "",
        c.describe_tensors(),
        "",
        c.rules,
        "- Launch every kernel from the calling thread: work started on another thread cannot be tied to the "
        "call by the profiler and earns no credit for executed instructions.",
        GPU_COMPUTE_RULE,
        "",
        "## Shapes and checks",
        f"- Timed at the default shape {format_shape(shape)}; correctness is also checked at shapes drawn at "
        "random for each evaluation from everything the contract allows (tails included), with inputs of "
        "several value distributions (not only N(0, 1)).",
        f"- Tolerance per element (as torch.allclose against the fp32 reference): atol={task.tolerance['atol']}, "
        f"rtol={task.tolerance['rtol']}"
        + "".join(f"; {name}: atol={t['atol']}, rtol={t['rtol']}" for name, t in task.output_tolerance.items())
        + (" (for inputs scaled by powers of two, atol scales with the outputs)." if task.kind_output_scale else ".")
        + (f" Plus, per element, the task's error bound: |got - ref| <= atol + rtol * |ref| + bound, where "
           f"{task.error_bound_rule}." if task.error_bound is not None else ""),
        f"- Baseline: {task.baseline_name}; work at the default shape: {task.flops(shape) / 1e9:.1f} GFLOP.",
    ]
    return "\n".join(lines)


def arch_section(arch, required: tuple[str, ...]) -> str:
    from xlang.archs import families

    fams = families()
    f = arch.figures
    lines = [
        f"## Target architecture: {arch.title} (`{arch.sm}`, compute capability {arch.compute_capability / 10:.1f})",
        f"- {f.get('sms', '?')} SMs, {f.get('smem_per_block_kib', '?')} KiB shared memory per block, "
        f"{f.get('registers_per_sm', '?')} registers per SM, {f.get('l2_mib', '?')} MiB L2"
        + (f", {f['tmem_per_sm_kib']} KiB tensor memory per SM" if "tmem_per_sm_kib" in f else "")
        + f"; peak dense bf16 {f.get('peak_dense_bf16_tflops', '?')} TFLOP/s, {f.get('mem_bandwidth_tbs', '?')} TB/s.",
        "- Required instruction families (your kernel must contain them in its SASS and execute them at run time):",
    ]
    lines += [f"  - `{name}`: {fams[name].doc}" for name in required]
    return "\n".join(lines)


@dataclass
class DocFile:
    rel: str  # path relative to arch_docs/
    text: str | None  # None: missing


def doc_files(arch, lang: str, level: str) -> list[DocFile]:
    """The architecture docs for a level: params = params.md; templates = + the language's own files
    (Backend.doc_files: e.g. templates/<lang>.md, or the CUDA headers); contracts = + contracts.md."""
    from xlang.backend import get_backend

    if level not in DOCS_LEVELS:
        raise ValueError(f"unknown docs level '{level}' (known: {', '.join(DOCS_LEVELS)})")
    if level == "none":
        return []
    root = resources.folder("arch_docs")
    wanted: list[str] = [f"{arch.docs}/params.md"]
    if level in ("templates", "contracts"):
        wanted += get_backend(lang).doc_files(arch)
    if level == "contracts":
        wanted.append(f"{arch.docs}/contracts.md")
    out = []
    for rel in wanted:
        path = root / rel
        out.append(DocFile(rel, path.read_text() if "*" not in rel and path.is_file() else None))
    return out


def docs_section(arch, lang: str, level: str) -> str:
    if level == "none":
        return ""
    files = doc_files(arch, lang, level)
    lines = [f"## Architecture documentation ({arch.docs}, level '{level}')"]
    for f in files:
        if f.text is None:
            lines.append(f"(Note: arch_docs/{f.rel} is not available; this part of the documentation "
                         "is missing.)")
            continue
        lines.append("")
        if f.rel.endswith(".cuh"):
            name = Path(f.rel).name
            lines += [f"### {f.rel} (on the include path: `#include \"{name}\"`)", "```cuda", f.text.rstrip(), "```"]
        else:
            lines += [f"### {f.rel}", f.text.rstrip()]
    return "\n".join(lines)


def reply_format(backend) -> str:
    fence = backend.fences[0] if backend.fences else ""
    return (f"## Reply\nReply with the complete {backend.title} source file in one ```{fence} code block that "
            f"defines `{ENTRY_POINT}`. Only the code block is compiled.")


def first_prompt(task, arch, backend, shape: dict, required: tuple[str, ...], level: str) -> str:
    parts = [task_section(task, shape), arch_section(arch, required), backend.prompt_section(task, arch).strip(),
             docs_section(arch, backend.name, level), reply_format(backend)]
    return "\n\n".join(p for p in parts if p)


def stub_reply(turn_idx: int, category: str | None) -> str:
    return f"(my reply of turn {turn_idx} is omitted here to save context; it was judged: {category or 'n/a'})"


def parse_prompt_variants(spec: str | None) -> dict[str, str]:
    """'base,plan' or 'base,mine=path/to/text.md' -> {name: text}, in order. A NAME=FILE entry adds a variant
    whose text is that file's."""
    from xlang.errors import XlangError

    out: dict[str, str] = {}
    for item in [x.strip() for x in (spec or "base").split(",") if x.strip()]:
        name, _, path = item.partition("=")
        name = name.strip()
        if path:
            file = Path(path.strip()).expanduser()
            if not file.is_file():
                raise XlangError(f"prompt variant '{name}': no such file {file}")
            out[name] = file.read_text().strip()
        elif name in PROMPT_VARIANTS:
            out[name] = PROMPT_VARIANTS[name]
        else:
            raise XlangError(f"unknown prompt variant '{name}' (built in: {', '.join(PROMPT_VARIANTS)}; "
                             "or NAME=FILE for your own text)")
    return out or {"base": ""}


def with_variant(first_user: str, variant_text: str) -> str:
    return f"{first_user}\n\n{variant_text}" if variant_text else first_user


def build_messages(first_user: str, history: list[dict], context: str = "trimmed") -> list[dict]:
    """history: earlier turns in order, each {turn_idx, reply, feedback, category}; context: a CONTEXT_POLICIES."""
    if context not in CONTEXT_POLICIES:
        raise ValueError(f"unknown context policy '{context}' (known: {', '.join(CONTEXT_POLICIES)})")
    system = {"role": "system", "content": SYSTEM}
    if context == "single-user":
        text = first_user
        if history:
            last = history[-1]
            text += (f"\n\n## Your previous reply (turn {last['turn_idx']})\n\n{last.get('reply') or '(empty reply)'}"
                     f"\n\n## Its result\n\n{last.get('feedback') or ''}")
        return [system, {"role": "user", "content": text}]
    messages = [system, {"role": "user", "content": first_user}]
    shown = history[-1:] if context == "latest-pair" else history
    for i, h in enumerate(shown):
        keep = context != "trimmed" or i >= len(shown) - KEEP_FULL_REPLIES
        messages.append({"role": "assistant",
                         "content": (h.get("reply") or "(empty reply)") if keep else stub_reply(h["turn_idx"],
                                                                                              h.get("category"))})
        messages.append({"role": "user", "content": h.get("feedback") or ""})
    return messages


# ------------------------------------------------------------------------------------------- extraction

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)


@dataclass
class Extracted:
    code: str | None
    note: str = ""  # why no code was found, for the feedback


def extract_code(reply: str | None, backend) -> Extracted:
    """The candidate in a reply: among fenced blocks in the backend's languages (or untagged), the last one
    that defines the entry point; else the longest block in the language."""
    text = reply or ""
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]
    fences = {f.lower() for f in backend.fences}
    tagged = [code for tag, code in blocks if tag in fences]
    untagged = [code for tag, code in blocks if not tag]
    for pool in (tagged, untagged):
        with_entry = [c for c in pool if ENTRY_POINT in c]
        if with_entry:
            return Extracted(with_entry[-1])
    if tagged:
        return Extracted(max(tagged, key=len))
    fence = backend.fences[0] if backend.fences else ""
    if not text.strip():
        return Extracted(None, "The reply was empty.")
    if text.count("```") % 2 == 1:
        return Extracted(None, "The reply ends inside an unterminated code block (it may have hit the output "
                               "token limit): keep the reasoning short and the whole file in one closed block.")
    if blocks:
        tags = ", ".join(sorted({t or "(untagged)" for t, _ in blocks}))
        return Extracted(None, f"The reply has code blocks ({tags}) but none in {backend.title} (```{fence}) "
                               f"defining `{ENTRY_POINT}`.")
    return Extracted(None, "The reply contains no fenced code block.")
