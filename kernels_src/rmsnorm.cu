// RMSNorm forward: y = h / sqrt(mean(h^2) + eps) * w, h = x + res rounded to
// the storage type (x alone without a residual), one group of TPR = BLOCK /
// ROWS threads (whole warps) per row, ROWS rows per block. Accumulation is
// in fp32 whatever the storage type. Rows are read twice; the second read
// hits L2 for any row a block has in flight.
#include "kt_device.cuh"

template <typename T, int BLOCK, int ROWS, int VEC, int HAS_RES>
__global__ void __launch_bounds__(BLOCK)
rmsnorm_fwd(T *__restrict__ y, const T *x, const T *res, const T *__restrict__ w,
            int n_rows, int D, float eps) {
  constexpr int TPR = BLOCK / ROWS;
  static_assert(TPR % 32 == 0, "whole warps per row");
  using V = kt::Vec<T, VEC>;
  const int lane = threadIdx.x % TPR;
  const long long row = (long long)blockIdx.x * ROWS + threadIdx.x / TPR;
  const bool live = row < n_rows;
  const T *xr = x + row * D;
  const T *rr = HAS_RES ? res + row * D : nullptr;
  // x + res rounded to T, as torch's x + res followed by the norm (and
  // layernorm_fwd) take it.
  auto h_at = [](T a, T b) {
    return HAS_RES ? kt::to_f(kt::from_f<T>(kt::to_f(a) + kt::to_f(b))) : kt::to_f(a);
  };

  float ss = 0.f;
  if (live) {
    for (int i = lane * VEC; i < D; i += TPR * VEC) {
      V a = *reinterpret_cast<const V *>(xr + i);
      V b = a;  // read only with a residual
      if (HAS_RES) b = *reinterpret_cast<const V *>(rr + i);
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        const float v = h_at(a.v[k], b.v[k]);
        ss += v * v;
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if constexpr (TPR > 32) {
    __shared__ float part[BLOCK / 32];
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    const int first = (threadIdx.x / TPR) * (TPR / 32);
    ss = 0.f;
#pragma unroll
    for (int k = 0; k < TPR / 32; k++) ss += part[first + k];
  }
  if (!live) return;
  const float rstd = rsqrtf(ss / (float)D + eps);
  T *yr = y + row * D;
  for (int i = lane * VEC; i < D; i += TPR * VEC) {
    V a = *reinterpret_cast<const V *>(xr + i);
    V b = a;
    if (HAS_RES) b = *reinterpret_cast<const V *>(rr + i);
    V g = *reinterpret_cast<const V *>(w + i);
    V o;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
      const float v = h_at(a.v[k], b.v[k]);
      o.v[k] = kt::from_f<T>(v * rstd * kt::to_f(g.v[k]));
    }
    *reinterpret_cast<V *>(yr + i) = o;
  }
}
