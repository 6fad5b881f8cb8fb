"""Where a backward program's partial row goes at its end: a probe for
issue 17's backward target, not part of `make bench`.

At D >= 8192 a program of layernorm_bwd is a cluster of two blocks (MG =
2) that merge their dw/db sums through distributed shared memory and store
one partial row; layernorm_bwd_reduce then sums the partial rows and drops
their lines from L2. This probe forces the shipped pick on the shipped spec
and on copies of it that move those bytes differently (STORES below):

- push merge: with one subgroup a block (ROWS = 1), item j of every thread
  belongs to block j * MG / ITEMS of the cluster; each block stores the
  items it does not own straight into their owner's shared memory
  (st.shared::cluster, past the pipeline's stages: the spec's smem grows
  by that much), arrives at the cluster barrier at once and waits there,
  then adds its own items over the blocks in rank order and stores them.
  No reads of another block's shared memory, one barrier where
  merge_sums has two, and the same additions in the same order;
- partial lines touched early: right after it starts, each block stores
  zeros where it will store its share of the partial row, with an L2
  evict-last policy (or none), so that the end's stores find their lines
  in L2;
- stored evict-last: the end's stores of the partial row with an L2
  evict-last policy.

Each copy must give the same bytes as the shipped spec (dx, and the
partial rows compared bit for bit). Times are GPU time through CUDA
graphs, the backward alone and with its reduce, ROUNDS times in turn, the
fastest of each; bf16, with the weight (and the bias for LayerNorm), at
the P that ktune.ops passes (tools/probe_bwd_programs.py times other P).

PARTS (comma-separated: stores, fused, tail; default the first two) adds a grid that
sums its own partial rows (layernorm_bwd_fused, params dwo, dbo and sync
added): after its stores each block adds one to a counter and spins until
every block of the launch has, then block b sums its share of the columns
over the partial rows, in order, into dw and db; no reduce is launched.
The spin needs every block resident at once, which holds for the shipped
picks at the shipped P on an idle GPU but is not safe in general: a probe
only. It is timed against the shipped backward with its reduce and alone,
and its dw and db compared with float64 (another order of additions than
the reduce's, so not the same bytes). PARTS=tail adds copies in which only
the last TAIL_NR blocks to arrive (comma-separated counts, default 33)
wait and sum, each a share of the columns, and drop the partial rows'
lines as the reduce does; the others leave at once.

CASES as TxDxRMS, comma-separated. $KTUNE_CACHE should name a fresh cache."""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_kernels as bk  # noqa: E402
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

# Device helpers the copies share, put before merge_sums.
HELPERS_AT = "// The dw/db sums of a program's subgroups, and with MG > 1 of a cluster's\n"
HELPERS = r'''namespace kt {
// C floats stored at p in the shared memory of block rank of this cluster:
// no reply awaited; a later cluster arrive (release) makes them visible.
template <int C> __device__ __forceinline__ void cluster_st(float *p, unsigned rank, const float *v) {
#if __CUDA_ARCH__ >= 900
  const unsigned a = cluster_addr(p, rank);
  if constexpr (C == 4)
    asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(a), "f"(v[0]), "f"(v[1]), "f"(v[2]),
                 "f"(v[3]) : "memory");
  else if constexpr (C == 2)
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(v[0]), "f"(v[1]) : "memory");
  else
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(a), "f"(v[0]) : "memory");
#endif
}
__device__ __forceinline__ void cluster_arrive() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
// C floats (v, or zeros where v is null) stored at p with L2 policy pol.
template <int C> __device__ __forceinline__ void st_policy(float *p, const float *v, unsigned long long pol) {
  float z[C];
#pragma unroll
  for (int k = 0; k < C; k++) z[k] = v ? v[k] : 0.f;
  if constexpr (C == 4)
    asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "f"(z[0]), "f"(z[1]),
                 "f"(z[2]), "f"(z[3]), "l"(pol) : "memory");
  else if constexpr (C == 2)
    asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;" ::"l"(p), "f"(z[0]), "f"(z[1]), "l"(pol)
                 : "memory");
  else
    asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(p), "f"(z[0]), "l"(pol) : "memory");
}
__device__ __forceinline__ unsigned long long evict_last() {
  unsigned long long pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ unsigned long long evict_normal() {
  unsigned long long pol;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
}  // namespace kt

'''
WITH_HELPERS = (HELPERS_AT, HELPERS + HELPERS_AT)  # the patch every STORES copy starts with
PUSH_FN = r'''// MG > 1, ROWS == 1: see tools/probe_bwd_stores.py.
template <int VEC, int NACC, int TPR, int MG, int HAS_DW, int HAS_BIAS, typename PT>
__device__ __forceinline__ void push_sums(float *box, const float (*dwa)[VEC], const float (*dba)[VEC], int lane,
                                          int LEN, PT *dwp, PT *dbp) {
  constexpr int C = VEC < 4 ? VEC : 4, H = VEC / C, OWN = (NACC + MG - 1) / MG;
  const int me = (int)blockIdx.x % MG;
  // Sum a's slot from sender s (its rank, less one past the owner's), for
  // owned item q, half h: a warp's lanes on consecutive C floats.
  auto at = [&](int a, int s, int q, int h) {
    return box + ((((a * (MG - 1) + s) * OWN + q) * H + h) * TPR + lane) * C;
  };
#pragma unroll
  for (int j = 0; j < NACC; j++) {
    const int o = j * MG / NACC;
    if (o == me || (lane + j * TPR) * VEC >= LEN) continue;
    const int q = j - (o * NACC + MG - 1) / MG, s = me < o ? me : me - 1;
#pragma unroll
    for (int h = 0; h < H; h++) {
      if constexpr (HAS_DW) kt::cluster_st<C>(at(0, s, q, h), (unsigned)o, dwa[j] + h * C);
      if constexpr (HAS_BIAS) kt::cluster_st<C>(at(HAS_DW, s, q, h), (unsigned)o, dba[j] + h * C);
    }
  }
  kt::cluster_arrive();
  kt::cluster_wait();
#pragma unroll
  for (int j = 0; j < NACC; j++) {
    const int i = (lane + j * TPR) * VEC;
    if (j * MG / NACC != me || i >= LEN) continue;
    const int q = j - (me * NACC + MG - 1) / MG;
#pragma unroll
    for (int h = 0; h < H; h++) {
      float w[C], b[C];
#pragma unroll
      for (int k = 0; k < C; k++) w[k] = b[k] = 0.f;
#pragma unroll
      for (int r = 0; r < MG; r++) {
        const int s = r < me ? r : r - 1;
#pragma unroll
        for (int k = 0; k < C; k++) {
          if constexpr (HAS_DW) w[k] += r == me ? dwa[j][h * C + k] : at(0, s, q, h)[k];
          if constexpr (HAS_BIAS) b[k] += r == me ? dba[j][h * C + k] : at(HAS_DW, s, q, h)[k];
        }
      }
      if constexpr (HAS_DW) kt::vstore<C>(dwp + i + h * C, w);
      if constexpr (HAS_BIAS) kt::vstore<C>(dbp + i + h * C, b);
    }
  }
}

'''
PUSH_CALL = ("  } else if constexpr (MERGE) {\n",
             "  } else if constexpr (MERGE && MG > 1 && ROWS == 1) {\n"
             "    push_sums<VEC, NACC, TPR, MG, HAS_DW, HAS_BIAS>(\n"
             "        reinterpret_cast<float *>(stages + (long long)STAGES * ROWS * (HAS_DRESIDUAL ? 3 : 2) * ITEMS *"
             " TPR * VEC),\n"
             "        dwa, dba, lane, LEN, dwp, dbp);\n"
             "  } else if constexpr (MERGE) {\n")
PUSH_SMEM = " + (MG > 1 && ROWS == 1) * (MG - 1) * cdiv(ITEMS, MG) * BLOCK * VEC * 4 * ((dw_part != 0) + (db_part != 0))"
TOUCH_AT = "  PT *dbp = HAS_BIAS ? db_part + (long long)prog * D + c0 : nullptr;\n"


def touch(policy):
    """The patch that stores zeros over the block's share of its partial row
    (merge_sums's columns) at its start, with L2 policy kt::policy()."""
    return (TOUCH_AT, TOUCH_AT +
            "  if constexpr (MERGE && sizeof(PT) == 4) {\n"
            "    constexpr int C = VEC < 4 ? VEC : 4;\n"
            "    const int rank = (int)blockIdx.x % MG, per = (LEN / C + MG - 1) / MG * C;\n"
            "    const int end = min(LEN, (rank + 1) * per);\n"
            "    const unsigned long long pol = kt::" + policy + "();\n"
            "    for (int c = rank * per + (int)threadIdx.x * C; c < end; c += (int)blockDim.x * C) {\n"
            "      if constexpr (HAS_DW) kt::st_policy<C>(reinterpret_cast<float *>(dwp) + c, nullptr, pol);\n"
            "      if constexpr (HAS_BIAS) kt::st_policy<C>(reinterpret_cast<float *>(dbp) + c, nullptr, pol);\n"
            "    }\n"
            "  }\n")


END_EVICT_LAST = (
    "    if constexpr (HAS_DW) kt::vstore<C>(dwp + c, w);\n    if constexpr (HAS_BIAS) kt::vstore<C>(dbp + c, b);\n",
    "    if constexpr (sizeof(PT) == 4) {\n"
    "      const unsigned long long pol = kt::evict_last();\n"
    "      if constexpr (HAS_DW) kt::st_policy<C>(reinterpret_cast<float *>(dwp) + c, w, pol);\n"
    "      if constexpr (HAS_BIAS) kt::st_policy<C>(reinterpret_cast<float *>(dbp) + c, b, pol);\n"
    "    } else {\n"
    "      if constexpr (HAS_DW) kt::vstore<C>(dwp + c, w);\n"
    "      if constexpr (HAS_BIAS) kt::vstore<C>(dbp + c, b);\n"
    "    }\n")


def push_spec(spec):
    spec["smem"] += PUSH_SMEM


def same_spec(spec):
    """The spec of a copy that changes only device code."""


# (label, spec name, patches, spec edit)
STORES = [
    ("push merge", "layernorm_bwd_push",
     [WITH_HELPERS, ("// dx = rstd * (wdy - (xhat", PUSH_FN + "// dx = rstd * (wdy - (xhat"), PUSH_CALL], push_spec),
    ("touched early, evict-last", "layernorm_bwd_touchlast", [WITH_HELPERS, touch("evict_last")], same_spec),
    ("touched early", "layernorm_bwd_touch", [WITH_HELPERS, touch("evict_normal")], same_spec),
    ("stored evict-last", "layernorm_bwd_endlast", [WITH_HELPERS, END_EVICT_LAST], same_spec),
]
LABELS = ["shipped"] + [s[0] for s in STORES]
SHARE_FN = r'''
// Probe (tools/probe_bwd_stores.py): columns [c0, c1) of dw and db (a share
// of per columns), the sums over the first `parts` partial rows in order,
// U loads of each in flight a thread.
template <typename W, int BLOCK, int U>
__device__ __forceinline__ void share_sums(const float *dw_part, const float *db_part, W *dwo, W *dbo, int parts,
                                           int D, int c0, int c1, int per) {
  const int C = per < BLOCK ? per : BLOCK, S = BLOCK / C;
  __shared__ float red[2][BLOCK];
  const int j = (int)threadIdx.x % C, s = (int)threadIdx.x / C;
  for (int cb = c0; cb < c1; cb += C) {
    const int c = cb + j;
    float a = 0.f, b = 0.f;
    if (s < S && c < c1) {
#pragma unroll U
      for (int p = s; p < parts; p += S) {
        if (dwo) a += __ldcg(dw_part + (long long)p * D + c);
        if (dbo) b += __ldcg(db_part + (long long)p * D + c);
      }
    }
    red[0][threadIdx.x] = a;
    red[1][threadIdx.x] = b;
    __syncthreads();
    if (s == 0 && c < c1) {
      for (int k = 1; k < S; k++) {
        a += red[0][k * C + j];
        b += red[1][k * C + j];
      }
      if (dwo) dwo[c] = kt::from_f<W>(a);
      if (dbo) dbo[c] = kt::from_f<W>(b);
    }
    __syncthreads();
  }
}
'''
# The fused copy: its reduce beside the entry, called after norm_bwd.
FUSED_AT = "\n// The entry, twice: CL * MG == 1 without a cluster attribute, so those\n"
FUSED_FN = r'''
// Probe (tools/probe_bwd_stores.py): every block meets the others after its
// partial row, spinning on a counter (every block resident: not safe in
// general), then sums its share of the columns over the partial rows.
template <typename W, int BLOCK>
__device__ __forceinline__ void fused_reduce(const float *dw_part, const float *db_part, W *dwo, W *dbo, int *sync,
                                             int n_rows, int D, int P) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned nb = gridDim.x;
    const unsigned t = atomicAdd(reinterpret_cast<unsigned *>(sync), 1u);
    const unsigned target = (t / nb + 1) * nb;
    unsigned v;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(sync) : "memory");
    } while ((int)(v - target) < 0);
  }
  __syncthreads();
  const int bs = (n_rows + P - 1) / P, parts = (n_rows + bs - 1) / bs;
  const int nb = (int)gridDim.x, per = (D + nb - 1) / nb, c0 = (int)blockIdx.x * per;
  share_sums<W, BLOCK, 4>(dw_part, db_part, dwo, dbo, parts, D, c0, min(D, c0 + per), per);
}

// The entry, twice: CL * MG == 1 without a cluster attribute, so those
'''
FUSED_PATCHES = [
    (FUSED_AT, SHARE_FN + FUSED_FN),
    ("                int n_rows, int D, int G, int P, int rms) {                                                        \\\n"
     "    norm_bwd<T, W, float,",
     "                int n_rows, int D, int G, int P, int rms, W *dwo, W *dbo, int *sync) {                           \\\n"
     "    norm_bwd<T, W, float,"),
    ("                                                    P, rms);                                                       \\\n"
     "  }\nKT_NORM_BWD_ENTRY(, CL * MG == 1)",
     "                                                    P, rms);                                                       \\\n"
     "    fused_reduce<W, BLOCK>(dw_part, db_part, dwo, dbo, sync, n_rows, D, P);                                        \\\n"
     "  }\nKT_NORM_BWD_ENTRY(, CL * MG == 1)"),
]

# The tail copy: only the last TAIL_NR blocks to arrive wait, and each sums
# a share of the columns; every other block leaves at once.
TAIL_FN = r'''
// Probe (tools/probe_bwd_stores.py, PARTS=tail): each block takes a ticket
// after its partial row; the last TAIL_NR to arrive wait for the rest (the
// blocks they wait on can always be placed on the SMs the others left),
// then each sums its share of the columns over the partial rows, in order,
// into dw and db and drops their lines from L2, as the reduce does.
__device__ __forceinline__ void drop_lines(float *a, int parts, int D, int lo, int hi);
template <typename W, int BLOCK>
__device__ __forceinline__ void tail_reduce(float *dw_part, float *db_part, W *dwo, W *dbo, int *sync,
                                            int n_rows, int D, int P) {
  __shared__ unsigned s_ticket;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    s_ticket = atomicAdd(reinterpret_cast<unsigned *>(sync), 1u);
  }
  __syncthreads();
  const unsigned nb = gridDim.x, t = s_ticket;
  const int nr = (int)nb < TAIL_NR ? (int)nb : TAIL_NR, pos = (int)(t % nb);
  if (pos < (int)nb - nr) return;
  const int r = pos - ((int)nb - nr);
  if (threadIdx.x == 0) {
    const unsigned target = (t / nb + 1) * nb;
    unsigned v;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(sync) : "memory");
    } while ((int)(v - target) < 0);
  }
  __syncthreads();
  const int bs = (n_rows + P - 1) / P, parts = (n_rows + bs - 1) / bs;
  const int per = ((D + nr - 1) / nr + 31) / 32 * 32;
  const int c0 = r * per, c1 = min(D, c0 + per);
  share_sums<W, BLOCK, 8>(dw_part, db_part, dwo, dbo, parts, D, c0, c1, per);
  if (c0 < c1 && dwo) drop_lines(dw_part, parts, D, c0, c1);
  if (c0 < c1 && dbo) drop_lines(db_part, parts, D, c0, c1);
}

// The entry, twice: CL * MG == 1 without a cluster attribute, so those
'''


def tail_patches(nr):
    """The fused copy's patches with tail_reduce in place of fused_reduce."""
    return [(FUSED_AT, "\n#define TAIL_NR %d\n" % nr + SHARE_FN + TAIL_FN), FUSED_PATCHES[1],
            (FUSED_PATCHES[2][0], FUSED_PATCHES[2][1].replace("fused_reduce", "tail_reduce"))]


def fused_spec(spec):
    """layernorm_bwd's spec with the fused copy's outputs and its counter."""
    spec["params"] += [
        {"name": "dwo", "type": "ptr", "dtype": "W", "access": "out", "extent": "D", "optional": True},
        {"name": "dbo", "type": "ptr", "dtype": "W", "access": "out", "extent": "D", "optional": True},
        {"name": "sync", "type": "ptr", "dtype": "i32", "access": "inout", "extent": "1"}]
CASES = pb.cases_from_env("1024x16384x0,1024x16384x1,2048x8192x0,2048x8192x1,1366x12288x0,4096x4096x0,"
                          "16778x1000x0,65536x256x0")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
PARTS = os.environ.get("PARTS", "stores,fused").split(",")
TAIL_NR = [int(n) for n in os.environ.get("TAIL_NR", "33").split(",")]


def bits(t):
    """t's bytes as integers (NaN compares equal to the same NaN)."""
    return t.view(torch.int32) if t.element_size() == 4 else t.view(torch.int16)


def outputs(k, bargs, config):
    """dx and the partial rows of one launch of k, poisoned first."""
    outs = [t for t in bargs[:3] if t is not None]
    return [bits(t) for t in pb.poisoned_outputs(lambda: k.launch(bargs, config=config), outs)]


def stores_row(ks, red, c, P, config):
    """config forced on each of ks (the shipped spec first), alone and with
    the reduce, ROUNDS times in turn: (whether each copy gave the shipped
    bytes, the fastest times, alone and with the reduce, of each)."""
    _, bargs, rargs = pb.bwd_buffers(c, P, c.w, c.b)
    ref = outputs(ks[0], bargs, config)
    same = [all(torch.equal(a, b) for a, b in zip(ref, outputs(k, bargs, config))) for k in ks[1:]]
    runs = []
    for k in ks:
        runs.append(lambda k=k: k.launch(bargs, config=config))
        runs.append(lambda k=k: (k.launch(bargs, config=config), red.launch(rargs)))
    return same, pb.fastest(runs, ROUNDS)


def fused_row(fks, shipped, red, c, P, config, copy_gbs):
    """config forced on each fused copy of fks ((label, kernel) pairs), and
    on the shipped spec with and without its reduce, ROUNDS times in turn:
    a row of the fastest of each with its % of the copy, and the errors
    against float64 (the shipped pair's, then each copy's)."""
    (dx, dw, db), bargs, rargs = pb.bwd_buffers(c, P, c.w, c.b)
    dwo, dbo = torch.empty_like(dw), torch.empty_like(db) if db is not None else None
    fargs = bargs + [dwo, c.arg(dbo), torch.zeros(1, dtype=torch.int32, device=bk.dev)]
    shipped.launch(bargs, config=config)
    red.launch(rargs)
    errs = [pb.grads_error(c, dx, dw, db)]
    for _, k in fks:
        got = pb.poisoned_outputs(lambda k=k: k.launch(fargs, config=config), [dwo, dbo])
        errs.append(pb.grads_error(c, dx, *got))
    runs = [lambda: (shipped.launch(bargs, config=config), red.launch(rargs)),
            lambda: shipped.launch(bargs, config=config)]
    runs += [lambda k=k: k.launch(fargs, config=config) for _, k in fks]
    best = pb.fastest(runs, ROUNDS)
    cells = ["%.2f (%.1f%%)" % (us, pb.bwd_pct(c, us, copy_gbs)) for us in best]
    return ("%s P=%d" % (pb.case_name(c), P),) + tuple(cells) + (" ".join("%.1e" % e for e in errs), config)


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(8)
    fwd, shipped, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))

    def copy_of(name, patches, edit):
        """A patched copy of layernorm_bwd loaded as name, from a folder of
        its own (each copy writes its own layernorm.cu)."""
        d = os.path.join(tmp, name)
        os.mkdir(d)
        return rt.kernel(pb.patched_copy(ktune.kernels_dir(), d, "layernorm_bwd", name, patches, edit))

    ks = [shipped] + [copy_of(name, patches, edit) for _, name, patches, edit in STORES if "stores" in PARTS]
    fks = [("fused", copy_of("layernorm_bwd_fused", FUSED_PATCHES, fused_spec))] if "fused" in PARTS else []
    if "tail" in PARTS:
        fks += [("last %d" % nr, copy_of("layernorm_bwd_tail%d" % nr, tail_patches(nr), fused_spec))
                for nr in TAIL_NR]
    rows, frows = [], []

    def one(c):
        name, P, cfg = pb.shipped_pick(copy_gbs, shipped, red, c)
        if cfg and fks:
            frows.append(fused_row(fks, shipped, red, c, P, cfg, copy_gbs))
            print("  " + " | ".join(str(x) for x in frows[-1]), flush=True)
        if cfg and len(ks) > 1:
            same, best = stores_row(ks, red, c, P, cfg)
            print("  %s: same bytes %s" % (name, same), flush=True)
            for label, alone, both in zip(LABELS, best[0::2], best[1::2]):
                print("    %-26s alone %6.2f us %4.1f%%  with reduce %6.2f us %4.1f%%"
                      % (label, alone, pb.bwd_pct(c, alone, copy_gbs), both, pb.bwd_pct(c, both, copy_gbs)),
                      flush=True)
            rows.append((name, "%.2f / %.2f" % tuple(best[:2])) + tuple(
                "%.2f / %.2f%s" % (a, b, "" if s else " (other bytes)")
                for a, b, s in zip(best[2::2], best[3::2], same)) + (cfg,))

    pb.each_case(fwd, CASES, one)
    if rows:
        pb.markdown_rows(("case",) + tuple(label + " µs, alone / with reduce:" for label in LABELS) + ("config",),
                         " | ".join(["%s"] * (len(LABELS) + 2)), rows)
    if frows:
        labels = ("with reduce", "alone") + tuple(label for label, _ in fks)
        pb.markdown_rows(("case",) + tuple(label + " µs:" for label in labels) + ("errors:", "config"),
                         " | ".join(["%s"] * (len(labels) + 3)), frows)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
