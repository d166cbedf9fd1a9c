"""Nsight Compute: the command lines we run, and pure functions that read what it prints.

One profiling run records a report (the candidate's call inside an NVTX range, SourceCounters plus the
per-opcode SASS metrics); two imports of that report print (a) the source page, one CSV row per SASS
instruction with its warp-level and predicated-on thread counts, and (b) the details page with the
per-opcode metric instances. The parsing here runs on any machine (tests use fixtures recorded on the H200).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import asdict, dataclass, field


NVTX_RANGE = "xlang_candidate"
METRICS = ("sass__inst_executed_per_opcode", "sass__thread_inst_executed_true_per_opcode")

# Kernels that are not the candidate's own and compute the answer for it: cuBLAS (nvjet, xmma, cutlass
# and the older ampere_/sm80_ names), cuDNN, torch's flash / memory-efficient attention and softmax.
FORBIDDEN_KERNEL = re.compile(
    r"nvjet|xmma|cutlass|cublas|cudnn|gemm|gemv|flash|fmha|sdpa|attention|softmax|"
    r"(^|[^a-z])(ampere|turing|volta|hopper|blackwell)_|(^|[^a-z0-9])sm\d\d+_|splitk|cunn_|magma",
    re.I,
)

_OPCODE = re.compile(r"^\s*\{?\s*(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def profile_command(ncu: str, report: str, child: list[str], *, replay: str = "kernel", nvtx: bool = True) -> list[str]:
    """Record a report (report + '.ncu-rep') of the child's kernels: those inside the NVTX range, or all."""
    cmd = [ncu, "--target-processes", "all", "--clock-control", "none", "--replay-mode", replay,
           "--section", "SourceCounters", "--metrics", ",".join(METRICS), "--import-source", "no",
           "--print-kernel-base", "mangled", "-f", "-o", report]
    if nvtx:
        cmd += ["--nvtx", "--nvtx-include", f"{NVTX_RANGE}/"]
    return cmd + list(child)


def source_page_command(ncu: str, report_file: str) -> list[str]:
    return [ncu, "-i", report_file, "--page", "source", "--print-source", "sass", "--csv",
            "--print-kernel-base", "mangled"]


def details_page_command(ncu: str, report_file: str) -> list[str]:
    return [ncu, "-i", report_file, "--page", "details", "--csv", "--print-metric-instances", "details",
            "--print-kernel-base", "mangled"]


def _number(text: str) -> float:
    text = (text or "").strip().replace(",", "")
    if text in ("", "-", "n/a", "N/A"):
        return 0.0
    try:
        value = float(text)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) else 0.0  # 'nan' / 'inf' parse as floats: not a count


def opcode_of(source: str) -> str | None:
    """'@!P0 HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ ;' -> 'HGMMA.64x128x16.F32.BF16'."""
    m = _OPCODE.match(source or "")
    return m.group(1) if m else None


def operands_of(source: str) -> str:
    """'@!P0 FFMA R1, R2, R3, R4 ;' -> 'R1, R2, R3, R4' (empty when there is no opcode)."""
    m = _OPCODE.match(source or "")
    return (source[m.end():].strip().rstrip("}").strip().rstrip(";").strip()) if m else ""


@dataclass
class SassLine:
    address: str
    opcode: str
    warp_instructions: float  # times a warp executed it
    threads: float  # predicated-on thread executions (the evidence that counts)
    operands: str = ""  # the instruction's operand text ('R2, -RZ, RZ, 0, 0'): math accounting reads it
    text: str = ""  # the whole instruction as the page prints it, predicate included: code identity reads it


@dataclass
class KernelProfile:
    name: str
    lines: list[SassLine] = field(default_factory=list)  # from the source page
    per_opcode: dict[str, float] = field(default_factory=dict)  # predicated-on threads per base opcode (details)
    per_opcode_warps: dict[str, float] = field(default_factory=dict)
    index: int = 0  # order in the report

    def to_dict(self) -> dict:
        return asdict(self)


def parse_source_page(text: str) -> list[KernelProfile]:
    """`ncu -i R --page source --print-source sass --csv`: a 'Kernel Name' row, a header row, one row per
    SASS instruction; repeated per profiled kernel."""
    kernels: list[KernelProfile] = []
    header: list[str] | None = None
    current: KernelProfile | None = None
    for row in csv.reader(io.StringIO(_csv_part(text))):
        if not row or not any(c.strip() for c in row):
            continue
        first = row[0].strip()
        if first == "Kernel Name":
            current = KernelProfile(name=row[1].strip() if len(row) > 1 else "", index=len(kernels))
            kernels.append(current)
            header = None
            continue
        if first == "Address" and "Source" in row:
            header = [c.strip() for c in row]
            if current is None:  # a single-kernel page with no name row
                current = KernelProfile(name="", index=0)
                kernels.append(current)
            continue
        if header is None or current is None:
            continue
        rec = _record(header, row)
        op = opcode_of(rec.get("Source", ""))
        if op is None:
            continue
        threads = rec.get("Predicated-On Thread Instructions Executed")
        warps = rec.get("Instructions Executed")
        current.lines.append(SassLine(rec.get("Address", ""), op, _number(warps), _number(threads),
                                      operands_of(rec.get("Source", "")), rec.get("Source", "").strip()))
    return kernels


def _record(header: list[str], row: list[str]) -> dict[str, str]:
    rec: dict[str, str] = {}
    for key, value in zip(header, row):
        rec.setdefault(key, value)  # a repeated column name: keep the first
    return rec


def _csv_part(text: str) -> str:
    """Drop the tool's own chatter (==PROF==, ==WARNING==, ...) that can precede the CSV."""
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("==") and ln.strip())


_INSTANCE_PAIR = re.compile(r"([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*[:=]\s*([0-9][0-9,]*(?:\.[0-9]+)?)")
_INSTANCE_SPACED = re.compile(r"\(?([A-Z][A-Z0-9_]*)\)?\s+([0-9][0-9,]*(?:\.[0-9]+)?)")


def parse_instances(value: str) -> dict[str, float]:
    """A metric's instance values as printed with --print-metric-instances details ('OP: n; OP: n' or
    'OP n OP n'), summed per opcode."""
    pairs = _INSTANCE_PAIR.findall(value or "") or _INSTANCE_SPACED.findall(value or "")
    out: dict[str, float] = {}
    for op, n in pairs:
        out[op] = out.get(op, 0.0) + _number(n)
    return out


def parse_details_page(text: str) -> list[KernelProfile]:
    """`ncu -i R --page details --csv --print-metric-instances details`: one row per (kernel, metric)."""
    rows = list(csv.reader(io.StringIO(_csv_part(text))))
    if not rows:
        return []
    kernels: dict[str, KernelProfile] = {}
    header: list[str] | None = None
    for row in rows:
        if "Kernel Name" in row and "Metric Name" in row:
            header = [c.strip() for c in row]
            continue
        if header is None or len(row) < header.index("Metric Name") + 1:
            continue
        rec = dict(zip(header, row))
        key = rec.get("ID", "") + "\x00" + rec["Kernel Name"]
        prof = kernels.get(key)
        if prof is None:
            prof = kernels[key] = KernelProfile(name=rec["Kernel Name"].strip(), index=len(kernels))
        metric = rec.get("Metric Name", "").strip()
        # The instance values may sit in the value column, or in extra columns after it.
        value = ",".join([rec.get("Metric Value", "")] + row[len(header):])
        value = value.split("(", 1)[1] if "(" in value else value  # 'total (OP: n; OP: n)
        if metric == "sass__thread_inst_executed_true_per_opcode":
            prof.per_opcode.update(parse_instances(value))
        elif metric == "sass__inst_executed_per_opcode":
            prof.per_opcode_warps.update(parse_instances(value))
    return list(kernels.values())


def merge(source: list[KernelProfile], details: list[KernelProfile]) -> list[KernelProfile]:
    """One profile per profiled launch, with its SASS lines. The details page is the count of launches (one
    result ID each); the source page can print a kernel's block more than once (on the H200, 2026-11-30: every
    kernel of the cuda_ptx attention-backward expert twice, identical), so a block never counts by itself:
    each launch takes the first block of its name whose executed thread instructions add up to the launch's
    own total (else the first of its name; launches of one kernel with equal counts share a block)."""
    if not source:
        return details
    if not details:
        return source
    if len(source) == len(details) and all(not s.name or s.name == d.name for s, d in zip(source, details)):
        for s, d in zip(source, details):
            s.per_opcode, s.per_opcode_warps = d.per_opcode, d.per_opcode_warps
            if not s.name:
                s.name = d.name
        return source
    out = []
    for d in details:
        same = [s for s in source if s.name == d.name]
        total = sum(d.per_opcode.values())
        block = next((s for s in same if abs(sum(ln.threads for ln in s.lines) - total) <= 1e-9 * max(total, 1.0)),
                     same[0] if same else None)
        if block is None:
            out.append(d)
            continue
        out.append(KernelProfile(name=d.name, index=d.index, lines=list(block.lines), per_opcode=d.per_opcode,
                                 per_opcode_warps=d.per_opcode_warps))
    named = {d.name for d in details}
    return out + [s for s in source if s.name not in named]  # a block the details page lacks stays visible


# ---- names: the candidate's kernels vs everything else -------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _mangled_base(name: str) -> str | None:
    """Itanium-mangled '_Z...' -> the function's own name (the last name of a nested name); crude but
    enough for kernel names: '_ZN12_GLOBAL__N_13fooEv' -> 'foo', '_Z8fma_gemmILi128EEvPKf' -> 'fma_gemm'."""
    s = name[2:]
    nested = s.startswith("N")
    i, last = (1 if nested else 0), None
    while i < len(s):
        c = s[i]
        if c.isdigit():
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            n = int(s[i:j])
            ident, i = s[j:j + n], j + n
            if not ident.startswith("_GLOBAL__N"):
                last = ident
            if not nested:
                break
        elif c == "I":  # template arguments: skip to the matching E (literals L...E nest too)
            depth, i = 1, i + 1
            while i < len(s) and depth:
                if s[i] in "IL":
                    depth += 1
                elif s[i] == "E":
                    depth -= 1
                i += 1
            if not nested:
                break
        elif c in "KVr":
            i += 1
        else:
            break
    return last


def _identifier(name: str) -> str:
    """Base identifier of a kernel name, mangled or not: 'void ns::foo<1>(float*)' -> 'foo';
    '_ZN12_GLOBAL__N_13fooEv' -> 'foo'."""
    name = name.strip()
    if name.startswith("_Z"):
        return _mangled_base(name) or name
    name = re.sub(r"^(void|__global__)\s+", "", name).replace("(anonymous namespace)::", "")
    name = name.split("(")[0]
    depth, base = 0, ""
    for ch in name:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            base += ch
    return base.split("::")[-1].strip()


def is_candidate_kernel(name: str, candidate_names) -> bool:
    name = name.strip()
    for c in candidate_names:
        c = c.strip()
        if name == c:
            return True
        if c.startswith("_Z") and name.startswith("_Z"):
            continue  # two different mangled names
        ident = _identifier(name)
        if ident and ident == _identifier(c):
            return True
    return False


def forbidden_reason(name: str) -> str | None:
    m = FORBIDDEN_KERNEL.search(name)
    return f"'{m.group(0).strip('_')}' in the kernel name" if m else None
