"""What rounding the residual sum to T costs the forward (the seventieth
run's change to load_h): a probe, not part of `make bench`.

The shipped kernels are copied into a temporary folder with load_h's
rounding taken out (the sum kept in f32, as before the change), as the spec
layernorm_fwd_unrounded. For each case (CASES as TxDxRMSxDTYPE, comma-
separated; the weight, the bias for LayerNorm, a residual in and x + res
out), the shipped spec is tuned, and its pick then runs in both sources,
timed in turn ROUNDS times. GPU times through CUDA graphs, % of the copy
bandwidth measured at the start for the bytes the call moves (x, res in;
y, res_out out)."""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_kernels as bk  # noqa: E402
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

CASES = os.environ.get("CASES", "16778x1000x0xbf16,4096x4096x0xbf16,1024x16384x0xbf16,4096x4096x1xbf16,"
                       "1024x16384x1xbf16,4096x4096x0xf16")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
PATCHES = [("for (int k = 0; k < VEC; k++) h[k] = kt::to_f(kt::from_f<T>(h[k] + r[k]));\n",
            "for (int k = 0; k < VEC; k++) h[k] += r[k];\n")]


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(6)
    shipped = rt.kernel("layernorm_fwd")
    unrounded = rt.kernel(pb.patched_copy(ktune.kernels_dir(), tmp, "layernorm_fwd", "layernorm_fwd_unrounded",
                                          PATCHES, lambda spec: None))
    out = []
    for s in CASES.split(","):
        T, D, rms, dt = s.split("x")
        c = bk.NormCase(int(T), int(D), dt, int(rms), res=True)
        y, h = torch.empty_like(c.x), torch.empty_like(c.x)
        args = [y, c.x, c.r, h, c.arg(c.w), c.arg(c.b), None, None, c.T, c.D, 1, c.eps, c.rms]
        shipped.launch(args)
        cfg = shipped.config_for(args)
        hs = h.clone()
        unrounded.launch(args, config=cfg)
        same_h = torch.equal(hs, h)
        times = {"rounded": [], "unrounded": []}
        for _ in range(ROUNDS):
            times["rounded"].append(bk.graph_time_us(lambda: shipped.launch(args, config=cfg)))
            times["unrounded"].append(bk.graph_time_us(lambda: unrounded.launch(args, config=cfg)))
        a, b = min(times["rounded"]), min(times["unrounded"])
        pct = [400.0 * c.T * c.D * c.es / t / 1e3 / copy_gbs for t in (a, b)]
        out.append((s, b, pct[1], a, pct[0], a - b, "yes" if same_h else "NO", cfg))
        print("  %s: unrounded %.2f us (%.1f%%), rounded %.2f (%.1f%%), %+.2f, res_out the same: %s  %s" % out[-1],
              flush=True)
        torch.cuda.empty_cache()
    pb.markdown_rows(("case", "unrounded µs", "% of copy", "rounded µs", "% of copy", "difference", "same res_out",
                      "config"), "%s | %.2f | %.1f%% | %.2f | %.1f%% | %+.2f | %s | %s", out)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
