"""The norms at 16M elements, for one tree of kernels against another: a
probe for issue 17's 16M targets, not part of `make bench`.

Each case (bf16, with the weight, and with the bias for LayerNorm) is tuned
cold at T = 16M / D, in tune mode whatever $KTUNE_MODE says (the
package's own runtime is asynchronous: its first launches would time the
default config). Then it is timed as `make bench` times it (20 launches
in a CUDA graph, median of 15 replays). The best of three such timings is
printed with the tuner's pick. A forward case (ln:D, rms:D) times
layernorm_fwd without statistics; a backward case (ln-bwd:D, rms-bwd:D)
times layernorm_bwd and its reduce at the P that ktune.ops passes, as
make bench's backward rows do.

One process runs one tree of kernels: $KTUNE_KERNELS names it, and
$KTUNE_CACHE should name a fresh cache. To compare two trees, run the
probe for each, in turn, more than once, and compare like lines. The
twenty-sixth and twenty-seventh runs in docs/kernels.md are examples.

Usage: probe_norm_tree.py TAG [ln:D|rms:D|ln-bwd:D|rms-bwd:D ...]
(default: LayerNorm's forward at 1000, 4096, 8192 and 12288, RMSNorm's at
4096)"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_kernels as bk  # noqa: E402
import ktune  # noqa: E402

DEFAULT = ("ln:1000", "ln:4096", "ln:8192", "ln:12288", "rms:4096")
NORMS = {"ln": (0, False), "rms": (1, False), "ln-bwd": (0, True), "rms-bwd": (1, True)}


def case(spec):
    """(rms, backward, D) from a case's text."""
    norm, _, d = spec.partition(":")
    if norm not in NORMS or not d.isdigit() or int(d) < 1:
        sys.exit("probe_norm_tree.py: %r is not ln:D, rms:D, ln-bwd:D or rms-bwd:D" % spec)
    return NORMS[norm] + (int(d),)


def forward(ks, c):
    """(µs, config) of the forward without statistics."""
    y = torch.empty_like(c.x)
    args = [y, c.x, None, c.nb, c.arg(c.w), c.arg(c.b), None, None, c.T, c.D, 1, c.eps, c.rms]
    ks[0].launch(args)
    t = min(bk.gpu_time_us(lambda: ks[0].launch(args)) for _ in range(3))
    return t, ks[0].config_for(args)


def backward(ks, c, nsm):
    """(µs, config) of the backward and its reduce, from the forward's
    statistics."""
    mean, rstd = bk.saved_stats(ks[0], c)
    dy = torch.randn_like(c.x)
    runs = [bk.bench_norm_bwd(ks, c, nsm, c.x, dy, None, mean, rstd)[0] for _ in range(3)]
    best = min(runs, key=lambda r: r[0])
    return best[0], "%s %s" % (best[1], best[2])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.split("Usage: ")[1])
    tag = sys.argv[1]
    rt = ktune.Runtime(mode="tune")  # cold tuning before the first launch, whatever $KTUNE_MODE says
    ks = [rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce", "layernorm_bwd_row")]
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    for rms, bwd, D in (case(s) for s in (sys.argv[2:] or DEFAULT)):
        T = -(-(1 << 24) // D)
        c = bk.NormCase(T, D, "bf16", rms)
        t, cfg = backward(ks, c, nsm) if bwd else forward(ks, c)
        name = ("rmsnorm" if rms else "layernorm") + (" bwd" if bwd else "")
        print("%-8s %-13s %6dx%-6d %7.2f us  [%s]" % (tag, name, T, D, t, cfg), flush=True)
        del c
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
