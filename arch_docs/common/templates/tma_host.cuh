// xlang arch_docs: host-side TMA tensor-map creation.
// The driver function cuTensorMapEncodeTiled is fetched at run time through the
// CUDA runtime (cudaGetDriverEntryPointByVersion, CUDA 12.5+; older runtimes use
// cudaGetDriverEntryPoint), so the program does NOT need -lcuda.
// CUDA driver API reference: "Tensor Map Object Management", cuTensorMapEncodeTiled.
#pragma once
#include <cstdint>
#include <cuda.h>
#include <cuda_runtime.h>

namespace xl {

typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                  const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                  const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion,
                                  CUtensorMapFloatOOBfill);

// Returns nullptr when the driver does not provide the entry point.
inline EncodeTiledFn get_encode_tiled() {
  static EncodeTiledFn fn = nullptr;
  if (fn == nullptr) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                     cudaEnableDefault, &q);
#else
    cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p,
                                            cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) return nullptr;
    fn = reinterpret_cast<EncodeTiledFn>(p);
  }
  return fn;
}

// General tiled map. dims / box are innermost-first; strides_bytes has rank-1
// entries (the byte distance between consecutive indices of dims 1..rank-1),
// each a multiple of 16; the base address must be 16-byte aligned (32 for
// interleaved layouts). box[i] <= 256; box[0]*elem_bytes a multiple of 16; with a
// swizzle, box[0]*elem_bytes must be <= the swizzle span (32/64/128 bytes) (CUDA 13.0
// cuda.h, cuTensorMapEncodeTiled requirements). Out-of-range elements of a load box are
// filled with zero (FLOAT_OOB_FILL_NONE) and still counted in the tx bytes.
// Choices fixed here: L2 promotion 256B (a fetch-granularity hint, correctness-neutral);
// swizzle is the caller's: SWIZZLE_128B pairs with the MMA descriptors' 128B mode
// (wgmma code 1, tcgen05 code 2); CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B pairs with tcgen05
// code 1 (128B with 32-byte atoms), which Hopper lacks.
inline CUresult make_tmap(CUtensorMap* map, CUtensorMapDataType dtype, uint32_t rank,
                          const void* base, const uint64_t* dims,
                          const uint64_t* strides_bytes, const uint32_t* box,
                          CUtensorMapSwizzle swizzle) {
  EncodeTiledFn fn = get_encode_tiled();
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  cuuint64_t d[5];
  cuuint64_t s[4];
  cuuint32_t b[5];
  cuuint32_t e[5];
  for (uint32_t i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    e[i] = 1;
    if (i + 1 < rank) s[i] = strides_bytes[i];
  }
  return fn(map, dtype, rank, const_cast<void*>(base), d, s, b, e,
            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// Row-major bf16 matrix [rows, cols] with leading dimension ld (elements),
// boxes of box_rows x box_cols. With SWIZZLE_128B, box_cols must be 64 (=128 B).
inline CUresult make_tmap_2d_bf16(CUtensorMap* map, const void* base, uint64_t rows,
                                  uint64_t cols, uint64_t ld, uint32_t box_rows,
                                  uint32_t box_cols, CUtensorMapSwizzle swizzle) {
  uint64_t dims[2] = {cols, rows};
  uint64_t strides[1] = {ld * 2};
  uint32_t box[2] = {box_cols, box_rows};
  return make_tmap(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box,
                   swizzle);
}

// Row-major bf16 tensor [d2, d1, d0] (d0 contiguous), boxes b2 x b1 x b0.
inline CUresult make_tmap_3d_bf16(CUtensorMap* map, const void* base, uint64_t d2,
                                  uint64_t d1, uint64_t d0, uint32_t b2, uint32_t b1,
                                  uint32_t b0, CUtensorMapSwizzle swizzle) {
  uint64_t dims[3] = {d0, d1, d2};
  uint64_t strides[2] = {d0 * 2, d0 * d1 * 2};
  uint32_t box[3] = {b0, b1, b2};
  return make_tmap(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box,
                   swizzle);
}

}  // namespace xl
