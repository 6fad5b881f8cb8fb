// Test-only: B = 3 does not compile (NVRTC's verdict on the source); the
// others write y[i] = 2i.
template <int B>
__global__ void refuse(float *y, int n) {
  static_assert(B != 3, "B = 3 does not compile");
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * i;
}
