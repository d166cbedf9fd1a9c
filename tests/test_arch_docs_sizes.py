"""Every shared-memory, stage-count, TMEM-column and register-budget claim of the arch docs'
prose (contracts.md, templates/*.md) is recomputed from the tile sizes it states.

The claims are parsed from the docs. Recognised forms (bf16 operands, 2 bytes per element; KB and
KiB both mean 1024 bytes, as in the docs):

* a stage: `128x64 (A) + 256x64 (B) bf16` (rows x K of each operand) or `128x256x64 stages`
  (BM x BN x BK); followed by `is / = N KiB`, `are N KiB`, `N stages (X KiB) fit` / `do not`,
  `N stages x (...) = X KiB`, `N-M stages of ... fit in X KB`;
* a tile: `64x64 bf16 = 8 KiB`;
* TMEM: `128 lanes (rows) x 512 columns of 32-bit cells (256 KiB)`, `(2 x 256 fp32 columns = all
  512`, the attention budget `BM = BN = 128, D = 128: 2 x S (256) + O (128) + 2 x P (128) = 512`;
* registers: `192 threads x 255 registers = 48,960 registers, under the 65,536`, and the
  setmaxnreg split `384 threads at 168 registers = 64,512 → producer 40 + 2 consumers x 232 = 504
  per "thread triple" ≤ 3 x 168`.

"Fit" means within the per-block shared-memory maximum of the arch's params.md (227 KB = 232,448 B),
and TMEM within 512 columns, registers within the 65,536 of params.md. Any size in KB / KiB in that
prose that no recognised claim accounts for fails the test (so a new claim is written in a
checkable form, or the parser learns it); the only bare sizes allowed are the platform limits
themselves, checked against params.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "arch_docs"
KIB = 1024
BF16 = 2
NUM = r"(\d[\d,]*)"


def _n(s: str) -> int:
    return int(s.replace(",", ""))


def limits(arch: str) -> dict[str, int]:
    """Per-block smem, registers per SM and TMEM columns, read from params.md."""
    text = (DOCS / arch / "params.md").read_text()
    both = re.search(r"\| shared memory per SM / per block, max \| (\d+) KB / (\d+) KB", text)
    per_sm = re.search(r"\| shared memory per SM, max \| (\d+) KB", text)
    per_block = re.search(r"\| shared memory per block, max \| (\d+) KB", text)
    sm, block = (both.groups() if both else (per_sm and per_sm.group(1), per_block and per_block.group(1)))
    assert sm and block, f"{arch}/params.md: no per-SM / per-block shared-memory maximum row"
    regs = re.search(r"32-bit registers per SM \| ([\d,]+)", text)
    assert regs, f"{arch}/params.md: no registers-per-SM row"
    out = {"smem_sm": _n(sm) * KIB, "smem_block": _n(block) * KIB, "regs": _n(regs.group(1))}
    cols = re.search(r"TMEM\) per SM \| \d+ KB = (\d+) lanes x (\d+) columns", text)
    if cols:
        out["tmem_cols"] = _n(cols.group(2))
        out["tmem_lanes"] = _n(cols.group(1))
    return out


def prose(arch: str) -> list[tuple[str, str]]:
    """(file, paragraph with line breaks folded) of contracts.md and the template guides."""
    out = []
    for f in [DOCS / arch / "contracts.md", *sorted((DOCS / arch / "templates").glob("*.md"))]:
        for para in re.split(r"\n\s*\n", f.read_text()):
            out.append((f"{arch}/{f.relative_to(DOCS / arch)}", " ".join(para.split())))
    return out


STAGE_AB = re.compile(r"(\d+)x(\d+) \(A\) \+ (\d+)x(\d+) \(B\) bf16\)?")
STAGE_MNK = re.compile(r"(\d+)x(\d+)x(\d+) (?:stages|tile)")
SIZE = re.compile(r"(\d+) ?(KiB|KB)\b")


class Checker:
    def __init__(self, arch: str):
        self.arch = arch
        self.lim = limits(arch)
        self.errors: list[str] = []
        self.claims = 0
        self.covered: list[tuple[int, int]] = []

    def bad(self, where: str, msg: str):
        self.errors.append(f"{where}: {msg}")

    def cover(self, m: re.Match, base: int = 0):
        self.covered.append((base + m.start(), base + m.end()))
        self.claims += 1

    def paragraph(self, where: str, text: str):
        self.covered = []
        cap = self.lim["smem_block"]
        # stages: find each stage definition, then the claims that follow it (up to the next one)
        defs = sorted([(m.start(), m, "ab") for m in STAGE_AB.finditer(text)]
                      + [(m.start(), m, "mnk") for m in STAGE_MNK.finditer(text)], key=lambda d: d[0])
        for i, (start, m, kind) in enumerate(defs):
            if kind == "ab":
                a_rows, a_k, b_rows, b_k = map(int, m.groups())
                stage = (a_rows * a_k + b_rows * b_k) * BF16
            else:
                bm, bn, bk = map(int, m.groups())
                stage = (bm + bn) * bk * BF16
            self.cover(m)
            end = defs[i + 1][0] if i + 1 < len(defs) else len(text)
            seg = text[m.end():end]
            head = text[max(0, start - 40):start]
            # "N stages x (" before the stage, "= X KiB" after it
            pre = re.search(r"(\d+) stages? x \($", head)
            eq = re.match(r" ?(?:is|=|stages are|tile has|has) (\d+) ?(KiB|KB)", seg)
            if eq:
                self.cover(eq, m.end())
                got = int(eq.group(1)) * KIB
                want = stage * (int(pre.group(1)) if pre else 1)
                if got != want:
                    self.bad(where, f"{m.group(0)!r}{' x ' + pre.group(1) if pre else ''} is {want // KIB} KiB "
                                    f"({want} B), the doc says {eq.group(1)} {eq.group(2)}")
            # "N-M stages of <stage> fit in X KB" (the stage follows the claim)
            rng = re.search(r"(\d+)-(\d+) stages of $", head)
            fit_in = re.match(r" fit in (\d+) ?(KiB|KB)", seg)
            if rng and fit_in:
                self.cover(fit_in, m.end())
                hi = int(rng.group(2))
                room = int(fit_in.group(1)) * KIB
                if room > cap:
                    self.bad(where, f"{fit_in.group(1)} {fit_in.group(2)} exceeds the per-block maximum {cap} B")
                if hi * stage > room:
                    self.bad(where, f"'{rng.group(0)}{m.group(0)} fit in {fit_in.group(1)} {fit_in.group(2)}': "
                                    f"{hi} stages x {stage // KIB} KiB = {hi * stage // KIB} KiB > "
                                    f"{room // KIB} KiB (at most {room // stage} fit)")
            # "[S = ]N stages (X KiB) fit [in the Y KiB]" / "do not"
            for c in re.finditer(r"(?:at most )?(?:S = )?(\d+) stages \((\d+) ?(KiB|KB)\) (fit|do not)"
                                 r"(?: in the (\d+) ?(KiB|KB))?", seg):
                self.cover(c, m.end())
                n, total = int(c.group(1)), int(c.group(2)) * KIB
                room = int(c.group(5)) * KIB if c.group(5) else cap
                if c.group(5):
                    self.covered.append((m.end() + c.start(5), m.end() + c.end(6)))
                if room > cap:
                    self.bad(where, f"{c.group(5)} KiB exceeds the per-block maximum {cap} B")
                if n * stage != total:
                    self.bad(where, f"{n} stages x {stage} B = {n * stage // KIB} KiB, the doc says "
                                    f"{c.group(2)} {c.group(3)}")
                if (c.group(4) == "fit") != (total <= room):
                    self.bad(where, f"'{c.group(0)}': {total} B vs {room} B available")
                if c.group(0).startswith("at most") and (n + 1) * stage <= room:
                    self.bad(where, f"'{c.group(0)}': {n + 1} stages ({(n + 1) * stage} B) fit as well")
        # a plain tile: "64x64 bf16 = 8 KiB"
        for m in re.finditer(r"(\d+)x(\d+) bf16 = (\d+) ?(KiB|KB)", text):
            if any(s <= m.start() < e for s, e in self.covered):
                continue
            self.cover(m)
            want = int(m.group(1)) * int(m.group(2)) * BF16
            if int(m.group(3)) * KIB != want:
                self.bad(where, f"{m.group(1)}x{m.group(2)} bf16 is {want} B, the doc says {m.group(3)} {m.group(4)}")
        # TMEM capacity
        for m in re.finditer(r"(\d+) lanes \(rows\) x (\d+) columns of 32-bit cells \((\d+) ?(KiB|KB)\)", text):
            self.cover(m)
            lanes, cols, size = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if lanes * cols * 4 != size * KIB:
                self.bad(where, f"{lanes} x {cols} x 4 B = {lanes * cols * 4} B, the doc says {size} {m.group(4)}")
            if "tmem_cols" in self.lim and (lanes, cols) != (self.lim["tmem_lanes"], self.lim["tmem_cols"]):
                self.bad(where, f"TMEM {lanes}x{cols} disagrees with params.md")
        for m in re.finditer(r"(\d+) x (\d+) fp32 columns = all (\d+)", text):
            self.cover(m)
            a, b, total = map(int, m.groups())
            if a * b != total or total != self.lim.get("tmem_cols", 512):
                self.bad(where, f"'{m.group(0)}': {a} x {b} = {a * b}, TMEM has {self.lim.get('tmem_cols')}")
        for m in re.finditer(r"BM = BN = (\d+), D = (\d+): 2 x S \((\d+)\) \+ O \((\d+)\) \+ 2 x P \((\d+)\) = (\d+)",
                             text):
            self.cover(m)
            bn, d, s2, o, p2, total = map(int, m.groups())
            # S fp32: BN columns per buffer; O fp32: D columns; P bf16: BN/2 columns per buffer
            want = {"2 x S": 2 * bn, "O": d, "2 x P": 2 * (bn // 2)}
            got = {"2 x S": s2, "O": o, "2 x P": p2}
            for k in want:
                if want[k] != got[k]:
                    self.bad(where, f"TMEM budget: {k} is {want[k]} columns, the doc says {got[k]}")
            if s2 + o + p2 != total or total > self.lim.get("tmem_cols", 512):
                self.bad(where, f"TMEM budget: {s2} + {o} + {p2} = {s2 + o + p2} (doc {total}), capacity "
                                f"{self.lim.get('tmem_cols')}")
        # registers
        for m in re.finditer(rf"(\d+) threads x (\d+) registers = {NUM} registers, under the {NUM}", text):
            self.cover(m)
            t, r, prod, pool = int(m.group(1)), int(m.group(2)), _n(m.group(3)), _n(m.group(4))
            if t * r != prod:
                self.bad(where, f"{t} x {r} = {t * r}, the doc says {prod}")
            if pool != self.lim["regs"] or prod > pool:
                self.bad(where, f"'{m.group(0)}': pool {pool} vs params.md {self.lim['regs']}, product {prod}")
        for m in re.finditer(rf"(\d+) threads at (\d+) registers = {NUM} → producer (\d+) \+ (\d+) consumers x (\d+) "
                             rf"= (\d+) per \"thread triple\" ≤ (\d+) x (\d+)", text):
            self.cover(m)
            t, r, prod, p, nc, c, tri, k, r2 = (_n(g) for g in m.groups())
            if t * r != prod or prod > self.lim["regs"]:
                self.bad(where, f"{t} x {r} = {t * r} (doc {prod}), pool {self.lim['regs']}")
            if p + nc * c != tri or tri > k * r2 or k != nc + 1 or r2 != r or t != 128 * k:
                self.bad(where, f"setmaxnreg split: {p} + {nc} x {c} = {p + nc * c} (doc {tri}) vs {k} x {r2} = "
                                f"{k * r2}; {t} threads = {t // 128} warpgroups")
        # every "= <number>" in a sentence about TMEM columns or registers is accounted for
        for sent in re.finditer(r"[^.;]*\b(?:columns?|registers?)\b[^.;]*", text):
            # an arithmetic result: "<n> x / + / at <...> = <n>" (not a parameter like "M = 128")
            for m in re.finditer(r"\d[\d,]*\)?\s*(?:[x+×*]|\bat\b)\s*[^=;]{0,80}?(= (?:all )?\d[\d,]*)",
                                 sent.group(0)):
                pos = sent.start() + m.start(1)
                if not any(s <= pos < e for s, e in self.covered):
                    self.bad(where, f"'{m.group(0)}' (columns / registers) is not derived from stated sizes: "
                                    f"...{sent.group(0).strip()[:160]}...")
        # every size in KB / KiB is accounted for
        for m in SIZE.finditer(text):
            if any(s <= m.start() < e for s, e in self.covered):
                continue
            size = int(m.group(1)) * KIB
            if size in (self.lim["smem_block"], self.lim["smem_sm"], 48 * KIB):
                continue  # a platform limit (48 KiB: the opt-in threshold for dynamic smem)
            ctx = text[max(0, m.start() - 60):m.end() + 20]
            self.bad(where, f"size '{m.group(0)}' is not derived from stated tile sizes: ...{ctx}...")


@pytest.mark.parametrize("arch", ["b200", "h100"])
def test_size_claims(arch):
    ck = Checker(arch)
    for where, para in prose(arch):
        ck.paragraph(where, para)
    assert not ck.errors, "\n".join(ck.errors)
    assert ck.claims >= 5, f"{arch}: only {ck.claims} size claims parsed: the parser lost them"


@pytest.mark.parametrize("text,expect", [
    ("4-7 stages of 128x64 (A) + 256x64 (B) bf16 fit in 227 KB.", "7 stages x 48 KiB = 336 KiB"),
    ("A stage of 128x64 (A) + 256x64 (B) bf16 is 40 KiB.", "is 48 KiB"),
    ("128x256x64 stages are 48 KiB: S = 5 stages (240 KiB) fit in the 227 KiB.", "vs 232448 B"),
    ("A stage of 128x64 (A) + 128x64 (B) bf16 is 32 KiB, so at most 6 stages (192 KiB) fit.", "7 stages"),
    ("BM = BN = 128, D = 128: 2 x S (256) + O (128) + 2 x P (256) = 640.", "2 x P is 128"),
    ("192 threads x 255 registers = 48,690 registers, under the 65,536.", "48960"),
    ("it needs 96 KiB of smem.", "not derived"),
    ("the accumulators take 3 x 128 columns = 384 of TMEM.", "not derived"),
])
def test_the_checker_catches(text, expect):
    ck = Checker("h100" if "threads at" in text else "b200")
    ck.paragraph("t", text)
    assert any(expect in e for e in ck.errors), f"{text!r}: {ck.errors}"


# ---- params.md figures vs xlang/archs.toml (the audit's memory_gib partial item) --------------------------

def _chip_table(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """Header and rows (by first cell) of the first table after '## Chip'."""
    rows, seen = [], False
    for ln in text[text.index("## Chip"):].splitlines()[1:]:
        if ln.startswith("|"):
            seen = True
            cells = [c.strip() for c in ln.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif seen:
            break
    return rows[0], {r[0]: r for r in rows[1:]}


def _first_int(cell: str, unit: str) -> int:
    m = re.search(rf"(\d[\d,]*) {unit}", cell)
    assert m, f"no '<n> {unit}' in {cell!r}"
    return _n(m.group(1))


def test_params_figures_match_archs_toml():
    """The figures params.md gives a model and the ones xlang reports (archs.toml) are the same."""
    import tomllib  # noqa: PLC0415

    archs = tomllib.loads((REPO / "xlang/archs.toml").read_text())["archs"]
    wrong = []
    for key, arch in archs.items():
        text = (DOCS / arch["docs"] / "params.md").read_text()
        header, chip = _chip_table(text)
        col = next((i for i, h in enumerate(header) if h.lower().split()[0] == key), None)
        assert col is not None, f"{arch['docs']}/params.md '## Chip' has no column {key.upper()}: {header}"
        checks = [("SMs", "", arch["sms"]), ("HBM capacity", "GB", arch["memory_gib"])]
        for row, unit, want in checks:
            name = next((k for k in chip if k == row or k.endswith(f"({row})")), None)
            assert name, f"{arch['docs']}/params.md '## Chip' has no {row} row: {list(chip)}"
            cell = chip[name][col]
            got = int(re.match(r"\d+", cell).group(0)) if not unit else _first_int(cell, unit)
            if got != want:
                wrong.append(f"{key}: params.md {row} = {got} {unit}, archs.toml {want}")
        lim = limits(arch["docs"])
        for name, got, want in (("smem per SM", lim["smem_sm"] // KIB, arch["smem_per_sm_kib"]),
                                ("smem per block", lim["smem_block"] // KIB, arch["smem_per_block_kib"]),
                                ("registers per SM", lim["regs"], arch["registers_per_sm"])):
            if got != want:
                wrong.append(f"{key}: params.md {name} = {got}, archs.toml {want}")
    assert not wrong, "\n".join(wrong)
