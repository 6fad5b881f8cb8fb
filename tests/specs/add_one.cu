// x = x + 1 in place: the smallest kernel whose autotuning would corrupt a
// caller's buffer if trials ran on it (each trial adds one more).
template <int BLOCK, int ITEMS>
__global__ void add_one(float *x, long long n) {
  long long base = ((long long)blockIdx.x * BLOCK + threadIdx.x) * ITEMS;
#pragma unroll
  for (int i = 0; i < ITEMS; i++)
    if (base + i < n) x[base + i] += 1.0f;
}
