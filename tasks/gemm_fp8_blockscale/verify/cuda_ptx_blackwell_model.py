"""CPU model of tasks/gemm_fp8_blockscale/solutions/cuda_ptx_blackwell.cu (CUDA C++ / inline PTX 1d2d fp8 GEMM,
sm_100a): a torch re-enactment of its tile / K-block loop, its two TMEM partials, the per-128-block promotion and its
scale indexing, against the task's reference at the task's tolerance (the judge's own compare_output).

A PASS SHOWS THAT THE KERNEL'S LOOP, BUFFER CHOICE AND SCALE INDEXING AGREE WITH THE RULES MODELLED HERE, NOT THAT THE
KERNEL RUNS: no B200 is in this workplace and the kernel has never run.

The model builds the expert with nvcc (xlang's cuda_ptx build) and calls the rule functions it exports (xl_rule_*: the
same constexpr functions its kernel inlines), so a change to a rule in the .cu changes what is modelled:
  * MMA issue for K block kb: four tcgen05.mma kind::f8f6f4 into TMEM columns xl_rule_partial_column(kb) .. + BN,
    MMA j reading the boxes' K elements from xl_rule_k_step_offset(j) (the descriptors' start field, 16-byte units;
    e4m3 is one byte an element) and overwriting or adding per xl_rule_accumulate_flag(j) (enable-input-d); the
    instruction descriptor xl_rule_idesc() is decoded (f32 D, E4M3 A and B, K-major, M, N, nothing else set);
  * schedule: the most overlapped order the kernel's barriers allow, MMA(kb + 1) before promote(kb) (the MMA issuer
    waits only for the promotion of kb - 1, which used the same buffer), so two K blocks sharing a buffer would clobber;
  * promotion by tile row r (TMEM lane r): acc[r, :] += partial[r, :] * SA.flat[xl_rule_sa_index(row, kb, K/128)]
    * SB.flat[xl_rule_sb_index(tn, kb, K/128)], rows past M scaled by 0 (their A rows are zero: TMA fill), every index
    inside its tensor (the kernel would read out of bounds otherwise);
  * TMA boxes zero past M and N, bf16 epilogue clipped at M and N.
TMEM starts as NaN: a partial read before any MMA wrote it, or added to without a fresh start, poisons the output.
Not modelled: the pipelines' barriers themselves, the tensor core's internal fp8 summation order and precision, how
the hardware lays TMEM out for tcgen05.ld.32x32b (taken from the PTX ISA and the bf16 expert), speed.

    python3 tasks/gemm_fp8_blockscale/verify/cuda_ptx_blackwell_model.py          # cases; 0 = PASS
    python3 tasks/gemm_fp8_blockscale/verify/cuda_ptx_blackwell_model.py --bugs   # every injected bug must FAIL
"""
import ctypes
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
EXPERT = ROOT / "tasks/gemm_fp8_blockscale/solutions/cuda_ptx_blackwell.cu"
TMEM_LANES = 128


def build_expert(source=EXPERT, workdir=None):
    """The expert built by xlang's cuda_ptx backend for b200 (nvcc, no GPU needed); returns the build result."""
    from xlang.archs import get_arch
    from xlang.backend import build_candidate
    from xlang.task import get_task

    task = get_task("gemm_fp8_blockscale")
    result = build_candidate(Path(source), "cuda_ptx", task, get_arch("b200"), task.shape(),
                             workdir=Path(workdir or tempfile.mkdtemp(prefix="fp8bs-ptx-model-")))
    if not result.ok:
        raise RuntimeError(f"the expert does not build: {result.error}")
    return result


class Rules:
    """The expert's rules, read from its shared object (xl_rule_*)."""

    def __init__(self, so_path):
        lib = ctypes.CDLL(str(so_path))
        for name, restype in (("xl_rule_partial_column", ctypes.c_uint32), ("xl_rule_accumulate_flag", ctypes.c_uint32),
                              ("xl_rule_k_step_offset", ctypes.c_uint64), ("xl_rule_sa_index", ctypes.c_longlong),
                              ("xl_rule_sb_index", ctypes.c_longlong), ("xl_rule_idesc", ctypes.c_uint32)):
            getattr(lib, name).restype = restype
        self.lib = lib
        self.BM, self.BN, self.BK, self.STAGES, self.MMA_K, self.BUFFERS, self.TMEM_COLS = \
            (lib.xl_rule_const(i) for i in range(7))

    def partial_column(self, kb):
        return self.lib.xl_rule_partial_column(kb)

    def accumulate_flag(self, j):
        return self.lib.xl_rule_accumulate_flag(j)

    def k_step_offset(self, j):
        return self.lib.xl_rule_k_step_offset(j)

    def sa_index(self, row, kb, kblocks):
        return self.lib.xl_rule_sa_index(row, kb, kblocks)

    def sb_index(self, tn, kb, kblocks):
        return self.lib.xl_rule_sb_index(tn, kb, kblocks)

    def idesc(self):
        return self.lib.xl_rule_idesc()


# Injected bugs: each replaces one rule with a plausible wrong one; every one must fail.
class _Bugged(Rules):
    def __init__(self, rules, bug):
        self.__dict__.update(rules.__dict__)
        self.bug, self.base = bug, rules

    def partial_column(self, kb):        # one TMEM buffer for every K block: MMA(kb + 1) overwrites kb's partial
        return 0 if self.bug == "buffers_shared" else self.base.partial_column(kb)

    def accumulate_flag(self, j):        # the K block's first MMA adds to the stale partial instead of starting fresh
        return 1 if self.bug == "no_fresh_partial" else self.base.accumulate_flag(j)

    def k_step_offset(self, j):          # K step counted in 16 elements (the bf16 expert's K) instead of 32
        return (j * 16) >> 4 if self.bug == "k_step_bf16" else self.base.k_step_offset(j)

    def sa_index(self, row, kb, kblocks):
        if self.bug == "sa_next_kblock":   # the scale of the next K block (the last one clamps)
            return self.base.sa_index(row, min(kb + 1, kblocks - 1), kblocks)
        if self.bug == "sa_row_of_tile":   # one scale per tile (its first row's) instead of per row
            return self.base.sa_index(row - row % self.BM, kb, kblocks)
        return self.base.sa_index(row, kb, kblocks)

    def sb_index(self, tn, kb, kblocks):
        if self.bug == "sb_kblock_zero":   # SB of K block 0 for every K block
            return self.base.sb_index(tn, 0, kblocks)
        if self.bug == "sb_transposed":    # SB read as [K/128, N/128]: column tn of row kb, with the row length K/128
            return kb * kblocks + tn
        return self.base.sb_index(tn, kb, kblocks)


LOOP_BUGS = ("sb_from_m_tile", "promote_before_mma_of_next")   # loop code, re-enacted here (not a rule function)
BUGS = ("buffers_shared", "no_fresh_partial", "k_step_bf16", "sa_next_kblock", "sa_row_of_tile", "sb_kblock_zero",
        "sb_transposed", "sb_from_m_tile")


def decode_idesc(idesc):
    return {"d_type": (idesc >> 4) & 3, "a_type": (idesc >> 7) & 7, "b_type": (idesc >> 10) & 7,
            "a_major": (idesc >> 15) & 1, "b_major": (idesc >> 16) & 1, "n": ((idesc >> 17) & 0x3F) << 3,
            "m": ((idesc >> 24) & 0x1F) << 4,
            "other": idesc & 0xE080604F}   # sparsity, saturate, bit 6, negate, bit 23, bits 29-31: all 0 here


def check_static(rules):
    """Fields the serial model relies on: the descriptor, the buffers inside the allocation, the K steps."""
    failures = []
    d = decode_idesc(rules.idesc())
    want = {"d_type": 1, "a_type": 0, "b_type": 0, "a_major": 0, "b_major": 0, "n": rules.BN, "m": rules.BM, "other": 0}
    if d != want:
        failures.append(f"instruction descriptor {d}, want {want}")
    if rules.TMEM_COLS & (rules.TMEM_COLS - 1) or not 32 <= rules.TMEM_COLS <= 512:
        failures.append(f"TMEM allocation of {rules.TMEM_COLS} columns is not a power of two in [32, 512]")
    for kb in range(2 * rules.BUFFERS):
        col = rules.partial_column(kb)
        if col + rules.BN > rules.TMEM_COLS:
            failures.append(f"K block {kb}: partial columns {col}..{col + rules.BN - 1} outside the allocation")
    return failures


def box(x, row0, rows, k0, width):
    out = torch.zeros(rows, width)
    r1 = min(row0 + rows, x.shape[0])
    if r1 > row0:
        out[: r1 - row0] = x[row0:r1, k0:k0 + width].float()
    return out


def scale_at(scales, index):
    assert 0 <= index < scales.numel(), f"scale index {index} outside a tensor of {scales.numel()}"
    return scales.reshape(-1)[index].float()


def model(inputs, shape, rules, bugs=()):
    """C as the expert computes it, tile by tile and K block by K block."""
    A, B, SA, SB = inputs["A"], inputs["B"], inputs["SA"], inputs["SB"]
    M, N, K = shape["M"], shape["N"], shape["K"]
    BM, BN, BK, MMA_K = rules.BM, rules.BN, rules.BK, rules.MMA_K
    kblocks = K // BK
    C = torch.full((M, N), float("nan"))
    for tm in range(-(-M // BM)):
        for tn in range(-(-N // BN)):
            tmem = torch.full((TMEM_LANES, rules.TMEM_COLS), float("nan"))
            acc = torch.zeros(BM, BN)

            def issue(kb):   # the MMA warp's four MMAs of K block kb
                a, b = box(A, tm * BM, BM, kb * BK, BK), box(B, tn * BN, BN, kb * BK, BK)
                col = rules.partial_column(kb)
                for j in range(BK // MMA_K):
                    k0 = rules.k_step_offset(j) << 4   # bytes = e4m3 elements
                    assert k0 + MMA_K <= BK, f"MMA {j} reads K elements {k0}..{k0 + MMA_K - 1} past the box"
                    d = a[:, k0:k0 + MMA_K] @ b[:, k0:k0 + MMA_K].t()
                    if rules.accumulate_flag(j):
                        tmem[:BM, col:col + BN] += d
                    else:
                        tmem[:BM, col:col + BN] = d

            def promote(kb):   # the 128 promotion threads of K block kb
                nonlocal acc
                col = rules.partial_column(kb)
                part = tmem[:BM, col:col + BN].clone()
                sb = scale_at(SB, rules.sb_index(tm if "sb_from_m_tile" in bugs else tn, kb, kblocks))
                sa = torch.stack([scale_at(SA, rules.sa_index(tm * BM + r, kb, kblocks)) if tm * BM + r < M
                                  else torch.tensor(0.0) for r in range(BM)])
                acc = acc + part * (sa * sb)[:, None]

            if "promote_before_mma_of_next" in bugs:   # the serial order: hides a shared buffer (checks the check)
                for kb in range(kblocks):
                    issue(kb)
                    promote(kb)
            else:
                issue(0)
                for kb in range(kblocks):
                    if kb + 1 < kblocks:
                        issue(kb + 1)
                    promote(kb)
            r1, c1 = min(BM, M - tm * BM), min(BN, N - tn * BN)
            C[tm * BM: tm * BM + r1, tn * BN: tn * BN + c1] = acc[:r1, :c1].to(torch.bfloat16).float()
    return C


# odd M and N (a partial tile in each, the last SB row block short), several K blocks (each buffer used twice)
CASES = (({"M": 77, "N": 208, "K": 384}, 1), ({"M": 130, "N": 144, "K": 512}, 2), ({"M": 7, "N": 400, "K": 256}, 3))


def run_cases(rules, bugs=(), cases=CASES, quiet=False):
    """True when the static checks pass and the model matches the task's reference on every case and input kind."""
    from xlang.profiler.judge.verify import compare_output
    from xlang.task import get_task

    task = get_task("gemm_fp8_blockscale")
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
            except AssertionError as e:   # the model found an index out of bounds or a read past a box
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
    rules = Rules(build_expert().load_path)
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
