#include "backend/cuda/arch/tma_desc.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"

namespace h3s::cuda::arch {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                           cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr)
      fail(ErrorKind::internal,
           "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12+ driver): {}",
           cudaGetErrorString(e));
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

CUtensorMap encode(const Tensor3d& t, const uint32_t (&box)[3], CUtensorMapDataType type,
                   CUtensorMapSwizzle swizzle, const char* what) {
  if (reinterpret_cast<uintptr_t>(t.base) % 16 != 0 || t.stride_bytes[0] % 16 != 0 ||
      t.stride_bytes[1] % 16 != 0)
    fail(ErrorKind::invalid_argument,
         "{}: TMA needs a 16-byte aligned base and 16-byte multiple strides (strides {} and {} "
         "bytes)",
         what, t.stride_bytes[0], t.stride_bytes[1]);
  CUtensorMap map;
  const cuuint64_t dims[3] = {t.extent[0], t.extent[1], t.extent[2]};
  const cuuint64_t strides[2] = {t.stride_bytes[0], t.stride_bytes[1]};
  const cuuint32_t unit[3] = {1, 1, 1};
  const CUresult r =
      encoder()(&map, type, 3, const_cast<void*>(t.base), dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail(ErrorKind::internal,
         "{}: cuTensorMapEncodeTiled failed (CUresult {}) for extents {} x {} x {}, strides {} "
         "and {} bytes",
         what, int(r), t.extent[0], t.extent[1], t.extent[2], t.stride_bytes[0], t.stride_bytes[1]);
  return map;
}

}  // namespace

CUtensorMap encode_bf16_swizzle128(const Tensor3d& t, const uint32_t (&box)[3], const char* what) {
  constexpr uint32_t kSwizzleRowBytes = 128;
  if (box[0] * 2 != kSwizzleRowBytes)
    fail(ErrorKind::internal, "{}: a 128-byte-swizzled box row must be 64 bf16 (got {})", what,
         box[0]);
  return encode(t, box, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_SWIZZLE_128B, what);
}

CUtensorMap encode_u8(const Tensor3d& t, const uint32_t (&box)[3], const char* what) {
  if (box[0] % 16 != 0)
    fail(ErrorKind::internal, "{}: an unswizzled box row must be a multiple of 16 bytes (got {})",
         what, box[0]);
  return encode(t, box, CU_TENSOR_MAP_DATA_TYPE_UINT8, CU_TENSOR_MAP_SWIZZLE_NONE, what);
}

CUtensorMap encode_u8_swizzle128(const Tensor3d& t, const uint32_t (&box)[3], const char* what) {
  constexpr uint32_t kSwizzleRowBytes = 128;
  if (box[0] != kSwizzleRowBytes)
    fail(ErrorKind::internal, "{}: a 128-byte-swizzled box row must be 128 bytes (got {})", what,
         box[0]);
  return encode(t, box, CU_TENSOR_MAP_DATA_TYPE_UINT8, CU_TENSOR_MAP_SWIZZLE_128B, what);
}

}  // namespace h3s::cuda::arch
