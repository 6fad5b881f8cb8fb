// Programmatic dependent launch, observed. slow_fill lets the next kernel
// start at once, spins, then writes x[i] = v + i and when each block ended.
// plus_one_after (its spec sets options.pdl) notes when each of its blocks
// started, in a buffer of its own that nothing before it touches, then
// waits for slow_fill and writes y[i] = x[i] + 1. Started early without
// that wait it would read x before slow_fill wrote it. slow_copy, like
// slow_fill, lets the next kernel start at once and spins, then copies n
// words: the inputs of a kernel under test, written just before it.
__device__ __forceinline__ long long now_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <int BLOCK>
__global__ void slow_fill(float *x, long long *t_end, int n, float v, long long spin) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) x[i] = v + i;
  __syncthreads();
  if (threadIdx.x == 0) t_end[blockIdx.x] = now_ns();
}

template <int BLOCK>
__global__ void plus_one_after(float *y, const float *x, long long *t_start, int n) {
  if (threadIdx.x == 0) t_start[blockIdx.x] = now_ns();
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

template <int BLOCK>
__global__ void slow_copy(unsigned *dst, const unsigned *src, int n, long long spin) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) dst[i] = src[i];
}
