"""Static SASS instruction census: disassemble every cubin, count opcodes per instruction family,
judge the architecture's required families present or missing, and report the PTX-level evidence too.

The census is the only evidence for an architecture we cannot run (B200 here), and a first screen for the
others; whether an instruction really executed is decided at run time by the profiler (Nsight Compute).
"""

from __future__ import annotations

import functools
import re
import subprocess
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from xlang import archs as archs_mod
from xlang.toolchain import require_tool

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "        /*0450*/   @!P0 HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;   /* 0x... */"
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+\{?\s*(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)")
_OPERANDS = re.compile(r"\s*([^;]*);")  # after the opcode: its operands, up to the ';'


def parse_sass(text: str) -> dict[str, Counter]:
    """cuobjdump -sass output -> {function name: Counter of full opcodes}."""
    functions: dict[str, Counter] = {}
    current = None
    for line in text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = functions.setdefault(m.group(1), Counter())
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            current[m.group(1)] += 1
    return functions


def parse_operands(text: str, family_names) -> dict[str, dict[str, Counter]]:
    """cuobjdump -sass output -> {function name: {opcode: Counter of operand texts}}, for the opcodes of the
    families that read operands (archs.toml `sass_operands`) only: what `classify` needs beside the opcodes."""
    fams = archs_mod.families()
    ruled = [fams[n].sass for n in family_names if fams[n].operands is not None]
    functions: dict[str, dict[str, Counter]] = {}
    current = None
    for line in text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = functions.setdefault(m.group(1), {})
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None and any(r.search(m.group(1)) for r in ruled):
            rest = _OPERANDS.match(line, m.end())
            current.setdefault(m.group(1), Counter())[rest.group(1).strip() if rest else ""] += 1
    return functions


def disassemble(binary: Path) -> dict[str, Counter]:
    """SASS opcode counts per function of a cubin, or of every cubin embedded in an ELF/.so/fatbin."""
    return parse_sass(_sass_text(binary))


DISASSEMBLE_TIMEOUT_S = 120.0


class CensusTimeout(RuntimeError):
    """The census ran past the deadline its caller gave (the build's time limit: xlang.backend.build_candidate)."""


class DisassemblyError(RuntimeError):
    """cuobjdump refused a module: the build's module is no GPU module, whoever made it (a verdict on the build). A
    class of its own so that callers catch this and not every RuntimeError (a RecursionError is one: a judge bug)."""


def _sass_text(binary: Path, timeout_s: float = DISASSEMBLE_TIMEOUT_S) -> str:
    stat = Path(binary).stat()
    try:
        return _disassemble(str(binary), stat.st_mtime_ns, stat.st_size, timeout_s)
    except subprocess.TimeoutExpired:
        raise CensusTimeout(f"cuobjdump did not finish {Path(binary).name} within {timeout_s:.0f} s") from None


_SASS_CACHE: dict[tuple, str] = {}  # (path, mtime, size) -> cuobjdump's text, the 64 latest (a module is
_SASS_LOCK = threading.Lock()      # disassembled once however often its kernels are asked for)


def _disassemble(path: str, mtime_ns: int, size: int, timeout_s: float = DISASSEMBLE_TIMEOUT_S) -> str:
    key = (path, mtime_ns, size)
    with _SASS_LOCK:
        if key in _SASS_CACHE:
            return _SASS_CACHE[key]
    tool = require_tool("cuobjdump")
    proc = subprocess.run([str(tool), "-sass", path], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise DisassemblyError(f"cuobjdump failed on {Path(path).name}: {proc.stderr.strip()[:500]}")
    with _SASS_LOCK:
        _SASS_CACHE[key] = proc.stdout
        while len(_SASS_CACHE) > 64:
            _SASS_CACHE.pop(next(iter(_SASS_CACHE)))
    return proc.stdout


# The whole instruction of a listing line, without its encoding comment: "@!P0 HGMMA.64x128x16.F32.BF16 R24, ..."
_LISTED = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*(?:/\*\s*0x[0-9a-fA-F]+\s*\*/)?\s*$")


def parse_listing(text: str) -> dict[str, list[list[tuple[int, str]]]]:
    """cuobjdump -sass output -> {function name: [its instructions, (offset in the function, text)]}, one list per
    time the name appears (a shared object can embed several cubins with a function of the same name)."""
    functions: dict[str, list[list[tuple[int, str]]]] = {}
    current = None
    for line in text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = []
            functions.setdefault(m.group(1), []).append(current)
            continue
        m = _LISTED.match(line)
        if m and current is not None and _INSTRUCTION.match(line):
            current.append((int(m.group(1), 16), m.group(2)))
    return functions


def listing(binary: Path) -> dict[str, list[list[tuple[int, str]]]]:
    """The SASS of every function of a cubin (or of every cubin embedded in an ELF/.so/fatbin), instruction by
    instruction: what Nsight Compute's source page is compared with (xlang.profiler.sass_identity.same_code)."""
    stat = Path(binary).stat()
    return _listing(str(binary), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _listing(path: str, _mtime_ns: int, _size: int) -> dict[str, list[list[tuple[int, str]]]]:
    tool = require_tool("cuobjdump")
    proc = subprocess.run([str(tool), "-sass", path], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise DisassemblyError(f"cuobjdump failed on {Path(path).name}: {proc.stderr.strip()[:500]}")
    return parse_listing(proc.stdout)


def classify(opcodes: Counter, family_names, operands: dict[str, Counter] | None = None) -> dict[str, int]:
    """Opcode counts -> instruction count per family (an instruction belongs to one family at most, the first in
    family_names that takes it). `operands` ({opcode: Counter of operand texts}, parse_operands) lets a family with
    an operand rule take an instruction; without it such a family takes none (a block-scaled tcgen05.mma cannot be
    told from its kind's plain one by the opcode)."""
    fams = archs_mod.families()
    counts = {name: 0 for name in family_names}
    for opcode, n in opcodes.items():
        forms = (operands or {}).get(opcode)
        for text, k in (forms.items() if forms and sum(forms.values()) == n else ((None, n),)):
            for name in family_names:
                if fams[name].matches(opcode, text):
                    counts[name] += k
                    break
    return counts


def narrow_accumulators(opcodes: Counter, family_names) -> dict[str, int]:
    """Full opcode -> count of the MMAs that accumulate in fp16 (archs.toml `narrow_accumulate` of their family)."""
    fams = archs_mod.families()
    rules = [fams[n].narrow_accumulate for n in family_names if fams[n].narrow_accumulate is not None]
    return {op: n for op, n in opcodes.items() if any(r.search(op) for r in rules)}


def ptx_evidence(ptx_texts, family_names) -> dict[str, int]:
    fams = archs_mod.families()
    return {name: sum(len(fams[name].ptx.findall(t)) for t in ptx_texts) for name in family_names}


@dataclass
class KernelCensus:
    name: str
    families: dict[str, int]
    opcodes: dict[str, int]  # base opcode (before the first '.') -> count, for the instruction mix
    instructions: int
    narrow_accumulate: dict[str, int] = field(default_factory=dict)  # fp16-accumulating MMAs: full opcode -> count


@dataclass
class Census:
    arch: str
    required: list[str]
    present: list[str]
    missing: list[str]
    families: dict[str, int]  # summed over kernels
    ptx: dict[str, int]
    kernels: list[KernelCensus] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing

    @property
    def narrow_accumulate(self) -> list[dict]:
        """[{kernel, opcode, count}] of MMAs that accumulate in fp16, in every kernel (empty: none seen)."""
        return [{"kernel": k.name, "opcode": op, "count": n} for k in self.kernels
                for op, n in sorted(k.narrow_accumulate.items())]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Census":
        return cls(**{**d, "kernels": [KernelCensus(**k) for k in d.get("kernels", [])]})


def take_census(binaries, ptx_texts, arch, required, deadline: float | None = None) -> Census:
    """Census of every function in the given cubins / shared objects against arch's families. deadline (a
    time.monotonic() value): CensusTimeout once it has passed, before a module or while one is disassembled."""
    names = list(arch.families)
    kernels = []
    for binary in binaries:
        left = DISASSEMBLE_TIMEOUT_S if deadline is None else min(DISASSEMBLE_TIMEOUT_S, deadline - time.monotonic())
        if left <= 0:
            raise CensusTimeout(f"the census reached its deadline before {Path(binary).name}")
        text = _sass_text(Path(binary), round(left, 3))
        operands = parse_operands(text, names)
        for fn, opcodes in parse_sass(text).items():
            base = Counter()
            for op, n in opcodes.items():
                base[op.split(".")[0]] += n
            kernels.append(KernelCensus(fn, classify(opcodes, names, operands.get(fn)), dict(base),
                                        sum(opcodes.values()), narrow_accumulators(opcodes, names)))
    totals = {n: sum(k.families[n] for k in kernels) for n in names}
    present = [f for f in required if totals.get(f, 0) > 0]
    return Census(
        arch=arch.name,
        required=list(required),
        present=present,
        missing=[f for f in required if f not in present],
        families=totals,
        ptx=ptx_evidence(ptx_texts, names),
        kernels=kernels,
    )
