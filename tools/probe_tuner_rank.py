"""Does the tuner pick the config that is fastest in use? A probe for
issue 17's forward and backward targets, not part of `make bench`.

For each case (bf16, the weight and bias the norm has), the key is tuned
cold in a cache of its own (budget PROBE_BUDGET_S seconds, default 10).
Then every config the tuner measured as valid is timed again as
`make bench` times it (20 launches captured in a CUDA graph, median of 15
replays), in one process, and the table says:
- the tuner's pick: its time through graphs and its rank among them;
- the fastest config through graphs, and the tuner's time for it;
- the pick against a copy of the same bytes (bench_kernels'
  same_bytes_copy_us), the yardstick at this size, beside make bench's
  (1 GiB).

WITH_REDUCE=1: each backward trial is timed followed by
layernorm_bwd_reduce at its own pick, as `make bench` times the pair (the
tuner times the backward alone): whether tuning the pair would pick
another config.

`row` ranks layernorm_bwd_row's trials instead (one program, a few rows:
the shapes ktune.ops sends it), in the dtype PROBE_DTYPE (default bf16).

Usage: probe_tuner_rank.py [fwd|bwd|both|row] [TxD,...]"""
import json
import os
import sqlite3
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_kernels as bk  # noqa: E402
import ktune  # noqa: E402
from ktune import ops  # noqa: E402

SHAPES = ((4096, 4096), (2048, 8192), (16778, 1000), (1366, 12288), (10923, 1536))


def trials(db, kernel, key):
    """(config as NAME=V,..., tuner's median µs) of every valid trial of the
    key (the table holds each config as a JSON object)."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT config, median_us FROM trials WHERE kernel=? AND key=? AND status='ok'"
                           " AND median_us IS NOT NULL", (kernel, key)).fetchall()
    finally:
        con.close()
    return [(",".join("%s=%s" % kv for kv in json.loads(cfg).items()), us) for cfg, us in rows]


def rank(k, args, db, after=None):
    """The tuner's pick and every valid trial timed through graphs, each
    launch followed by after() where given."""
    pick = k.config_for(args)
    rows = trials(db, k.name, k.key(args))
    timed = []

    def call(cfg):
        k.launch(args, config=cfg)
        if after:
            after()
    for cfg, tuner_us in rows:
        try:
            timed.append((bk.graph_time_us(lambda cfg=cfg: call(cfg)), tuner_us, cfg))
        except ktune.KtuneError as e:
            print("    %s: %s" % (cfg, e), flush=True)
    timed.sort()
    return pick, timed


def canon(cfg):
    """A config's fields, whatever their order."""
    return tuple(sorted(kv.split("=") for kv in cfg.split(",")))


def report(name, nbytes, copy_gbs, pick, timed, out):
    pct = lambda t: 100.0 * nbytes / t / 1e3 / copy_gbs  # noqa: E731
    where = [i for i, r in enumerate(timed) if canon(r[2]) == canon(pick)]
    if not where:
        print("  %s: the pick %s is not among %d timed trials" % (name, pick, len(timed)), flush=True)
        return
    i = where[0]
    best = timed[0]
    by_tuner = sorted(timed, key=lambda r: r[1])
    row = (name, len(timed), timed[i][0], pct(timed[i][0]), i + 1, best[0], pct(best[0]), best[1],
           by_tuner[0][1], 100.0 * bk.same_bytes_copy_us(nbytes) / timed[i][0], best[2], pick)
    out.append(row)
    print("  %-24s %3d trials  pick %6.1f us %3.0f%% (rank %d)  best %6.1f us %3.0f%% (tuner %.1f, tuner's best"
          " %.1f)  pick / same-bytes copy %3.0f%%  best [%s]  pick [%s]" % row, flush=True)
    for t, tu, cfg in timed[:5]:
        print("      %6.1f us  tuner %6.1f  %s" % (t, tu, cfg), flush=True)


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "both"
    shapes = SHAPES
    if len(sys.argv) > 2:
        shapes = tuple(tuple(int(v) for v in s.split("x")) for s in sys.argv[2].split(","))
    budget = float(os.environ.get("PROBE_BUDGET_S", "10"))
    tmp = tempfile.mkdtemp()
    db = os.path.join(tmp, "probe.db")
    rt = ktune.Runtime(mode="tune", budget_s=budget, cache_path=db)
    fwd, bwd, row, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_row",
                                                 "layernorm_bwd_reduce"))
    with_reduce = os.environ.get("WITH_REDUCE") == "1"
    dtype = os.environ.get("PROBE_DTYPE", "bf16")
    copy_gbs = bk.copy_bandwidth()
    print("device: %s; copy %.0f GB/s (1 GiB); budget %.0f s a key"
          % (torch.cuda.get_device_name(0), copy_gbs, budget), flush=True)
    out = []
    for T, D in shapes:
        for rms in (1, 0):
            c = bk.NormCase(T, D, dtype, rms)
            name = "%s %dx%d" % ("rmsnorm" if rms else "layernorm", T, D)
            y = torch.empty_like(c.x)
            if what in ("fwd", "both"):
                args = [y, c.x, None, c.nb, c.arg(c.w), c.arg(c.b), None, None, T, D, 1, c.eps, rms]
                fwd.launch(args)
                pick, timed = rank(fwd, args, db)
                report(name + " fwd", 2 * T * D * c.es, copy_gbs, pick, timed, out)
            if what == "row":
                mean, rstd = bk.saved_stats(fwd, c)
                dx, dw = torch.empty_like(c.x), torch.empty_like(c.w)
                dbias = torch.empty_like(c.b) if c.b is not None else None
                args = [dx, dw, c.arg(dbias), torch.randn_like(c.x), c.x, c.w, mean, rstd, None, T, D, 1, rms]
                row.launch(args)
                pick, timed = rank(row, args, db)
                report(name + " row", 3 * T * D * c.es, copy_gbs, pick, timed, out)
            if what in ("bwd", "both"):
                mean = None if rms else torch.empty(T, device=bk.dev)
                rstd = torch.empty(T, device=bk.dev)
                fwd.launch([y, c.x, None, c.nb, c.arg(c.w), c.arg(c.b), mean, rstd, T, D, 1, c.eps, rms])
                dy = torch.randn_like(c.x)
                dx = torch.empty_like(c.x)
                P = ops._bwd_programs(c.x, dy, None, T, D, 1, c.w, c.b is not None)
                dwp = torch.empty(P, D, device=bk.dev)
                dbp = torch.empty(P, D, device=bk.dev) if c.b is not None else None
                args = [dx, dwp, dbp, dy, c.x, c.w, mean, rstd, None, T, D, 1, P, rms]
                bwd.launch(args)
                after = None
                if with_reduce:
                    dw, dbias = torch.empty_like(c.w), torch.empty_like(c.b) if c.b is not None else None
                    rargs = [dw, c.arg(dbias), dwp, dbp, T, D, P]
                    red.launch(rargs)
                    after = lambda rargs=rargs: red.launch(rargs)  # noqa: E731
                pick, timed = rank(bwd, args, db, after)
                report("%s bwd%s P=%d" % (name, "+reduce" if after else "", P), 3 * T * D * c.es, copy_gbs, pick,
                       timed, out)
            del c
            torch.cuda.empty_cache()
    print("\n| case | trials | pick µs | % of copy | pick's rank | best µs | % of copy | tuner's µs for best"
          " | tuner's best µs | pick, % of same-bytes copy | best config | pick |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for r in out:
        print("| %s | %d | %.1f | %.0f%% | %d | %.1f | %.0f%% | %.1f | %.1f | %.0f%% | %s | %s |" % r)


if __name__ == "__main__":
    main()
