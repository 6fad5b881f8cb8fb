// y = 2 x (+ w), then x[i] = BLOCK: a consumed input, left holding a value
// that differs between configs (compared, every config but one would fail).
template <int BLOCK>
__global__ void drain(float *y, float *x, const float *w, int n) {
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i >= n) return;
  float v = 2.0f * x[i] + (w ? w[i] : 0.0f);
  x[i] = (float)BLOCK;
  y[i] = v;
}
