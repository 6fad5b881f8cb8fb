// Token permutation for mixture-of-experts: rows of D elements reordered by
// a row map, with optional per-row probabilities carried along.
//   permute_rows      out[j] = in[map[j]], probs_out[j] = probs[map[j]]
//   permute_rows_bwd  din[map[j]] = dout[j], dprobs[map[j]] = dprobs_out[j]
// A map entry outside [0, N) gives a zero row forward and is skipped
// backward. The backward needs map to name each row at most once (a
// permutation), so no two programs write one row. One group of
// TPR = BLOCK / ROWS threads per row; the copy is VEC elements wide.
#include "kt_device.cuh"

namespace kt {
template <typename T, int TPR, int VEC>
__device__ __forceinline__ void copy_row(T *__restrict__ dst, const T *__restrict__ src, int D,
                                         int lane) {
  using V = Vec<T, VEC>;
  for (int i = lane * VEC; i < D; i += TPR * VEC)
    *reinterpret_cast<V *>(dst + i) = src ? *reinterpret_cast<const V *>(src + i) : V{};
}
}  // namespace kt

template <typename T, int BLOCK, int ROWS, int VEC, int HAS_PROBS>
__global__ void __launch_bounds__(BLOCK)
permute_rows(T *__restrict__ out, const T *__restrict__ in, const int *__restrict__ map,
             const float *__restrict__ probs, float *__restrict__ probs_out, int M, int N, int D) {
  constexpr int TPR = BLOCK / ROWS;
  const int lane = threadIdx.x % TPR;
  const long long j = (long long)blockIdx.x * ROWS + threadIdx.x / TPR;
  if (j >= M) return;
  const int src = map[j];
  const bool ok = src >= 0 && src < N;
  kt::copy_row<T, TPR, VEC>(out + j * D, ok ? in + (long long)src * D : nullptr, D, lane);
  if (HAS_PROBS && lane == 0) probs_out[j] = ok ? probs[src] : 0.f;
}

template <typename T, int BLOCK, int ROWS, int VEC, int HAS_PROBS>
__global__ void __launch_bounds__(BLOCK)
permute_rows_bwd(T *__restrict__ din, const T *__restrict__ dout, const int *__restrict__ map,
                 const float *__restrict__ dprobs_out, float *__restrict__ dprobs, int M, int N,
                 int D) {
  constexpr int TPR = BLOCK / ROWS;
  const int lane = threadIdx.x % TPR;
  const long long j = (long long)blockIdx.x * ROWS + threadIdx.x / TPR;
  if (j >= M) return;
  const int dst = map[j];
  if (dst < 0 || dst >= N) return;
  kt::copy_row<T, TPR, VEC>(din + (long long)dst * D, dout + j * D, D, lane);
  if (HAS_PROBS && lane == 0) dprobs[dst] = dprobs_out[j];
}
