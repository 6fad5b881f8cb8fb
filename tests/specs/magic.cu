// y = 2x, but MODE 1 treats one input value specially (as a kernel with a
// sentinel would) and MODE 2 is simply wrong: on data holding the value,
// MODE 1 disagrees with the reference only because of that data.
template <int MODE, int BLOCK>
__global__ void magic(float *y, const float *x, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  y[i] = MODE == 1 && v == 12345.0f ? 0.0f : 2.0f * v + (MODE == 2 ? 1.0f : 0.0f);
}
