// Device helpers the bundled kernels share: widening to float and narrowing
// back for the storage types, and a vector of VEC elements moved as one
// access. Included by quoted name; the runtime compiles with this
// directory on NVRTC's include path and hashes this file with each source
// that includes it, so an edit here compiles every kernel anew.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kt {
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half(v); }

// VEC elements moved as one access; the spec's constraints guarantee the
// alignment a vector access needs (sizeof(T) * VEC bytes).
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

// VEC elements at src widened into dst, as one access.
template <int VEC, typename T> __device__ __forceinline__ void vload(float *dst, const T *src) {
  Vec<T, VEC> a = *reinterpret_cast<const Vec<T, VEC> *>(src);
#pragma unroll
  for (int k = 0; k < VEC; k++) dst[k] = to_f(a.v[k]);
}

// VEC floats narrowed into dst, as one access.
template <int VEC, typename T> __device__ __forceinline__ void vstore(T *dst, const float *src) {
  Vec<T, VEC> a;
#pragma unroll
  for (int k = 0; k < VEC; k++) a.v[k] = from_f<T>(src[k]);
  *reinterpret_cast<Vec<T, VEC> *>(dst) = a;
}
}  // namespace kt
