// LayerNorm and RMSNorm, forward and backward, with optional residual in and
// out, weight, bias and groups. A row of D elements is G segments of
// L = D / G; each segment is normalised on its own (G = 1 is the plain norm,
// G > 1 a group norm over the row) and the weight and bias index the whole row.
// Accumulation is in fp32 whatever the storage types.
//
// Three entries share the helpers below:
//   layernorm_fwd         one group of TPR = BLOCK / ROWS threads per segment
//   layernorm_bwd         a persistent grid of programs (a block, or a
//                         cluster of CL blocks): program p owns the rows
//                         [p * BS, min((p + 1) * BS, N)), BS = cdiv(N, P),
//                         writes dx for them and its partial dw/db row
//   layernorm_bwd_reduce  sums the partial rows into dw and db
//
// ITEMS > 0 keeps a segment in registers (ITEMS vectors of VEC per thread,
// one read of global memory); ITEMS == 0 streams it from memory for segments
// too long for registers. STAGES > 0 (with ITEMS > 0 and 16-byte vectors)
// copies the next STAGES - 1 tiles into shared memory while the current one
// is reduced.
//
// layernorm_fwd, layernorm_bwd_row and layernorm_bwd_reduce set
// options.pdl: on sm_90+ the runtime launches them while the kernel before
// them drains, so they wait (grid_wait) before their first access to global
// memory. The forward and the reduce then let the kernel after them launch
// at once (grid_trigger); the backward entries let it launch only once
// their rows are done, so that the reduce's blocks are resident when the
// partial rows land but not beside the streaming programs all along (with
// that, the one-block-per-SM programs ran a quarter slower back to back).
// layernorm_bwd is not launched early itself. Its persistent programs
// gained 0.5-1 us at most tuned picks launched early, but lost up to 2.5 us
// at others in the same process (H100: RMSNorm 1024x16384 in 66 blocks of
// 512, 43.0 -> 45.1 us with its reduce), and a pick with several blocks an
// SM took 48.0 us where an earlier run, launched plainly, took 39.9: most
// likely blocks placed while the kernel before drains land unevenly.
#include "kt_device.cuh"

namespace kt {
// The same widening, done where it is written: inline assembly the compiler
// cannot merge, so a segment kept as 16-bit values (PACK) is widened at each
// pass instead of once into twice the registers.
__device__ __forceinline__ float to_f_here(float v) { return v; }
__device__ __forceinline__ float to_f_here(__nv_bfloat16 v) {
  float f;
  asm volatile("mov.b32 %0, {%1, %2};" : "=f"(f) : "h"((unsigned short)0), "h"(__bfloat16_as_ushort(v)));
  return f;
}
__device__ __forceinline__ float to_f_here(__half v) {
  float f;
  asm volatile("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(__half_as_ushort(v)));
  return f;
}
// The same widening, not volatile: scheduled freely, but not hoisted out of
// the loop it is written in, so 16-bit values held across rows stay 16-bit
// in registers (a held bf16 weight: 56 registers where kt::to_f took 61).
__device__ __forceinline__ float to_f_late(float v) { return v; }
__device__ __forceinline__ float to_f_late(__nv_bfloat16 v) {
  float f;
  asm("mov.b32 %0, {%1, %2};" : "=f"(f) : "h"((unsigned short)0), "h"(__bfloat16_as_ushort(v)));
  return f;
}
__device__ __forceinline__ float to_f_late(__half v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(__half_as_ushort(v)));
  return f;
}

template <bool C, typename A, typename B> struct pick { using type = A; };
template <bool C, typename A> struct enable_if {};
template <typename A> struct enable_if<true, A> { using type = A; };
template <typename A, typename B> struct pick<false, A, B> { using type = B; };

// VEC sums added into dst (stored, when add is false). Floats (partial rows,
// shared memory) as 16-, 8- or 4-byte accesses: VEC scalar accesses by a
// warp would touch each 32-byte sector VEC times; dst must be aligned to
// min(VEC, 4) floats. Another type (the weight's, where one program owns
// every row and writes dw itself) as one vector of VEC, rounded once per
// store.
template <int VEC, typename P> __device__ __forceinline__ void add_sums(P *dst, const float *src, bool add) {
  if constexpr (sizeof(P) == 4) {
    constexpr int C = VEC < 4 ? VEC : 4;
#pragma unroll
    for (int k = 0; k < VEC; k += C) {
      Vec<float, C> a;
      if (add) a = *reinterpret_cast<const Vec<float, C> *>(dst + k);
#pragma unroll
      for (int c = 0; c < C; c++) a.v[c] = (add ? a.v[c] : 0.f) + src[k + c];
      *reinterpret_cast<Vec<float, C> *>(dst + k) = a;
    }
  } else {
    float a[VEC];
    if (add) vload<VEC>(a, dst);
#pragma unroll
    for (int k = 0; k < VEC; k++) a[k] = (add ? a[k] : 0.f) + src[k];
    vstore<VEC>(dst, a);
  }
}

// The power of two at or above n (n <= 32): the lanes that add n warps' sums.
__host__ __device__ constexpr int lanes_for(int n) {
  return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : n <= 16 ? 16 : 32;
}

// One of the NW = TPR / 32 warps' sums of this thread's group in part, for
// N2 = lanes_for(NW) lanes to add: lane l of every warp reads sum l % N2
// (zero past NW, when NW is not a power of two), so no thread holds NW loads
// in registers.
template <int TPR, typename V> __device__ __forceinline__ V warp_sum_at_lane(const V *part, V zero) {
  constexpr int NW = TPR / 32, N2 = lanes_for(NW);
  const int l = (int)(threadIdx.x % N2);
  return N2 == NW || l < NW ? part[(threadIdx.x / TPR) * NW + l] : zero;
}

// Sum over a group of TPR threads (whole warps, or 16 lanes: half a warp).
// Every thread of the block calls it the same number of times: it
// synchronises when TPR > 32. part is one of two halves the caller
// alternates between, as for group_sum2.
template <int TPR> __device__ __forceinline__ float group_sum(float v, float *part) {
#pragma unroll
  for (int o = (TPR < 32 ? TPR : 32) / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (TPR > 32) {
    // The warps' sums are added by shuffles too.
    constexpr int N2 = lanes_for(TPR / 32);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    v = warp_sum_at_lane<TPR>(part, 0.f);
#pragma unroll
    for (int o = N2 / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

// a and b summed over each aligned group of N lanes (a power of two up to
// 32), by xor shuffles: every lane of a group gets the same bits.
template <int N> __device__ __forceinline__ void xor_sum2(float &a, float &b) {
#pragma unroll
  for (int o = N / 2; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
}

// Two sums over a group at once behind one barrier. part is one of two
// halves the caller alternates between, so the half written now was last
// read before the previous call's barrier.
template <int TPR>
__device__ __forceinline__ float2 group_sum2(float a, float b, float2 *part) {
  xor_sum2<(TPR < 32 ? TPR : 32)>(a, b);
  if constexpr (TPR > 32) {
    constexpr int N2 = lanes_for(TPR / 32);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = make_float2(a, b);
    __syncthreads();
    const float2 p = warp_sum_at_lane<TPR>(part, make_float2(0.f, 0.f));
    a = p.x;
    b = p.y;
    xor_sum2<N2>(a, b);
  }
  return make_float2(a, b);
}

// 16-byte copies from global to shared memory that complete asynchronously
// (sm_80 and later; the specs admit them only there): rows in flight this
// way hold shared memory, not registers. Rows bypass L1 (.cg: each is read
// once); L1 = true keeps the lines in L1 (.ca) for what every block of an SM
// copies, the forward's weight and bias: at D = 1000 with 8K blocks the
// bypass took 34.7 us where L1 took 24.8.
template <bool L1 = false> __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
#if __CUDA_ARCH__ >= 800
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  if constexpr (L1)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N of this thread's groups are pending.
template <int N> __device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Programmatic dependent launch. grid_trigger lets the next kernel's blocks
// be scheduled before this block exits (they still wait for this whole grid
// in grid_wait); grid_wait blocks until the previous kernel in the stream has
// completed and its writes are visible. No-ops in a launch without it.
__device__ __forceinline__ void grid_trigger() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// A thread's VEC running sums of item j kept in shared memory (the
// backward's ACC = 1) instead of registers: C-float vectors at
// acc[((j * VEC / C + q) * TPR + lane) * C], so the lanes of a warp touch
// consecutive vectors (no bank conflicts) and no two threads share one.
template <int VEC, int TPR> struct SharedSums {
  static constexpr int C = VEC < 4 ? VEC : 4;
  float *acc;
  __device__ __forceinline__ Vec<float, C> *at(int j, int q, int lane) const {
    return reinterpret_cast<Vec<float, C> *>(acc) + (j * (VEC / C) + q) * TPR + lane;
  }
  __device__ __forceinline__ void zero(int j, int lane) const {
#pragma unroll
    for (int q = 0; q < VEC / C; q++) {
      Vec<float, C> z;
#pragma unroll
      for (int c = 0; c < C; c++) z.v[c] = 0.f;
      *at(j, q, lane) = z;
    }
  }
  __device__ __forceinline__ void add(int j, int lane, const float *v) const {
#pragma unroll
    for (int q = 0; q < VEC / C; q++) {
      Vec<float, C> a = *at(j, q, lane);
#pragma unroll
      for (int c = 0; c < C; c++) a.v[c] += v[q * C + c];
      *at(j, q, lane) = a;
    }
  }
  __device__ __forceinline__ void get(int j, int lane, float *v) const {
#pragma unroll
    for (int q = 0; q < VEC / C; q++) {
      const Vec<float, C> a = *at(j, q, lane);
#pragma unroll
      for (int c = 0; c < C; c++) v[q * C + c] = a.v[c];
    }
  }
};

// Thread-block clusters (sm_90 and later; the specs admit CL > 1 only
// there). A cluster's blocks run at once, so they may wait for each other
// and read each other's shared memory (distributed shared memory).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KT_CLUSTER(n) __cluster_dims__(n, 1, 1)
#else
#define KT_CLUSTER(n)
#endif
// Every thread of every block of the cluster arrives; shared-memory writes
// before it are visible to the whole cluster after it.
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
// The address of p (a variable of this block's shared memory) in the shared
// memory of block rank of this cluster.
__device__ __forceinline__ unsigned cluster_addr(const void *p, unsigned rank) {
  unsigned a = 0;
#if __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
#endif
  return a;
}
// *p, read from the shared memory of block rank of this cluster (p is the
// same variable in this block's).
__device__ __forceinline__ float2 cluster_ld2(const float2 *p, unsigned rank) {
  float2 v = make_float2(0.f, 0.f);
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(cluster_addr(p, rank)) : "memory");
#endif
  return v;
}
// One float at p, read the same way.
__device__ __forceinline__ float cluster_ld1(const float *p, unsigned rank) {
  float v = 0.f;
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(cluster_addr(p, rank)) : "memory");
#endif
  return v;
}
// Four floats at p (16-byte aligned), read the same way.
__device__ __forceinline__ float4 cluster_ld4(const float *p, unsigned rank) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if __CUDA_ARCH__ >= 900
  const unsigned a = cluster_addr(p, rank);
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(a)
               : "memory");
#endif
  return v;
}
// C floats at p (aligned to C floats) added into a, read from this block's
// shared memory (MG == 1) or that of block rank of its cluster.
template <int C, int MG> __device__ __forceinline__ void add_shared(float *a, const float *p, unsigned rank) {
  float v[C];
  if constexpr (MG == 1) {
    const Vec<float, C> s = *reinterpret_cast<const Vec<float, C> *>(p);
#pragma unroll
    for (int k = 0; k < C; k++) v[k] = s.v[k];
  } else if constexpr (C == 4) {
    const float4 s = cluster_ld4(p, rank);
    v[0] = s.x, v[1] = s.y, v[2] = s.z, v[3] = s.w;
  } else if constexpr (C == 2) {
    const float2 s = cluster_ld2(reinterpret_cast<const float2 *>(p), rank);
    v[0] = s.x, v[1] = s.y;
  } else {
    v[0] = cluster_ld1(p, rank);
  }
#pragma unroll
  for (int k = 0; k < C; k++) a[k] += v[k];
}

// group_sum2 over the groups of TPR threads at the same place in each of a
// cluster's CL blocks (a segment split over the blocks): the warps' sums
// meet behind one cluster barrier (which also serves as the block's), and
// every thread of every block adds its group's NW * CL sums in the same
// order, so all get the same bits. part alternates as for group_sum2: a half
// is written again only after the next call's barrier, which no thread
// reaches before it has read this call's.
template <int TPR, int CL>
__device__ __forceinline__ float2 cluster_sum2(float a, float b, float2 *part) {
  constexpr int NW = TPR / 32, NP = NW * CL;
  static_assert(NP <= 32 && (NP & (NP - 1)) == 0, "a warp adds every block's warp sums");
  xor_sum2<32>(a, b);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = make_float2(a, b);
  cluster_sync();
  const int e = (int)threadIdx.x % NP;
  const float2 p = cluster_ld2(part + (threadIdx.x / TPR) * NW + e % NW, (unsigned)(e / NW));
  a = p.x;
  b = p.y;
  xor_sum2<NP>(a, b);
  return make_float2(a, b);
}

// The VEC-element vectors of a segment of L elements that thread lane of a
// group of TPR reads in the ITEMS loops, from src into the same places of dst.
template <int ITEMS, int TPR, int VEC, typename T>
__device__ __forceinline__ void copy_mine(T *dst, const T *src, int lane, int L) {
#pragma unroll
  for (int j = 0; j < ITEMS; j++) {
    const int i = (lane + j * TPR) * VEC;
    if (i < L) cp_async16(dst + i, src + i);
  }
}
}  // namespace kt

// h = x (+ res), VEC elements from xs and rs. The sum is rounded to T, as
// res_out stores it: the statistics and y are those of the h the backward
// reads back (one of unrounded sums differs from it by a rounding, which
// rstd magnifies up to 1 / sqrt(eps) in a row of equal values), and those
// of torch's x + res followed by the norm.
template <int VEC, int HAS_RESIDUAL, typename T>
__device__ __forceinline__ void load_h(float *h, const T *xs, const T *rs) {
  kt::vload<VEC>(h, xs);
  if constexpr (HAS_RESIDUAL) {
    float r[VEC];
    kt::vload<VEC>(r, rs);
#pragma unroll
    for (int k = 0; k < VEC; k++) h[k] = kt::to_f(kt::from_f<T>(h[k] + r[k]));
  }
}

// y = (h - mu) * rs [* w] [+ b]: VEC elements, at column c of w and b; h
// is f32, or the input type where the segment is kept packed.
template <int VEC, int HAS_WEIGHT, int HAS_BIAS, typename T, typename W, typename H>
__device__ __forceinline__ void store_norm(T *y, const H *h, float mu, float rs, const W *w, const W *b,
                                           int c) {
  float wv[VEC], bv[VEC], o[VEC];
  if constexpr (HAS_WEIGHT) kt::vload<VEC>(wv, w + c);
  if constexpr (HAS_BIAS) kt::vload<VEC>(bv, b + c);
#pragma unroll
  for (int k = 0; k < VEC; k++) {
    o[k] = (kt::to_f_here(h[k]) - mu) * rs;
    if constexpr (HAS_WEIGHT) o[k] *= wv[k];
    if constexpr (HAS_BIAS) o[k] += bv[k];
  }
  kt::vstore<VEC>(y, o);
}

// PACK (ITEMS > 0, 16-bit x, no residual) keeps the segment in registers as
// loaded, widening each element at every pass: half the registers, so more
// blocks fit on an SM, for a conversion per element per pass. It wins where
// a launch is a few waves of blocks waiting on memory (4096 x 4096 on an
// H100) and loses elsewhere; the tuner decides.
//
// STAGES > 0 (ITEMS > 0, 16-byte vectors): a grid of at most
// num_sms * 1024 / BLOCK blocks, each walking tiles of ROWS segments with
// STAGES - 1 tiles of x (and res) in flight in dynamic shared memory, copied
// by cp.async; as in layernorm_bwd, a thread reads back only what it copied.
// It is held to the registers that let all 1024 / BLOCK blocks the grid
// counts on fit on an SM at once.
//
// OCC > 1 (ITEMS > 0, STAGES == 0) holds the compiler to the registers that
// let OCC blocks share an SM (64K / (BLOCK * OCC) a thread): one more row in
// flight per SM where the registers it would take alone leave room for one
// fewer. LayerNorm, bf16, H100, the fastest of four interleaved graph
// timings: 3277x5120 at BLOCK=256, ITEMS=3: 25.49 -> 24.76 us (OCC=5, 56 -> 48
// registers); 4096x4096 at BLOCK=256, ITEMS=2: 24.92 -> 24.68 (OCC=6);
// 1366x12288 at BLOCK=384, ITEMS=4 (a row exactly): 26.63 -> 25.52 (OCC=3),
// where BLOCK=512, ITEMS=3 took 26.12. Past the point where the values
// spill, it loses (3277x5120, OCC=6: 27.71); the tuner decides. In blocks
// of 128 (OCC 9 or 12): LayerNorm with weight and bias, ITEMS=4, 64 -> 56
// registers (9 blocks an SM); H200, 4096x4096: 19.6 -> 19.1 us.
//
// A BLOCK that is not a power of two (320, 384, 640, 768: 10, 12, 20, 24
// warps, their sums added over 16 or 32 lanes, the rest zero) is admitted
// only where it covers a segment exactly (BLOCK * VEC * ITEMS == L, one
// segment a block, no pipeline): rows of 5 * 2^k and 3 * 2^k then leave no
// lane idle, where blocks of a power of two leave up to a sixth of theirs.
// LayerNorm, bf16, H200, each key tuned cold at 16M elements and timed
// through graphs, two processes each: 1639x10240 23.2 -> 19.8 and 20.0 us
// (BLOCK=320, ITEMS=4, OCC=4, where BLOCK=512, ITEMS=3, STAGES=2 had won);
// at 2560, 5120, 6144 and 12288 the tuner kept the configs it had.
//
// WSH = 1 (STAGES == 0, ITEMS > 0, sm_80) copies the whole weight and bias
// into shared memory (cp.async, issued before x is read) for the stores to
// read: their latency is then spent while x arrives and the sums are taken,
// not after them. LayerNorm, bf16, H100, graphs, the same config either
// way: 1024x16384 26.41 -> 25.57 us, 2048x8192 26.21 -> 25.57, 16778x1000
// 25.73 -> 25.17; at 4096x4096 (24.65 -> 24.83) and 3277x5120 it moved
// nothing. A block that then normalised two or four rows in turn with them
// (L2 read once a block, not once a row) lost everywhere (31.3 at
// 1024x16384): a block's next row waits for the one before.
template <typename T, typename W, int BLOCK, int ROWS, int VEC, int ITEMS, int STAGES, int PACK, int OCC, int WSH,
          int IS_RMS_NORM, int HAS_RESIDUAL, int STORE_RESIDUAL_OUT, int HAS_WEIGHT, int HAS_BIAS>
__global__ void __launch_bounds__(BLOCK, STAGES > 0 ? 1024 / BLOCK : OCC)
layernorm_fwd(T *__restrict__ y, const T *__restrict__ x, const T *__restrict__ res,
              T *__restrict__ res_out, const W *__restrict__ w, const W *__restrict__ b,
              float *__restrict__ mean, float *__restrict__ rstd, int n_rows, int D, int G,
              float eps, int rms) {
  constexpr int TPR = BLOCK / ROWS;
  static_assert(TPR % 32 == 0 || TPR == 16, "whole warps, or half a warp, per segment");
  static_assert(STAGES == 0 || (ITEMS > 0 && VEC * sizeof(T) == 16),
                "the pipeline copies 16-byte vectors of whole segments");
  static_assert(!PACK || (ITEMS > 0 && sizeof(T) == 2 && !HAS_RESIDUAL),
                "a packed segment is 16-bit x as loaded (x + res needs f32)");
  static_assert(!WSH || (STAGES == 0 && ITEMS > 0 && (HAS_WEIGHT || HAS_BIAS)),
                "the weight and bias staged once, for a block's one tile of segments");
  __shared__ float2 part[2][BLOCK / 32];
  int phase = 0;
  auto sum = [&](float v) {
    phase ^= 1;
    return kt::group_sum<TPR>(v, reinterpret_cast<float *>(part[phase]));
  };
  extern __shared__ float4 stage_mem[];
  (void)rms;
  kt::grid_wait();
  kt::grid_trigger();
  if constexpr (WSH) {
    // D * sizeof(W) is a multiple of 16 and w, b are 16-byte aligned (the spec).
    W *const ws = reinterpret_cast<W *>(stage_mem);
    W *const bs = ws + (HAS_WEIGHT ? D : 0);
    const int n16 = D * (int)sizeof(W) / 16;
    for (int i = threadIdx.x; i < n16; i += BLOCK) {
      if constexpr (HAS_WEIGHT) kt::cp_async16<true>((char *)ws + 16 * i, (const char *)w + 16 * i);
      if constexpr (HAS_BIAS) kt::cp_async16<true>((char *)bs + 16 * i, (const char *)b + 16 * i);
    }
    kt::cp_async_commit();
    w = HAS_WEIGHT ? ws : w;
    b = HAS_BIAS ? bs : b;
  }
  const int L = D / G;
  const int lane = threadIdx.x % TPR;
  const int sub = threadIdx.x / TPR;
  const long long nseg = (long long)n_rows * G;

  // A segment's mean (LayerNorm) and rstd, for the backward, where asked.
  auto save_stats = [&](long long seg, float mu, float rs) {
    if (lane != 0) return;
    if (!IS_RMS_NORM && mean) mean[seg] = mu;
    if (rstd) rstd[seg] = rs;
  };

  // One segment held in registers, h read from xs and rsrc (global memory
  // or a pipeline slot, indexed from the segment's start). Every thread of
  // the block calls it the same number of times (it contains barriers).
  auto segment = [&](const T *xs, const T *rsrc, long long seg, bool live) {
    const long long base = seg * L;
    const int wbase = (int)(seg % G) * L;
    using H = typename kt::pick<PACK != 0, T, float>::type;
    kt::Vec<H, VEC> v[ITEMS > 0 ? ITEMS : 1];
    float s = 0.f, mu = 0.f;
    // LayerNorm's mean and variance in one reduction where that is exact
    // enough: sums of x - K and (x - K)^2, K the segment's first element, so
    // that they are about the spread, not the mean. Their rounding moves the
    // variance by at most about L * 2^-24 of it (where x[0] is the one far
    // outlier), under a 16-bit output's own rounding for L <= 16384; f32
    // segments and longer ones take a reduction for the mean and one for the
    // deviations about it. The choice is the same in every thread (barriers).
    // Where a segment held in registers cannot pass 16384 values (the spec
    // holds L to BLOCK / ROWS * VEC * ITEMS), it is made at compile time.
    constexpr bool ONE_FITS = ITEMS > 0 && TPR * VEC * ITEMS <= 16384;
    const bool one = !IS_RMS_NORM && sizeof(T) == 2 && (ONE_FITS || L <= 16384);
    float K = 0.f, q = 0.f, rs;
    if (one && live) {
      float k0[1];
      load_h<1, HAS_RESIDUAL>(k0, x + base, HAS_RESIDUAL ? res + base : nullptr);
      K = k0[0];
    }
    // The sums of one reduction, x - K and its square, from one subtraction
    // (in the order the squares' own loop took them: the same bits);
    // otherwise the sum of x - K alone, for the mean.
    auto add = [&](float h) {
      const float e = h - K;
      s += e;
      if (one) q += e * e;
    };
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
      const int i = (lane + j * TPR) * VEC;
      if (live && i < L) {
        if constexpr (PACK) {
          v[j] = *reinterpret_cast<const kt::Vec<T, VEC> *>(xs + i);
          if constexpr (STORE_RESIDUAL_OUT) *reinterpret_cast<kt::Vec<T, VEC> *>(res_out + base + i) = v[j];
        } else {
          load_h<VEC, HAS_RESIDUAL>(v[j].v, xs + i, rsrc + i);
          if constexpr (STORE_RESIDUAL_OUT) kt::vstore<VEC>(res_out + base + i, v[j].v);
        }
      } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) v[j].v[k] = kt::from_f<H>(0.f);
      }
      if (!PACK && !IS_RMS_NORM && i < L) {
#pragma unroll
        for (int k = 0; k < VEC; k++) add(kt::to_f_here(v[j].v[k]));
      }
    }
    // A packed segment's sums in a loop of its own: its widening is volatile,
    // and between the loads it kept each load waiting on the one before
    // (LayerNorm, bf16, 1366x12288 at BLOCK=512, ITEMS=3: 33.87 us, 26.87
    // after). RMSNorm needs no sum of x.
#pragma unroll
    for (int j = 0; j < (PACK && !IS_RMS_NORM ? ITEMS : 0); j++) {
      const int i = (lane + j * TPR) * VEC;
      if (i < L) {
#pragma unroll
        for (int k = 0; k < VEC; k++) add(kt::to_f_here(v[j].v[k]));
      }
    }
    // Without one reduction, the squares about the mean (a reduction for it
    // first; RMSNorm's mean is 0).
    if (!one && !IS_RMS_NORM) mu = sum(s) / (float)L;
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
      const int i = (lane + j * TPR) * VEC;
      if (!one && i < L) {
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          const float e = kt::to_f_here(v[j].v[k]) - mu;
          q += e * e;
        }
      }
    }
    if (one) {
      phase ^= 1;
      const float2 r = kt::group_sum2<TPR>(s, q, part[phase]);
      const float ds = r.x / (float)L;
      mu = K + ds;
      rs = rsqrtf(fmaxf(r.y / (float)L - ds * ds, 0.f) + eps);
    } else {
      rs = rsqrtf(sum(q) / (float)L + eps);
    }
    if constexpr (WSH) {
      kt::cp_async_wait<0>();
      __syncthreads();  // every thread's share of the copy has landed
    }
    if (!live) return;
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
      const int i = (lane + j * TPR) * VEC;
      if (i < L) store_norm<VEC, HAS_WEIGHT, HAS_BIAS>(y + base + i, v[j].v, mu, rs, w, b, wbase + i);
    }
    save_stats(seg, mu, rs);
  };

  if constexpr (STAGES > 0) {
    constexpr int CAP = ITEMS * TPR * VEC;  // elements of one segment's slot
    constexpr int NS = HAS_RESIDUAL ? 2 : 1;
    constexpr long long SLOT = (long long)ROWS * NS * CAP;
    T *const mine = reinterpret_cast<T *>(stage_mem) + (long long)sub * NS * CAP;
    const long long tiles = (nseg + ROWS - 1) / ROWS;
    const long long mine_n = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    // The k-th tile of this block into slot k % STAGES; one group per call.
    auto issue = [&](long long k) {
      const long long seg = (blockIdx.x + k * gridDim.x) * ROWS + sub;
      if (k < mine_n && seg < nseg) {
        T *sx = mine + (k % STAGES) * SLOT;
        kt::copy_mine<ITEMS, TPR, VEC>(sx, x + seg * L, lane, L);
        if constexpr (HAS_RESIDUAL) kt::copy_mine<ITEMS, TPR, VEC>(sx + CAP, res + seg * L, lane, L);
      }
      kt::cp_async_commit();
    };
#pragma unroll
    for (int k = 0; k < STAGES - 1; k++) issue(k);
#pragma unroll 1
    for (long long k = 0; k < mine_n; k++) {
      issue(k + STAGES - 1);
      kt::cp_async_wait<STAGES - 1>();
      const T *sx = mine + (k % STAGES) * SLOT;
      const long long seg = (blockIdx.x + k * gridDim.x) * ROWS + sub;
      segment(sx, sx + CAP, seg, seg < nseg);
    }
    kt::cp_async_wait<0>();
  } else if constexpr (ITEMS > 0) {
    const long long seg = (long long)blockIdx.x * ROWS + sub;
    const long long base = seg * L;
    segment(x + base, HAS_RESIDUAL ? res + base : nullptr, seg, seg < nseg);
  } else {
    // Streaming: three passes over the segment; the second and third hit L2.
    const long long seg = (long long)blockIdx.x * ROWS + sub;
    const bool live = seg < nseg;
    const long long base = seg * L;
    const int wbase = (int)(seg % G) * L;
    const T *xr = x + base;
    const T *rr = HAS_RESIDUAL ? res + base : nullptr;
    float s = 0.f, mu = 0.f;
    if (live && !IS_RMS_NORM) {
      for (int i = lane * VEC; i < L; i += TPR * VEC) {
        float a[VEC];
        load_h<VEC, HAS_RESIDUAL>(a, xr + i, rr + i);
#pragma unroll
        for (int k = 0; k < VEC; k++) s += a[k];
      }
    }
    if constexpr (!IS_RMS_NORM) mu = sum(s) / (float)L;
    float q = 0.f;
    if (live) {
      for (int i = lane * VEC; i < L; i += TPR * VEC) {
        float a[VEC];
        load_h<VEC, HAS_RESIDUAL>(a, xr + i, rr + i);
        if constexpr (STORE_RESIDUAL_OUT) kt::vstore<VEC>(res_out + base + i, a);
#pragma unroll
        for (int k = 0; k < VEC; k++) q += (a[k] - mu) * (a[k] - mu);
      }
    }
    const float rs = rsqrtf(sum(q) / (float)L + eps);
    if (!live) return;
    for (int i = lane * VEC; i < L; i += TPR * VEC) {
      float a[VEC];
      load_h<VEC, HAS_RESIDUAL>(a, xr + i, rr + i);
      store_norm<VEC, HAS_WEIGHT, HAS_BIAS>(y + base + i, a, mu, rs, w, b, wbase + i);
    }
    save_stats(seg, mu, rs);
  }
}

// The subgroups' dw/db sums (of the thread's NACC items) added into dw and
// db (a partial row, or shared memory) in turn, the first storing:
// deterministic, no atomics.
template <int VEC, int NACC, int TPR, int ROWS, int HAS_DW, int HAS_BIAS, typename PT>
__device__ __forceinline__ void add_in_turn(PT *dw, PT *db, const float (*dwa)[VEC], const float (*dba)[VEC],
                                            int lane, int sub, int LEN) {
  for (int t = 0; t < ROWS; t++) {
    if (sub == t) {
#pragma unroll
      for (int j = 0; j < NACC; j++) {
        const int i = (lane + j * TPR) * VEC;
        if (i >= LEN) continue;
        if constexpr (HAS_DW) kt::add_sums<VEC>(dw + i, dwa[j], t > 0);
        if constexpr (HAS_BIAS) kt::add_sums<VEC>(db + i, dba[j], t > 0);
      }
    }
    if (ROWS > 1) __syncthreads();
  }
}

// The subgroups' dw/db sums added in shared memory by every thread at once:
// each subgroup writes its own sums at ms + sub * NS (NS floats: LEN for
// each of dw and db), then each thread adds C columns at a time over the
// subgroups from the first, which is the order add_in_turn adds them in (the
// same bits), and writes them to dwp and dbp (MG == 1) or to subgroup 0's
// place, for the cluster's merge. add_in_turn takes ROWS turns, one subgroup
// at work in each and a barrier after it, where this takes one barrier: at
// 8 subgroups the launch is 0.8-1.8 us shorter (H100, 16778x1000). The ROWS
// places fit in a pipeline's slots: at least two slots of ROWS rows of x
// and dy, each row's pair at least as many bytes as a row of two f32 sums.
template <int VEC, int NACC, int TPR, int ROWS, int MG, int HAS_DW, int HAS_BIAS, typename PT>
__device__ __forceinline__ void fold_subgroups(float *ms, const float (*dwa)[VEC], const float (*dba)[VEC], int lane,
                                               int sub, int LEN, PT *dwp, PT *dbp) {
  constexpr int C = VEC < 4 ? VEC : 4;
  const int NS = (HAS_DW + HAS_BIAS) * LEN, DB = HAS_DW ? LEN : 0;
  float *const mine = ms + sub * NS;
#pragma unroll
  for (int j = 0; j < NACC; j++) {
    const int i = (lane + j * TPR) * VEC;
    if (i >= LEN) continue;
    if constexpr (HAS_DW) kt::add_sums<VEC>(mine + i, dwa[j], false);
    if constexpr (HAS_BIAS) kt::add_sums<VEC>(mine + DB + i, dba[j], false);
  }
  __syncthreads();
  for (int c = (int)threadIdx.x * C; c < LEN; c += (int)blockDim.x * C) {
    float w[C], b[C];
#pragma unroll
    for (int k = 0; k < C; k++) w[k] = b[k] = 0.f;
#pragma unroll
    for (int t = 0; t < ROWS; t++) {
      if constexpr (HAS_DW) kt::add_shared<C, 1>(w, ms + t * NS + c, 0u);
      if constexpr (HAS_BIAS) kt::add_shared<C, 1>(b, ms + t * NS + DB + c, 0u);
    }
    if constexpr (MG == 1) {
      if constexpr (HAS_DW) kt::vstore<C>(dwp + c, w);
      if constexpr (HAS_BIAS) kt::vstore<C>(dbp + c, b);
    } else {
      if constexpr (HAS_DW) kt::vstore<C>(ms + c, w);
      if constexpr (HAS_BIAS) kt::vstore<C>(ms + DB + c, b);
    }
  }
}

// The dw/db sums of a program's subgroups, and with MG > 1 of a cluster's
// MG blocks (each over its share of the program's rows), added in f32 and
// written to the program's dw/db (a partial row, or W's dw and db, rounded
// once). Each block first adds its subgroups' sums into ms (its dynamic
// shared memory, free once every thread is past its last tile): all at once
// (fold_subgroups) where the pipeline's slots hold ROWS sums (FOLD), else in
// turn, in the room for two sums of LEN floats. Then each block adds one
// MG-th of the columns over the cluster's blocks, in rank order, C = min(VEC,
// 4) at a time, and writes them. No atomics: the same bits every run.
template <int VEC, int NACC, int TPR, int ROWS, int MG, bool FOLD, int HAS_DW, int HAS_BIAS, typename PT>
__device__ __forceinline__ void merge_sums(float *ms, const float (*dwa)[VEC], const float (*dba)[VEC], int lane,
                                           int sub, int LEN, PT *dwp, PT *dbp) {
  constexpr int C = VEC < 4 ? VEC : 4;
  float *mw = ms, *mb = ms + (HAS_DW ? LEN : 0);
  __syncthreads();
  if constexpr (FOLD) {
    fold_subgroups<VEC, NACC, TPR, ROWS, MG, HAS_DW, HAS_BIAS>(ms, dwa, dba, lane, sub, LEN, dwp, dbp);
    if constexpr (MG == 1) return;  // written
  } else {
    add_in_turn<VEC, NACC, TPR, ROWS, HAS_DW, HAS_BIAS>(mw, mb, dwa, dba, lane, sub, LEN);
  }
  if constexpr (MG > 1)
    kt::cluster_sync();  // every block's sums in its shared memory
  else
    __syncthreads();
  const int rank = (int)blockIdx.x % MG, per = (LEN / C + MG - 1) / MG * C;
  const int end = min(LEN, (rank + 1) * per);
  for (int c = rank * per + (int)threadIdx.x * C; c < end; c += (int)blockDim.x * C) {
    float w[C], b[C];
#pragma unroll
    for (int k = 0; k < C; k++) w[k] = b[k] = 0.f;
#pragma unroll
    for (int r = 0; r < MG; r++) {
      if constexpr (HAS_DW) kt::add_shared<C, MG>(w, mw + c, (unsigned)r);
      if constexpr (HAS_BIAS) kt::add_shared<C, MG>(b, mb + c, (unsigned)r);
    }
    if constexpr (HAS_DW) kt::vstore<C>(dwp + c, w);
    if constexpr (HAS_BIAS) kt::vstore<C>(dbp + c, b);
  }
  if constexpr (MG > 1) kt::cluster_sync();  // no block leaves while another reads its sums
}

// dx = rstd * (wdy - (xhat * mean(wdy * xhat) + mean(wdy))) [+ dres], with
// xhat = (x - mean) * rstd, wdy = w * dy (the mean(wdy) term only for
// LayerNorm); dw += dy * xhat, db += dy over the program's rows.
//
// Every store is masked to the program's own segments, so no choice of
// ROWS (the tile of segments in flight) against BS can make two programs
// write one row; a program whose range is empty returns at once.
// GROUPED (G > 1) and ITEMS == 0 accumulate dw/db in the program's partial
// row itself (ROWS == 1: a column is always the same thread's); otherwise
// in registers, written once at the end.
//
// STAGES > 0 (ITEMS > 0, G == 1, 16-byte vectors) keeps STAGES - 1 tiles of
// x and dy in flight in dynamic shared memory (cp.async) while the current
// tile is reduced: a program of one block then streams at the bandwidth that
// would otherwise need many resident blocks, each adding a partial row. A
// thread copies exactly the elements it later reads, so a slot needs no
// barrier; it is refilled only after the same thread consumed it.
// With at most 8 elements per thread the compiler is held to 64 registers, so
// 1024 threads (two programs of 512) fit on an SM; it would otherwise take
// about 90 and leave room for one.
//
// ACC = 1 (ITEMS > 0, G == 1, ROWS == 1) keeps the program's dw/db sums in
// dynamic shared memory instead of registers: each thread owns the same
// columns in every row, so its sums are its own, and a long row (LayerNorm
// at D = 12288 holds 2 x 24 sums a thread beside 2 x 24 row values) fits
// in registers without spilling.
//
// CL > 1 (sm_90; ITEMS > 0, G == 1) makes a program a cluster of CL blocks,
// each holding a CL-th of every row's columns (L / CL, whole vectors): a
// long row then fits in registers with room for more rows in flight, and
// one row, or one wave of rows, is spread over more SMs. With P = SMs / CL
// there would be CL times fewer partial rows, but on an H100 33 clusters of
// 4 did not run at once (a second wave, twice the time). The row sums meet
// through distributed shared memory (cluster_sum2), one cluster barrier a
// tile of ROWS rows: its latency is what ROWS > 1 amortises.
//
// REREAD = 1 (STAGES > 0) reads a tile's x and dy again from its pipeline
// slot after the row sums, instead of holding x-hat and w * dy in registers
// across them: 2 * ITEMS * VEC registers a thread freed (the slot is
// refilled only at the next tile), for a second pass over shared memory.
//
// MG > 1 (sm_90; CL == 1, ACC == 0, ITEMS > 0) makes a program a cluster
// of MG blocks that split its rows, not its columns: each block streams its
// share with no barrier between them, and at the end they add their dw/db
// sums through distributed shared memory (merge_sums, in the dynamic shared
// memory the spec sizes: layernorm_bwd's stages). MG blocks then write one
// partial row where MG programs of one block would write MG, so with P =
// SMs / MG the partial rows written, and read again by the reduce, are MG
// times fewer.
//
// HAS_DW = 0 with HAS_WEIGHT = 1 (a weight that needs no gradient: a frozen
// norm, or a backward asked for dx alone) reads w for dx and sums no dw:
// without the bias either, a program writes no partial row at all.
//
// PT is the partial rows' type: f32 for layernorm_bwd; W's for
// layernorm_bwd_row, whose one program over all rows writes dw and db
// themselves (ROWS > 1 or MG > 1: through merge_sums, rounded once).
template <typename T, typename W, typename PT, int BLOCK, int ROWS, int VEC, int ITEMS, int STAGES, int ACC, int CL,
          int MG, int REREAD, int HOLD, int IS_RMS_NORM, int HAS_DRESIDUAL, int HAS_WEIGHT, int HAS_DW, int HAS_BIAS,
          int GROUPED>
__device__ __forceinline__ void
norm_bwd(T *__restrict__ dx, PT *__restrict__ dw_part, PT *__restrict__ db_part,
         const T *__restrict__ dy, const T *__restrict__ x, const W *__restrict__ w,
         const float *__restrict__ mean, const float *__restrict__ rstd,
         const T *__restrict__ dres, int n_rows, int D, int G, int P, int rms) {
  constexpr int TPR = BLOCK / ROWS;
  static_assert(TPR % 32 == 0 || (TPR == 16 && CL == 1), "whole warps, or half a warp outside clusters, per segment");
  constexpr bool IN_PART = GROUPED || ITEMS == 0;
  static_assert(!IN_PART || ROWS == 1, "partial rows updated in place need one segment at a time");
  static_assert(STAGES == 0 || (ITEMS > 0 && !GROUPED && VEC * sizeof(T) == 16),
                "the pipeline copies 16-byte vectors of whole rows");
  constexpr bool SACC = ACC != 0 && (HAS_DW || HAS_BIAS);
  static_assert(!SACC || (ITEMS > 0 && !GROUPED && ROWS == 1), "shared sums need a column per thread");
  static_assert(CL == 1 || (ITEMS > 0 && !GROUPED), "a cluster splits whole rows in registers");
  static_assert(!REREAD || STAGES > 0, "a tile is read again from its pipeline slot");
  static_assert(MG == 1 || (CL == 1 && !SACC && !IN_PART && (HAS_DW || HAS_BIAS)),
                "merged programs split whole rows, their sums in registers");
  // The sums meet in f32 in shared memory before they are written: across a
  // cluster's blocks, or across the subgroups of a program that writes W's
  // dw and db itself (adding them in turn there would round each time).
  // Subgroups meet there too where the pipeline's slots are free to hold
  // them (STAGES > 0: they hold ROWS rows of x and dy, more than two sums of
  // a row): in global memory, each subgroup in turn would wait for the
  // one before's partial row to come back from L2.
  constexpr bool MERGE =
      (MG > 1 || (ROWS > 1 && (sizeof(PT) != 4 || STAGES > 0))) && (HAS_DW || HAS_BIAS);
  // There the subgroups' sums meet all at once (fold_subgroups), but where
  // a cluster of two subgroups a block meets after them: its turns cost
  // less than the fold's extra pass (H100, LayerNorm 10923x1536, ROWS = 2,
  // MG = 2: 41.30 us in turn, 41.57 folded).
  constexpr bool FOLD = STAGES > 0 && ROWS > 1 && (MG == 1 || ROWS >= 4);
  // Its ROWS places of LEN floats a sum fit in the stages (STAGES slots of
  // ROWS rows of x, dy and dres, each row's at least LEN values: the spec's
  // ITEMS * TPR * VEC >= L / CL) where a slot's row of each is as many bytes.
  static_assert(!MERGE || !FOLD || STAGES * (HAS_DRESIDUAL ? 3 : 2) * sizeof(T) >= 4 * (HAS_DW + HAS_BIAS),
                "the subgroups' sums fit in the pipeline's slots");
  __shared__ float2 part[2][BLOCK / 32];
  extern __shared__ float4 stage_mem[];
  // Dynamic shared memory: the weight's sums, the bias's, then the stages.
  constexpr int NSUM = SACC ? ITEMS * TPR * VEC : 0;
  const kt::SharedSums<VEC, TPR> sw{reinterpret_cast<float *>(stage_mem)};
  const kt::SharedSums<VEC, TPR> sb{sw.acc + (HAS_DW ? NSUM : 0)};
  T *const stages = reinterpret_cast<T *>(sb.acc + (HAS_BIAS ? NSUM : 0));
  int phase = 0;
  (void)rms;
  const int L = D / G;      // a segment's elements, and the stride of rows / G
  const int LEN = L / CL;   // the columns of a segment this block holds
  const float inv_l = 1.f / (float)L;
  const int lane = threadIdx.x % TPR;
  const int sub = threadIdx.x / TPR;
  const int prog = (int)blockIdx.x / (CL * MG);
  const int bs = (n_rows + P - 1) / P;
  const long long p0 = (long long)prog * bs;
  if (p0 >= n_rows) return;  // the whole cluster: one program's rows
  // Launched early (layernorm_bwd_row's options.pdl): nothing global is
  // read before the kernel before has finished; a no-op in a plain launch.
  kt::grid_wait();
  const long long p1 = min(p0 + bs, (long long)n_rows);
  // This block's rows: MG > 1, a share of the program's (maybe none: the
  // block still joins the merge); else all of them.
  const long long share = (p1 - p0 + MG - 1) / MG;
  const long long row0 = min(p0 + ((int)blockIdx.x % MG) * share, p1);
  const long long row1 = min(row0 + share, p1);
  const long long seg_end = row1 * G;
  // From here on columns count from this block's first (G == 1 when CL > 1).
  const int c0 = ((int)blockIdx.x % CL) * LEN;
  x += c0;
  dy += c0;
  dx += c0;
  if constexpr (HAS_DRESIDUAL) dres += c0;
  if constexpr (HAS_WEIGHT) w += c0;
  PT *dwp = HAS_DW ? dw_part + (long long)prog * D + c0 : nullptr;
  PT *dbp = HAS_BIAS ? db_part + (long long)prog * D + c0 : nullptr;

  if constexpr (IN_PART) {
    for (int c = threadIdx.x; c < D; c += BLOCK) {
      if constexpr (HAS_DW) dwp[c] = kt::from_f<PT>(0.f);
      if constexpr (HAS_BIAS) dbp[c] = kt::from_f<PT>(0.f);
    }
    __syncthreads();
  }

  constexpr int NACC = ITEMS > 0 && !GROUPED && !SACC ? ITEMS : 1;
  float dwa[NACC][VEC], dba[NACC][VEC];
#pragma unroll
  for (int j = 0; j < NACC; j++)
#pragma unroll
    for (int k = 0; k < VEC; k++) dwa[j][k] = dba[j][k] = 0.f;
  if constexpr (SACC) {
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
      if constexpr (HAS_DW) sw.zero(j, lane);
      if constexpr (HAS_BIAS) sb.zero(j, lane);
    }
  }

  // The weight at the thread's columns, read once where every segment the
  // block walks has the same columns (one group, segments in registers),
  // and kept as stored: not read again from L2 for every row. Always up to
  // 16 KB a block (4 registers a thread at 1024 threads); past that where
  // the tuner finds it faster (HOLD): at 16384 columns a block of 1024
  // threads holds 8 registers more, and some configs spill, but without it
  // every row reads as many bytes of w as of dy (LayerNorm, bf16, 1024 x
  // 16384, P = 66 on an H100: 46.4 -> 43.4 us, the tuner's pick each way).
  constexpr bool HOLD_W =
      HAS_WEIGHT && ITEMS > 0 && !GROUPED && (HOLD || ITEMS * VEC * sizeof(W) * BLOCK <= 16384);
  kt::Vec<W, VEC> wk[HOLD_W ? ITEMS : 1];
  if constexpr (HOLD_W) {
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
      const int i = (lane + j * TPR) * VEC;
      if (i < LEN) wk[j] = *reinterpret_cast<const kt::Vec<W, VEC> *>(w + i);
    }
  }

  // One segment held in registers, read from xs, ds and rsrc (dres: global
  // memory or a pipeline slot, indexed from the segment's start). Every
  // thread of the block calls it the same number of times (it contains the
  // barrier).
  auto segment = [&](const T *xs, const T *ds, const T *rsrc, long long seg, long long base, float mu, float rs,
                     bool live) {
    const int wbase = GROUPED ? (int)(seg % G) * L : 0;
    // x-hat and w * dy of the thread's items: held for the pass after the
    // sums, or (REREAD) one item's worth computed again there.
    constexpr int HELD = REREAD || ITEMS == 0 ? 1 : ITEMS;
    float xh[HELD][VEC], g[HELD][VEC];
    auto item = [&](int j, int i, float *xo, float *go, float *d) {
      kt::vload<VEC>(xo, xs + i);
      kt::vload<VEC>(d, ds + i);
      float wv[VEC];
      if constexpr (HOLD_W) {
#pragma unroll
        for (int k = 0; k < VEC; k++) wv[k] = kt::to_f_late(wk[j].v[k]);
      } else if constexpr (HAS_WEIGHT) {
        kt::vload<VEC>(wv, w + wbase + i);
      }
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        xo[k] = (xo[k] - mu) * rs;
        go[k] = HAS_WEIGHT ? d[k] * wv[k] : d[k];
      }
    };
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
      const int i = (lane + j * TPR) * VEC;
      const int h = REREAD ? 0 : j;
      if (live && i < LEN) {
        float d[VEC];
        item(j, i, xh[h], g[h], d);
        float pw[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) {
          s1 += xh[h][k] * g[h][k];
          s2 += g[h][k];
          if constexpr (!IN_PART && !SACC) {
            if constexpr (HAS_DW) dwa[j][k] += d[k] * xh[h][k];
            if constexpr (HAS_BIAS) dba[j][k] += d[k];
          } else {
            pw[k] = d[k] * xh[h][k];
          }
        }
        if constexpr (IN_PART && HAS_DW) kt::add_sums<VEC>(dwp + wbase + i, pw, true);
        if constexpr (IN_PART && HAS_BIAS) kt::add_sums<VEC>(dbp + wbase + i, d, true);
        if constexpr (SACC && HAS_DW) sw.add(j, lane, pw);
        if constexpr (SACC && HAS_BIAS) sb.add(j, lane, d);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) xh[h][k] = g[h][k] = 0.f;
      }
    }
    // RMSNorm has no mean(wdy): one sum to reduce, not two.
    float2 r;
    if constexpr (CL > 1)
      r = kt::cluster_sum2<TPR, CL>(s1, s2, part[phase]);
    else if constexpr (IS_RMS_NORM)
      r = make_float2(kt::group_sum<TPR>(s1, reinterpret_cast<float *>(part[phase])), 0.f);
    else
      r = kt::group_sum2<TPR>(s1, s2, part[phase]);
    phase ^= 1;
    // dx = rs * wdy - xhat * (rs * c1) - rs * c2: two fused multiply-adds an
    // element, the row's factors once (no division a row).
    const float a1 = r.x * inv_l * rs, a2 = IS_RMS_NORM ? 0.f : r.y * inv_l * rs;
    if (!live) return;
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
      const int i = (lane + j * TPR) * VEC;
      if (i >= LEN) continue;
      const int h = REREAD ? 0 : j;
      float o[VEC], rr[VEC];
      if constexpr (REREAD) {
        float d[VEC];
        item(j, i, xh[0], g[0], d);
      }
      if constexpr (HAS_DRESIDUAL) kt::vload<VEC>(rr, rsrc + i);
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        o[k] = fmaf(-xh[h][k], a1, fmaf(g[h][k], rs, -a2));
        if constexpr (HAS_DRESIDUAL) o[k] += rr[k];
      }
      kt::vstore<VEC>(dx + base + i, o);
    }
  };

  if constexpr (STAGES > 0) {
    // A row's slot holds x, dy and (with a residual) dres: read ahead with
    // the others, dres no longer waits a full memory latency after the sums.
    constexpr int CAP = ITEMS * TPR * VEC;  // elements of one tensor's row in a slot
    constexpr int NT = HAS_DRESIDUAL ? 3 : 2;
    constexpr long long SLOT = (long long)ROWS * NT * CAP;
    T *const mine = stages + (long long)sub * NT * CAP;
    const long long tiles = (row1 - row0 + ROWS - 1) / ROWS;
    // The thread's next row to copy (and its first element), and its slot:
    // tile t goes to slot t % STAGES, counted here, not divided each tile.
    // Every thread commits one group per call, empty or not, so the wait
    // below counts tiles.
    const long long step = (long long)ROWS * L;
    long long seg_in = row0 + sub, off_in = seg_in * L;
    int slot_in = 0;
    auto issue = [&]() {
      if (seg_in < row1) {
        T *sx = mine + slot_in * SLOT;
        kt::copy_mine<ITEMS, TPR, VEC>(sx, x + off_in, lane, LEN);
        kt::copy_mine<ITEMS, TPR, VEC>(sx + CAP, dy + off_in, lane, LEN);
        if constexpr (HAS_DRESIDUAL) kt::copy_mine<ITEMS, TPR, VEC>(sx + 2 * CAP, dres + off_in, lane, LEN);
      }
      kt::cp_async_commit();
      seg_in += ROWS;
      off_in += step;
      slot_in = slot_in + 1 == STAGES ? 0 : slot_in + 1;
    };
#pragma unroll
    for (int t = 0; t < STAGES - 1; t++) issue();
    long long seg = row0 + sub, off = seg * L;
    int slot = 0;
    float mu_n = 0.f, rs_n = 0.f;
    if (seg < row1) {
      mu_n = IS_RMS_NORM ? 0.f : mean[seg];
      rs_n = rstd[seg];
    }
#pragma unroll 1
    for (long long t = 0; t < tiles; t++, seg += ROWS, off += step) {
      issue();
      const float mu = mu_n, rs = rs_n;
      if (seg + ROWS < row1) {
        mu_n = IS_RMS_NORM ? 0.f : mean[seg + ROWS];
        rs_n = rstd[seg + ROWS];
      }
      kt::cp_async_wait<STAGES - 1>();
      const T *sx = mine + slot * SLOT;
      slot = slot + 1 == STAGES ? 0 : slot + 1;
      segment(sx, sx + CAP, sx + 2 * CAP, seg, off, mu, rs, seg < row1);
    }
    kt::cp_async_wait<0>();
  } else {
#pragma unroll 1
    for (long long s0 = row0 * G; s0 < seg_end; s0 += ROWS) {
      const long long seg = s0 + sub;
      const bool live = seg < seg_end;
      const long long base = seg * L;
      const float mu = IS_RMS_NORM || !live ? 0.f : mean[seg];
      const float rs = live ? rstd[seg] : 0.f;
      if constexpr (ITEMS > 0) {
        segment(x + base, dy + base, HAS_DRESIDUAL ? dres + base : nullptr, seg, base, mu, rs, live);
      } else {
        const int wbase = (int)(seg % G) * L;
        float s1 = 0.f, s2 = 0.f;
        if (live) {
          for (int i = lane * VEC; i < L; i += TPR * VEC) {
            float a[VEC], d[VEC], wv[VEC];
            kt::vload<VEC>(a, x + base + i);
            kt::vload<VEC>(d, dy + base + i);
            if constexpr (HAS_WEIGHT) kt::vload<VEC>(wv, w + wbase + i);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
              const float xh = (a[k] - mu) * rs, g = HAS_WEIGHT ? d[k] * wv[k] : d[k];
              s1 += xh * g;
              s2 += g;
            }
          }
        }
        const float2 r = kt::group_sum2<TPR>(s1, s2, part[phase]);
        phase ^= 1;
        const float a1 = r.x * inv_l * rs, a2 = IS_RMS_NORM ? 0.f : r.y * inv_l * rs;
        if (!live) continue;
        for (int i = lane * VEC; i < L; i += TPR * VEC) {
          float a[VEC], d[VEC], wv[VEC], r[VEC], o[VEC], pw[VEC];
          kt::vload<VEC>(a, x + base + i);
          kt::vload<VEC>(d, dy + base + i);
          if constexpr (HAS_WEIGHT) kt::vload<VEC>(wv, w + wbase + i);
          if constexpr (HAS_DRESIDUAL) kt::vload<VEC>(r, dres + base + i);
#pragma unroll
          for (int k = 0; k < VEC; k++) {
            const float xh = (a[k] - mu) * rs, g = HAS_WEIGHT ? d[k] * wv[k] : d[k];
            o[k] = fmaf(-xh, a1, fmaf(g, rs, -a2));
            if constexpr (HAS_DRESIDUAL) o[k] += r[k];
            pw[k] = d[k] * xh;
          }
          if constexpr (HAS_DW) kt::add_sums<VEC>(dwp + wbase + i, pw, true);
          if constexpr (HAS_BIAS) kt::add_sums<VEC>(dbp + wbase + i, d, true);
          kt::vstore<VEC>(dx + base + i, o);
        }
      }
    }
  }

  // The reduce may launch now: its blocks become resident while the partial
  // rows are written, where registers allow. Earlier, they would sit beside
  // the streaming programs for the whole kernel.
  kt::grid_trigger();
  if constexpr (SACC) {
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
      const int i = (lane + j * TPR) * VEC;
      if (i >= LEN) continue;
      float v[VEC];
      if constexpr (HAS_DW) {
        sw.get(j, lane, v);
        kt::add_sums<VEC>(dwp + i, v, false);
      }
      if constexpr (HAS_BIAS) {
        sb.get(j, lane, v);
        kt::add_sums<VEC>(dbp + i, v, false);
      }
    }
  } else if constexpr (MERGE) {
    merge_sums<VEC, NACC, TPR, ROWS, MG, FOLD, HAS_DW, HAS_BIAS>(reinterpret_cast<float *>(stages), dwa, dba, lane, sub,
                                                                LEN, dwp, dbp);
  } else if constexpr (!IN_PART && (HAS_DW || HAS_BIAS)) {
    add_in_turn<VEC, NACC, TPR, ROWS, HAS_DW, HAS_BIAS>(dwp, dbp, dwa, dba, lane, sub, LEN);
  }
  // No block leaves while another of its cluster may still read its part.
  if constexpr (CL > 1) kt::cluster_sync();
}

// The entry, twice: CL * MG == 1 without a cluster attribute, so those
// configs launch as they did before clusters (a cluster of one block is
// still a cluster launch), CL * MG > 1 with one. A name expression's
// template arguments leave exactly one of them viable.
#define KT_NORM_BWD_ENTRY(ATTR, COND)                                                                             \
  template <typename T, typename W, int BLOCK, int ROWS, int VEC, int ITEMS, int STAGES, int ACC, int CL, int MG, \
            int REREAD, int HOLD, int IS_RMS_NORM, int HAS_DRESIDUAL, int HAS_WEIGHT, int HAS_DW, int HAS_BIAS,    \
            int GROUPED, typename kt::enable_if<(COND), int>::type = 0>                                            \
  __global__ void ATTR __launch_bounds__(BLOCK, ITEMS * VEC <= 8 ? 1024 / BLOCK : 1)                              \
  layernorm_bwd(T *__restrict__ dx, float *__restrict__ dw_part, float *__restrict__ db_part,                      \
                const T *__restrict__ dy, const T *__restrict__ x, const W *__restrict__ w,                        \
                const float *__restrict__ mean, const float *__restrict__ rstd, const T *__restrict__ dres,         \
                int n_rows, int D, int G, int P, int rms) {                                                        \
    norm_bwd<T, W, float, BLOCK, ROWS, VEC, ITEMS, STAGES, ACC, CL, MG, REREAD, HOLD, IS_RMS_NORM, HAS_DRESIDUAL,  \
             HAS_WEIGHT, HAS_DW, HAS_BIAS, GROUPED>(dx, dw_part, db_part, dy, x, w, mean, rstd, dres, n_rows, D, G, \
                                                    P, rms);                                                       \
  }
KT_NORM_BWD_ENTRY(, CL * MG == 1)
KT_NORM_BWD_ENTRY(KT_CLUSTER(CL * MG), CL * MG > 1)
#undef KT_NORM_BWD_ENTRY

// The backward of a few rows by one program, dw and db written by it in
// W's dtype: its sums over its rows are kept in f32 (registers, then shared
// memory where subgroups or blocks meet) and rounded once, as the reduce
// rounds them (for one row, the same bytes), and no reduce is launched (at
// T = 1 the second launch was about half the time). One program: a block of
// ROWS segments, or a cluster of CL blocks that split the rows' columns or
// of MG blocks that split the rows; STAGES > 0 keeps rows in flight. Twice,
// as layernorm_bwd.
#define KT_NORM_BWD_ROW_ENTRY(ATTR, COND)                                                                          \
  template <typename T, typename W, int BLOCK, int ROWS, int VEC, int ITEMS, int STAGES, int CL, int MG,           \
            int IS_RMS_NORM, int HAS_DRESIDUAL, int HAS_WEIGHT, int HAS_DW, int HAS_BIAS, int GROUPED,              \
            typename kt::enable_if<(COND), int>::type = 0>                                                          \
  __global__ void ATTR __launch_bounds__(BLOCK)                                                                     \
  layernorm_bwd_row(T *__restrict__ dx, W *__restrict__ dw, W *__restrict__ db, const T *__restrict__ dy,           \
                    const T *__restrict__ x, const W *__restrict__ w, const float *__restrict__ mean,              \
                    const float *__restrict__ rstd, const T *__restrict__ dres, int n_rows, int D, int G,         \
                    int rms) {                                                                                      \
    norm_bwd<T, W, W, BLOCK, ROWS, VEC, ITEMS, STAGES, 0, CL, MG, 0, 0, IS_RMS_NORM, HAS_DRESIDUAL, HAS_WEIGHT,     \
             HAS_DW, HAS_BIAS, GROUPED>(dx, dw, db, dy, x, w, mean, rstd, dres, n_rows, D, G, 1, rms);              \
  }
KT_NORM_BWD_ROW_ENTRY(, CL * MG == 1)
KT_NORM_BWD_ROW_ENTRY(KT_CLUSTER(CL * MG), CL * MG > 1)
#undef KT_NORM_BWD_ROW_ENTRY

// Column c of the partial rows p = threadIdx.y, + SP, ... below parts, in
// order, of a (and of b where B): unrolled so that eight loads are in flight
// at once (eight rows, or four of each array), where the sum would
// otherwise wait on L2 once a row.
template <int SP, bool B>
__device__ __forceinline__ void column_sums(const float *__restrict__ a, const float *__restrict__ b, int c,
                                            int parts, int D, float &sa, float &sb) {
#pragma unroll(B ? 4 : 8)
  for (int p = threadIdx.y; p < parts; p += SP) {
    sa += a[(long long)p * D + c];
    if constexpr (B) sb += b[(long long)p * D + c];
  }
}

// The 128-byte lines wholly inside columns [lo, hi) of the first `parts`
// rows of a (rows of D floats), dropped from L2 without being written back
// (sm_80 and later): read once, these dirty lines would otherwise reach
// DRAM later. Lines shared with other columns are left as they are.
__device__ __forceinline__ void drop_lines(float *a, int parts, int D, int lo, int hi) {
#if __CUDA_ARCH__ >= 800
  const int nt = (int)(blockDim.x * blockDim.y), t = (int)(threadIdx.y * blockDim.x + threadIdx.x);
  for (int p = t; p < parts; p += nt) {
    const unsigned long long s = (unsigned long long)(a + (long long)p * D + lo);
    const unsigned long long e = (unsigned long long)(a + (long long)p * D + hi);
    for (unsigned long long l = (s + 127) & ~127ull; l + 128 <= e; l += 128)
      asm volatile("discard.global.L2 [%0], 128;" ::"l"(l) : "memory");
  }
#endif
}

// dw[c] = sum of dw_part[p][c] over the programs that own rows (the same
// count layernorm_bwd derives from N and P); db likewise. A BD x SP block:
// SP threads split the partial rows of BD columns, then add in shared memory.
// The partial rows are consumed: once every thread of the block has read
// its columns, their lines are dropped (drop_lines).
template <typename W, int BD, int SP>
__global__ void __launch_bounds__(BD * SP)
layernorm_bwd_reduce(W *__restrict__ dw, W *__restrict__ db, float *__restrict__ dw_part,
                     float *__restrict__ db_part, int n_rows, int D, int P) {
  __shared__ float sw[SP][BD], sb[SP][BD];
  kt::grid_wait();
  kt::grid_trigger();
  const int c = blockIdx.x * BD + threadIdx.x;
  const int bs = P > 0 ? (n_rows + P - 1) / P : 0;
  const int parts = bs > 0 ? (n_rows + bs - 1) / bs : 0;
  float aw = 0.f, ab = 0.f;
  if (c < D && dw && db)
    column_sums<SP, true>(dw_part, db_part, c, parts, D, aw, ab);
  else if (c < D && dw)
    column_sums<SP, false>(dw_part, nullptr, c, parts, D, aw, ab);
  else if (c < D && db)
    column_sums<SP, false>(db_part, nullptr, c, parts, D, ab, aw);
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  const int lo = (int)blockIdx.x * BD, hi = min(D, lo + BD);
  if (dw) drop_lines(dw_part, parts, D, lo, hi);
  if (db) drop_lines(db_part, parts, D, lo, hi);
  if (threadIdx.y != 0 || c >= D) return;
#pragma unroll
  for (int k = 1; k < SP; k++) {
    aw += sw[k][threadIdx.x];
    ab += sb[k][threadIdx.x];
  }
  if (dw) dw[c] = kt::from_f<W>(aw);
  if (db) db[c] = kt::from_f<W>(ab);
}
