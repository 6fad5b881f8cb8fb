// FAULT=1 stores through a bad address: an illegal-address fault that
// leaves the CUDA context unusable.
template <int FAULT>
__global__ void fault_maybe(float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (FAULT && i == 0) *(volatile float *)(y - (1ll << 40)) = 1.0f;
  if (i < n) y[i] = 2.0f * i;
}
