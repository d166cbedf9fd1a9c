"""Every descriptor constant of the arch docs is rebuilt from the field tables the docs give.

Parsed from the docs (never restated here):

* the kind::f16 instruction-descriptor table of ``b200/contracts.md`` §7 (bits, field, our value):
  the value is rebuilt field by field and must equal the hex constant the doc states; the
  reserved bits the doc names must be outside every field; the "N >> 3" / "M >> 4" examples must
  agree with the shape they name;
* the shared-memory descriptor tables (``b200/contracts.md`` §6, ``h100/contracts.md`` §5): the
  SW128 K-major descriptor the docs describe (LBO, SBO, version bits, swizzle code) is built from
  the table for several tile addresses;
* the swizzle-code equivalences written as ``1<<62 == 2<<61 = 128B`` are evaluated and must agree
  with both tables;
* address masks written as ``bit 24 cleared (`& 0xFEFFFFFF`...)``.

Then the headers must compute the same numbers: one nvcc run static_asserts
``xl::umma_idesc_bf16_f32<...>()``, ``xl::umma_desc_bits`` and ``xl::wgmma_desc_bits`` (constexpr)
against the values rebuilt here, and the header enums against the tables.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from test_arch_docs_claims import GENCODE, cuda_tools

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "arch_docs"


def _section(text: str, number: int) -> str:
    m = re.search(rf"^## {number}\. .*?(?=^## \d+\. |\Z)", text, re.S | re.M)
    assert m, f"section {number} not found"
    return m.group(0)


def _table(section: str) -> list[list[str]]:
    rows = []
    for ln in section.splitlines():
        if ln.startswith("|"):
            cells = [c.strip() for c in ln.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
    return rows[1:]


def _bits(spec: str) -> list[tuple[int, int]]:
    """'0-1, 2, 3' -> [(0, 1), (2, 2), (3, 3)]."""
    out = []
    for part in spec.split(","):
        a, _, b = part.strip().partition("-")
        out.append((int(a), int(b or a)))
    return out


def idesc_table():
    text = (DOCS / "b200/contracts.md").read_text()
    sec = _section(text, 7)
    fields = []
    for cells in _table(sec):
        assert len(cells) == 3, cells
        fields.append((_bits(cells[0]), cells[1], cells[2]))
    return sec, fields


def build_idesc(fields, m: int, n: int) -> int:
    """Rebuild the descriptor from the 'our value' column; 'N >> 3' / 'M >> 4' rows take m, n."""
    value = 0
    for ranges, name, ours in fields:
        shift = re.fullmatch(r"([MN]) >> (\d+)", name)
        if shift:
            v = (m if shift.group(1) == "M" else n) >> int(shift.group(2))
        else:
            v = int(re.match(r"\d+", ours).group(0))
        if v:
            assert len(ranges) == 1, f"{name}: a non-zero value needs one bit range, got {ranges}"
        lo, hi = ranges[0]
        assert v < (1 << (hi - lo + 1)), f"{name}: {v} does not fit bits {lo}-{hi}"
        value |= v << lo
    return value


def test_idesc_constant_rebuilt_from_its_table():
    sec, fields = idesc_table()
    for ranges, name, ours in fields:  # the examples in the value column agree with their shape
        ex = re.fullmatch(r"(\d+) for ([MN]) = (\d+)", ours)
        shift = re.fullmatch(r"([MN]) >> (\d+)", name)
        if shift:
            assert ex and ex.group(2) == shift.group(1), f"{name}: value {ours!r} should be 'k for {shift.group(1)} = x'"
            assert int(ex.group(3)) >> int(shift.group(2)) == int(ex.group(1)), f"{name}: {ours!r} is wrong"
    consts = re.findall(r"`xl::umma_idesc_bf16_f32\((\d+), (\d+)\)` = `(0x[0-9A-Fa-f]+)`", sec)
    assert consts, "§7 states no umma_idesc_bf16_f32 constant"
    for m, n, hexval in consts:
        got = build_idesc(fields, int(m), int(n))
        assert got == int(hexval, 16), f"table gives 0x{got:08X} for M={m}, N={n}; the doc says {hexval}"
    used = {b for ranges, _, _ in fields for lo, hi in ranges for b in range(lo, hi + 1)}
    reserved = re.search(r"Bits (\d+) and (\d+) are reserved", sec)
    assert reserved, "§7 names no reserved bits"
    for b in map(int, reserved.groups()):
        assert b not in used, f"bit {b} is called reserved but a field of the table covers it"


def smem_tables():
    b = {}
    for cells in _table(_section((DOCS / "b200/contracts.md").read_text(), 6)):
        b[cells[1]] = _bits(cells[0])[0]
    h = {}
    for cells in _table(_section((DOCS / "h100/contracts.md").read_text(), 5)):
        h[cells[1]] = _bits(cells[0])[0]
    return b, h


def _field(table: dict, starts: str):
    keys = [k for k in table if k.startswith(starts)]
    assert len(keys) == 1, f"no single field starting {starts!r} in {list(table)}"
    return keys[0], table[keys[0]]


def swizzle_codes(table: dict) -> dict[str, int]:
    """'swizzle: 0 none, 1 = 128B with 32B atom, 2 = 128B, ...' -> {'128B': 2, ...}."""
    key, _ = _field(table, "swizzle")
    codes = {}
    for part in key.split(":", 1)[1].split(","):
        m = re.match(r"\s*(\d+)(?: =)? (.+?)\s*$", part)
        assert m, part
        codes[m.group(2)] = int(m.group(1))
    return codes


def build_smem_desc(table: dict, addr: int, lbo: int, sbo: int, swizzle: str) -> int:
    desc = 0
    for name, value in (("start address", addr >> 4), ("leading-dimension byte offset", lbo >> 4),
                        ("stride-dimension byte offset", sbo >> 4)):
        _, (lo, hi) = _field(table, name)
        assert value < 1 << (hi - lo + 1)
        desc |= value << lo
    fixed = [k for k in table if k.startswith("fixed value")]
    for k in fixed:  # 'fixed value 0b001 (set bit 46)'
        lo, hi = table[k]
        desc |= int(re.search(r"0b([01]+)", k).group(1), 2) << lo
    _, (lo, _) = _field(table, "swizzle")
    desc |= swizzle_codes(table)[swizzle] << lo
    return desc


def test_swizzle_equivalences_agree_with_both_tables():
    b, h = smem_tables()
    bc, hc = swizzle_codes(b), swizzle_codes(h)
    text = (DOCS / "b200/contracts.md").read_text()
    claims = re.findall(r"(\d+)<<(\d+) == (\d+)<<(\d+) = (\d+B)", text)
    assert len(claims) == 3, f"expected the three equivalences in b200 §6, found {claims}"
    _, (h_lo, _) = _field(h, "swizzle")
    _, (b_lo, _) = _field(b, "swizzle")
    for hv, hs, bv, bs, mode in claims:
        assert int(hv) << int(hs) == int(bv) << int(bs), f"{hv}<<{hs} != {bv}<<{bs}"
        assert (int(hs), int(bs)) == (h_lo, b_lo), "shifts are not the tables' swizzle positions"
        assert hc[mode] == int(hv) and bc[mode] == int(bv), f"{mode}: tables say Hopper {hc[mode]}, tcgen05 {bc[mode]}"


def test_address_masks():
    """`bit 24 cleared (& 0xFEFFFFFF ...)` in the prose, and the mask the wrapper really applies."""
    seen = {}
    for rel in ("b200/contracts.md", "common/templates/tma.cuh"):
        text = (DOCS / rel).read_text()
        found = re.findall(r"bit (\d+) cleared \(`?& (0x[0-9A-Fa-f]+)", text)
        assert found, f"{rel}: no 'bit N cleared (& 0x...)' claim"
        for bit, mask in found:
            assert int(mask, 16) == 0xFFFFFFFF & ~(1 << int(bit)), f"{rel}: {mask} is not bit {bit} cleared"
            seen[mask.upper()] = bit
    code = re.search(r"tma_load_2d_pair\(.*?smem_u32\(bar\) & (0x[0-9A-Fa-f]+)u", (DOCS / "common/templates/tma.cuh")
                     .read_text(), re.S)
    assert code and code.group(1).upper() in seen, "tma_load_2d_pair does not apply the documented mask"


def _enum(header: str, name: str) -> dict[str, int]:
    m = re.search(rf"enum class {name} : uint32_t \{{([^}}]*)\}}", header)
    assert m, name
    return {k.strip(): int(v) for k, v in (e.split("=") for e in m.group(1).split(","))}


def test_headers_compute_the_documented_descriptors(tmp_path):
    """One nvcc run per arch: static_asserts of the header functions against the values the doc
    tables give (so a header and its table cannot drift apart)."""
    nvcc, _ = cuda_tools()
    _, fields = idesc_table()
    b, h = smem_tables()
    umma_enum = _enum((DOCS / "b200/templates/tcgen05.cuh").read_text(), "UmmaSwizzle")
    wgmma_enum = _enum((DOCS / "h100/templates/wgmma.cuh").read_text(), "WgmmaSwizzle")
    enum_name = {"none": "None", "128B": "B128", "64B": "B64", "32B": "B32", "128B with 32B atom": "B128_Atom32"}
    for table, enum in ((b, umma_enum), (h, wgmma_enum)):
        for mode, code in swizzle_codes(table).items():
            assert enum[enum_name[mode]] == code, f"header enum {enum_name[mode]}={enum[enum_name[mode]]}, doc {code}"
    b200 = ['#include "tcgen05.cuh"']
    for m, n in ((128, 128), (64, 8), (128, 256), (64, 256), (128, 16)):
        b200.append(f"static_assert(xl::umma_idesc_bf16_f32<{m}, {n}>() == 0x{build_idesc(fields, m, n):08X}u, "
                    f"\"idesc {m}x{n}\");")
    b200.append(f"static_assert(xl::umma_idesc_bf16_f32<256, 256, 2>() == 0x{build_idesc(fields, 256, 256):08X}u,"
                " \"idesc pair\");")
    h100 = ['#include "wgmma.cuh"']
    # the SW128 K-major operand both docs describe: LBO 16 (unused), SBO 1024 B, 1024-aligned tiles
    for addr in (0x400, 0x8000, 0x1c400, 0x3fc00):
        for mode in ("128B", "64B", "32B"):
            ename = enum_name[mode]
            b200.append(f"static_assert(xl::umma_desc_bits(0x{addr:x}u, 16, 1024, xl::UmmaSwizzle::{ename}) == "
                        f"0x{build_smem_desc(b, addr, 16, 1024, mode):016X}ull, \"umma desc\");")
            h100.append(f"static_assert(xl::wgmma_desc_bits(0x{addr:x}u, 16, 1024, xl::WgmmaSwizzle::{ename}) == "
                        f"0x{build_smem_desc(h, addr, 16, 1024, mode):016X}ull, \"wgmma desc\");")
    # the Hopper descriptor with the version bit set is the tcgen05 one (b200 §6's claim)
    for mode in ("128B", "64B", "32B"):
        assert build_smem_desc(h, 0x400, 16, 1024, mode) | (1 << 46) == build_smem_desc(b, 0x400, 16, 1024, mode)
    for arch, lines, inc, target in (("b200", b200, "b200", "sm_100a"), ("h100", h100, "h100", "sm_90a")):
        src = tmp_path / f"desc_{arch}.cu"
        src.write_text("\n".join([*lines, "__global__ void xl_desc_probe() {}", ""]))
        res = subprocess.run([str(nvcc), GENCODE[target], "-std=c++17", "-I", str(DOCS / inc / "templates"),
                              "-I", str(DOCS / "common/templates"), "-cubin", "-o", str(tmp_path / f"{arch}.cubin"),
                              str(src)], capture_output=True, text=True)
        assert res.returncode == 0, f"{arch}: a header disagrees with its doc table:\n{res.stderr[-3000:]}"


def test_rebuilders_catch_a_wrong_constant():
    """The rebuild is not a tautology: a changed table value or constant changes the result."""
    _, fields = idesc_table()
    good = build_idesc(fields, 128, 128)
    shifted = [(([(lo + 1, hi + 1)] if name.startswith("M >>") else r), name, ours) for r, name, ours in fields
               for lo, hi in [r[0]]]
    assert build_idesc(shifted, 128, 128) != good  # the classic M-field-off-by-one bug
    b, h = smem_tables()
    assert build_smem_desc(b, 0x400, 16, 1024, "128B") != build_smem_desc(h, 0x400, 16, 1024, "128B")
