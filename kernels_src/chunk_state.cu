// Chunked linear-attention state recurrence, per batch-head bh, over N chunks
// of C tokens (k: [BH, N*C, DK], v: [BH, N*C, DV], decay: [BH, N]):
//   h[0] = h0 (or 0),  h[i+1] = decay[i] * h[i] + K_i^T V_i,
// every h[i] stored (h: [BH, N+1, DK, DV], fp32).
//
// C, DK and DV are compile-time constants (CC, KD, VD), so variants for
// several head shapes live side by side. NS is N when the spec specialises
// it, else 0 and N is read at run time.
//   chunk_state_fwd       one block per (DK x DV tile, bh), walking the chunks
//   chunk_state_bwd_scan  dg[i] = dh[i] + decay[i] * dg[i+1], chunks in reverse
//                         (dg[i] is the whole gradient of h[i]; dg[0] is dh0)
//   chunk_state_bwd       per (chunk, bh): dk = v dg[i+1]^T, dv = k dg[i+1],
//                         ddecay[i] = sum(dg[i+1] * h[i])
#include "kt_device.cuh"

// Each thread owns a TM x TN tile of the block's BK x BV tile of h, so that
// one step over t reads TM + TN values from shared memory for TM * TN
// multiply-adds.
template <typename T, int CC, int KD, int VD, int BK, int BV, int NT, int NS>
__global__ void __launch_bounds__(NT)
chunk_state_fwd(float *__restrict__ h, const T *__restrict__ k, const T *__restrict__ v,
                const float *__restrict__ decay, const float *__restrict__ h0, int BH, int N,
                int C, int DK, int DV) {
  static_assert(KD % BK == 0 && VD % BV == 0 && (BK * BV) % NT == 0, "tiles divide the state");
  constexpr int E = BK * BV / NT;
  constexpr int TN = E < 4 ? E : 4, TM = E / TN;
  static_assert(BV % TN == 0 && BK % TM == 0 && (BV / TN) * (BK / TM) == NT, "thread tiles cover the block tile");
  extern __shared__ float sm[];
  float *ks = sm, *vs = sm + CC * BK;
  (void)BH, (void)C, (void)DK, (void)DV;
  const int n = NS > 0 ? NS : N;
  const int bh = blockIdx.y;
  const int k0 = (blockIdx.x / (VD / BV)) * BK, v0 = (blockIdx.x % (VD / BV)) * BV;
  const int tx = threadIdx.x % (BV / TN), ty = threadIdx.x / (BV / TN);
  const T *kb = k + (long long)bh * n * CC * KD;
  const T *vb = v + (long long)bh * n * CC * VD;
  float *hb = h + (long long)bh * (n + 1) * KD * VD + (long long)(k0 + ty * TM) * VD + v0 + tx * TN;

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; i++)
#pragma unroll
    for (int j = 0; j < TN; j++) {
      acc[i][j] = h0 ? h0[(long long)bh * KD * VD + (long long)(k0 + ty * TM + i) * VD + v0 + tx * TN + j] : 0.f;
      hb[i * VD + j] = acc[i][j];
    }
  for (int c = 0; c < n; c++) {
    const T *kc = kb + (long long)c * CC * KD, *vc = vb + (long long)c * CC * VD;
    for (int idx = threadIdx.x; idx < CC * BK; idx += NT)
      ks[idx] = kt::to_f(kc[(idx / BK) * KD + k0 + idx % BK]);
    for (int idx = threadIdx.x; idx < CC * BV; idx += NT)
      vs[idx] = kt::to_f(vc[(idx / BV) * VD + v0 + idx % BV]);
    __syncthreads();
    const float dc = decay[(long long)bh * n + c];
    float s[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
      for (int j = 0; j < TN; j++) s[i][j] = 0.f;
#pragma unroll 4
    for (int t = 0; t < CC; t++) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; i++) a[i] = ks[t * BK + ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; j++) b[j] = vs[t * BV + tx * TN + j];
#pragma unroll
      for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) s[i][j] += a[i] * b[j];
    }
    float *hn = hb + (long long)(c + 1) * KD * VD;
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
      for (int j = 0; j < TN; j++) {
        acc[i][j] = dc * acc[i][j] + s[i][j];
        hn[i * VD + j] = acc[i][j];
      }
    __syncthreads();
  }
}

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK)
chunk_state_bwd_scan(float *__restrict__ dg, const float *__restrict__ dh,
                     const float *__restrict__ decay, int BH, int N, int DK, int DV) {
  (void)BH;
  const long long S = (long long)DK * DV;
  const long long e = (long long)blockIdx.x * BLOCK + threadIdx.x;
  if (e >= S) return;
  const long long base = (long long)blockIdx.y * (N + 1) * S + e;
  float g = dh[base + N * S];
  dg[base + N * S] = g;
  for (int i = N - 1; i >= 0; i--) {
    g = dh[base + i * S] + decay[(long long)blockIdx.y * N + i] * g;
    dg[base + i * S] = g;
  }
}

template <typename T, int CC, int KD, int VD, int NT, int NS>
__global__ void __launch_bounds__(NT)
chunk_state_bwd(T *__restrict__ dk, T *__restrict__ dv, float *__restrict__ ddecay,
                const T *__restrict__ k, const T *__restrict__ v, const float *__restrict__ h,
                const float *__restrict__ dg, int BH, int N, int C, int DK, int DV) {
  constexpr int GS = VD + 1;  // padded rows: threads walking k hit distinct banks
  extern __shared__ float sm[];
  float *gs = sm, *ks = gs + KD * GS, *vs = ks + CC * KD;
  __shared__ float part[NT / 32];
  (void)BH, (void)C, (void)DK, (void)DV;
  const int n = NS > 0 ? NS : N;
  const int i = blockIdx.x, bh = blockIdx.y;
  const long long tok = ((long long)bh * n + i) * CC;
  const float *g = dg + ((long long)bh * (n + 1) + i + 1) * KD * VD;
  const float *hp = h + ((long long)bh * (n + 1) + i) * KD * VD;

  float dd = 0.f;
  for (int idx = threadIdx.x; idx < KD * VD; idx += NT) {
    const float gv = g[idx];
    gs[(idx / VD) * GS + idx % VD] = gv;
    dd += gv * hp[idx];
  }
  for (int idx = threadIdx.x; idx < CC * KD; idx += NT) ks[idx] = kt::to_f(k[tok * KD + idx]);
  for (int idx = threadIdx.x; idx < CC * VD; idx += NT) vs[idx] = kt::to_f(v[tok * VD + idx]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) dd += __shfl_xor_sync(0xffffffffu, dd, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = dd;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < NT / 32; w++) s += part[w];
    ddecay[(long long)bh * n + i] = s;
  }
  for (int idx = threadIdx.x; idx < CC * KD; idx += NT) {
    const int t = idx / KD, kk = idx % KD;
    float s = 0.f;
#pragma unroll 8
    for (int vv = 0; vv < VD; vv++) s += vs[t * VD + vv] * gs[kk * GS + vv];
    dk[tok * KD + idx] = kt::from_f<T>(s);
  }
  for (int idx = threadIdx.x; idx < CC * VD; idx += NT) {
    const int t = idx / VD, vv = idx % VD;
    float s = 0.f;
#pragma unroll 8
    for (int kk = 0; kk < KD; kk++) s += ks[t * KD + kk] * gs[kk * GS + vv];
    dv[tok * VD + idx] = kt::from_f<T>(s);
  }
}
