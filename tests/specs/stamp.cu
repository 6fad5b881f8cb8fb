// Writes the GPU's clock: two runs never agree, so no config can be judged
// against it.
template <int BLOCK>
__global__ void stamp(float *y, int n) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = (float)(t & 0xffffffull);
}
