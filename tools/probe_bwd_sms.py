"""Whether a layernorm_bwd launch's slow blocks are the same SMs from one
launch to the next: a probe for issue 17's backward target, not part of
`make bench`.

probe_bwd_phases.py's stamped copy of the kernels, with each block's SM
(%smid) kept beside its stamps. For each case (as for probe_bwd_phases:
ln:D or rms:D, bf16, T = 16M / D, with the weight, and the bias for
LayerNorm, tuned cold at the P that ktune.ops passes, or at P given as
ln:D@P, or a config forced as ln:D@P/CONFIG) the stamped launch runs
LAUNCHES times (default 10, after two to settle); per launch, when the
blocks end (from the first block's start) and how long they stream
(first tile landed to last tile done); then, between consecutive
launches, the share of blocks that ran on the same SM, and the
correlation of their stream times taken block by block and SM by SM; and
the SMs that streamed fastest and slowest on average. A correlation near 1 says the slow blocks are slow because of
where they run; near 0, that it changes from launch to launch.
$KTUNE_CACHE should name a fresh cache.

Usage: probe_bwd_sms.py ln:D|rms:D[@P[/CONFIG]] ..."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_bwd_phases as ph  # noqa: E402

LAUNCHES = int(os.environ.get("LAUNCHES", "10"))
AT = "  unsigned long long ts[8] = {0, 0, 0, 0, 0, 0, 0, 0};\n"
ph.PATCHES.append((AT, AT + '  { unsigned s_; asm volatile("mov.u32 %0, %%smid;" : "=r"(s_)); ts[7] = s_; }\n'))


def corr(a, b):
    """Pearson's correlation of two lists of numbers."""
    a = torch.tensor(a, dtype=torch.float64)
    b = torch.tensor(b, dtype=torch.float64)
    a, b = a - a.mean(), b - b.mean()
    return (a @ b / (a.norm() * b.norm())).item()


def launches(kp, args, cfg, P, blocks):
    """LAUNCHES launches' blocks: {block: (end µs, stream µs, SM)}, for the
    blocks whose stamps are all set and in order (a block of a cluster
    that owns no rows lands no tile)."""
    out = []
    for i in range(LAUNCHES + 2):
        kp._slow_launch(args, None, cfg)
        torch.cuda.synchronize()
        st = [(b, s) for b, s in enumerate(ph.stamps(args, P, blocks))
              if 0 < s[0] <= s[1] <= s[2] <= s[3] and s[3] - s[0] < 10 ** 9]
        t0 = min(s[0] for _, s in st)
        if i >= 2:
            out.append({b: ((s[3] - t0) / 1e3, (s[2] - s[1]) / 1e3, s[7]) for b, s in st})
    return out


def report(ls):
    for i, l in enumerate(ls):
        ends, streams = [v[0] for v in l.values()], [v[1] for v in l.values()]
        print("  launch %d: ends %.2f / %.2f / %.2f (min / mean / max), streams %.2f to %.2f us"
              % (i, min(ends), sum(ends) / len(ends), max(ends), min(streams), max(streams)))
    same, by_block, by_sm = [], [], []
    for a, b in zip(ls, ls[1:]):
        keys = [k for k in a if k in b]
        same.append(sum(a[k][2] == b[k][2] for k in keys) / len(keys))
        by_block.append(corr([a[k][1] for k in keys], [b[k][1] for k in keys]))
        sa, sb = ({v[2]: v[1] for v in x.values()} for x in (a, b))
        sms = [s for s in sa if s in sb]
        by_sm.append(corr([sa[s] for s in sms], [sb[s] for s in sms]))
    print("  blocks on the SM of the launch before: %s" % " ".join("%.2f" % v for v in same))
    print("  stream times' correlation, launch to launch, block by block: %s" % " ".join("%.2f" % v for v in by_block))
    print("  the same, SM by SM: %s" % " ".join("%.2f" % v for v in by_sm))
    per = {}
    for l in ls:
        for v in l.values():
            per.setdefault(v[2], []).append(v[1])
    m = sorted((sum(v) / len(v), s) for s, v in per.items())
    print("  mean stream by SM, fastest: %s; slowest: %s" % (" ".join("%d:%.1f" % (s, t) for t, s in m[:6]),
                                                            " ".join("%d:%.1f" % (s, t) for t, s in m[-6:])))


def probe(ks, kp, rms, D, P, cfg):
    T, P, args, cfg, blocks = ph.case_args(ks, rms, D, P, cfg)
    ls = launches(kp, args, cfg, P, blocks)
    print("%s %dx%d P=%d [%s], %d blocks stamped" % ("rmsnorm" if rms else "layernorm", T, D, P, cfg, len(ls[0])))
    report(ls)


if __name__ == "__main__":
    ph.each_spec("probe_bwd_sms.py", __doc__.split("Usage: ")[1], probe)
