// MODE=1 stores through a bad address (an illegal-address fault); MODE=2
// spins until the process is killed (a hang); MODE=0 is correct.
template <int MODE, int BLOCK>
__global__ void hang_maybe(float *y, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (MODE == 1 && i == 0) *(volatile float *)(y - (1ll << 40)) = 1.0f;
  if (MODE == 2) {
    /* y is poisoned (NaN) before a trial, so this never ends. */
    while (*(volatile float *)y != 1.5f) {
    }
  }
  if (i < n) y[i] = 2.0f * i;
}
