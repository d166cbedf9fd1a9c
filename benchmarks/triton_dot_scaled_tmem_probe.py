"""How Triton moves block scales into tensor memory on sm_100 (arch_docs/b200/templates/triton.md): compiles, with
no GPU, a tl.dot_scaled kernel whose e4m3 operands and UE8M0 scales come through TMA, the scales in the 5D
pre-shuffled layout [1, BM/128, BK/VEC/4, 2, 256] (128 rows x 4 scales per 512-byte block, reshaped and permuted
back to [BM, BK/VEC] in the kernel), and counts the tcgen05 instructions of its PTX. Triton 3.6.0 (2026-12-04):
tcgen05.cp.cta_group::1.warpx4.32x128b x4 (the scales, shared -> TMEM), tcgen05.mma ...kind::mxf8f6f4.block_scale
.scale_vec::1X x8, one tcgen05.st.sync.aligned.32x32b.x128.b32 (not the scales). Run: python3 benchmarks/
triton_dot_scaled_tmem_probe.py"""
import re

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

@triton.jit
def k(a_desc, b_desc, sa_desc, sb_desc, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, VEC: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    R: tl.constexpr = BK // VEC // 4
    for kk in range(0, K, BK):
        a = a_desc.load([pm * BM, kk])
        b = b_desc.load([pn * BN, kk])
        sa = sa_desc.load([0, pm, kk // BK, 0, 0])
        sb = sb_desc.load([0, pn, kk // BK, 0, 0])
        sa = sa.reshape(BM // 128, R, 32, 4, 4).trans(0, 3, 2, 1, 4).reshape(BM, BK // VEC)
        sb = sb.reshape(BN // 128, R, 32, 4, 4).trans(0, 3, 2, 1, 4).reshape(BN, BK // VEC)
        acc = tl.dot_scaled(a, sa, "e4m3", b.T, sb, "e4m3", acc)
    offs_m = pm * BM + tl.arange(0, BM)
    offs_n = pn * BN + tl.arange(0, BN)
    tl.store(c_ptr + offs_m[:, None] * 1024 + offs_n[None, :], acc)

sig = {"a_desc": "tensordesc<fp8e4nv[128, 128]>", "b_desc": "tensordesc<fp8e4nv[128, 128]>",
       "sa_desc": "tensordesc<u8[1, 1, 1, 2, 256]>", "sb_desc": "tensordesc<u8[1, 1, 1, 2, 256]>",
       "c_ptr": "*fp32", "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "VEC": "constexpr"}
src = triton.compiler.ASTSource(k, signature=sig, constexprs={"BM": 128, "BN": 128, "BK": 128, "VEC": 32})
out = triton.compile(src, target=GPUTarget("cuda", 100, 32), options={"num_warps": 4, "num_stages": 3})
ptx = out.asm["ptx"]
for pat in ("tcgen05.cp", "tcgen05.st", "tcgen05.mma", "block_scale", "cp.async.bulk.tensor"):
    forms = sorted({re.sub(r"^@%p\d+\s+", "", line.strip()).split()[0] for line in ptx.splitlines() if pat in line})
    print(pat, sum(pat in line for line in ptx.splitlines()), forms)
print(triton.__version__)
