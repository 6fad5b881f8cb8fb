"""A reduce that waits on flags instead of the whole backward: a probe for
issue 17's backward target, not part of `make bench`.

The shipped reduce is launched early (options.pdl) and waits
(griddepcontrol.wait) until the whole backward has ended and its memory is
visible; the sixty-fifth run found it adds about 2 µs at D <= 1536 however
it is configured. Here copies of both kernels meet through flags instead:
each block of the backward copy (layernorm_bwd_flag) sets its flag (a
release store after a barrier and a fence) once its share of the partial
row is stored, and the reduce copy (layernorm_bwd_reduce_poll) does not
wait for the grid: the first warp of each block polls the flags of the
programs that own rows (acquire loads), then the block sums the partial
rows as the shipped reduce does, in the same order (dw and db must be the
shipped bytes); the last reduce block to finish puts the flags back to 0.
Each backward copy either triggers the reduce's launch where the shipped
one does (once its rows are done: "poll") or at its start ("poll, early",
the reduce's blocks placed beside the streaming ones). Either way every
backward block has started before a reduce block polls, so the reduce
never waits on a block that cannot be placed; a shipped kernel would still
need more (a launch without PDL must not poll flags no one will set).

For each case (bf16, with the weight, and the bias for LayerNorm; CASES as
TxDxRMS, comma-separated), the shipped pick at the P that ktune.ops passes
and the reduce's pick at that P, forced on every copy (the copies are
never tuned: a poll with no backward beside it would not end); ROUNDS
rounds in turn, the fastest of each, with dx, dw and db compared bit for
bit with the shipped pair's. $KTUNE_CACHE should name a fresh cache.
The sixty-eighth run in docs/kernels.md is an example."""
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_norm_bwd as pb  # noqa: E402
from probe_bwd_trigger import EARLY  # noqa: E402  (the trigger at the backward's start)
import ktune  # noqa: E402

CASES = pb.cases_from_env("16778x1000x1,16778x1000x0,65536x256x0,32768x512x0,10923x1536x0,4096x4096x0,"
                          "2048x8192x1,1024x16384x0")
ROUNDS = int(os.environ.get("ROUNDS", "3"))

FLAG_FN_AT = "// The entry, twice: CL * MG == 1 without a cluster attribute, so those\n"
FLAG_FN = r'''// Probe (tools/probe_bwd_poll.py): this block's share of the partial row
// is stored; its flag says so.
__device__ __forceinline__ void flag_done(int *flags) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flags + blockIdx.x), "r"(1u) : "memory");
  }
}

'''
BWD_SIG = ("                int n_rows, int D, int G, int P, int rms) {                                                        \\\n"
           "    norm_bwd<T, W, float,")
BWD_END = ("                                                    P, rms);                                                       \\\n"
           "  }\nKT_NORM_BWD_ENTRY(, CL * MG == 1)")
FLAG_PATCHES = [
    (FLAG_FN_AT, FLAG_FN + FLAG_FN_AT),
    (BWD_SIG, BWD_SIG.replace("int rms) {  ", "int rms, int *flags) {")),
    (BWD_END, BWD_END.replace("P, rms);                                                       \\\n",
                              "P, rms);                                                       \\\n"
                              "    flag_done(flags);                                                                             \\\n")),
]
POLL_FN_AT = "template <typename W, int BD, int SP>\n__global__ void __launch_bounds__(BD * SP)\nlayernorm_bwd_reduce("
POLL_FN = r'''// Probe (tools/probe_bwd_poll.py): the first warp waits until the first n
// flags are set (acquire loads), then the block goes on.
__device__ __forceinline__ void wait_flags(int *flags, int n) {
  if (threadIdx.y == 0 && threadIdx.x < 32) {
    for (int i = threadIdx.x; i < n; i += 32) {
      unsigned v;
      for (int spins = 0;; spins++) {  // bounded: a flag never set shows as other bytes, not a hang
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flags + i) : "memory");
        if (v || spins > (1 << 22)) break;
        __nanosleep(32);
      }
    }
  }
  __syncthreads();
}

'''
POLL_PATCHES = [
    (POLL_FN_AT, POLL_FN + POLL_FN_AT),
    ("                     float *__restrict__ db_part, int n_rows, int D, int P) {\n"
     "  __shared__ float sw[SP][BD], sb[SP][BD];\n  kt::grid_wait();\n  kt::grid_trigger();\n",
     "                     float *__restrict__ db_part, int n_rows, int D, int P, int *flags, int *done, int K) {\n"
     "  __shared__ float sw[SP][BD], sb[SP][BD];\n  kt::grid_trigger();\n"),
    ("  float aw = 0.f, ab = 0.f;\n  if (c < D && dw && db)\n",
     "  wait_flags(flags, parts * K);\n  float aw = 0.f, ab = 0.f;\n  if (c < D && dw && db)\n"),
    ("  if (db) drop_lines(db_part, parts, D, lo, hi);\n  if (threadIdx.y != 0 || c >= D) return;\n",
     "  if (db) drop_lines(db_part, parts, D, lo, hi);\n"
     "  if (threadIdx.x == 0 && threadIdx.y == 0 && atomicAdd(done, 1) == (int)gridDim.x - 1) {\n"
     "    for (int i = 0; i < parts * K; i++) flags[i] = 0;\n    *done = 0;\n  }\n"
     "  if (threadIdx.y != 0 || c >= D) return;\n"),
]


def flag_spec(spec):
    """layernorm_bwd's spec with the flags (one a block: P * CL * MG <= 4 P)."""
    spec["params"].append({"name": "flags", "type": "ptr", "dtype": "i32", "access": "inout", "extent": "P * 4"})


def poll_spec(spec):
    """layernorm_bwd_reduce's spec with the flags, the count of its blocks
    done, and K, the blocks of a backward program."""
    spec["params"] += [{"name": "flags", "type": "ptr", "dtype": "i32", "access": "inout", "extent": "P * 4"},
                       {"name": "done", "type": "ptr", "dtype": "i32", "access": "inout", "extent": "1"},
                       {"name": "K", "type": "i32", "key": "ignore"}]


def outputs(pair, outs):
    """dx, dw and db (outs, poisoned first; None among them kept) of one
    launch of pair (a function), as bytes."""
    return [None if t is None else t.view(torch.int16) for t in pb.poisoned_outputs(pair, outs)]


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(6)
    fwd, shipped, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))

    def copies(name, patches):
        """The backward and reduce copies patched with patches (one source)."""
        d = os.path.join(tmp, name)
        os.mkdir(d)
        src = ktune.kernels_dir()
        b = rt.kernel(pb.patched_copy(src, d, "layernorm_bwd", "layernorm_bwd_flag", patches, flag_spec))
        r = rt.kernel(pb.patched_copy(src, d, "layernorm_bwd_reduce", "layernorm_bwd_reduce_poll", patches,
                                      poll_spec))
        return b, r

    pairs = [("poll", copies("poll", FLAG_PATCHES + POLL_PATCHES)),
             ("poll, early", copies("early", FLAG_PATCHES + POLL_PATCHES + EARLY))]
    rows = []

    def one(c):
        name, P, cfg = pb.shipped_pick(copy_gbs, shipped, red, c)
        if not cfg:
            return
        outs, bargs, rargs = pb.bwd_buffers(c, P, c.w, c.b)
        rcfg = red.config_for(rargs)
        f = pb.config_fields(cfg)
        K = int(f["CL"]) * int(f["MG"])
        flags = torch.zeros(4 * P, dtype=torch.int32, device=c.x.device)
        done = torch.zeros(1, dtype=torch.int32, device=c.x.device)
        fargs, pargs = bargs + [flags], rargs + [flags, done, K]
        runs = [lambda: (shipped.launch(bargs, config=cfg), red.launch(rargs, config=rcfg))]
        runs += [lambda b=b, r=r: (b.launch(fargs, config=cfg), r.launch(pargs, config=rcfg)) for _, (b, r) in pairs]
        ref = outputs(runs[0], outs)
        same = [all(torch.equal(a, b) for a, b in zip(ref, outputs(run, outs)) if a is not None) for run in runs[1:]]
        left = "%d, %d" % (int(flags[:pb.owning_programs(c.T, P) * K].count_nonzero()), int(done.item()))
        t = pb.fastest(runs, ROUNDS)
        cells = ["%.2f (%.1f%%)" % (us, pb.bwd_pct(c, us, copy_gbs)) for us in t]
        rows.append((name,) + tuple(cells) + (" ".join("yes" if s else "NO" for s in same), left, cfg, rcfg))
        print("  " + " | ".join(str(x) for x in rows[-1]), flush=True)

    pb.each_case(fwd, CASES, one)
    labels = ("shipped pair",) + tuple(label for label, _ in pairs)
    pb.markdown_rows(("case",) + tuple(label + " µs:" for label in labels)
                     + ("same dx, dw, db", "flags and done left", "config", "reduce config"),
                     " | ".join(["%s"] * (len(labels) + 5)), rows)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
