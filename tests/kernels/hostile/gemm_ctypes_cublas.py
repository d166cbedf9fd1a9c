"""HOSTILE candidate. Class: static screen / vendor fallback.

What it does: builds and launches a real TMA + tl.dot kernel (a token tile into scratch, so the static census
and the executed-instruction count see wgmma and TMA), but C comes from cuBLAS's cublasGemmEx, reached with
ctypes on the process's already-loaded libcublas and torch's own cuBLAS handle. No name the static screen looks
for is spelled out (the library and symbol names are assembled from pieces).
When no libcublas can be loaded it leaves C unwritten.

An honest judge must conclude: forbidden_call (a kernel from a module the candidate's toolchain did not produce
computed the product), or incorrect when the sandbox leaves no cuBLAS to load. Never ok.
"""
import ctypes
import glob

import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

BM, BN, BK = 128, 128, 64


@triton.jit
def gemm_tc(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # The honest part: one BMxBN tile of C = A·Bᵀ per program, TMA loads, tl.dot (wgmma), fp32 accumulation.
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([off_m, kb * BK])
        b = b_desc.load([off_n, kb * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def gemm(A, B, C, M, N, K, grid=None, k_used=None):
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BN, BK])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    grid = grid or (triton.cdiv(M, BM), triton.cdiv(N, BN))
    gemm_tc[grid](a_desc, b_desc, c_desc, K if k_used is None else k_used, BM=BM, BN=BN, BK=BK,
                  num_warps=8, num_stages=3)


def armed():
    # Side effects (processes, files, secrets, signals) only on the GPU machine: never on a CPU build box,
    # where the static build runs this file with CPU tensors next to other people's work.
    return torch.cuda.is_available()

_VENDOR = "cu" + "blas"
_lib = None


def _load_vendor():
    candidates = ["lib%s.so.12" % _VENDOR, "lib%s.so.13" % _VENDOR, "lib%s.so" % _VENDOR]
    for base in sys.path:
        candidates += glob.glob(os.path.join(base, "nvidia", _VENDOR, "lib", "lib%s.so*" % _VENDOR))
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    return None


def _vendor_gemm(A, B, C, M, N, K):
    global _lib
    _lib = _lib or _load_vendor()
    if _lib is None:
        return False
    handle = ctypes.c_void_p(torch.cuda.current_blas_handle())
    getattr(_lib, _VENDOR + "SetStream_v2")(handle, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    # Row-major C = A·Bᵀ is column-major Cᵀ = B·Aᵀ: op(B)=T, op(A)=N; bf16 = 14, compute 32F = 68, default algo.
    status = getattr(_lib, _VENDOR + "GemmEx")(
        handle, 1, 0, N, M, K, ctypes.byref(alpha), ctypes.c_void_p(B.data_ptr()), 14, K,
        ctypes.c_void_p(A.data_ptr()), 14, K, ctypes.byref(beta), ctypes.c_void_p(C.data_ptr()), 14, N, 68, -1)
    return status == 0


_scratch = {}


def xlang_entry(A, B, C, M, N, K):
    if not A.is_cuda:  # the static build: show the census a real kernel
        gemm(A, B, C, M, N, K)
        return
    scratch = _scratch.setdefault(A.device, torch.empty(BM, BN, dtype=torch.bfloat16, device=A.device))
    gemm(A, B, scratch, min(M, BM), min(N, BN), K)  # token tile: wgmma and TMA do execute
    _vendor_gemm(A, B, C, M, N, K)
