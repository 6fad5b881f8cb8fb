// Softmax over rows of L elements: y = softmax(scale * x + bias), with
// elements whose mask byte is 0 left out (they get 0). A row with every
// element masked is all zeros. One group of TPR = BLOCK / ROWS threads per row.
//
// ALIGNED (a derived constant: L divisible by VEC and every pointer aligned to
// its vector) selects vector accesses; otherwise the same loop runs with one
// guarded access per element, so ragged rows and unaligned pointers are
// correct under every config rather than excluded from vector configs.
// ITEMS > 0 keeps the row in registers; ITEMS == 0 streams it twice with an
// online maximum.
#include "kt_device.cuh"

namespace kt {
// Elements [i, i + VEC) of a row of n: one vector access when ALIGNED, else
// one access per element below n.
template <int VEC, bool ALIGNED, typename T>
__device__ __forceinline__ void load(float *dst, const T *src, int i, int n, float fill) {
  if (ALIGNED) {
    vload<VEC>(dst, src + i);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) dst[k] = i + k < n ? to_f(src[i + k]) : fill;
  }
}

template <int VEC, bool ALIGNED>
__device__ __forceinline__ void load_mask(bool *dst, const unsigned char *src, int i, int n) {
  if (ALIGNED) {
    Vec<unsigned char, VEC> a = *reinterpret_cast<const Vec<unsigned char, VEC> *>(src + i);
#pragma unroll
    for (int k = 0; k < VEC; k++) dst[k] = a.v[k] != 0;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) dst[k] = i + k < n && src[i + k] != 0;
  }
}

template <int VEC, bool ALIGNED, typename T>
__device__ __forceinline__ void store(T *dst, const float *src, int i, int n) {
  if (ALIGNED) {
    vstore<VEC>(dst + i, src);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++)
      if (i + k < n) dst[i + k] = from_f<T>(src[k]);
  }
}

// Reduction over a group of TPR threads (whole warps); every thread of the
// block calls it the same number of times.
template <int TPR, bool MAX> __device__ __forceinline__ float group_reduce(float v, float *part) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, u) : v + u;
  }
  if constexpr (TPR > 32) {
    __syncthreads();
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    const int first = (threadIdx.x / TPR) * (TPR / 32);
    v = part[first];
#pragma unroll
    for (int k = 1; k < TPR / 32; k++) v = MAX ? fmaxf(v, part[first + k]) : v + part[first + k];
  }
  return v;
}
}  // namespace kt

template <typename T, int BLOCK, int ROWS, int VEC, int ITEMS, int HAS_MASK, int HAS_BIAS,
          int ALIGNED>
__global__ void __launch_bounds__(BLOCK)
masked_softmax(T *__restrict__ y, const T *__restrict__ x, const unsigned char *__restrict__ mask,
               const T *__restrict__ bias, int n_rows, int L, float scale) {
  constexpr int TPR = BLOCK / ROWS;
  static_assert(TPR % 32 == 0, "whole warps per row");
  __shared__ float part[BLOCK / 32];
  const float NEG = __int_as_float(0xff800000);
  const int lane = threadIdx.x % TPR;
  const long long row = (long long)blockIdx.x * ROWS + threadIdx.x / TPR;
  const bool live = row < n_rows;
  const long long base = row * L;

  // z for elements [i, i + VEC): -inf where masked or past the row.
  auto logits = [&](float *z, int i) {
    kt::load<VEC, ALIGNED>(z, x + base, i, L, 0.f);
    float b[VEC];
    bool keep[VEC];
    if constexpr (HAS_BIAS) kt::load<VEC, ALIGNED>(b, bias + base, i, L, 0.f);
    if constexpr (HAS_MASK) kt::load_mask<VEC, ALIGNED>(keep, mask + base, i, L);
#pragma unroll
    for (int k = 0; k < VEC; k++) {
      z[k] = z[k] * scale + (HAS_BIAS ? b[k] : 0.f);
      if (i + k >= L || (HAS_MASK && !keep[k])) z[k] = NEG;
    }
  };

  if constexpr (ITEMS > 0) {
    float z[ITEMS][VEC];
    float m = NEG;
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
      const int i = (lane + j * TPR) * VEC;
      if (live && i < L) {
        logits(z[j], i);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) z[j][k] = NEG;
      }
#pragma unroll
      for (int k = 0; k < VEC; k++) m = fmaxf(m, z[j][k]);
    }
    m = kt::group_reduce<TPR, true>(m, part);
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < ITEMS; j++)
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        z[j][k] = m == NEG ? 0.f : expf(z[j][k] - m);
        s += z[j][k];
      }
    s = kt::group_reduce<TPR, false>(s, part);
    const float inv = s > 0.f ? 1.f / s : 0.f;
    if (!live) return;
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
      const int i = (lane + j * TPR) * VEC;
      if (i >= L) continue;
#pragma unroll
      for (int k = 0; k < VEC; k++) z[j][k] *= inv;
      kt::store<VEC, ALIGNED>(y + base, z[j], i, L);
    }
  } else {
    // Online maximum: the running sum is rescaled when the maximum grows.
    float m = NEG, s = 0.f;
    if (live) {
      for (int i = lane * VEC; i < L; i += TPR * VEC) {
        float z[VEC];
        logits(z, i);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          if (z[k] == NEG) continue;
          if (z[k] > m) {
            s = s * expf(m - z[k]) + 1.f;
            m = z[k];
          } else {
            s += expf(z[k] - m);
          }
        }
      }
    }
    const float gm = kt::group_reduce<TPR, true>(m, part);
    s = m == NEG ? 0.f : s * expf(m - gm);
    s = kt::group_reduce<TPR, false>(s, part);
    const float inv = s > 0.f ? 1.f / s : 0.f;
    if (!live) return;
    for (int i = lane * VEC; i < L; i += TPR * VEC) {
      float z[VEC];
      logits(z, i);
#pragma unroll
      for (int k = 0; k < VEC; k++) z[k] = gm == NEG ? 0.f : expf(z[k] - gm) * inv;
      kt::store<VEC, ALIGNED>(y + base, z, i, L);
    }
  }
}
