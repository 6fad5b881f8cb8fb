"""The end of a backward program, where its dw/db sums leave the SMs: a
probe for issue 17's backward target, not part of `make bench`. Three
parts (PARTS, comma-separated: change, skew, noend; default all).

First, what a change to layernorm.cu (the sixty-sixth run) gains against
the code before it: a pipelined program of ROWS > 1 subgroups (STAGES >
0) adds their dw/db sums in shared memory with every thread at once
(fold_subgroups: each subgroup writes its sums to a place of its own in
the free pipeline slots, then each thread adds a few columns over the
subgroups in order), where each subgroup in turn added its sums into one
place, one subgroup at work a turn (add_in_turn; ROWS turns, a barrier
each). The additions are the same, in the same order.

The other side of the change (CHANGE: the code before where the shipped
source holds it, else the code after) is a patched copy under another
name (layernorm_bwd_before or layernorm_bwd_after). For each case (bf16,
with the weight, and the bias for LayerNorm; CASES as TxDxRMS,
comma-separated) at the P that ktune.ops passes: the shipped spec tuned
and the old one tuned (each its own key); then the shipped pick and every
FORCED config (ROWS > 1, pipelined) forced on both, ROUNDS times in turn,
the fastest of each; the bytes of dx, dw and db of the two compared (the
same additions in the same order: they must be equal), and both against
float64 (probe_norm_bwd.reference).

Second, programs that end at two times (SKEW_PATCHES, as the spec
layernorm_bwd_skew, whose config field SK the shipped spec lacks): every
odd program whose whole share lies inside the rows starts SK rows late, so
the even programs own bs + SK rows and the odd ones bs - SK (bs = cdiv(N,
P)). Which rows a program sums is still fixed by N, P and the config (the
same bits every run); the question is whether the odd programs' partial
rows, written while the even ones still stream, shorten the launch's end,
where every program now writes its partial row at the same moment. The
shipped pick forced with SK = 0 (the shipped code) and each SKEW value,
ROUNDS times in turn, the fastest of each, and the error against
float64.

Third, what the end costs (ENDS, as specs layernorm_bwd_noend,
layernorm_bwd_nostore, layernorm_bwd_dxcs and layernorm_bwd_unmerged):
the shipped pick forced on the shipped spec and on copies of it, ROUNDS
times in turn, the fastest of each: with no end at all (the merge and
the partial rows' stores guarded by a condition on the unused argument
rms that never holds, so the compiler keeps every sum); with the merge
of the cluster's sums through shared memory but not the partial row's
stores (guarded so); with the end kept and dx stored evict-first
(st.global.cs), so that L2 may write dx back early and the partial rows
stored at the end find lines to take (the same outputs); and with each
block of a cluster storing its own sums straight from registers, no
merge (MG blocks then write one partial row each, unordered: timing
only). Beside them the same rows without weight and bias (no sums, no
partial rows), tuned at the same P. The backward alone; the copies'
outputs are not checked."""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_kernels as bk  # noqa: E402
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

# The change, as (before, after) pairs of layernorm.cu's text: the probe
# makes the other side of whichever the shipped source holds.
CHANGE = [
    ("    merge_sums<VEC, NACC, TPR, ROWS, MG, false, HAS_DW, HAS_BIAS>(",
     "    merge_sums<VEC, NACC, TPR, ROWS, MG, FOLD, HAS_DW, HAS_BIAS>("),
]


def other_side():
    """(patches, name, whether the shipped source holds the change): the
    patches that make the side of CHANGE the shipped source lacks."""
    with open(os.path.join(ktune.kernels_dir(), "layernorm.cu")) as f:
        text = f.read()
    shipped_new = all(after in text for _, after in CHANGE)
    if shipped_new:
        return [(a, b) for b, a in CHANGE], "layernorm_bwd_before", True
    return list(CHANGE), "layernorm_bwd_after", False


SKEW_PATCHES = [
    ("          int GROUPED>\n__device__ __forceinline__ void\nnorm_bwd(",
     "          int GROUPED, int SK = 0>\n__device__ __forceinline__ void\nnorm_bwd("),
    ("  const long long p0 = (long long)prog * bs;\n",
     "  auto start_ = [&](long long i) -> long long {\n"
     "    const long long s = i * bs + ((i & 1) && (i + 1) * bs <= n_rows ? SK : 0);\n"
     "    return s < n_rows ? s : n_rows;\n"
     "  };\n"
     "  const long long p0 = start_(prog);\n"),
    ("  const long long p1 = min(p0 + bs, (long long)n_rows);\n", "  const long long p1 = start_(prog + 1);\n"),
    ("int GROUPED, typename kt::enable_if", "int GROUPED, int SK, typename kt::enable_if"),
    ("HAS_BIAS, GROUPED>(dx, dw_part, db_part,", "HAS_BIAS, GROUPED, SK>(dx, dw_part, db_part,"),
]
SKEW = [int(v) for v in os.environ.get("SKEW", "1,2,4").split(",") if v]
# The third part's copies of layernorm_bwd: (label, spec name, patches). The
# conditions on rms never hold (ktune passes 0 or 1), and the compiler
# cannot know it, so every sum and every load they guard stays.
ENDS = [
    ("no end", "layernorm_bwd_noend",
     [("  kt::grid_trigger();\n  if constexpr (SACC) {",
       "  kt::grid_trigger();\n  if (rms != 0x7fffffff) {\n  } else if constexpr (SACC) {")]),
    ("merged, not stored", "layernorm_bwd_nostore",
     [("lane,\n                                           int sub, int LEN, PT *dwp, PT *dbp) {",
       "lane,\n                                           int sub, int LEN, PT *dwp, PT *dbp, int rms) {"),
      # fold_subgroups's stores first: the merge's, guarded, hold their text.
      ("                                               int sub, int LEN, PT *dwp, PT *dbp) {",
       "                                               int sub, int LEN, PT *dwp, PT *dbp, int rms) {"),
      ("(ms, dwa, dba, lane, sub, LEN, dwp, dbp);", "(ms, dwa, dba, lane, sub, LEN, dwp, dbp, rms);"),
      ("      if constexpr (HAS_DW) kt::vstore<C>(dwp + c, w);\n"
       "      if constexpr (HAS_BIAS) kt::vstore<C>(dbp + c, b);\n",
       "      if (rms == 0x7fffffff) {\n        if constexpr (HAS_DW) kt::vstore<C>(dwp + c, w);\n"
       "        if constexpr (HAS_BIAS) kt::vstore<C>(dbp + c, b);\n      }\n"),
      ("    if constexpr (HAS_DW) kt::vstore<C>(dwp + c, w);\n    if constexpr (HAS_BIAS) kt::vstore<C>(dbp + c, b);\n",
       "    if (rms == 0x7fffffff) {\n      if constexpr (HAS_DW) kt::vstore<C>(dwp + c, w);\n"
       "      if constexpr (HAS_BIAS) kt::vstore<C>(dbp + c, b);\n    }\n"),
      ("                                                                LEN, dwp, dbp);",
       "                                                                LEN, dwp, dbp, rms);")]),
    ("dx stored evict-first", "layernorm_bwd_dxcs",
     [("// The subgroups' dw/db sums (of the thread's NACC items)",
       "template <int VEC, typename T> __device__ __forceinline__ void vstore_cs(T *dst, const float *src) {\n"
       "  kt::Vec<T, VEC> a;\n"
       "#pragma unroll\n"
       "  for (int k = 0; k < VEC; k++) a.v[k] = kt::from_f<T>(src[k]);\n"
       "  if constexpr (sizeof(a) == 16) {\n"
       "    const uint4 u = *reinterpret_cast<const uint4 *>(&a);\n"
       "    asm volatile(\"st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};\" ::\"l\"(dst), \"r\"(u.x), \"r\"(u.y),\n"
       "                 \"r\"(u.z), \"r\"(u.w) : \"memory\");\n"
       "  } else {\n"
       "    *reinterpret_cast<kt::Vec<T, VEC> *>(dst) = a;\n"
       "  }\n"
       "}\n\n"
       "// The subgroups' dw/db sums (of the thread's NACC items)"),
      ("      kt::vstore<VEC>(dx + base + i, o);\n    }\n  };", "      vstore_cs<VEC>(dx + base + i, o);\n    }\n  };"),
      ("          kt::vstore<VEC>(dx + base + i, o);\n", "          vstore_cs<VEC>(dx + base + i, o);\n")]),
    ("stored, not merged", "layernorm_bwd_unmerged",
     [("      (MG > 1 || (ROWS > 1 && (sizeof(PT) != 4 || STAGES > 0))) && (HAS_DW || HAS_BIAS);",
       "      (ROWS > 1 && (sizeof(PT) != 4 || STAGES > 0)) && (HAS_DW || HAS_BIAS);")]),
]
END_LABELS = ["shipped"] + [e[0] for e in ENDS] + ["no weight"]  # the third part's columns
PARTS = os.environ.get("PARTS", "change,skew,noend").split(",")


def skew_spec(spec):
    """layernorm_bwd's spec with the config field SK (0 and SKEW)."""
    spec["template"].append("SK")
    spec["config"]["SK"] = sorted({0, *SKEW})
    spec["default"]["SK"] = 0
    spec["constraints"].append("SK == 0 || SK < cdiv(N, P)")


CASES = pb.cases_from_env("4096x4096x1,4096x4096x0,2048x8192x1,2048x8192x0,1366x12288x0,1024x16384x1,"
                          "1024x16384x0,16778x1000x0")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
FORCED = {4096: ["BLOCK=1024,ROWS=2,VEC=8,ITEMS=1,STAGES=2,ACC=0,CL=1,MG=1,REREAD=0,HOLD=0",
                 "BLOCK=512,ROWS=2,VEC=8,ITEMS=2,STAGES=3,ACC=0,CL=1,MG=1,REREAD=0,HOLD=0"],
          1000: ["BLOCK=512,ROWS=4,VEC=8,ITEMS=1,STAGES=2,ACC=0,CL=1,MG=1,REREAD=0,HOLD=0"]}


def launcher(k, c, P, config):
    """(launch of backward + reduce with k forced to config (tuned where
    None), outputs (dx, dw, db))."""
    outs, bargs, rargs = pb.bwd_buffers(c, P, c.w, c.b)

    def both():
        k.launch(bargs, config=config)
        RED.launch(rargs)
    return both, outs, bargs


def outputs_of(k, c, P, config):
    """dx, dw, db (None for RMSNorm) of one launch, poisoned first."""
    both, outs, _ = launcher(k, c, P, config)
    return pb.poisoned_outputs(both, outs)


def same_bytes(a, b):
    """Whether two output triples hold the same bytes."""
    return all((x is None and y is None) or torch.equal(x.view(torch.int16), y.view(torch.int16))
               for x, y in zip(a, b))


def compare(rows, name, new, old, c, P, config):
    """Times of config forced on new and old, ROUNDS in turn (the fastest
    of each), their bytes compared, their error against float64."""
    best = pb.fastest([launcher(k, c, P, config)[0] for k in (new, old)], ROUNDS)
    a, b = outputs_of(new, c, P, config), outputs_of(old, c, P, config)
    err = pb.grads_error(c, *a)
    pct = lambda us: pb.bwd_pct(c, us, COPY[0])  # noqa: E731
    rows.append((name, config, best[1], pct(best[1]), best[0], pct(best[0]), same_bytes(a, b), err))
    print("  %-24s old %6.2f us %4.1f%%  new %6.2f us %4.1f%%  same bytes %s  err %.1e  [%s]"
          % (name, best[1], pct(best[1]), best[0], pct(best[0]), rows[-1][6], err, config), flush=True)


def skewed(rows, name, k, c, P, config):
    """config forced on the skew spec with SK = 0 and each SKEW value,
    ROUNDS times in turn: the fastest of each, and its error."""
    runs = [(sk, launcher(k, c, P, "%s,SK=%d" % (config, sk))[0]) for sk in [0] + SKEW]
    best = {sk: float("inf") for sk, _ in runs}
    for _ in range(ROUNDS):
        for sk, fn in runs:
            try:
                best[sk] = min(best[sk], bk.graph_time_us(fn))
            except ktune.KtuneError as e:
                print("  %s SK=%d: %s" % (name, sk, e), flush=True)
                best[sk] = float("nan")
    for sk, _ in runs:
        if best[sk] == best[sk]:
            err = pb.grads_error(c, *outputs_of(k, c, P, "%s,SK=%d" % (config, sk)))
            pct = pb.bwd_pct(c, best[sk], COPY[0])
            rows.append((name, sk, best[sk], pct, err, config))
            print("  %-24s SK=%d %6.2f us %4.1f%%  err %.1e  [%s]" % rows[-1], flush=True)


def endless(rows, name, k, cuts, c, P, config):
    """config forced on k and on each copy of cuts, ROUNDS times in turn
    (the fastest of each), and the rows without weight and bias tuned at P:
    a row of rows, printed."""
    _, bargs, _ = pb.bwd_buffers(c, P, c.w, c.b)
    best = pb.fastest([lambda kk=kk: kk.launch(bargs, config=config) for kk in [k] + cuts], ROUNDS)
    best.append(pb.bwd_times(k, RED, c, P, False)[0])
    pcts = [pb.bwd_pct(c, us, COPY[0]) for us in best]
    rows.append((name,) + tuple(v for pair in zip(best, pcts) for v in pair) + (config,))
    print("  %s: %s  [%s]" % (name, "  ".join("%s %.2f us %.1f%%" % t for t in zip(END_LABELS, best, pcts)), config),
          flush=True)


COPY = [0.0]
RED = None


def main():
    global RED
    rt, _, COPY[0], tmp = pb.probe_start(8)
    fwd, shipped, RED = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))
    patches, other, shipped_new = other_side()
    copy = rt.kernel(pb.patched_copy(ktune.kernels_dir(), tmp, "layernorm_bwd", other, patches, lambda spec: None))
    new, old = (shipped, copy) if shipped_new else (copy, shipped)
    print("shipped source: %s the change; the other side as %s" % ("with" if shipped_new else "without", other))
    skew = rt.kernel(pb.patched_copy(ktune.kernels_dir(), tmp, "layernorm_bwd", "layernorm_bwd_skew", SKEW_PATCHES,
                                     skew_spec))
    cuts = [rt.kernel(pb.patched_copy(ktune.kernels_dir(), tmp, "layernorm_bwd", spec, patches, lambda spec: None))
            for _, spec, patches in ENDS] if "noend" in PARTS else []
    tuned, rows, srows, erows = [], [], [], []

    def runs_of(c):
        P = pb.shipped_programs(c)
        name = "%s P=%d" % (pb.case_name(c), P)
        if "change" in PARTS:
            picks = [pb.run(tuned, COPY[0], name, label, k, RED, c, P) for label, k in (("new", new), ("old", old))]
            for cfg in dict.fromkeys([p for p in picks if p] + FORCED.get(c.D, [])):
                try:
                    compare(rows, name, new, old, c, P, cfg)
                except ktune.KtuneError as e:
                    print("  %s [%s]: %s" % (name, cfg, e), flush=True)
            pick = picks[0] if shipped_new else picks[1]
        else:
            pick = pb.run(tuned, COPY[0], name, "shipped", shipped, RED, c, P)
        if pick and SKEW and "skew" in PARTS:
            skewed(srows, name, skew, c, P, pick)
        if pick and "noend" in PARTS:
            endless(erows, name, shipped, cuts, c, P, pick)

    pb.each_case(fwd, CASES, runs_of)
    pb.print_table(tuned)
    pb.markdown_rows(("case", "config", "old µs:", "% of copy:", "new µs:", "% of copy:", "same bytes", "error:"),
                     "%s | %s | %.2f | %.1f%% | %.2f | %.1f%% | %s | %.1e", rows)
    pb.markdown_rows(("case", "SK", "µs:", "% of copy:", "error:", "config"), "%s | %d | %.2f | %.1f%% | %.1e | %s",
                     srows)
    pb.markdown_rows(("case",) + tuple(h for label in END_LABELS for h in (label + " µs:", "% of copy:")) +
                     ("config",), " | ".join(["%s"] + ["%.2f | %.1f%%"] * len(END_LABELS) + ["%s"]), erows)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
