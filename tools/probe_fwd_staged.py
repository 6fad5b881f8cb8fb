"""Whether layernorm_fwd's pipelined blocks gain from the weight and bias
staged in shared memory once a block (WSH = 1 with STAGES > 0, which the
shipped spec refuses): a probe for issue 17's forward target, not part of
`make bench`.

The shipped kernels are copied into a temporary folder and layernorm.cu is
patched (PATCHES; each anchor must be found once): the pipelined path puts
its slots after the staged weight and bias, and its first tile's wait and
one barrier cover their copy (committed first). The copy is a spec of its
own, layernorm_fwd_staged, whose WSH constraint no longer asks for
STAGES = 0.

For each case (CASES as TxDxRMSxDTYPE, comma-separated; the weight, and
the bias for LayerNorm): the shipped spec and the staged copy tuned in one
process, then both picks timed again in turn, ROUNDS times, each pick's y
against float64 (the largest error over the largest value). SWEEP=1: also
the three fastest pipelined configs (VEC = 8) of the copy with WSH = 0 and
with WSH = 1, each forced. GPU times through CUDA graphs (inference: no
statistics written), % of the copy bandwidth measured at the start, as
make bench counts it. The thirty-third run in docs/kernels.md is an
example."""
import itertools
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_kernels as bk  # noqa: E402
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

CASES = os.environ.get("CASES", "1024x16384x0xbf16,1366x12288x0xbf16,2048x8192x0xbf16,4096x4096x0xbf16,"
                       "16778x1000x0xbf16,10923x1536x0xbf16,1024x16384x1xbf16,1024x16384x0xf16,1366x12288x0xf16")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
PATCHES = [
    ("  static_assert(!WSH || (STAGES == 0 && ITEMS > 0 && (HAS_WEIGHT || HAS_BIAS)),\n",
     "  static_assert(!WSH || (ITEMS > 0 && (HAS_WEIGHT || HAS_BIAS)),\n"),
    ("    if constexpr (WSH) {\n      kt::cp_async_wait<0>();\n",
     "    if constexpr (WSH && STAGES == 0) {\n      kt::cp_async_wait<0>();\n"),
    ("    T *const mine = reinterpret_cast<T *>(stage_mem) + (long long)sub * NS * CAP;\n",
     "    const int wsh_bytes = WSH ? D * (int)sizeof(W) * (HAS_WEIGHT + HAS_BIAS) : 0;\n"
     "    T *const mine = reinterpret_cast<T *>(reinterpret_cast<char *>(stage_mem) + wsh_bytes) + (long long)sub * NS"
     " * CAP;\n"),
    ("      issue(k + STAGES - 1);\n      kt::cp_async_wait<STAGES - 1>();\n",
     "      issue(k + STAGES - 1);\n      kt::cp_async_wait<STAGES - 1>();\n"
     "      if (WSH && k == 0) __syncthreads();\n"),
]


def staged_spec(src_dir, out_dir):
    """layernorm.cu with PATCHES and layernorm_fwd as layernorm_fwd_staged
    (WSH = 1 with a pipeline admitted), in out_dir; the spec's path."""
    old, new = "WSH == 0 || (STAGES == 0 && ITEMS > 0", "WSH == 0 || (ITEMS > 0"

    def edit(spec):
        if not any(old in c for c in spec["constraints"]):
            sys.exit("layernorm_fwd_staged: the WSH constraint was not found")
        spec["constraints"] = [c.replace(old, new) for c in spec["constraints"]]

    return pb.patched_copy(src_dir, out_dir, "layernorm_fwd", "layernorm_fwd_staged", PATCHES, edit)


def worst(c, y):
    """y's largest error against float64, over the largest value."""
    x = c.x.double()
    if c.rms:
        ref = x * torch.rsqrt((x * x).mean(1, keepdim=True) + c.eps)
    else:
        mu = x.mean(1, keepdim=True)
        ref = (x - mu) * torch.rsqrt(((x - mu) ** 2).mean(1, keepdim=True) + c.eps)
    ref = ref * c.w.double() + (c.b.double() if c.b is not None else 0)
    return ((y.double() - ref).abs().max() / ref.abs().max()).item()


def pct(c, us, copy_gbs):
    """us as a percentage of the copy bandwidth, for case c's bytes (x in, y out)."""
    return 100.0 * 2 * c.T * c.D * c.es / us / 1e3 / copy_gbs


def sweep(k, args, c, copy_gbs):
    """Every pipelined config (VEC = 8) the spec admits for args, with WSH
    0 and 1 each: the three fastest of each, as (us, % of copy, config)."""
    best = {0: [], 1: []}
    for blk, rows, items, st, ws in itertools.product((256, 512, 1024), (1, 2, 4, 8), (1, 2, 3, 4), (2, 3, 4), (0, 1)):
        cfg = "BLOCK=%d,ROWS=%d,VEC=8,ITEMS=%d,STAGES=%d,PACK=0,OCC=1,WSH=%d" % (blk, rows, items, st, ws)
        try:
            k.launch(args, config=cfg)
        except ktune.KtuneError:
            continue
        t = bk.graph_time_us(lambda: k.launch(args, config=cfg))
        best[ws].append((t, pct(c, t, copy_gbs), cfg))
    return {ws: sorted(v)[:3] for ws, v in best.items()}


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(6)
    shipped = rt.kernel("layernorm_fwd")
    staged = rt.kernel(staged_spec(ktune.kernels_dir(), tmp))
    out = []
    for s in CASES.split(","):
        T, D, rms, dt = s.split("x")
        c = bk.NormCase(int(T), int(D), dt, int(rms))
        y = torch.empty_like(c.x)
        args = [y, c.x, None, c.nb, c.arg(c.w), c.arg(c.b), None, None, c.T, c.D, 1, c.eps, c.rms]
        cfg = {}
        for name, k in (("shipped", shipped), ("staged", staged)):
            y.fill_(float("nan"))
            k.launch(args)
            cfg[name] = k.config_for(args)
            err = worst(c, y)
            print("  %s %s: %s, err %.1e" % (s, name, cfg[name], err), flush=True)
        times = {"shipped": [], "staged": []}
        for _ in range(ROUNDS):
            for name, k in (("shipped", shipped), ("staged", staged)):
                times[name].append(bk.graph_time_us(lambda: k.launch(args)))
        for name in ("shipped", "staged"):
            t = min(times[name])
            out.append((s, name, t, pct(c, t, copy_gbs), " ".join("%.2f" % v for v in times[name]), cfg[name]))
            print("  %-22s %s %6.2f us %3.0f%%  [%s]  %s" % out[-1], flush=True)
        if os.environ.get("SWEEP") == "1":
            for ws, picks in sweep(staged, args, c, copy_gbs).items():
                for t, p, forced in picks:
                    out.append((s, "piped WSH=%d" % ws, t, p, "", forced))
                    print("  %-22s %s %6.2f us %3.0f%%  [%s]  %s" % out[-1], flush=True)
        torch.cuda.empty_cache()
    pb.markdown_rows(("case", "space", "µs (best):", "% of copy:", "rounds", "config"),
                     "%s | %s | %.2f | %.0f%% | %s | %s", out)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
