"""Where a layernorm_bwd launch spends its time, block by block: a probe for
issue 17's backward target, not part of `make bench`.

The shipped kernels are copied into a temporary folder and layernorm.cu
gets `%globaltimer` reads (PATCHES below; each anchor must be found once):
when each block starts, when its first tile lands, when its last tile is
done, the steps of its merge (merge_sums: sums written to shared memory,
the cluster barrier, the other blocks' share added and the partial row
written, the last barrier; where fold_subgroups writes the partial row
itself, one block a program, the three stamps at once after it) and
when it ends. Block r of program p writes
its eight stamps over the first 16 floats of its rank's place in dw_part
row p, so the stamped launch's partial rows are not a result.

Each case (bf16, with the weight, and the bias for LayerNorm, T = 16M / D)
is tuned cold in tune mode at the P that ktune.ops passes (or P given as
ln:D@P), or forced to a config (ln:D@P/CONFIG). The shipped kernel's time
and the stamped one's are graph times (tools/bench_kernels.py), and the
stamped launch's dx and partial rows past the stamps are compared with the
shipped launch's, bit for bit. Then, per phase, min / median / max over
the blocks that own rows, in µs. The twenty-eighth run in docs/kernels.md
is an example.

Usage: probe_bwd_phases.py ln:D|rms:D[@P[/CONFIG]] ...
$KTUNE_CACHE should name a fresh cache."""
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_kernels as bk  # noqa: E402
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402
from ktune import ops  # noqa: E402

STAMP = 'asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(ts[%d]));'
# (anchor, replacement): the anchor kept, the stamp beside it.
PATCHES = [
    ("  if (p0 >= n_rows) return;  // the whole cluster: one program's rows\n",
     "  if (p0 >= n_rows) return;  // the whole cluster: one program's rows\n"
     "  unsigned long long ts[8] = {0, 0, 0, 0, 0, 0, 0, 0};\n  " + STAMP % 0 + "\n"),
    ("      kt::cp_async_wait<STAGES - 1>();\n      const T *sx = mine + slot * SLOT;",
     "      kt::cp_async_wait<STAGES - 1>();\n      if (t == 0) " + STAMP % 1 + "\n"
     "      const T *sx = mine + slot * SLOT;"),
    ("  kt::grid_trigger();\n  if constexpr (SACC) {",
     "  " + STAMP % 2 + "\n  kt::grid_trigger();\n  if constexpr (SACC) {"),
    ("lane,\n                                           int sub, int LEN, PT *dwp, PT *dbp) {",
     "lane,\n                                           int sub, int LEN, PT *dwp, PT *dbp, unsigned long long *ts) {"),
    ("    add_in_turn<VEC, NACC, TPR, ROWS, HAS_DW, HAS_BIAS>(mw, mb, dwa, dba, lane, sub, LEN);\n  }\n",
     "    add_in_turn<VEC, NACC, TPR, ROWS, HAS_DW, HAS_BIAS>(mw, mb, dwa, dba, lane, sub, LEN);\n  }\n  "
     + STAMP % 4 + "\n"),
    # Sums folded and written by fold_subgroups (MG == 1): the merge's
    # later steps take no time of their own.
    ("    if constexpr (MG == 1) return;  // written\n",
     "    if constexpr (MG == 1) {\n      " + " ".join(STAMP % k for k in (4, 5, 6)) + "\n      return;\n    }\n"),
    ("    __syncthreads();\n  const int rank = (int)blockIdx.x % MG, per",
     "    __syncthreads();\n  " + STAMP % 5 + "\n  const int rank = (int)blockIdx.x % MG, per"),
    ("  if constexpr (MG > 1) kt::cluster_sync();  // no block leaves",
     "  " + STAMP % 6 + "\n  if constexpr (MG > 1) kt::cluster_sync();  // no block leaves"),
    ("LEN, dwp, dbp);\n  } else if constexpr (!IN_PART", "LEN, dwp, dbp, ts);\n  } else if constexpr (!IN_PART"),
    ("  // No block leaves while another of its cluster may still read its part.\n"
     "  if constexpr (CL > 1) kt::cluster_sync();\n}",
     "  // No block leaves while another of its cluster may still read its part.\n"
     "  if constexpr (CL > 1) kt::cluster_sync();\n  __syncthreads();\n  " + STAMP % 3 + "\n"
     "  if constexpr (HAS_DW && sizeof(PT) == 4) {\n    if (threadIdx.x == 0) {\n"
     "      unsigned long long *o = reinterpret_cast<unsigned long long *>(dw_part + (long long)prog * D) +\n"
     "                              8 * ((int)blockIdx.x % (CL * MG));\n"
     "      for (int k = 0; k < 8; k++) o[k] = ts[k];\n    }\n  }\n}"),
]
# Columns: (name, later stamp, earlier stamp).
PHASES = [("first tile", 1, 0), ("stream", 2, 1), ("to shared", 4, 2), ("barrier", 5, 4), ("add+write", 6, 5),
          ("last barrier", 3, 6), ("after stream", 3, 2)]


def stamped_tree():
    """A temporary copy of the kernels with the stamps in layernorm.cu."""
    d = tempfile.mkdtemp(prefix="ktune-phases-")
    src = ktune.kernels_dir()
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), d)
    path = os.path.join(d, "layernorm.cu")
    text = open(path).read()
    for anchor, repl in PATCHES:
        if text.count(anchor) != 1:
            sys.exit("probe_bwd_phases.py: layernorm.cu has %d copies of %r; update PATCHES"
                     % (text.count(anchor), anchor[:60]))
        text = text.replace(anchor, repl)
    open(path, "w").write(text)
    return d


def spread(v):
    v = sorted(v)
    return "%5.2f/%5.2f/%5.2f" % (v[0], v[len(v) // 2], v[-1]) if v else "-"


def same(a, b):
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def case_args(ks, rms, D, P, cfg):
    """A case of T = 16M / D rows (bf16, with the weight, and the bias for
    LayerNorm) for layernorm_bwd: (T, P, its arguments, cfg, the blocks a
    program), P the one ktune.ops passes where none is given, cfg tuned
    there where none is given. ks: layernorm_fwd, layernorm_bwd."""
    fwd, bwd = ks
    T = -(-(1 << 24) // D)
    c = bk.NormCase(T, D, "bf16", rms)
    mean, rstd = bk.saved_stats(fwd, c)
    dy, dx = torch.randn_like(c.x), torch.empty_like(c.x)
    P = P or ops._bwd_programs(c.x, dy, None, T, D, 1, c.w, c.b is not None)
    dwp = torch.empty(P, D, device=bk.dev)
    dbp = torch.empty(P, D, device=bk.dev) if c.b is not None else None
    args = [dx, dwp, dbp, dy, c.x, c.arg(c.w), mean, rstd, None, T, D, 1, P, rms]
    cfg = cfg or bwd.config_for(args)
    fields = pb.config_fields(cfg)
    return T, P, args, cfg, int(fields["MG"]) * int(fields["CL"])


def stamps(args, P, blocks):
    """The eight stamps of each block of the stamped launch just run, from
    the partial rows (args[1]), a list a block."""
    return args[1].view(torch.int64)[:, :8 * blocks].reshape(P * blocks, 8).cpu().tolist()


def probe(ks, kp, rms, D, P, cfg):
    bwd = ks[1]
    T, P, args, cfg, blocks = case_args(ks, rms, D, P, cfg)
    dx = args[0]
    outs = [t for t in args[:3] if t is not None]
    bwd._slow_launch(args, None, cfg)
    ref = [t.clone() for t in outs]
    shipped = min(bk.gpu_time_us(lambda: bwd._slow_launch(args, None, cfg)) for _ in range(3))
    for t in outs:
        t.fill_(float("nan"))
    kp._slow_launch(args, None, cfg)
    torch.cuda.synchronize()
    # Rows of programs that own no rows are written by neither launch.
    skip, parts = 16 * blocks, pb.owning_programs(T, P)
    equal = same(dx, ref[0]) and all(same(a[:parts, skip:], b[:parts, skip:]) for a, b in zip(outs[1:], ref[1:]))
    stamped = min(bk.gpu_time_us(lambda: kp._slow_launch(args, None, cfg)) for _ in range(3))
    for _ in range(5):  # the last of five back to back
        kp._slow_launch(args, None, cfg)
    torch.cuda.synchronize()
    st = [s for s in stamps(args, P, blocks) if 0 < s[0] < (1 << 62)]  # programs without rows hold no stamps
    t0 = min(s[0] for s in st)
    print("%s %dx%d P=%d [%s]: shipped %.2f us, stamped %.2f us, the same dx and partial rows: %s"
          % ("rmsnorm" if rms else "layernorm", T, D, P, cfg, shipped, stamped, "yes" if equal else "NO"))
    for name, a, b in PHASES:
        print("  %-13s %s" % (name, spread([(s[a] - s[b]) / 1e3 for s in st if s[a] and s[b]])))
    print("  %-13s %s (%d blocks)" % ("block ends", spread([(s[3] - t0) / 1e3 for s in st]), len(st)), flush=True)


def each_spec(prog, usage, fn):
    """fn(ks, kp, rms, D, P, cfg) for each of sys.argv's ln:D|rms:D[@P[/CONFIG]]
    (P and cfg None where not given): ks the shipped layernorm_fwd and
    layernorm_bwd, kp the stamped copy of layernorm_bwd (stamped_tree),
    in a tuning runtime. prog names the probe in errors; usage is printed
    without arguments."""
    if len(sys.argv) < 2:
        sys.exit(usage)
    rt = ktune.Runtime(mode="tune")
    ks = [rt.kernel("layernorm_fwd"), rt.kernel("layernorm_bwd")]
    tree = stamped_tree()
    try:
        kp = rt.kernel(os.path.join(tree, "layernorm_bwd.json"))
        for spec in sys.argv[1:]:
            norm, _, rest = spec.partition(":")
            d, _, at = rest.partition("@")
            p, _, cfg = at.partition("/")
            if norm not in ("ln", "rms") or not d.isdigit() or (p and not p.isdigit()):
                sys.exit("%s: %r is not ln:D or rms:D[@P[/CONFIG]]" % (prog, spec))
            fn(ks, kp, norm == "rms", int(d), int(p) if p else None, cfg or None)
            torch.cuda.empty_cache()
    finally:
        shutil.rmtree(tree, ignore_errors=True)


if __name__ == "__main__":
    each_spec("probe_bwd_phases.py", __doc__.split("Usage: ")[1], probe)
