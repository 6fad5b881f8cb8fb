"""Whether layernorm_bwd's rows handed out as blocks ask, not split ahead
of time, end its programs together: a probe for issue 17's backward
target, not part of `make bench`.

The shipped backward splits the rows evenly and ahead of time, and blocks
that stream the same bytes end microseconds apart (some SMs are slower).
A copy (layernorm_bwd_dyn) hands out tiles of ROWS rows from a counter in
global memory (a new argument, two integers: tiles handed out, blocks
done; the last block done puts both back to 0). Each block still sums its
rows' dw and db in registers and writes one partial row, but which rows a
partial row holds now changes from run to run, so dw and db do not have
the same bits from run to run: this is an upper bound on what balancing
gains, not a structure to ship as it is (a deterministic one would fix
which rows each partial row sums, and hand out those groups).

Only the pipelined path (STAGES > 0, CL = 1) is changed; a case whose
pick has STAGES = 0 or CL > 1 is skipped. For each case (bf16, with the
weight, and the bias for LayerNorm; CASES as TxDxRMS, comma-separated),
the shipped pick at the P that ktune.ops passes, forced on both specs,
alone and with the reduce, ROUNDS rounds in turn, the fastest of each;
dx of the two compared bit for bit, dw and db against float64 (the largest
error over the largest value). $KTUNE_CACHE should name a fresh cache."""
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_kernels as bk  # noqa: E402
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

CASES = pb.cases_from_env("16778x1000x1,16778x1000x0,65536x256x0,32768x512x0,10923x1536x0,4096x4096x0,"
                          "4096x4096x1,2048x8192x1,2048x8192x0,1024x16384x0,1024x16384x1")
ROUNDS = int(os.environ.get("ROUNDS", "3"))

# The pipelined loop, from its tile count to its last wait: replaced.
LOOP_FROM = "    const long long tiles = (row1 - row0 + ROWS - 1) / ROWS;\n"
LOOP_TO = "    kt::cp_async_wait<0>();\n  } else {\n"
DYN_LOOP = r'''    // Probe (tools/probe_bwd_dyn.py): tiles of ROWS rows handed out by
    // ctr[0] as blocks ask. Thread 0 asks for the tile STAGES + 1 ahead and
    // puts the answer in the ring a tile later, so the atomic's latency is
    // hidden; the barrier each tile publishes it. ctr[1] counts the blocks
    // done; the last puts both back to 0 for the next launch.
    static_assert(CL == 1, "blocks that split columns would have to share their tiles");
    constexpr int RING = 16;
    static_assert(STAGES + 2 <= RING, "the ring holds the tiles in flight");
    __shared__ long long ring[RING];
    unsigned *const grab = reinterpret_cast<unsigned *>(ctr);
    const long long TT = ((long long)n_rows + ROWS - 1) / ROWS;
    if (threadIdx.x == 0) {
      const unsigned g = atomicAdd(grab, (unsigned)(STAGES + 1));
      for (int i = 0; i <= STAGES; i++) ring[i] = (long long)g + i;
    }
    __syncthreads();
    long long in_t = 0;
    int slot_in = 0;
    auto issue = [&]() {
      const long long seg_in = ring[in_t % RING] * ROWS + sub;
      if (seg_in < n_rows) {
        const long long off_in = seg_in * L;
        T *sx = mine + slot_in * SLOT;
        kt::copy_mine<ITEMS, TPR, VEC>(sx, x + off_in, lane, LEN);
        kt::copy_mine<ITEMS, TPR, VEC>(sx + CAP, dy + off_in, lane, LEN);
        if constexpr (HAS_DRESIDUAL) kt::copy_mine<ITEMS, TPR, VEC>(sx + 2 * CAP, dres + off_in, lane, LEN);
      }
      kt::cp_async_commit();
      in_t++;
      slot_in = slot_in + 1 == STAGES ? 0 : slot_in + 1;
    };
#pragma unroll
    for (int t = 0; t < STAGES - 1; t++) issue();
    int slot = 0;
    float mu_n = 0.f, rs_n = 0.f;
    {
      const long long s = ring[0] * ROWS + sub;
      if (s < n_rows) {
        mu_n = IS_RMS_NORM ? 0.f : mean[s];
        rs_n = rstd[s];
      }
    }
    unsigned pend = 0;
#pragma unroll 1
    for (long long t = 0;; t++) {
      const long long tile = ring[t % RING];
      if (tile >= TT) break;
      if (threadIdx.x == 0) {
        if (t > 0) ring[(t + STAGES) % RING] = pend;
        pend = atomicAdd(grab, 1u);
      }
      issue();
      const long long seg = tile * ROWS + sub, off = seg * L;
      const float mu = mu_n, rs = rs_n;
      const long long nxt = ring[(t + 1) % RING] * ROWS + sub;
      if (nxt < n_rows) {
        mu_n = IS_RMS_NORM ? 0.f : mean[nxt];
        rs_n = rstd[nxt];
      }
      kt::cp_async_wait<STAGES - 1>();
      const T *sx = mine + slot * SLOT;
      slot = slot + 1 == STAGES ? 0 : slot + 1;
      segment(sx, sx + CAP, sx + 2 * CAP, seg, off, mu, rs, seg < n_rows);
      __syncthreads();
    }
    kt::cp_async_wait<0>();
    if (threadIdx.x == 0) {
      ring[0] = pend;  // the last ask answered before the block counts itself done
      __threadfence();
      const unsigned blocks = (unsigned)((n_rows + bs - 1) / bs) * MG;
      if (atomicAdd(grab + 1, 1u) == blocks - 1) {
        atomicExch(grab, 0u);
        atomicExch(grab + 1, 0u);
      }
    }
  } else {
'''
ENTRY = [
    ("         const T *__restrict__ dres, int n_rows, int D, int G, int P, int rms) {\n",
     "         const T *__restrict__ dres, int n_rows, int D, int G, int P, int rms, int *ctr = nullptr) {\n"),
    ("                int n_rows, int D, int G, int P, int rms) {"
     "                                                        \\\n",
     "                int n_rows, int D, int G, int P, int rms, int *ctr) {"
     "                                              \\\n"),
    ("                                                    P, rms);"
     "                                                       \\\n",
     "                                                    P, rms, ctr);"
     "                                                  \\\n"),
]


def dyn_patches(src_dir):
    """The patches that make layernorm_bwd_dyn of the shipped source."""
    with open(os.path.join(src_dir, "layernorm.cu")) as f:
        text = f.read()
    a = text.index(LOOP_FROM)
    return [(text[a:text.index(LOOP_TO, a) + len(LOOP_TO)], DYN_LOOP)] + ENTRY


def dyn_spec(spec):
    """layernorm_bwd's spec with the counter the copy hands tiles out by."""
    spec["params"].append({"name": "ctr", "type": "ptr", "dtype": "i32", "access": "inout", "extent": "2"})


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(6)
    fwd, shipped, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))
    src = ktune.kernels_dir()
    dyn = rt.kernel(pb.patched_copy(src, tmp, "layernorm_bwd", "layernorm_bwd_dyn", dyn_patches(src), dyn_spec))
    rows = []

    def one(c):
        name, P, cfg = pb.shipped_pick(copy_gbs, shipped, red, c)
        if not cfg:
            return
        f = pb.config_fields(cfg)
        if f["STAGES"] == "0" or f["CL"] != "1":
            print("  %s: skipped (STAGES=%s, CL=%s)" % (name, f["STAGES"], f["CL"]), flush=True)
            return
        outs, bargs, rargs = pb.bwd_buffers(c, P, c.w, c.b)
        ctr = torch.zeros(2, dtype=torch.int32, device=bk.dev)
        dargs = bargs + [ctr]
        ref = pb.grads(shipped, red, bargs, rargs, outs, cfg)
        got = pb.grads(dyn, red, dargs, rargs, outs, cfg)
        again = pb.grads(dyn, red, dargs, rargs, outs, cfg)
        same_dx = torch.equal(ref[0].view(torch.int16), got[0].view(torch.int16))
        err = pb.grads_error(c, *got)
        stable = all(a is None or torch.equal(a, b) for a, b in zip(got[1:], again[1:]))
        runs = [lambda: shipped.launch(bargs, config=cfg), lambda: dyn.launch(dargs, config=cfg),
                lambda: (shipped.launch(bargs, config=cfg), red.launch(rargs)),
                lambda: (dyn.launch(dargs, config=cfg), red.launch(rargs))]
        t = pb.fastest(runs, ROUNDS)
        rows.append((name, t[0], t[1], t[2], pb.bwd_pct(c, t[2], copy_gbs), t[3], pb.bwd_pct(c, t[3], copy_gbs),
                     "yes" if same_dx else "NO", "%.1e" % err, "yes" if stable else "no",
                     "%d %d" % tuple(ctr.tolist()), cfg))
        print("  %-28s alone %6.2f -> %6.2f  with reduce %6.2f (%4.1f%%) -> %6.2f (%4.1f%%)  dx same %s  err %s  "
              "dw same twice %s  ctr %s" % rows[-1][:11], flush=True)

    pb.each_case(fwd, CASES, one)
    pb.markdown_rows(("case", "shipped alone µs:", "handed out alone µs:", "shipped with reduce µs:", "% of copy:",
                      "handed out with reduce µs:", "% of copy:", "dx same bits", "error", "dw same bits twice",
                      "counter after", "config"),
                     "%s | %.2f | %.2f | %.2f | %.1f%% | %.2f | %.1f%% | %s | %s | %s | %s | %s", rows)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
