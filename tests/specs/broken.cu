// y[r] += x[r] over rows of D, deliberately broken for the tuner's tests.
// Each program owns ROWS_PER rows, but works on a tile of BT rows from its
// first one. With MASKED=0 and BT larger than its share, it also adds into
// the next program's rows (two programs write one row): the overlapping
// writes of a tile larger than a program's share. With BT smaller than the
// share it leaves rows undone. PAST=1 writes one element past the output.
template <int BT, int MASKED, int PAST>
__global__ void broken_rows(float *y, const float *x, int rows, int D) {
  const int ROWS_PER = 2;
  int first = blockIdx.x * ROWS_PER;
  int last = MASKED ? min(first + ROWS_PER, rows) : rows;
  for (int r = first; r < first + BT && r < last; r++)
    for (int i = threadIdx.x; i < D; i += blockDim.x) y[(long long)r * D + i] += x[(long long)r * D + i];
  if (PAST && blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) y[(long long)rows * D] = 7.0f;
}
