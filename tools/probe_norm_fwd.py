"""The forward norms at 16M elements, for one tree of kernels against
another: a probe for issue 17's forward target, not part of `make bench`.

Each case (bf16, with the weight, and with the bias for LayerNorm) is tuned
cold at T = 16M / D. Then it is timed as `make bench` times it (20 launches
in a CUDA graph, median of 15 replays). The best of three such timings is
printed with the tuner's pick.

One process runs one tree of kernels: $KTUNE_KERNELS names it, and
$KTUNE_CACHE should name a fresh cache. To compare two trees, run the
probe for each, in turn, more than once, and compare like lines. The
twenty-sixth run in docs/kernels.md is an example.

Usage: probe_norm_fwd.py TAG [ln:D|rms:D ...]   (default: LayerNorm at
1000, 4096, 8192 and 12288, RMSNorm at 4096)"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_kernels as bk  # noqa: E402
import ktune  # noqa: E402

DEFAULT = ("ln:1000", "ln:4096", "ln:8192", "ln:12288", "rms:4096")


def case(spec):
    """(rms, D) from "ln:D" or "rms:D"."""
    norm, _, d = spec.partition(":")
    if norm not in ("ln", "rms") or not d.isdigit() or int(d) < 1:
        sys.exit("probe_norm_fwd.py: %r is not ln:D or rms:D" % spec)
    return int(norm == "rms"), int(d)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.split("Usage: ")[1])
    tag = sys.argv[1]
    fwd = ktune.runtime().kernel("layernorm_fwd")
    for rms, D in (case(s) for s in (sys.argv[2:] or DEFAULT)):
        T = -(-(1 << 24) // D)
        c = bk.NormCase(T, D, "bf16", rms)
        y = torch.empty_like(c.x)
        args = [y, c.x, None, c.nb, c.arg(c.w), c.arg(c.b), None, None, T, D, 1, c.eps, rms]
        fwd.launch(args)
        t = min(bk.gpu_time_us(lambda: fwd.launch(args)) for _ in range(3))
        print("%-8s %-9s %6dx%-6d %7.2f us  [%s]" % (tag, "rmsnorm" if rms else "layernorm", T, D, t,
                                                    fwd.config_for(args)), flush=True)


if __name__ == "__main__":
    main()
