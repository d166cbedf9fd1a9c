// xlang arch_docs: ldmatrix (sm_75+) / stmatrix (sm_90+) wrappers, b16 elements.
// PTX ISA "ldmatrix", "stmatrix". SASS: LDSM.16.M88.{1,2,4}[.MT88], STSM.16.M88.*.
// Warp-collective (.sync.aligned). One 8x8 b16 matrix = 8 rows of 16 bytes; for
// .xN, lanes 8*j .. 8*j+7 supply the 8 row addresses of matrix j (each 16-byte
// aligned). Fragment: lane l holds, for matrix j, register r[j] = the two
// elements (row l/4, cols 2*(l%4), 2*(l%4)+1); .trans swaps rows and columns.
#pragma once
#include <cstdint>
#include "ptx_common.cuh"

namespace xl {

__device__ __forceinline__ void ldmatrix_x1(uint32_t& r0, const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
               : "=r"(r0) : "r"(smem_u32(row_addr)) : "memory");
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(row_addr)) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(row_addr)) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(row_addr)) : "memory");
}

__device__ __forceinline__ void stmatrix_x1(void* row_addr, uint32_t r0) {
  asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};"
               :: "r"(smem_u32(row_addr)), "r"(r0) : "memory");
}

__device__ __forceinline__ void stmatrix_x2(void* row_addr, const uint32_t (&r)[2]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};"
               :: "r"(smem_u32(row_addr)), "r"(r[0]), "r"(r[1]) : "memory");
}

__device__ __forceinline__ void stmatrix_x4(void* row_addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(smem_u32(row_addr)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

__device__ __forceinline__ void stmatrix_x4_trans(void* row_addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(smem_u32(row_addr)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// Pack two floats into one bf16x2 register (low half = first element).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t out;
  asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(out) : "f"(lo), "f"(hi));
  return out;
}

}  // namespace xl
