"""Code identity: is a kernel that Nsight Compute profiled, instruction for instruction, a module the candidate's
toolchain made? (The ncu stage's provenance check; stages/ncu.py.)"""

from __future__ import annotations

import re
from collections import Counter

from xlang.profiler.ncu import KernelProfile

# ---- code identity: is a profiled kernel, instruction for instruction, a module the candidate's toolchain made? ----
#
# Nsight Compute's source page lists every SASS instruction of the profiled function in order, at its address
# in GPU memory; cuobjdump lists a cubin's functions at offsets from the function's start. The two print the same
# instructions in two ways. Seen on the H200 (ncu 2025.3.1, cuobjdump 13.0, harness 5's expert verdicts,
# 2026-12-01): branch and call targets absolute on the page, relative in the listing; '.reuse' flags only in the
# listing; operands the page separates with a comma where the listing has a space ('RET.REL.NODEC R2, 0x0' /
# 'RET.REL.NODEC R2 0x0', 'BRX R4, -0x160' / 'BRX R4 -0x160'); and operands in another order
# ('LDGSTS.E.64 desc[UR22][R6.64], P2, [R202+0x18000]' on the page, '[R202+0x18000], desc[UR22][R6.64], P2' in
# the listing). So an instruction is compared as its offset, its predicate and opcode (with every modifier), and
# the multiset of its operands: targets relative to the function's start, hex in one case, no reuse flags. Two
# functions are the same code when every instruction matches at the same offset. Ordering the operands gives up
# only which operand sits where inside one instruction; a kernel that is not the build's (a vendor's, a
# rewritten one) differs in its opcodes, registers, offsets or length, which all still count.

_HEX = re.compile(r"\b0x([0-9a-fA-F]+)\b")
# A relocated operand in a cubin not yet loaded (cuobjdump prints the symbol: '32@lo(var)', '`(vprintf)'); the
# page shows the loaded value. It matches any one operand there (never measured: no fixture has one).
_RELOCATED = re.compile(r"(?:-?\d+@(?:lo|hi)\([^)]*\)|`\([^)]*\))")
RELOCATED = "<reloc>"


def _even(text: str) -> str:
    """'[@P] OPCODE.MODS | operand operand ...': operands sorted, separators, ';', '.reuse' and hex case evened."""
    text = text.strip().rstrip(";").replace(".reuse", "")
    text = re.sub(r"0x[0-9a-fA-F]+", lambda m: m.group(0).lower(), text)
    tokens = [t for t in re.split(r"[\s,;]+", text) if t]
    head = tokens[:2] if tokens and tokens[0].startswith("@") else tokens[:1]
    return " ".join(head) + " | " + " ".join(sorted(tokens[len(head):]))


def profiled_code(profile: "KernelProfile") -> list[str] | None:
    """The profiled function's instructions, evened out for comparison (targets relative to its start), or None
    when the page gave no whole listing (no SASS text, or addresses that do not parse)."""
    lines = profile.lines
    if not lines or not all(ln.text for ln in lines):
        return None
    try:
        addresses = [int(ln.address, 16) for ln in lines]
    except ValueError:
        return None
    base, end = addresses[0], addresses[-1] + 16

    def relative(m):
        value = int(m.group(1), 16)
        return hex(value - base) if base <= value <= end else m.group(0)

    code = []
    for address, ln in zip(addresses, lines):
        code.append(f"{address - base:x} {_even(_HEX.sub(relative, ln.text))}")
    return code


def module_code(instructions: list[tuple[int, str]]) -> list[str]:
    """One function of a cuobjdump listing (xlang.census.parse_listing), evened out as profiled_code is."""
    return [f"{offset:x} {_even(_RELOCATED.sub(RELOCATED, text))}" for offset, text in instructions]


def _same_instruction(got: str, want: str) -> bool:
    if got == want:
        return True
    if RELOCATED not in want:
        return False
    (got_head, got_ops), (want_head, want_ops) = (x.split(" | ", 1) for x in (got, want))
    if got_head != want_head:
        return False
    left = Counter(got_ops.split())
    for op in want_ops.split():
        if op != RELOCATED:
            if not left[op]:
                return False
            left[op] -= 1
    return sum(left.values()) == want_ops.split().count(RELOCATED)


def same_code(profiled: list[str], module: list[str]) -> bool:
    """Instruction for instruction, offset for offset; a relocated operand of the module matches any one operand."""
    return len(profiled) == len(module) and all(_same_instruction(g, w) for g, w in zip(profiled, module))


def module_index(listings) -> dict[int, list[tuple[str, list[str]]]]:
    """{instruction count: [(function name, code)]} over listings ({name: [instructions, ...]} each)."""
    index: dict[int, list[tuple[str, list[str]]]] = {}
    for functions in listings:
        for name, variants in functions.items():
            for instructions in variants:
                code = module_code(instructions)
                index.setdefault(len(code), []).append((name, code))
    return index


def sass_identity(profile: "KernelProfile", modules: dict[int, list[tuple[str, list[str]]]]) -> str | bool | None:
    """Whether the kernel Nsight Compute profiled is, instruction for instruction, a function of one of the
    candidate's modules (module_index of its build's binaries and of the cubins its JIT wrote in this stage): the
    name of the function it matches, False when it matches none, None when the page has no whole listing of it
    (then its code cannot be told). Names do not decide: the same code under another name is the candidate's
    code, and another code under a name the build has is not."""
    code = profiled_code(profile)
    if code is None:
        return None
    same_name = [m for m in modules.get(len(code), []) if m[0].strip() == profile.name.strip()]
    others = [m for m in modules.get(len(code), []) if m[0].strip() != profile.name.strip()]
    for name, module in same_name + others:
        if same_code(code, module):
            return name
    return False


def first_difference(profile: "KernelProfile", modules: dict[int, list[tuple[str, list[str]]]]) -> str | None:
    """Where the profiled code first parts from a module function of the same name (for the verdict's detail: an
    impostor, or an honest kernel the page prints in a way not yet seen), or None when no function has that name."""
    code = profiled_code(profile) or []
    same = [m for entries in modules.values() for m in entries if m[0].strip() == profile.name.strip()]
    if not same or not code:
        return None
    _, module = min(same, key=lambda m: abs(len(m[1]) - len(code)))
    if len(module) != len(code):
        return f"{len(code)} instructions profiled, {len(module)} built"
    differ = [(got, want) for got, want in zip(code, module) if not _same_instruction(got, want)]
    if differ:
        got, want = differ[0]
        return (f"{len(differ)} of {len(code)} instructions differ, the first: profiled '{got[:100]}', "
                f"built '{want[:100]}'")
    return None
