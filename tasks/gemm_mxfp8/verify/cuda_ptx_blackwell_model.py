"""CPU model of tasks/gemm_mxfp8/solutions/cuda_ptx_blackwell.cu (CUDA C++ / inline PTX MXFP8 GEMM, sm_100a): a torch
re-enactment of its tile / K-step loop and of its scale handling, against the task's reference at the task's tolerance
(the judge's own compare_output).

A PASS SHOWS THAT THE KERNEL'S SCALE INDEXING AGREES WITH THE RULES MODELLED HERE, NOT THAT THE KERNEL RUNS: no B200 is
in this workplace and the kernel has never run.

The model builds the expert with nvcc (xlang's cuda_ptx build) and calls the rule functions it exports (xl_rule_*: the
same constexpr functions its kernel inlines), so a change to a rule in the .cu changes what is modelled:
  * scale staging (scale warps): lane l, word j loads the 32-bit word kt (4 scale bytes, little-endian) of tile row
    xl_rule_scale_row(l, j) (byte 127 past M or N) and stores it at word xl_rule_scale_word(l, j) of the operand's
    512-byte chunk of slot s = kt % STAGES (SFA chunk, then SFB chunk 512 bytes on);
  * tcgen05.cp.32x128b.warpx4 (PTX ISA tcgen05.cp; shared-memory descriptor 9.7.16.4.1): the source descriptor
    xl_rule_chunk_desc(chunk) is decoded (start, SBO; no swizzle) and TMEM lane r (and r + 32, + 64, + 96: warpx4) gets
    the 16 bytes of row r at start + (r // 8) SBO + (r % 8) 16, byte b of its column c from byte 4 c + b;
  * the MMA for K block b of the step (tcgen05.mma kind::mxf8f6f4 .scale_vec::1X, one scale per row per 32-wide
    K block): its scale operands xl_rule_scale_operand(tmem, s, A|B, b) and instruction descriptor xl_rule_idesc are
    decoded (M, N, types, UE8M0 scale type, the scale-factor ids in bits 29-30 / 4-5, which must equal the ids the
    operand addresses carry in bits 30-31); row m of A takes the byte `id` of TMEM lane m, column (operand column) +
    m // 32 (CUTLASS's make_tmem_layout_sfa for this MMA, which tasks/gemm_mxfp8/verify/cutedsl_blackwell_emulate.py
    checks at trace time), likewise B; the K block is elements 32 b .. 32 b + 31 of the step (A / B descriptors + 32 B);
  * fp32 accumulation of (A_blk @ B_blk^T) * sa * sb per K block (the tensor core's internal summation order and
    precision are NOT modelled), TMA boxes zero past M and N, bf16 epilogue clipped at M and N.
Static checks: each slot's scale columns are its own, outside the accumulator and inside the allocation.
Not modelled: the pipelines and barriers, the epilogue's TMEM loads (the bf16 expert's), how the hardware reads TMEM
(taken from the PTX ISA and CUTLASS's layouts), speed.

    python3 tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py          # cases; 0 = PASS
    python3 tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py --bugs   # every injected bug must FAIL
"""
import ctypes
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
EXPERT = ROOT / "tasks/gemm_mxfp8/solutions/cuda_ptx_blackwell.cu"
UNWRITTEN = -1
TMEM_LANES = 128


def build_rules_library(source=EXPERT, workdir=None, task_name="gemm_mxfp8"):
    """The expert built by xlang's cuda_ptx backend for b200 (nvcc, no GPU needed); returns its shared object."""
    from xlang.archs import get_arch
    from xlang.backend import build_candidate
    from xlang.task import get_task

    task = get_task(task_name)
    result = build_candidate(Path(source), "cuda_ptx", task, get_arch("b200"), task.shape(),
                             workdir=Path(workdir or tempfile.mkdtemp(prefix="mxfp8-ptx-model-")))
    if not result.ok:
        raise RuntimeError(f"the expert does not build: {result.error}")
    return result.load_path


class Rules:
    """The expert's scale rules, read from its shared object (xl_rule_*), tabulated once."""

    def __init__(self, so_path):
        lib = ctypes.CDLL(str(so_path))
        for name, restype in (("xl_rule_scale_operand", ctypes.c_uint32), ("xl_rule_idesc", ctypes.c_uint32),
                              ("xl_rule_chunk_desc", ctypes.c_uint64)):
            getattr(lib, name).restype = restype
        self.lib = lib
        (self.BM, self.BN, self.BK, self.STAGES, self.MMA_K, self.CHUNK, self.ACC_COLS, self.TMEM_COLS,
         self.CHUNKS) = (lib.xl_rule_const(i) for i in range(9))

    def scale_row(self, lane, j):
        return self.lib.xl_rule_scale_row(lane, j)

    def scale_word(self, lane, j):
        return self.lib.xl_rule_scale_word(lane, j)

    def scale_operand(self, tmem, s, operand, b):
        return self.lib.xl_rule_scale_operand(ctypes.c_uint32(tmem), s, operand, b)

    def idesc(self, sfa, sfb):
        return self.lib.xl_rule_idesc(ctypes.c_uint32(sfa), ctypes.c_uint32(sfb))

    def chunk_desc(self, addr):
        return self.lib.xl_rule_chunk_desc(ctypes.c_uint32(addr))


# Injected bugs: each replaces one rule (or one step of the loop) with a plausible wrong one; every one must fail.
class _Bugged(Rules):
    def __init__(self, rules, bug):
        self.__dict__.update(rules.__dict__)
        self.bug, self.base = bug, rules

    def scale_word(self, lane, j):   # the word of row lane + 32 j stored at word lane + 32 j (row-major chunk)
        return lane + 32 * j if self.bug == "chunk_row_major" else self.base.scale_word(lane, j)

    def scale_row(self, lane, j):    # lane l loads rows 4 l + j (consecutive rows), stored at the same words
        return 4 * lane + j if self.bug == "lane_rows_consecutive" else self.base.scale_row(lane, j)

    def scale_operand(self, tmem, s, operand, b):
        if self.bug == "scale_id_dropped":   # every MMA of the step reads K block 0's scale byte
            return self.base.scale_operand(tmem, s, operand, 0)
        if self.bug == "columns_shared":     # one set of scale columns for every slot
            return self.base.scale_operand(tmem, 0, operand, b)
        return self.base.scale_operand(tmem, s, operand, b)

    def idesc(self, sfa, sfb):
        if self.bug == "idesc_without_ids":  # the descriptor's scale-factor ids left 0
            return self.base.idesc(sfa & 0x3FFFFFFF, sfb & 0x3FFFFFFF)
        return self.base.idesc(sfa, sfb)

    def chunk_desc(self, addr):
        d = self.base.chunk_desc(addr)
        if self.bug == "chunk_sbo_256":      # stride between 8-row core matrices 256 B instead of the chunk's 128
            d = (d & ~(0x3FFF << 32)) | (16 << 32)
        return d


LOOP_BUGS = ("sb_from_m_tile", "word_of_next_step")   # in the kernel's loop code, re-enacted here (not a rule function)
BUGS = ("chunk_row_major", "lane_rows_consecutive", "scale_id_dropped", "columns_shared", "idesc_without_ids",
        "chunk_sbo_256") + LOOP_BUGS


def decode_smem_desc(desc):
    return {"start": (desc & 0x3FFF) << 4, "lbo": ((desc >> 16) & 0x3FFF) << 4, "sbo": ((desc >> 32) & 0x3FFF) << 4,
            "version": (desc >> 46) & 7, "base": (desc >> 49) & 7, "swizzle": (desc >> 61) & 7}


def check_static(rules):
    """The design rules the serial model cannot see: descriptors' fixed fields and per-slot scale columns."""
    failures = []
    columns = {}
    for s in range(rules.STAGES):
        for operand in (0, 1):
            for b in range(rules.BK // rules.MMA_K):
                col = rules.scale_operand(0, s, operand, b) & 0xFFFF
                columns.setdefault((s, operand), set()).add(col)
    spans = {}
    for key, cols in columns.items():
        if len(cols) != 1:
            failures.append(f"slot {key[0]} operand {key[1]}: the MMAs of one step read columns {sorted(cols)}")
        col = min(cols)
        spans[key] = set(range(col, col + 4))   # tcgen05.cp .32x128b writes 4 columns
        if col < rules.ACC_COLS or col + 4 > rules.TMEM_COLS:
            failures.append(f"slot {key[0]} operand {key[1]}: scale columns {col}..{col + 3} outside "
                            f"[{rules.ACC_COLS}, {rules.TMEM_COLS})")
    keys = sorted(spans)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if spans[a] & spans[b]:
                failures.append(f"scale columns of {a} and {b} overlap: a copy could overwrite scales in use")
    d = decode_smem_desc(rules.chunk_desc(0x1000))
    if d["version"] != 1 or d["swizzle"] != 0 or d["base"] != 0:
        failures.append(f"chunk descriptor fields {d}")
    return failures


def decode_idesc(idesc):
    return {"b_sf_id": (idesc >> 4) & 3, "a_type": (idesc >> 7) & 7, "b_type": (idesc >> 10) & 7,
            "a_major": (idesc >> 15) & 1, "b_major": (idesc >> 16) & 1, "n": ((idesc >> 17) & 0x3F) << 3,
            "scale_type": (idesc >> 23) & 1, "m": ((idesc >> 24) & 0x1F) << 4, "a_sf_id": (idesc >> 29) & 3,
            "other": idesc & 0x8000600F}   # sparsity, saturate, negate bits, bit 31: all 0 here


SF_BASE = 0x30000   # shared address of slot 0's scale chunks (the kernel: after 6 x 32 KiB of A / B boxes)


def stage(smem, scales, rows, row0, kt, chunk_addr, rules, bugs):
    """The scale warp's stores of one operand's chunk (its stage_scales)."""
    step = min(kt + 1, scales.shape[1] // 4 - 1) if "word_of_next_step" in bugs else kt
    for lane in range(32):
        for j in range(4):
            row = row0 + rules.scale_row(lane, j)
            word = scales[row, 4 * step: 4 * step + 4].long() if row < rows else torch.full((4,), 127)
            at = chunk_addr + 4 * rules.scale_word(lane, j)
            smem[at: at + 4] = word   # little-endian: block 4 kt + b at byte b


def copy_to_tmem(tmem, smem, taddr, desc):
    """tcgen05.cp.cta_group::1.32x128b.warpx4: 32 rows of 16 bytes to lanes r, r + 32, r + 64, r + 96, 4 columns."""
    d = decode_smem_desc(desc)
    assert d["version"] == 1 and d["swizzle"] == 0, f"chunk descriptor {d}"
    lane0, col = taddr >> 16, taddr & 0xFFFF
    assert lane0 == 0, "tcgen05.cp .warpx4 from a lane other than 0"
    for r in range(32):
        src = d["start"] + (r // 8) * d["sbo"] + (r % 8) * 16
        row = smem[src: src + 16].view(4, 4)    # column c, byte b
        for q in range(4):
            tmem[32 * q + r, col: col + 4] = row


def mma_scales(tmem, operand_addr, sf_id, rows):
    """[rows] scale factors an MMA reads: row m at TMEM lane m, column (operand's) + m // 32, byte sf_id."""
    col = operand_addr & 0xFFFF
    assert (operand_addr >> 16) & 0x3FFF == 0, "scale operand with a lane offset"
    m = torch.arange(rows)
    byte = tmem[m, col + m // 32, sf_id]
    assert (byte != UNWRITTEN).all(), "the MMA reads a scale byte nothing wrote"
    return (byte.float() - 127.0).exp2()


def box(x, row0, rows, k0, width):
    out = torch.zeros(rows, width)
    r1 = min(row0 + rows, x.shape[0])
    if r1 > row0:
        out[: r1 - row0] = x[row0:r1, k0:k0 + width].float()
    return out


def model(inputs, shape, rules, bugs=()):
    """C as the expert computes it, tile by tile and K step by K step."""
    A, B, SA, SB = inputs["A"], inputs["B"], inputs["SA"], inputs["SB"]
    M, N, K = shape["M"], shape["N"], shape["K"]
    BM, BN, BK, MMA_K = rules.BM, rules.BN, rules.BK, rules.MMA_K
    C = torch.full((M, N), float("nan"))
    for tm in range(-(-M // BM)):
        for tn in range(-(-N // BN)):
            smem = torch.full((1 << 18,), UNWRITTEN, dtype=torch.long)
            tmem = torch.full((TMEM_LANES, rules.TMEM_COLS, 4), UNWRITTEN, dtype=torch.long)
            acc = torch.zeros(BM, BN)
            for kt in range(K // BK):
                s = kt % rules.STAGES
                chunk = SF_BASE + s * 2 * rules.CHUNK
                stage(smem, SA, M, tm * BM, kt, chunk, rules, bugs)
                stage(smem, SB, N, (tm * BM) if "sb_from_m_tile" in bugs else tn * BN, kt, chunk + rules.CHUNK,
                      rules, bugs)
                copy_to_tmem(tmem, smem, rules.scale_operand(0, s, 0, 0) & 0xFFFF, rules.chunk_desc(chunk))
                copy_to_tmem(tmem, smem, rules.scale_operand(0, s, 1, 0) & 0xFFFF,
                             rules.chunk_desc(chunk + rules.CHUNK))
                a, b = box(A, tm * BM, BM, kt * BK, BK), box(B, tn * BN, BN, kt * BK, BK)
                for blk in range(BK // MMA_K):
                    sfa, sfb = rules.scale_operand(0, s, 0, blk), rules.scale_operand(0, s, 1, blk)
                    d = decode_idesc(rules.idesc(sfa, sfb))
                    assert (d["m"], d["n"], d["a_type"], d["b_type"], d["a_major"], d["b_major"], d["scale_type"],
                            d["other"]) == (BM, BN, 0, 0, 0, 0, 1, 0), f"instruction descriptor {d}"
                    assert (d["a_sf_id"], d["b_sf_id"]) == (sfa >> 30, sfb >> 30), \
                        "the descriptor's scale-factor ids differ from the operand addresses' (bits 30-31)"
                    ks = slice(blk * MMA_K, (blk + 1) * MMA_K)
                    sa = mma_scales(tmem, sfa, d["a_sf_id"], BM)
                    sb = mma_scales(tmem, sfb, d["b_sf_id"], BN)
                    acc = acc + (a[:, ks] @ b[:, ks].t()) * (sa[:, None] * sb[None, :])
            r1, c1 = min(BM, M - tm * BM), min(BN, N - tn * BN)
            C[tm * BM: tm * BM + r1, tn * BN: tn * BN + c1] = acc[:r1, :c1].to(torch.bfloat16).float()
    return C


CASES = (({"M": 130, "N": 144, "K": 256}, 1), ({"M": 7, "N": 272, "K": 384}, 2),
         ({"M": 257, "N": 400, "K": 1024}, 3), ({"M": 64, "N": 16, "K": 128}, 4))


def run_cases(rules, bugs=(), cases=CASES, quiet=False):
    """True when the static checks pass and the model matches the task's reference on every case and input kind."""
    from xlang.profiler.judge.verify import compare_output
    from xlang.task import get_task

    task = get_task("gemm_mxfp8")
    if bugs:
        for bug in bugs:
            if bug not in LOOP_BUGS:
                rules = _Bugged(rules, bug)
    failures = check_static(rules)
    for f in failures if not quiet else ():
        print("FAIL static:", f)
    ok = not failures
    for shape, seed in cases:
        task.check_shape(shape)
        for kind in task.input_kinds:
            x = task.make_inputs(shape, seed, "cpu", kind)
            try:
                got = model(x, shape, rules, bugs)
            except AssertionError as e:   # the model found the kernel reading what it never wrote, or a bad field
                ok = False
                if not quiet:
                    print(f"FAIL {shape} {kind}: {e}")
                continue
            stats = compare_output("C", got, task.reference(x, shape)["C"], **task.tolerance,
                           bound=task.bound_for("C", x, shape))
            good = "failure" not in stats
            ok &= good
            if not quiet:
                print(f"{'ok  ' if good else 'FAIL'} {shape} {kind}: max rel err {stats['max_rel_err']:.3g}")
    return ok


def main(argv):
    rules = Rules(build_rules_library())
    if "--bugs" in argv:
        caught = [b for b in BUGS if not run_cases(rules, (b,), cases=CASES[:2], quiet=True)]
        for b in BUGS:
            print(f"bug {b}: {'FAILS (caught)' if b in caught else 'PASSES (missed)'}")
        return 0 if len(caught) == len(BUGS) else 1
    good = run_cases(rules)
    print("PASS" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
