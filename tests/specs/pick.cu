// x[i] = 2i, after every block spins SLOW * 20 microseconds: SLOW = 0 is
// the fastest config by far, so any correct tuning picks it.
template <int SLOW, int BLOCK>
__global__ void pick(float *x, int n) {
  if (SLOW) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < SLOW * 20000ull);
  }
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) x[i] = 2.0f * i;
}
