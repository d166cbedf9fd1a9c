"""Every compile-checkable claim of the arch docs, checked with nvcc 13 and cuobjdump (CPU only).

The claims live in the docs themselves, in two tables of ``arch_docs/<arch>/params.md``:

* "SASS spellings": one row per PTX form, the wrapper that emits it (or -) and the SASS opcodes
  ``cuobjdump -sass`` shows for it (or "none" when ptxas emits no instruction of its own).
* "Forms ptxas accepts or rejects": one row per form and target, "accepted" or "rejected".

This file holds a probe for every row, keyed by the row's first cell. All SASS probes and accepted
forms of one architecture compile in ONE nvcc run (one kernel per probe); each rejected form
compiles alone and must fail with the error text given here (so a typo in a probe cannot pass as
a rejection), and each has an accepted twin differing only in the form under test. A row without
a probe, or a probe without a row, fails the test: the docs and the checks move together.

Run ``python3 tests/test_arch_docs_claims.py`` to print each probe's SASS (to write a new row).
Compiling proves spelling and SASS mapping only, never run-time semantics (no B200 exists here).
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from xlang.toolchain import find_tool

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "arch_docs"
GENCODE = {
    "sm_100a": "-gencode=arch=compute_100a,code=sm_100a",
    "sm_100": "-gencode=arch=compute_100,code=sm_100",
    "sm_90a": "-gencode=arch=compute_90a,code=sm_90a",
    "sm_90": "-gencode=arch=compute_90,code=sm_90",
}
INCLUDES = {
    "b200": ["arch_docs/b200/templates", "arch_docs/common/templates"],
    "h100": ["arch_docs/h100/templates", "arch_docs/common/templates"],
}
TARGET = {"b200": "sm_100a", "h100": "sm_90a"}

NVCC = find_tool("nvcc")
CUOBJDUMP = find_tool("cuobjdump")
# Missing CUDA tools FAIL these tests (CI's machine has them: a skip there would hide every claim).
# A machine that really has no CUDA toolkit opts out explicitly with XLANG_SKIP_CUDA_TESTS=1.
OPT_OUT = "XLANG_SKIP_CUDA_TESTS"


def cuda_tools() -> tuple[Path, Path]:
    """(nvcc, cuobjdump), or a loud failure naming what is missing (a skip only with the opt-out)."""
    missing = [name for name, path in (("nvcc", NVCC), ("cuobjdump", CUOBJDUMP)) if path is None]
    if missing:
        msg = (f"{' and '.join(missing)} not found (nvcc: the CUDA toolkit 13.0, PATH or CUDA_HOME; cuobjdump: "
               f"pip install nvidia-cuda-cuobjdump): the arch-docs claims cannot be checked")
        if os.environ.get(OPT_OUT) == "1":
            pytest.skip(f"{msg}; skipped because {OPT_OUT}=1")
        pytest.fail(f"{msg}. Set {OPT_OUT}=1 only on a machine without the toolkit.", pytrace=False)
    return NVCC, CUOBJDUMP

# Every probe kernel has this signature and these shared objects, so a body can use any of them.
PRELUDE = """#include <cstdint>
#include <cuda.h>
#include "ptx_common.cuh"
#include "mbarrier.cuh"
#include "fence.cuh"
#include "tma.cuh"
"""
HEADERS = {"b200": '#include "tcgen05.cuh"\n'
                   '__device__ __forceinline__ void xl_setmaxnreg_inc_232() {\n'
                   '  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");\n}\n'
                   '__device__ __forceinline__ void xl_setmaxnreg_dec_40() {\n'
                   '  asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");\n}\n',
           "h100": '#include "wgmma.cuh"\n#include "setmaxnreg.cuh"\n#include "ldsm_stsm.cuh"\n'}
SIGNATURE = ("(const __grid_constant__ CUtensorMap map, uint32_t* out, uint32_t t, uint64_t da, "
             "uint64_t db, uint32_t idesc, uint32_t mask32)")
LOCALS = """  __shared__ alignas(1024) uint8_t smem[2048];
  __shared__ alignas(8) uint64_t bar;
  __shared__ uint32_t slot;
  const uint16_t mask = static_cast<uint16_t>(mask32);
  uint32_t r[32];
  float acc[64];
  (void)smem; (void)bar; (void)slot; (void)mask; (void)r; (void)acc;
"""
# Write registers out so that the loads under test are used.
SINK = "  for (int i = 0; i < 32; ++i) out[threadIdx.x * 32 + i] = r[i];\n"


def _ptx(form: str) -> str:
    return f'asm volatile("{form}" ::: "memory");'


# TMA's gather mode (PTX ISA cp.async.bulk.tensor, load mode .tile::gather4): four rows at four row coordinates, one
# column coordinate; the paged-KV gather of Blackwell (attn_decode_paged). Rejected on sm_90a.
GATHER4 = ('if (threadIdx.x == 0) asm volatile("cp.async.bulk.tensor.2d.shared::cta.global.tile::gather4'
           '.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];" :: '
           '"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))), "l"(&map), "r"(t), "r"(t), "r"(t + 1), '
           '"r"(t + 2), "r"(t + 3), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(&bar))) : "memory");')

# ---- SASS probes: first cell of the params.md row -> kernel body ---------------------------------
SASS_PROBES = {
    "b200": {
        "tcgen05.alloc.cta_group::1": "if (threadIdx.x < 32) xl::tmem_alloc<32>(&slot);",
        "tcgen05.alloc.cta_group::2": "if (threadIdx.x < 32) xl::tmem_alloc<32, 2>(&slot);",
        "tcgen05.dealloc.cta_group::1": "if (threadIdx.x < 32) xl::tmem_dealloc<32>(t);",
        "tcgen05.relinquish_alloc_permit.cta_group::1":
            "if (threadIdx.x < 32) xl::tmem_relinquish_alloc_permit();",
        "tcgen05.fence::before_thread_sync": "xl::tcgen05_fence_before();",
        "tcgen05.fence::after_thread_sync": "xl::tcgen05_fence_after();",
        "tcgen05.wait::ld": "xl::tcgen05_wait_ld();",
        "tcgen05.wait::st": "xl::tcgen05_wait_st();",
        "tcgen05.mma.cta_group::1.kind::f16 (A, B in smem)":
            "if (threadIdx.x == 0) xl::tcgen05_mma_f16(t, da, db, idesc, mask32);",
        "tcgen05.mma.cta_group::1.kind::f16 (A in TMEM)":
            "if (threadIdx.x == 0) xl::tcgen05_mma_f16_ts(t, t + 256, db, idesc, mask32);",
        "tcgen05.mma.cta_group::2.kind::f16":
            "if (threadIdx.x == 0) xl::tcgen05_mma_f16_pair(t, da, db, idesc, mask32);",
        "tcgen05.mma.cta_group::2.kind::f16 (A in TMEM)":
            "if (threadIdx.x == 0) xl::tcgen05_mma_f16_ts_pair(t, t + 256, db, idesc, mask32);",
        "tcgen05.mma.cta_group::1.kind::tf32":
            'if (threadIdx.x == 0) asm volatile("tcgen05.mma.cta_group::1.kind::tf32 [%0], %1, %2, %3, 1;"'
            ' :: "r"(t), "l"(da), "l"(db), "r"(idesc) : "memory");',
        "tcgen05.mma.cta_group::1.kind::f8f6f4":
            'if (threadIdx.x == 0) asm volatile("tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, 1;"'
            ' :: "r"(t), "l"(da), "l"(db), "r"(idesc) : "memory");',
        "tcgen05.mma.cta_group::1.kind::i8":
            'if (threadIdx.x == 0) asm volatile("tcgen05.mma.cta_group::1.kind::i8 [%0], %1, %2, %3, 1;"'
            ' :: "r"(t), "l"(da), "l"(db), "r"(idesc) : "memory");',
        "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale":
            'if (threadIdx.x == 0) asm volatile("tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X '
            '[%0], %1, %2, %3, [%4], [%5], 1;" :: "r"(t), "l"(da), "l"(db), "r"(idesc), "r"(t + 64),'
            ' "r"(t + 96) : "memory");',
        "tcgen05.mma.cta_group::1.kind::mxf4.block_scale":
            'if (threadIdx.x == 0) asm volatile("tcgen05.mma.cta_group::1.kind::mxf4.block_scale '
            '[%0], %1, %2, %3, [%4], [%5], 1;" :: "r"(t), "l"(da), "l"(db), "r"(idesc), "r"(t + 64),'
            ' "r"(t + 96) : "memory");',
        "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X":
            'if (threadIdx.x == 0) asm volatile("tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X '
            '[%0], %1, %2, %3, [%4], [%5], 1;" :: "r"(t), "l"(da), "l"(db), "r"(idesc), "r"(t + 64),'
            ' "r"(t + 96) : "memory");',
        "tcgen05.commit.cta_group::1.mbarrier::arrive::one":
            "if (threadIdx.x == 0) xl::tcgen05_commit(&bar);",
        "tcgen05.commit.cta_group::1 .multicast::cluster":
            "if (threadIdx.x == 0) xl::tcgen05_commit_multicast(&bar, mask);",
        "tcgen05.commit.cta_group::2 .multicast::cluster":
            "if (threadIdx.x == 0) xl::tcgen05_commit_pair_multicast(&bar, mask);",
        "tcgen05.ld.32x32b.x32": "xl::tmem_ld_32x32b_x32(t, r); xl::tcgen05_wait_ld();" + SINK,
        "tcgen05.ld.32x32b.x32.pack::16b": "xl::tmem_ld_32x32b_x32_pack16(t, r); xl::tcgen05_wait_ld();" + SINK,
        "tcgen05.ld.16x256b.x8": "xl::tmem_ld_16x256b<8>(t, r); xl::tcgen05_wait_ld();" + SINK,
        "tcgen05.ld.16x128b.x16": "xl::tmem_ld_16x128b<16>(t, r); xl::tcgen05_wait_ld();" + SINK,
        "tcgen05.st.32x32b.x8":
            "uint32_t w[8]; for (int i = 0; i < 8; ++i) w[i] = t + i; xl::tmem_st_32x32b_x8(t, w);",
        "tcgen05.st.32x32b.x32.unpack::16b":
            "for (int i = 0; i < 32; ++i) r[i] = t * i; xl::tmem_st_32x32b_x32_unpack16(t, r);",
        "tcgen05.cp.cta_group::1.128x256b":
            'if (threadIdx.x == 0) asm volatile("tcgen05.cp.cta_group::1.128x256b [%0], %1;"'
            ' :: "r"(t), "l"(da) : "memory");',
        "cp.async.bulk.tensor.2d (load)":
            "if (threadIdx.x == 0) xl::tma_load_2d(smem, &map, &bar, 0, 0);",
        "cp.async.bulk.tensor.2d .multicast::cluster (load)":
            "if (threadIdx.x == 0) xl::tma_load_2d_multicast(smem, &map, &bar, 0, 0, mask);",
        "cp.async.bulk.tensor.2d .cta_group::2 (load)":
            "if (threadIdx.x == 0) xl::tma_load_2d_pair(smem, &map, &bar, 0, 0);",
        "cp.async.bulk.tensor.2d (store)": "if (threadIdx.x == 0) xl::tma_store_2d(&map, smem, 0, 0);",
        "cp.async.bulk.tensor.4d (load)": "if (threadIdx.x == 0) xl::tma_load_4d(smem, &map, &bar, 0, 0, t, t);",
        "cp.async.bulk.tensor.5d (load)": "if (threadIdx.x == 0) xl::tma_load_5d(smem, &map, &bar, 0, 0, t, t, t);",
        "cp.async.bulk.tensor.2d .tile::gather4 (load)": GATHER4,
        "cp.async.bulk.tensor.2d .L2::cache_hint (load)":
            "if (threadIdx.x == 0) xl::tma_load_2d_hint(smem, &map, &bar, 0, 0, xl::l2_policy_evict_last());",
        "cp.reduce.async.bulk.tensor.2d .add (reduce-store)":
            "if (threadIdx.x == 0) xl::tma_reduce_add_2d(&map, smem, 0, 0);",
        "cp.async.bulk.commit_group": "xl::tma_store_commit();",
        "prefetch.tensormap": "xl::tma_prefetch_desc(&map);",
        "cp.async.bulk.prefetch.tensor.2d.L2":
            'asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"'
            ' :: "l"(reinterpret_cast<uint64_t>(&map)), "r"(0), "r"(0) : "memory");',
        "elect.sync": "out[threadIdx.x] = xl::elect_one_sync();",
        "fence.proxy.async.shared::cta": "xl::fence_proxy_async_smem();",
        "mbarrier.init": "xl::mbar_init(&bar, t);",
        "mbarrier.arrive.expect_tx": "xl::mbar_arrive_expect_tx(&bar, t);",
        "mbarrier.try_wait.parity": "out[threadIdx.x] = xl::mbar_try_wait(&bar, t);",
        "mbarrier.arrive.release.cluster (remote, via mapa)": "xl::mbar_arrive_remote(&bar, t);",
        "barrier.cluster.arrive + wait": "xl::cluster_sync();",
        "setmaxnreg.inc": "xl_setmaxnreg_inc_232();",
        "setmaxnreg.inc, kernel without a minimum-blocks launch bound": "xl_setmaxnreg_inc_232();",
    },
    "h100": {
        "wgmma.mma_async m64n128k16 bf16 (A, B in smem)":
            "xl::wgmma_m64n128k16_ss(*reinterpret_cast<float(*)[64]>(acc), da, db, 1);"
            "for (int i = 0; i < 64; ++i) out[threadIdx.x * 64 + i] = __float_as_uint(acc[i]);",
        "wgmma.mma_async m64n128k32 e4m3 (A, B in smem)":
            "xl::wgmma_m64n128k32_e4m3_ss(*reinterpret_cast<float(*)[64]>(acc), da, db, 1);"
            "for (int i = 0; i < 64; ++i) out[threadIdx.x * 64 + i] = __float_as_uint(acc[i]);",
        "wgmma.fence": "xl::wgmma_fence();",
        "wgmma.wait_group": "xl::wgmma_wait<0>();",
        "setmaxnreg.inc": "xl::setmaxnreg_inc<232>();",
        "setmaxnreg.dec": "xl::setmaxnreg_dec<40>();",
        "setmaxnreg.inc, kernel without a minimum-blocks launch bound": "xl::setmaxnreg_inc<232>();",
        "ldmatrix.x4": "uint32_t q[4]; xl::ldmatrix_x4(q, smem + 16 * (threadIdx.x % 32));"
                       "for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = q[i];",
        "ldmatrix.x4.trans": "uint32_t q[4]; xl::ldmatrix_x4_trans(q, smem + 16 * (threadIdx.x % 32));"
                             "for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = q[i];",
        "stmatrix.x4": "uint32_t q[4] = {t, t + 1, t + 2, t + 3};"
                       "xl::stmatrix_x4(smem + 16 * (threadIdx.x % 32), q);"
                       "__syncthreads(); out[threadIdx.x] = smem[threadIdx.x];",
        "cp.async.bulk.tensor.2d (load)":
            "if (threadIdx.x == 0) xl::tma_load_2d(smem, &map, &bar, 0, 0);",
        "cp.async.bulk.tensor.2d .multicast::cluster (load)":
            "if (threadIdx.x == 0) xl::tma_load_2d_multicast(smem, &map, &bar, 0, 0, mask);",
        "cp.async.bulk.tensor.2d (store)": "if (threadIdx.x == 0) xl::tma_store_2d(&map, smem, 0, 0);",
        "cp.async.bulk.tensor.4d (load)": "if (threadIdx.x == 0) xl::tma_load_4d(smem, &map, &bar, 0, 0, t, t);",
        "cp.async.bulk.tensor.5d (load)": "if (threadIdx.x == 0) xl::tma_load_5d(smem, &map, &bar, 0, 0, t, t, t);",
        "cp.async.bulk.tensor.2d .L2::cache_hint (load)":
            "if (threadIdx.x == 0) xl::tma_load_2d_hint(smem, &map, &bar, 0, 0, xl::l2_policy_evict_last());",
        "cp.reduce.async.bulk.tensor.2d .add (reduce-store)":
            "if (threadIdx.x == 0) xl::tma_reduce_add_2d(&map, smem, 0, 0);",
        "cp.async.bulk.commit_group": "xl::tma_store_commit();",
        "prefetch.tensormap": "xl::tma_prefetch_desc(&map);",
        "cp.async.bulk.prefetch.tensor.2d.L2":
            'asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"'
            ' :: "l"(reinterpret_cast<uint64_t>(&map)), "r"(0), "r"(0) : "memory");',
        "elect.sync": "out[threadIdx.x] = xl::elect_one_sync();",
        "fence.proxy.async.shared::cta": "xl::fence_proxy_async_smem();",
        "mbarrier.init": "xl::mbar_init(&bar, t);",
        "mbarrier.arrive.expect_tx": "xl::mbar_arrive_expect_tx(&bar, t);",
        "mbarrier.try_wait.parity": "out[threadIdx.x] = xl::mbar_try_wait(&bar, t);",
        "barrier.cluster.arrive + wait": "xl::cluster_sync();",
    },
}

# ---- forms: first cell of the params.md row -> (body, error text when rejected or None) ----------
# A rejected form's error text is what ptxas / the static_assert says; None = must compile.
_LD = ("{{uint32_t q[{n}]; asm volatile(\"tcgen05.ld.sync.aligned.{shape}.b32 {{{regs}}}, [%{n}]{extra};\""
       " : {outs} : \"r\"(t)); xl::tcgen05_wait_ld(); for (int i = 0; i < {n}; ++i) out[i] = q[i];}}")


def _ld(shape: str, n: int, extra: str = "") -> str:
    regs = ", ".join(f"%{i}" for i in range(n))
    outs = ", ".join(f'"=r"(q[{i}])' for i in range(n))
    return _LD.format(n=n, shape=shape, regs=regs, outs=outs, extra=extra)


MMA_F16 = ('if (threadIdx.x == 0) asm volatile("tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, 1;"'
           ' :: "r"(t), "l"(da), "l"(db), "r"(idesc) : "memory");')
WGMMA_FENCE = _ptx("wgmma.fence.sync.aligned;")
ACC_SINK = " for (int i = 0; i < 64; ++i) out[threadIdx.x * 64 + i] = __float_as_uint(acc[i]);"


def _alloc(ncols: int) -> str:
    return ('if (threadIdx.x < 32) asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], '
            f'{ncols};" :: "r"(xl::smem_u32(&slot)) : "memory");')


FORM_PROBES = {
    "b200": {
        "tcgen05.ld.32x32b.x128": (_ld("32x32b.x128", 128), None),
        "tcgen05.ld.16x64b.x128": (_ld("16x64b.x128", 128), None),
        "tcgen05.ld.16x128b.x64": (_ld("16x128b.x64", 128), None),
        "tcgen05.ld.16x128b.x128": (_ld("16x128b.x128", 256), "Illegal vector size"),
        "tcgen05.ld.16x256b.x32": (_ld("16x256b.x32", 128), None),
        "tcgen05.ld.16x256b.x64": (_ld("16x256b.x64", 256), "Illegal vector size"),
        "tcgen05.ld.16x32bx2.x128": (_ld("16x32bx2.x128", 128, ", 16"), None),
        "tcgen05.ld.32x32b.x2.pack::16b": (_ld("32x32b.x2.pack::16b", 2), None),
        "tcgen05.ld.32x32b.x2.unpack::16b": (_ld("32x32b.x2.unpack::16b", 2), "Illegal modifier '.unpack::16b'"),
        "tcgen05.st.32x32b.x2.unpack::16b":
            ('asm volatile("tcgen05.st.sync.aligned.32x32b.x2.unpack::16b.b32 [%0], {%1, %2};"'
             ' :: "r"(t), "r"(t), "r"(t) : "memory");', None),
        "tcgen05.st.32x32b.x2.pack::16b":
            ('asm volatile("tcgen05.st.sync.aligned.32x32b.x2.pack::16b.b32 [%0], {%1, %2};"'
             ' :: "r"(t), "r"(t), "r"(t) : "memory");', "Illegal modifier '.pack::16b'"),
        "tcgen05.alloc.cta_group::1 and tcgen05.mma.cta_group::2 in one kernel":
            ('if (threadIdx.x < 32) xl::tmem_alloc<32>(&slot);'
             'if (threadIdx.x == 0) xl::tcgen05_mma_f16_pair(t, da, db, idesc, 1);',
             "uses single CTA(.cta_group::1) and CTA pair granularity(.cta_group::2)"),
        "setmaxnreg.inc (on sm_100a)": (_ptx("setmaxnreg.inc.sync.aligned.u32 232;"), None),
        "wgmma.fence (on sm_100a)": (WGMMA_FENCE, "Instruction 'wgmma.fence' not supported on .target 'sm_100a'"),
        "tcgen05.mma on plain sm_100": (MMA_F16, "not supported on .target 'sm_100'"),
        "xl::umma_idesc_bf16_f32<128, 136>()": ("out[0] = xl::umma_idesc_bf16_f32<128, 136>();", None),
        "xl::umma_idesc_bf16_f32<128, 132>()": ("out[0] = xl::umma_idesc_bf16_f32<128, 132>();",
                                                "kind::f16 shape"),
        "xl::umma_idesc_bf16_f32<64, 8>()": ("out[0] = xl::umma_idesc_bf16_f32<64, 8>();", None),
        "xl::umma_idesc_bf16_f32<256, 128>()": ("out[0] = xl::umma_idesc_bf16_f32<256, 128>();",
                                                "kind::f16 shape"),
        "xl::umma_idesc_bf16_f32<256, 128, 2>()": ("out[0] = xl::umma_idesc_bf16_f32<256, 128, 2>();", None),
        "xl::umma_idesc_bf16_f32<128, 136, 2>()": ("out[0] = xl::umma_idesc_bf16_f32<128, 136, 2>();",
                                                   "kind::f16 shape"),
        "xl::umma_idesc_bf16_f32<128, 144, 1, true>()":
            ("out[0] = xl::umma_idesc_bf16_f32<128, 144, 1, true>();", None),
        "xl::umma_idesc_bf16_f32<128, 136, 1, true>()":
            ("out[0] = xl::umma_idesc_bf16_f32<128, 136, 1, true>();", "kind::f16 shape"),
        "xl::tmem_alloc<512>": ("if (threadIdx.x < 32) xl::tmem_alloc<512>(&slot);", None),
        "xl::tmem_alloc<48>": ("if (threadIdx.x < 32) xl::tmem_alloc<48>(&slot);", "nCols must be a power of two"),
        "xl::tmem_alloc<16>": ("if (threadIdx.x < 32) xl::tmem_alloc<16>(&slot);", "nCols must be a power of two"),
        "xl::tmem_ld_16x256b<8>": ("xl::tmem_ld_16x256b<8>(t, r);" + SINK, None),
        "xl::tmem_ld_16x256b<16>": ("uint32_t q[64]; xl::tmem_ld_16x256b<16>(t, q); out[0] = q[0];",
                                    "16x256b: wrapped for"),
        "tcgen05.alloc 64 columns (raw PTX)": (_alloc(64), None),
        "tcgen05.alloc 48 columns (raw PTX)": (_alloc(48), "value must be power of 2"),
        "tcgen05.alloc 16 columns (raw PTX)": (_alloc(16), "expected to be in range [32..512]"),
        # run-time rules in their violating form: ptxas accepts them (FORM_SASS: the violation is really there)
        "tcgen05.alloc 32 then 64 columns in one CTA":
            ("if (threadIdx.x < 32) { xl::tmem_alloc<32>(&slot); xl::tmem_alloc<64>(&slot); }", None),
        "tcgen05.alloc after tcgen05.relinquish_alloc_permit":
            ("if (threadIdx.x < 32) { xl::tmem_alloc<32>(&slot); xl::tmem_relinquish_alloc_permit();"
             " xl::tmem_alloc<32>(&slot); }", None),
        "tcgen05.alloc without tcgen05.dealloc": ("if (threadIdx.x < 32) xl::tmem_alloc<32>(&slot);", None),
        "st.shared to an MMA operand before the MMA's commit fired":
            ("if (threadIdx.x == 0) { xl::tcgen05_mma_f16(t, da, db, idesc, 1); smem[0] = 1; }"
             " __syncthreads(); out[threadIdx.x] = smem[threadIdx.x];", None),
        "tcgen05.ld in a divergent branch (16 of 32 lanes)":
            ("if (threadIdx.x % 32 < 16) { xl::tmem_ld_32x32b_x32(t, r); xl::tcgen05_wait_ld(); }" + SINK, None),
        "tcgen05.ld result used without tcgen05.wait::ld": ("xl::tmem_ld_32x32b_x32(t, r);" + SINK, None),
        "setmaxnreg in warps 4-5 of a 192-thread kernel":
            ("if (threadIdx.x >= 128) xl_setmaxnreg_dec_40(); else xl_setmaxnreg_inc_232();", None),
        "elect.sync with a full mask inside a one-thread branch":
            ("if (threadIdx.x == 0) out[0] = xl::elect_one_sync();", None),
        "st.shared then a TMA store of it without fence.proxy.async":
            ("smem[threadIdx.x] = static_cast<uint8_t>(t); __syncthreads();"
             " if (threadIdx.x == 0) { xl::tma_store_2d(&map, smem, 0, 0); xl::tma_store_commit(); }", None),
    },
    "h100": {
        "wgmma.fence (on sm_90a)": (WGMMA_FENCE, None),
        "wgmma.mma_async e4m3, K-major (no transpose immediates)":
            ('asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, 1, 1, 1;"'
             ' : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]) : "l"(da), "l"(db));' + ACC_SINK, None),
        "wgmma.mma_async e4m3 with the transpose immediates":
            ('asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;"'
             ' : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]) : "l"(da), "l"(db));' + ACC_SINK,
             "Arguments mismatch for instruction 'wgmma.mma_async"),
        "wgmma.fence on plain sm_90": (WGMMA_FENCE, "Instruction 'wgmma.fence' not supported on .target 'sm_90'"),
        "tcgen05.fence::before_thread_sync (on sm_90a)":
            (_ptx("tcgen05.fence::before_thread_sync;"),
             "Instruction 'tcgen05.fence' not supported on .target 'sm_90a'"),
        "setmaxnreg.inc (on sm_90a)": (_ptx("setmaxnreg.inc.sync.aligned.u32 232;"), None),
        "cp.async.bulk.tensor.2d .tile::gather4 (on sm_90a)":
            (GATHER4, "Feature '.tile::gather4 with destination state space as .shared::cta' requires .target sm_100"),
        "xl::setmaxnreg_inc<236>": ("xl::setmaxnreg_inc<236>();", "setmaxnreg: 24..256, multiple of 8"),
        "wgmma in a branch that splits the warpgroup":
            ("for (int i = 0; i < 64; ++i) acc[i] = 0.f;"
             " if (threadIdx.x < 64) { xl::wgmma_fence(); xl::wgmma_m64n128k16_ss(*reinterpret_cast<float(*)[64]>(acc),"
             " da, db, 1); xl::wgmma_commit(); xl::wgmma_wait<0>(); }" + ACC_SINK, None),
        "mbarrier word overwritten by plain stores without mbarrier.inval":
            ("xl::mbar_init(&bar, 1); __syncthreads(); reinterpret_cast<volatile uint32_t*>(&bar)[0] = t;"
             " out[threadIdx.x] = reinterpret_cast<volatile uint32_t*>(&bar)[1];", None),
        "empty-barrier arrive before the wgmma.wait_group that covers the stage":
            ("xl::wgmma_fence(); xl::wgmma_m64n128k16_ss(*reinterpret_cast<float(*)[64]>(acc), da, db, 1);"
             " xl::wgmma_commit(); xl::mbar_arrive(&bar); xl::wgmma_wait<0>();" + ACC_SINK, None),
        "setmaxnreg in half a warpgroup (warps 0-1 of 4)": ("if (threadIdx.x < 64) xl::setmaxnreg_dec<40>();", None),
        "st.shared then a TMA store of it without fence.proxy.async":
            ("smem[threadIdx.x] = static_cast<uint8_t>(t); __syncthreads();"
             " if (threadIdx.x == 0) { xl::tma_store_2d(&map, smem, 0, 0); xl::tma_store_commit(); }", None),
        "TMA load through a tensor map written in global memory, without fence.proxy.tensormap":
            ("out[threadIdx.x] = t; __syncthreads(); if (threadIdx.x == 0)"
             " xl::tma_load_2d(smem, reinterpret_cast<const CUtensorMap*>(out), &bar, 0, 0);", None),
    },
}
# Each rejected form -> the accepted probe it differs from in only the thing under test.
TWINS = {
    "b200": {
        "tcgen05.ld.16x128b.x128": "tcgen05.ld.16x128b.x64",
        "tcgen05.ld.16x256b.x64": "tcgen05.ld.16x256b.x32",
        "tcgen05.ld.32x32b.x2.unpack::16b": "tcgen05.ld.32x32b.x2.pack::16b",
        "tcgen05.st.32x32b.x2.pack::16b": "tcgen05.st.32x32b.x2.unpack::16b",
        "tcgen05.alloc.cta_group::1 and tcgen05.mma.cta_group::2 in one kernel": "tcgen05.mma.cta_group::2.kind::f16",
        "wgmma.fence (on sm_100a)": "setmaxnreg.inc (on sm_100a)",
        "tcgen05.mma on plain sm_100": "tcgen05.mma.cta_group::1.kind::f16 (A, B in smem)",
        "xl::umma_idesc_bf16_f32<128, 132>()": "xl::umma_idesc_bf16_f32<128, 136>()",
        "xl::umma_idesc_bf16_f32<256, 128>()": "xl::umma_idesc_bf16_f32<256, 128, 2>()",
        "xl::umma_idesc_bf16_f32<128, 136, 2>()": "xl::umma_idesc_bf16_f32<256, 128, 2>()",
        "xl::umma_idesc_bf16_f32<128, 136, 1, true>()": "xl::umma_idesc_bf16_f32<128, 144, 1, true>()",
        "xl::tmem_alloc<48>": "xl::tmem_alloc<512>",
        "xl::tmem_alloc<16>": "xl::tmem_alloc<512>",
        "xl::tmem_ld_16x256b<16>": "xl::tmem_ld_16x256b<8>",
        "tcgen05.alloc 48 columns (raw PTX)": "tcgen05.alloc 64 columns (raw PTX)",
        "tcgen05.alloc 16 columns (raw PTX)": "tcgen05.alloc 64 columns (raw PTX)",
    },
    "h100": {
        "wgmma.fence on plain sm_90": "wgmma.fence (on sm_90a)",
        "wgmma.mma_async e4m3 with the transpose immediates": "wgmma.mma_async e4m3, K-major (no transpose immediates)",
        "tcgen05.fence::before_thread_sync (on sm_90a)": "setmaxnreg.inc (on sm_90a)",
        "xl::setmaxnreg_inc<236>": "setmaxnreg.inc",
        "cp.async.bulk.tensor.2d .tile::gather4 (on sm_90a)": "cp.async.bulk.tensor.2d (load)",
    },
}
# Forms whose row names a target other than the architecture's own (first cell -> target).
FORM_TARGET = {"tcgen05.mma on plain sm_100": "sm_100", "wgmma.fence on plain sm_90": "sm_90"}
# Accepted forms that show a run-time rule violated: the SASS must hold the violating instructions
# (present) and lack what would undo the violation (absent), so the probe cannot pass as an empty kernel.
FORM_SASS = {
    "b200": {
        "tcgen05.alloc 64 columns (raw PTX)": (["UTCATOMSWS.FIND_AND_SET.ALIGN"], []),
        "tcgen05.alloc 32 then 64 columns in one CTA": (["UTCATOMSWS.FIND_AND_SET.ALIGN"], ["UTCATOMSWS.AND"]),
        "tcgen05.alloc after tcgen05.relinquish_alloc_permit":
            (["UVIRTCOUNT.DEALLOC.SMPOOL", "UTCATOMSWS.FIND_AND_SET.ALIGN"], []),
        "tcgen05.alloc without tcgen05.dealloc": (["UTCATOMSWS.FIND_AND_SET.ALIGN"], ["UTCATOMSWS.AND"]),
        "st.shared to an MMA operand before the MMA's commit fired": (["UTCHMMA", "STS"], ["UTCBAR"]),
        "tcgen05.ld in a divergent branch (16 of 32 lanes)": (["LDTM.x32"], []),
        "tcgen05.ld result used without tcgen05.wait::ld": (["LDTM.x32"], []),
        "setmaxnreg in warps 4-5 of a 192-thread kernel":
            (["USETMAXREG.DEALLOC.CTAPOOL", "USETMAXREG.TRY_ALLOC.CTAPOOL"], []),
        "elect.sync with a full mask inside a one-thread branch": (["ELECT"], []),
        "st.shared then a TMA store of it without fence.proxy.async": (["STS", "UTMASTG.2D"], ["FENCE.VIEW.ASYNC.S"]),
    },
    "h100": {
        "wgmma in a branch that splits the warpgroup": (["HGMMA"], []),
        "mbarrier word overwritten by plain stores without mbarrier.inval": (["SYNCS.EXCH.64", "STS"], []),
        "empty-barrier arrive before the wgmma.wait_group that covers the stage": (["HGMMA", "SYNCS.ARRIVE"], []),
        "setmaxnreg in half a warpgroup (warps 0-1 of 4)": (["USETMAXREG.DEALLOC.CTAPOOL"], []),
        "st.shared then a TMA store of it without fence.proxy.async": (["STS", "UTMASTG.2D"], ["FENCE.VIEW.ASYNC.S"]),
        "TMA load through a tensor map written in global memory, without fence.proxy.tensormap":
            (["STG", "UTMALDG.2D"], []),
    },
}
# Probes whose kernel needs other launch bounds than (128, 1) (first cell -> bounds).
BOUNDS = {"setmaxnreg in warps 4-5 of a 192-thread kernel": "192, 1"}


# ---- the doc tables ---------------------------------------------------------------------------------

def _table_after(text: str, heading: str) -> list[list[str]]:
    """Rows (cells) of the first markdown table after the line starting with `heading`."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(heading))
    rows, seen = [], False
    for ln in lines[start + 1:]:
        if ln.startswith("|"):
            seen = True
            cells = [c.strip() for c in ln.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif seen:
            break
    return rows[1:]  # drop the header row


def _first_code(cell: str) -> str:
    m = re.match(r"`([^`]+)`(.*)$", cell)
    assert m, f"first cell must start with `...`: {cell!r}"
    return (m.group(1) + m.group(2)).strip()


def sass_claims(arch: str) -> dict[str, tuple[str, list[str]]]:
    """PTX form -> (wrapper cell, SASS opcodes claimed; [] means 'none')."""
    rows = _table_after((DOCS / arch / "params.md").read_text(), "## SASS spellings")
    out = {}
    for cells in rows:
        assert len(cells) == 3, f"{arch} SASS row needs 3 cells: {cells}"
        sass = cells[2]
        opcodes = [] if sass.lower().startswith("none") else re.findall(r"`([^`]+)`", sass)
        assert opcodes or sass.lower().startswith("none"), f"no SASS named in {cells}"
        out[_first_code(cells[0])] = (cells[1], opcodes)
    return out


def form_claims(arch: str) -> dict[str, tuple[str, bool]]:
    """form -> (target, accepted?)."""
    rows = _table_after((DOCS / arch / "params.md").read_text(), "## Forms ptxas accepts or rejects")
    out = {}
    for cells in rows:
        assert len(cells) == 3, f"{arch} forms row needs 3 cells: {cells}"
        m = re.match(r"(accepted|rejected)\b", cells[2].lower())
        assert m, f"verdict must start with accepted / rejected: {cells}"
        verdict = m.group(1)
        out[_first_code(cells[0])] = (cells[1].strip("`"), verdict == "accepted")
    return out


def form_verdicts(arch: str) -> dict[str, str]:
    """form -> the verdict cell as written."""
    rows = _table_after((DOCS / arch / "params.md").read_text(), "## Forms ptxas accepts or rejects")
    return {_first_code(cells[0]): cells[2] for cells in rows}


# ---- compiling ----------------------------------------------------------------------------------------

# Full mnemonic with modifiers; lower case occurs in shapes (HGMMA.64x128x16..., LDTM.x32).
_MNEMONIC = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Za-z0-9_.]*)")


# ptxas drops setmaxnreg (info C7508, "unable to determine register count at entry") unless the kernel
# declares __launch_bounds__(threads, min_blocks); the probes do, except the rows that show it.
NO_MIN_BLOCKS = "setmaxnreg.inc, kernel without a minimum-blocks launch bound"


def _source(arch: str, bodies: dict[str, str], loose: tuple[str, ...] = (),
            bounds: dict[str, str] | None = None) -> str:
    bounds = bounds or {}
    kernels = [f'extern "C" __global__ void __launch_bounds__({"128" if name in loose else bounds.get(name, "128, 1")}) '
               f'{name}{SIGNATURE} {{\n{LOCALS}  {body}\n}}\n' for name, body in bodies.items()]
    return PRELUDE + HEADERS[arch] + "\n".join(kernels)


def _nvcc(arch: str, target: str, source: str, workdir: Path, stem: str) -> subprocess.CompletedProcess:
    src, cubin = workdir / f"{stem}.cu", workdir / f"{stem}.cubin"
    src.write_text(source)
    inc = [a for d in INCLUDES[arch] for a in ("-I", str(REPO / d))]
    return subprocess.run([str(NVCC), GENCODE[target], "-std=c++17", *inc, "-cubin", "-o", str(cubin), str(src)],
                          capture_output=True, text=True)


def _sass_by_kernel(cubin: Path) -> dict[str, collections.Counter]:
    res = subprocess.run([str(CUOBJDUMP), "-sass", str(cubin)], capture_output=True, text=True, check=True)
    out: dict[str, collections.Counter] = {}
    current = None
    for line in res.stdout.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            current = out.setdefault(m.group(1), collections.Counter())
            continue
        m = _MNEMONIC.search(line)
        if m and current is not None:
            current[m.group(1)] += 1
    return out


def _has(ops: collections.Counter, spelled: str) -> bool:
    return any(op == spelled or op.startswith(spelled + ".") for op in ops)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One nvcc run per architecture: every SASS probe and every accepted form, plus an empty kernel
    (the baseline for 'none'); every rejected form compiled alone, two at a time."""
    cuda_tools()
    work = tmp_path_factory.mktemp("claims")
    result, notes = {}, {}
    rejected_jobs = []
    for arch in ("b200", "h100"):
        bodies = {"probe_empty": ""}
        names = {}
        for i, (key, body) in enumerate(SASS_PROBES[arch].items()):
            bodies[f"sass_{i}"] = body
            names[key] = f"sass_{i}"
        for i, (key, (body, err)) in enumerate(FORM_PROBES[arch].items()):
            if err is None and FORM_TARGET.get(key, TARGET[arch]) == TARGET[arch]:
                bodies[f"form_{i}"] = body
                names[key] = f"form_{i}"
            else:
                rejected_jobs.append((arch, key, FORM_TARGET.get(key, TARGET[arch]), body))
        bounds = {names[k]: b for k, b in BOUNDS.items() if k in names}
        res = _nvcc(arch, TARGET[arch], _source(arch, bodies, (names.get(NO_MIN_BLOCKS, ""),), bounds), work,
                    f"probes_{arch}")
        assert res.returncode == 0, f"{arch} probes failed to compile:\n{res.stderr[-4000:]}"
        result[arch] = (names, _sass_by_kernel(work / f"probes_{arch}.cubin"))
        notes[arch] = res.stderr

    def one(job):
        arch, key, target, body = job
        stem = "rej_" + re.sub(r"\W+", "_", f"{arch}_{key}")[:80]
        return job, _nvcc(arch, target, _source(arch, {"probe": body}), work, stem)

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        alone = {(job[0], job[1]): res for job, res in pool.map(one, rejected_jobs)}
    return result, alone, notes


# ---- the tests ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["b200", "h100"])
def test_every_doc_row_has_a_probe_and_back(arch):
    assert set(sass_claims(arch)) == set(SASS_PROBES[arch]), (
        f"{arch} SASS table vs probes: only in doc {set(sass_claims(arch)) - set(SASS_PROBES[arch])}, "
        f"only probed {set(SASS_PROBES[arch]) - set(sass_claims(arch))}")
    assert set(form_claims(arch)) == set(FORM_PROBES[arch]), (
        f"{arch} forms table vs probes: only in doc {set(form_claims(arch)) - set(FORM_PROBES[arch])}, "
        f"only probed {set(FORM_PROBES[arch]) - set(form_claims(arch))}")


@pytest.mark.parametrize("arch", ["b200", "h100"])
def test_sass_spellings(arch, built):
    names, sass = built[0][arch]
    base = set(sass["probe_empty"])
    wrong = []
    for key, (wrapper, claimed) in sass_claims(arch).items():
        ops = sass[names[key]]
        wrapper_names = re.findall(r"`(xl::\w+)", wrapper)
        missing_wrapper = [w for w in wrapper_names if w not in SASS_PROBES[arch][key]]
        if missing_wrapper:
            wrong.append(f"{key}: the doc names {missing_wrapper}, the probe does not call it")
        if not claimed:
            extra = set(ops) - base
            if extra:
                wrong.append(f"{key}: doc says no SASS, got {sorted(extra)}")
        for op in claimed:
            if not _has(ops, op):
                wrong.append(f"{key}: doc says `{op}`, SASS has {sorted(set(ops) - base)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("arch", ["b200", "h100"])
def test_forms_accepted_or_rejected(arch, built):
    result, alone, notes = built
    names, sass = result[arch]
    wrong = []
    for key, (target, accepted) in form_claims(arch).items():
        body, err = FORM_PROBES[arch][key]
        probe_target = FORM_TARGET.get(key, TARGET[arch])
        if target != probe_target:
            wrong.append(f"{key}: doc says target {target}, probe compiles for {probe_target}")
        if accepted != (err is None):
            wrong.append(f"{key}: doc says {'accepted' if accepted else 'rejected'}, the probe expects the opposite")
        if err is None and probe_target == TARGET[arch]:
            assert names[key] in sass  # it compiled with the batch
            present, absent = FORM_SASS[arch].get(key, ([], []))
            ops = sass[names[key]]
            wrong += [f"{key}: the probe's SASS lacks `{op}` (the form under test is not there)"
                      for op in present if not _has(ops, op)]
            wrong += [f"{key}: the probe's SASS has `{op}`, which it must not" for op in absent if _has(ops, op)]
            if "ptxas does not check" in form_verdicts(arch)[key] and not present:
                wrong.append(f"{key}: a run-time-rule row needs FORM_SASS entries")
            for code in re.findall(r"info (C\d{4})", form_verdicts(arch)[key]):  # a ptxas message the row names
                if not re.search(rf"\({code}\).*'{names[key]}'", notes[arch]):
                    wrong.append(f"{key}: the row says ptxas reports {code}; it did not for this probe")
        else:
            res = alone[(arch, key)]
            if err is None and res.returncode != 0:
                wrong.append(f"{key}: expected to compile for {probe_target}, failed: {res.stderr[-600:]}")
            if err is not None and (res.returncode == 0 or err not in res.stderr):
                wrong.append(f"{key}: expected rejection with {err!r}, got rc={res.returncode} {res.stderr[-600:]}")
    assert not wrong, "\n".join(wrong)


def test_rejected_forms_have_an_accepted_twin():
    """A rejection only means something next to an accepted form one step away (same instruction,
    same probe shape), so that a rejected probe cannot fail for an unrelated reason."""
    for arch, probes in FORM_PROBES.items():
        rejected = {k for k, (_, err) in probes.items() if err is not None}
        assert rejected == set(TWINS[arch]), f"{arch}: twins missing or stale: {rejected ^ set(TWINS[arch])}"
        for key, twin in TWINS[arch].items():
            ok = (twin in probes and probes[twin][1] is None) or twin in SASS_PROBES[arch]
            assert ok, f"{arch}: twin {twin!r} of {key!r} is not an accepted probe"


def test_missing_tools_fail_loudly(monkeypatch):
    """Without nvcc the claims must fail, not skip: CI would otherwise pass with nothing checked."""
    monkeypatch.setattr(sys.modules[__name__], "NVCC", None)
    monkeypatch.delenv(OPT_OUT, raising=False)
    with pytest.raises(pytest.fail.Exception, match="nvcc not found"):
        cuda_tools()
    monkeypatch.setenv(OPT_OUT, "1")
    with pytest.raises(pytest.skip.Exception, match=OPT_OUT):
        cuda_tools()


if __name__ == "__main__":  # print the SASS of every probe, to write or check a doc row
    with tempfile.TemporaryDirectory() as d:
        for arch in ("b200", "h100"):
            bodies = {"probe_empty": ""}
            keys = {}
            for i, (key, body) in enumerate(SASS_PROBES[arch].items()):
                bodies[f"sass_{i}"] = body
                keys[f"sass_{i}"] = key
            loose = tuple(n for n, k in keys.items() if k == NO_MIN_BLOCKS)
            res = _nvcc(arch, TARGET[arch], _source(arch, bodies, loose), Path(d), arch)
            if res.returncode:
                print(res.stderr)
                continue
            sass = _sass_by_kernel(Path(d) / f"{arch}.cubin")
            base = set(sass["probe_empty"])
            for name, key in keys.items():
                print(f"{arch} | {key} | {sorted(set(sass[name]) - base)}")
