"""What the candidate's kernels executed, from Nsight Compute's pages (parsed by ncu.py): the instruction families
per kernel (summarize), the FLOPs priced from the executed SASS, the required tensor-core family's share of them
(work_check), and whether the GPU computed the answer at all (gpu_compute_check)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from xlang.archs import TensorCoreOpcode, tensor_core_opcodes
from xlang.archs import families as all_families  # `families` is a parameter name here
from xlang.profiler.ncu import KernelProfile, forbidden_reason, is_candidate_kernel

# ---- math accounting: FLOPs from the executed SASS ---------------------------------------------------
#
# Issue 12, item 4: "executed" must mean the work. Each math instruction of the source page is priced in
# FLOPs per PREDICATED-ON THREAD execution (the page's "Predicated-On Thread Instructions Executed"), so a
# warp-wide MMA is divided by the 32 threads and a warpgroup-wide one by the 128 threads that issue it
# together. An FMA counts 2 FLOPs (multiply + add), the convention of every peak TFLOP/s figure.
#
# Checked on the H200 fixtures (tests/fixtures/profiler, ncu 2025.3.1): each HGMMA.64x128x16 warpgroup issue
# shows as 4 warp-level and 128 predicated-on thread executions, and the HGMMA FLOPs of the Triton and the
# cuda_ptx GEMM at 8192x7168x5120 come to exactly 2*M*N*K (tests/test_profiler_math.py).

WARPGROUP_THREADS = 128  # PTX ISA, "Warpgroup": 4 contiguous warps; wgmma.mma_async is issued by all 128
WARP_THREADS = 32  # PTX ISA, mma.sync: "warp-level" - the 32 threads of a warp compute one m x n x k tile


@dataclass(frozen=True)
class MathRule:
    name: str  # what it is reported under: the opcode without modifiers
    pattern: str  # regular expression on the full SASS opcode ('HGMMA.64x128x16.F32.BF16')
    kind: str  # "tensor_core" | "other"
    shape: str  # "gmma": MxNxK in the opcode, per warpgroup; "mma": mnk digits in the opcode, per warp;
    #             "scalar": a fixed count per thread; "descriptor": the shape is not in the opcode (unknown)
    flops: float = 0.0  # "scalar" only: FLOPs per predicated-on thread
    moves_if_zero: tuple[int, ...] = ()  # operand positions (0 = destination) where RZ makes it a move
    source: str = ""


# How each tensor-core shape spelling is priced (archs.toml `shape` of a family's opcodes).
_SHAPE_SOURCES = {
    "gmma": "PTX ISA 8.x, wgmma.mma_async: shapes .m64nNk{K}, issued by a warpgroup of 128 threads, 2*64*N*K FLOPs per issue",
    "mma": "PTX ISA 8.x, 'Warp-level matrix multiply-accumulate' (mma.sync): SASS spells .m16n8k16 as 16816, .m16n8k8 as "
           "1688, .m8n8k4 as 884; one tile per warp of 32 threads, 2*m*n*k FLOPs",
    # tcgen05.mma: M and N live in the instruction descriptor (a register, PTX ISA tcgen05 'Instruction descriptor'),
    # the operands in shared/tensor memory descriptors; the SASS opcode does not carry the shape.
    "descriptor": "PTX ISA tcgen05.mma: shape in the runtime instruction descriptor, not in the opcode",
}
_ALU_SRC = "PTX ISA fma / mul / add: one result per thread and lane; an FMA is 2 FLOPs"


def _tensor_core_rule(op: TensorCoreOpcode) -> MathRule:
    note = f" ({op.note})" if op.shape != "descriptor" else ""
    return MathRule(op.name, rf"^{op.pattern}\b", "tensor_core", op.shape, source=_SHAPE_SOURCES[op.shape] + note)


# Data, in one place. The first rule whose pattern matches the opcode prices it; opcodes no rule matches
# are not math (integer address arithmetic (IMAD, IADD3), MUFU transcendentals, FMNMX, conversions).
# The tensor-core opcodes come from archs.toml (wgmma, mma.sync, tcgen05.mma families), the rest are CUDA-core.
MATH_RULES: tuple[MathRule, ...] = tuple(_tensor_core_rule(op) for op in tensor_core_opcodes()) + (
    # CUDA-core floating point, per predicated-on thread. Packed forms do 2 lanes.
    MathRule("FFMA", r"^FFMA\b", "other", "scalar", 2, (1, 2), _ALU_SRC + " (fma.f32)"),
    MathRule("FFMA2", r"^FFMA2\b", "other", "scalar", 4, (1, 2), _ALU_SRC + " (fma.f32x2, sm_100+: 2 lanes)"),
    MathRule("FMUL", r"^FMUL\b", "other", "scalar", 1, (1, 2), _ALU_SRC),
    MathRule("FMUL2", r"^FMUL2\b", "other", "scalar", 2, (1, 2), _ALU_SRC + " (f32x2)"),
    MathRule("FADD", r"^FADD\b", "other", "scalar", 1, (1, 2), _ALU_SRC),
    MathRule("FADD2", r"^FADD2\b", "other", "scalar", 2, (1, 2), _ALU_SRC + " (f32x2)"),
    # HFMA2.MMA is the same half2 FMA issued on the MMA pipe; ptxas also uses 'HFMA2.MMA Rd, -RZ, RZ, a, b'
    # to load constants (seen in the fixtures): an RZ multiplicand makes it a move, not math.
    MathRule("HFMA2", r"^HFMA2\b", "other", "scalar", 4, (1, 2), _ALU_SRC + " (fma.f16x2 / bf16x2: 2 lanes)"),
    MathRule("HMUL2", r"^HMUL2\b", "other", "scalar", 2, (1, 2), _ALU_SRC + " (2 lanes)"),
    MathRule("HADD2", r"^HADD2\b", "other", "scalar", 2, (1, 2), _ALU_SRC + " (2 lanes; HADD2.F32 -RZ, x is a cvt)"),
    MathRule("DFMA", r"^DFMA\b", "other", "scalar", 2, (1, 2), _ALU_SRC + " (fma.f64)"),
    MathRule("DMUL", r"^DMUL\b", "other", "scalar", 1, (1, 2), _ALU_SRC),
    MathRule("DADD", r"^DADD\b", "other", "scalar", 1, (1, 2), _ALU_SRC),
    # Integer dot products (dp4a / dp2a): 4 (2) multiply-adds per thread.
    MathRule("IDP4A", r"^IDP\.4A\b", "other", "scalar", 8, (1, 2), "PTX ISA dp4a: 4 products + accumulate"),
    MathRule("IDP2A", r"^IDP\.2A\b", "other", "scalar", 4, (1, 2), "PTX ISA dp2a: 2 products + accumulate"),
)

_RULES = tuple((re.compile(r.pattern), r) for r in MATH_RULES)
_GMMA_SHAPE = re.compile(r"\.(\d+)x(\d+)x(\d+)(?:\.|$)")
_MMA_K = (4, 8, 16, 32, 64, 128, 256)
_ZERO = re.compile(r"^[-!|]*RZ(\||\.|$)")


def _mma_shape(opcode: str) -> tuple[int, int, int] | None:
    """'HMMA.16816.F32.BF16' -> (16, 8, 16); '1688' -> (16, 8, 8); '884' -> (8, 8, 4); '16832' -> (16, 8, 32).
    Every mma.sync shape has n = 8 and m in {8, 16} (PTX ISA, mma shapes), which makes the digits unambiguous."""
    for part in opcode.split(".")[1:]:
        if part.isdigit() and 3 <= len(part) <= 6:
            m = 16 if part.startswith("16") else 8 if part.startswith("8") else None
            rest = part[2:] if m == 16 else part[1:]
            if m and rest.startswith("8") and rest[1:].isdigit() and int(rest[1:]) in _MMA_K:
                return m, 8, int(rest[1:])
            return None
    return None


def _is_move(operands: str, positions: tuple[int, ...]) -> bool:
    ops = [o.strip() for o in operands.split(",")] if operands else []
    return any(p < len(ops) and _ZERO.match(ops[p]) for p in positions)


def math_rule(opcode: str) -> MathRule | None:
    for pattern, rule in _RULES:
        if pattern.search(opcode or ""):
            return rule
    return None


def instruction_flops(opcode: str, operands: str = "") -> tuple[MathRule, float | None] | None:
    """FLOPs of one predicated-on THREAD execution of a SASS instruction: None when it is not math;
    (rule, None) when it is math of a size the opcode does not tell (tcgen05, or a base opcode without
    its shape modifiers); (rule, 0.0) for the compiler's move idioms (an RZ multiplicand or addend)."""
    rule = math_rule(opcode)
    if rule is None:
        return None
    if rule.shape == "gmma":
        m = _GMMA_SHAPE.search(opcode)
        return rule, (2.0 * int(m[1]) * int(m[2]) * int(m[3]) / WARPGROUP_THREADS) if m else None
    if rule.shape == "mma":
        shape = _mma_shape(opcode)
        return rule, (2.0 * shape[0] * shape[1] * shape[2] / WARP_THREADS) if shape else None
    if rule.shape == "scalar":
        return rule, 0.0 if _is_move(operands, rule.moves_if_zero) else float(rule.flops)
    return rule, None


def _count(threads: float, warps: float) -> float:
    """A sane predicated-on thread count: finite, not negative, at most 32 per warp-level execution."""
    if not math.isfinite(threads) or threads <= 0:
        return 0.0
    if math.isfinite(warps) and warps > 0:
        threads = min(threads, WARP_THREADS * warps)
    return threads


def kernel_math(profile: KernelProfile) -> dict:
    """FLOPs one kernel executed, from its SASS lines (or, with no source page, from the per-opcode metric,
    whose base opcodes carry no MMA shape). {'tensor_core', 'other': FLOPs; 'by_opcode': {opcode: FLOPs};
    'unmeasured': {opcode: threads} for math whose size is unknown}."""
    out = {"tensor_core": 0.0, "other": 0.0, "by_opcode": {}, "unmeasured": {}}
    if profile.lines:
        items = ((ln.opcode, ln.operands, _count(ln.threads, ln.warp_instructions)) for ln in profile.lines)
    else:
        items = ((op, "", _count(n, profile.per_opcode_warps.get(op, 0.0))) for op, n in profile.per_opcode.items())
    for opcode, operands, threads in items:
        if threads <= 0:
            continue
        priced = instruction_flops(opcode, operands)
        if priced is None:
            continue
        rule, per_thread = priced
        if per_thread is None:
            out["unmeasured"][opcode] = out["unmeasured"].get(opcode, 0.0) + threads
            continue
        flops = per_thread * threads
        if flops <= 0:
            continue  # a move idiom
        out[rule.kind] += flops
        out["by_opcode"][opcode] = out["by_opcode"].get(opcode, 0.0) + flops
    return out


def family_math(name: str, families=None) -> str:
    """archs.toml's `math` field of a family: 'tensor_core' (its instructions are tensor-core math),
    'cuda_core', or '' (not math)."""
    fam = (families or {}).get(name) if families is not None else None
    value = getattr(fam, "math", None)
    return value if isinstance(value, str) else getattr(all_families().get(name), "math", "")


def tensor_core_families(required, families=None) -> list[str]:
    """The required families whose instructions are the tensor-core math (wgmma on Hopper, tcgen05_mma on
    Blackwell, mma_sync where a task requires that path), read from archs.toml, not from names here."""
    return [f for f in required if family_math(f, families) == "tensor_core"]


def _rule_name(opcode: str) -> str:
    rule = math_rule(opcode)
    return rule.name if rule else opcode.split(".")[0]


def _flops_text(values: list[float]) -> tuple[float, str]:
    top = max([abs(v) for v in values] + [0.0])
    for scale, unit in ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP")):
        if top >= scale:
            return scale, unit
    return 1.0, "FLOP"


def _math_summary(own_maths: list[dict], required, families, task_flops) -> dict:
    """The summary keys of the math accounting over the candidate's own kernels."""
    tc_fams = tensor_core_families(required, families)

    def in_tc(opcode: str) -> bool:
        return any(families[f].sass.search(opcode) for f in tc_fams if f in families)

    totals = {"tensor_core": 0.0, "other": 0.0}
    by_opcode: dict[str, float] = {}
    unmeasured: dict[str, float] = {}
    for km in own_maths:
        for k in totals:
            totals[k] += km[k]
        for op, v in km["by_opcode"].items():
            by_opcode[op] = by_opcode.get(op, 0.0) + v
        for op, v in km["unmeasured"].items():
            unmeasured[op] = unmeasured.get(op, 0.0) + v
    tc_flops = sum((v for op, v in by_opcode.items() if in_tc(op)), 0.0) if tc_fams else None
    note, tc_unknown = None, None
    tc_unmeasured = sorted(op for op in unmeasured if tc_fams and in_tc(op))
    if tc_unmeasured:
        by_design = all(getattr(math_rule(op), "shape", "") == "descriptor" for op in tc_unmeasured)
        tc_flops, tc_unknown = None, ("descriptor" if by_design else "no_shape")
        note = (f"{'/'.join(tc_fams)} FLOPs unknown: {', '.join(tc_unmeasured)} "
                + ("keep the MMA shape in a runtime descriptor, not in the opcode" if by_design else
                   "executed without its shape in the opcode (no source page?)"))
    other_unmeasured = sorted(op for op in unmeasured if not in_tc(op))
    total = totals["tensor_core"] + totals["other"]
    share = None
    if tc_flops is not None and not other_unmeasured and total > 0:
        share = tc_flops / total
    if other_unmeasured and note is None:
        note = f"math of unknown size executed ({', '.join(other_unmeasured)}): the share cannot be computed"
    rest: dict[str, float] = {}
    for op, v in by_opcode.items():
        if not (tc_fams and in_tc(op)):
            rest[_rule_name(op)] = rest.get(_rule_name(op), 0.0) + v
    ratio = tc_flops / task_flops if (tc_flops is not None and task_flops and task_flops > 0) else None
    per_task = (lambda v: v / task_flops) if task_flops and task_flops > 0 else (lambda v: None)
    non_tc = sum(v for v in rest.values() if v > 0)  # math not by the required family: FFMA, HFMA2, mma.sync...
    return {
        "math_flops": totals,
        "math_by_opcode": by_opcode,
        "math_unmeasured": unmeasured,
        "math_rest": rest,
        "tc_families": tc_fams,
        "tc_flops": tc_flops,
        "tc_unknown": tc_unknown,  # None, "descriptor" (not readable from SASS by design), "no_shape"
        "tc_share": share,
        "tc_to_task": ratio,
        "task_flops": task_flops,
        # What the GPU computed at all (issue 40): every priced FLOP of the candidate's own kernels, tensor core or
        # not, and the math outside the required family (issue 31, item 5), each against the task's FLOPs.
        "gpu_flops": total,
        "gpu_to_task": per_task(total),
        "non_tc_flops": non_tc if tc_fams else None,
        "non_tc_to_task": per_task(non_tc) if tc_fams else None,
        "math_note": note,
    }


# The work share (issue 31, item 5): the required tensor-core family must do at least `min_share` of the
# candidate's executed math, with its FLOPs at most `ratio[1]` times the task's. Together they bound the math
# anything else did: other <= tc * (1 - s) / s <= ratio[1] * (1 - s) / s * task. With the old 50% share and a 2x
# cap that bound was 2x the task, so FFMA could do all the real work beside dummy wgmma of the same size (a
# hostile candidate did: 52% share, 1.06x the task's FLOPs); the tasks' numbers keep it at most 0.5x
# (xlang.task.Task.min_tc_share / tc_flops_ratio; tests/test_profiler_math.py checks every task's).
DEFAULT_MIN_SHARE = 0.8
DEFAULT_RATIO = (0.5, 2.0)
MAX_OTHER_TO_TASK = 0.5  # the most non-tensor-core math, in task FLOPs, any task's share and cap may leave room for


def other_math_bound(min_share: float, ratio_hi: float) -> float:
    """The most math (in multiples of the task's FLOPs) that anything but the required tensor-core family can do
    in a candidate passing work_check with this share and cap: ratio_hi * (1 - min_share) / min_share."""
    return ratio_hi * (1.0 - min_share) / min_share if 0 < min_share <= 1 else math.inf


def work_check(summary: dict, min_share: float = DEFAULT_MIN_SHARE,
               ratio: tuple[float, float] = DEFAULT_RATIO) -> str | None:
    """The failure reason when the required tensor-core family did not do the work, or None.

    Fails when it did less than `min_share` of the candidate's executed math (tensor-core and CUDA-core alike),
    or when its FLOPs are outside `ratio` times the task's FLOPs at the profiled shape (checked only where
    the caller gave the task's FLOPs). Passing both leaves at most other_math_bound(min_share, ratio[1]) times
    the task's FLOPs to other math (FFMA, HFMA2, mma.sync...), so with the tasks' numbers FMA cannot have done
    the task beside padding wgmma. Not checked (None) when no tensor-core family is required. Where the
    family's FLOPs cannot be read from the SASS by design (tcgen05: the shape is in a runtime descriptor, see
    summary['math_note']), only that bound is checked: it holds whatever the tensor cores did. Math of unknown
    size otherwise (a shape missing from the data, or outside the family) fails closed. This cannot prove that
    the tensor-core work produced the answer: it shows the tensor cores executed about the task's math, and
    nothing else did more than the bound."""
    tc_fams = summary.get("tc_families") or []
    if not tc_fams:
        return None
    fam = "/".join(tc_fams)
    tc = summary.get("tc_flops")
    totals = summary.get("math_flops") or {}
    total = float(totals.get("tensor_core", 0.0)) + float(totals.get("other", 0.0))
    task = summary.get("task_flops")
    lo, hi = ratio
    if tc is None:
        if summary.get("tc_unknown") != "descriptor":
            return f"{fam}'s share of the math cannot be checked: {summary.get('math_note') or 'its FLOPs are unknown'}"
        # The family's FLOPs are not in the SASS (tcgen05). Still sound: passing both checks needs
        # tc >= other * s / (1 - s) and tc <= hi * task, so other math above hi * task * (1 - s) / s fails
        # whatever the tensor cores did.
        other = sum(v for v in (summary.get("math_rest") or {}).values() if v > 0)
        if task and task > 0 and 0 < min_share < 1:
            bound = other_math_bound(min_share, hi) * task
            if other > bound:
                scale, unit = _flops_text([other, bound])
                return (f"other math ({other / scale:.3g} {unit}, {other / task:.3g}x the task's FLOPs) exceeds what "
                        f"any {fam} share could allow "
                        f"({bound / scale:.3g} {unit} at {100 * min_share:g}% share and at most {hi:g}x the task's "
                        f"FLOPs); {fam}'s own FLOPs are not readable from SASS")
        return None
    if summary.get("math_unmeasured") and summary.get("tc_share") is None:
        return f"{fam}'s share of the math cannot be checked: {summary.get('math_note') or 'math of unknown size'}"
    if total <= 0:
        return f"{fam} did no math in the candidate's kernels (no math executed at all)"
    share = tc / total
    if share < min_share:
        scale, unit = _flops_text([tc, total])
        rest = sorted(((n, v) for n, v in (summary.get("math_rest") or {}).items() if v > 0), key=lambda nv: -nv[1])
        if len(rest) == 1:
            tail = f"; {rest[0][0]} did the rest"
        elif rest:
            tail = "; the rest: " + ", ".join(f"{n} {v / scale:.3g}" for n, v in rest[:4]) + f" {unit}"
        else:
            tail = ""
        other = f"; other math {summary['non_tc_to_task']:.3g}x the task's FLOPs" \
            if summary.get("non_tc_to_task") is not None else ""
        return (f"{fam} did {100 * share:.1f}% of the math ({tc / scale:.3g} of {total / scale:.3g} {unit}; "
                f"at least {100 * min_share:g}% required){tail}{other}")
    if task and task > 0:
        r = tc / task
        if r < lo or r > hi:
            scale, unit = _flops_text([tc, task])
            other = f"; other math {summary['non_tc_to_task']:.3g}x" if summary.get("non_tc_to_task") is not None else ""
            return (f"{fam} did {r:.3g}x the task's FLOPs ({tc / scale:.3g} of {task / scale:.3g} {unit} at the "
                    f"profiled shape; {lo:g}x to {hi:g}x required){other}")
    return None


# ---- the GPU computed the answer (issue 40) ----------------------------------------------------------
#
# A candidate whose outputs match is `correct` only if its own kernels executed math of about the task's size:
# one that copies the inputs to the host, computes there (numpy, a C++ loop, torch CPU ops) and copies the
# answer back, with a token kernel launched for form, executes next to nothing. The experts' recorded ratios of
# GPU FLOPs (every priced FLOP of their own kernels) to the task's, read from reports/h200-reference (stores/*.db
# and attn_bwd_head_dims/*.db: every H200 expert stored there, gluon having no backward, 2026-12-01): gemm
# 1.000; attn_fwd 1.008, causal 1.040 (D=128; the harness-2 head-dim runs kept no math accounting); attn_bwd
# 1.003-1.414 at D=64/128, 1.338 (cuda_ptx, CuTe DSL) and 1.876 (Triton) at D=96 padded to 128; causal
# 1.035-1.438. The default floor of 0.5x (Task.min_gpu_flops_ratio) leaves each of them at least 2x.

def gpu_compute_check(summary: dict, min_ratio: float) -> dict:
    """Whether the candidate's own kernels executed at least `min_ratio` times the task's FLOPs at the profiled
    shape: {'status': 'ok' | 'off_gpu' | 'unverified', 'gpu_to_task', 'min_ratio', 'detail'}. Math of a size the
    SASS does not tell (tcgen05 keeps its shape in a runtime descriptor) makes the priced FLOPs a lower bound:
    below the floor that is 'unverified', never a pass and never an accusation. No task FLOPs: 'unverified'."""
    task = summary.get("task_flops")
    gpu = float(summary.get("gpu_flops") or 0.0)
    out = {"status": "ok", "gpu_to_task": None, "min_ratio": min_ratio, "detail": ""}
    if not task or task <= 0:
        return {**out, "status": "unverified", "detail": "the task's FLOPs at the profiled shape are not known"}
    r = out["gpu_to_task"] = gpu / task
    if r >= min_ratio:
        return out
    scale, unit = _flops_text([gpu, task])
    did = (f"the candidate's own kernels executed {gpu / scale:.3g} {unit} of math on the GPU, {r:.3g}x the "
           f"task's {task / scale:.3g} {unit} at the profiled shape (at least {min_ratio:g}x required)")
    if summary.get("math_unmeasured"):
        unknown = ", ".join(sorted(summary["math_unmeasured"]))
        return {**out, "status": "unverified",
                "detail": did + f"; math of unknown size ({unknown}) executed too, so that is a lower bound"}
    return {**out, "status": "off_gpu", "detail": did}


# ---- the judgement of executed instructions ---------------------------------------------------------

def classify_opcode(opcode: str, family_names, families, operands: str | None = None) -> str | None:
    for fam in family_names:
        pattern = families[fam].sass
        # The per-opcode metric gives base opcodes ('SYNCS'); some families match 'SYNCS.' forms.
        if pattern.search(opcode) or ("." not in opcode and pattern.search(opcode + ".")):
            # A family with an operand rule (archs.toml sass_operands: block-scaled tcgen05.mma) takes only an
            # instruction whose operands are known and match; the per-opcode metric has none.
            rule = getattr(families[fam], "operands", None)
            if rule is not None and (operands is None or not rule.search(operands)):
                continue
            return fam
    return None


def summarize(profiles: list[KernelProfile], candidate_names, family_names, required, families=None,
              task_flops: float | None = None) -> dict:
    """Per kernel and per family, the predicated-on threads that executed; forbidden kernels; missing families;
    the math the candidate's kernels executed (FLOPs by tensor core and the rest, the required tensor-core
    family's share of it and its ratio to `task_flops`, the task's FLOPs at the profiled shape): see
    `work_check` for the decision on those.

    Only kernels the candidate built count towards the families and the math; any other kernel whose name
    is a vendor library's or torch's compute kernel is reported as forbidden.
    """
    if families is None:
        families = all_families()
    kernels, totals = [], {f: 0.0 for f in family_names}
    forbidden, seen_candidates = [], set()
    own_maths: list[dict] = []
    for p in profiles:
        own = is_candidate_kernel(p.name, candidate_names)
        fams = {f: 0.0 for f in family_names}
        lines = {f: [0, 0] for f in family_names}  # [executed SASS lines, static SASS lines]
        source = "sass_lines" if p.lines else "per_opcode"
        if p.lines:
            for ln in p.lines:
                fam = classify_opcode(ln.opcode, family_names, families, ln.operands or None)
                if fam is None:
                    continue
                lines[fam][1] += 1
                if ln.threads > 0:
                    lines[fam][0] += 1
                    fams[fam] += ln.threads
        else:
            for op, n in p.per_opcode.items():
                fam = classify_opcode(op, family_names, families)
                if fam is not None:
                    fams[fam] += n
        km = kernel_math(p)
        entry = {"name": p.name, "candidate": own, "source": source, "families": fams,
                 "math": {"tensor_core": km["tensor_core"], "other": km["other"]},
                 "lines": lines if p.lines else None,
                 "threads": sum(ln.threads for ln in p.lines) if p.lines else sum(p.per_opcode.values())}
        if own:
            seen_candidates.update(c for c in candidate_names if is_candidate_kernel(p.name, [c]))
            for f in family_names:
                totals[f] += fams[f]
            own_maths.append(km)
        else:
            why = forbidden_reason(p.name)
            if why:
                entry["forbidden"] = why
                forbidden.append({"name": p.name, "why": why})
        kernels.append(entry)
    return {
        "tool": "ncu",
        "profiled_kernels": len(profiles),
        "kernels": kernels,
        "families": totals,
        "required": list(required),
        "missing": [f for f in required if totals.get(f, 0) <= 0],
        "forbidden_kernels": forbidden,
        "not_launched": sorted(set(candidate_names) - seen_candidates),
        **_math_summary(own_maths, required, families, task_flops),
    }
