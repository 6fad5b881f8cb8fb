// y[i] = x[i + 1]: reads the element its neighbour writes, so it cannot run
// in place.
template <int BLOCK>
__global__ void shift_left(float *y, const float *x, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = x[i + 1];
}
