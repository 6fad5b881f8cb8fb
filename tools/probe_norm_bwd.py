"""Where the norm backward's time goes at T*D >= 16M with a weight, and
whether a wider config space (deeper pipelines, a warp a row in blocks of
many rows) helps: a probe for issue 17's last target, not part of `make
bench`.

For each case, bf16, every key tuned cold in this run (a budget of
PROBE_BUDGET_S seconds a key, default 8, and a third of it for the
runs without weight and at many P):
- base: layernorm_bwd as shipped, at the P that ktune.ops passes: the
  backward alone, and with its reduce;
- wide: the same spec with WIDE's values (STAGES up to 8, ROWS up to 32: a
  warp a row in a block of 1024), a copy under another name, so both are
  tuned and timed in one process; and base's config forced there with a
  deeper pipeline;
- no w: the same rows without weight and bias (no partial rows), at that P
  and at the P that ktune.ops passes without sums;
- many P: with the weight, at the no-weight P: many programs, many partial
  rows.
GPU times through CUDA graphs (bench_kernels.graph_time_us); % of the copy
bandwidth measured at the start, as make bench counts it."""
import json
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_kernels as bk  # noqa: E402
import ktune  # noqa: E402
from ktune import norm_programs, ops  # noqa: E402

WIDE = {"STAGES": [0, 2, 3, 4, 6, 8], "ROWS": [1, 2, 4, 8, 16, 32]}
CASES = ((4096, 4096, 1), (4096, 4096, 0), (16778, 1000, 1), (16778, 1000, 0), (1024, 16384, 0))


def probe_start(default_budget):
    """A probe's start: a tuning runtime with $PROBE_BUDGET_S seconds a key
    (default_budget without it), the copy bandwidth measured now, both
    printed with the device's name. (runtime, budget, copy GB/s, a new
    temporary folder.)"""
    budget = float(os.environ.get("PROBE_BUDGET_S", default_budget))
    rt = ktune.Runtime(mode="tune", budget_s=budget)
    copy_gbs = bk.copy_bandwidth()
    print("device: %s; copy %.0f GB/s; budget %.0f s a key" % (torch.cuda.get_device_name(0), copy_gbs, budget))
    return rt, budget, copy_gbs, tempfile.mkdtemp()


def patched_copy(src_dir, out_dir, base, name, patches, edit):
    """A copy of spec base (base.json in src_dir) as name in out_dir, for a
    probe: layernorm.cu with patches ((anchor, replacement) pairs, each
    anchor found once, else the probe exits naming it) and kt_device.cuh
    beside it, the spec renamed and changed by edit(spec). The spec's path."""
    with open(os.path.join(src_dir, "layernorm.cu")) as f:
        text = f.read()
    for anchor, repl in patches:
        if text.count(anchor) != 1:
            sys.exit("%s: anchor found %d times: %r" % (name, text.count(anchor), anchor[:60]))
        text = text.replace(anchor, repl)
    with open(os.path.join(out_dir, "layernorm.cu"), "w") as f:
        f.write(text)
    shutil.copy(os.path.join(src_dir, "kt_device.cuh"), out_dir)
    with open(os.path.join(src_dir, base + ".json")) as f:
        spec = json.load(f)
    spec["name"] = name
    edit(spec)
    path = os.path.join(out_dir, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def wide_spec(src_dir, out_dir):
    """layernorm_bwd with WIDE's values, as layernorm_bwd_wide in out_dir."""
    return patched_copy(src_dir, out_dir, "layernorm_bwd", "layernorm_bwd_wide", [],
                        lambda spec: spec["config"].update(WIDE))


def reference(c):
    """dx, dw, db in float64 from the saved statistics (db None for RMSNorm)."""
    x, dy = c.x.double(), c.dy.double()
    xh = (x - c.mean.double()[:, None]) if not c.rms else x
    xh = xh * c.rstd.double()[:, None]
    g = dy * c.w.double()
    dx = g - xh * (g * xh).mean(1, keepdim=True)
    if not c.rms:
        dx = dx - g.mean(1, keepdim=True)
    dx = dx * c.rstd.double()[:, None]
    return dx, (dy * xh).sum(0), None if c.rms else dy.sum(0)


def worst(got, want):
    """The largest error over the largest value."""
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def grads_error(c, dx, dw, db):
    """The largest error of dx, dw and db (db None without a bias) against
    c.ref; NaN where any is NaN."""
    errs = [worst(dx, c.ref[0]), worst(dw, c.ref[1])] + ([worst(db, c.ref[2])] if db is not None else [])
    return max(errs) if all(e == e for e in errs) else float("nan")


def bwd_buffers(c, P, w, b):
    """A backward's outputs and arguments at P for case c with weight w and
    bias b (either None): ((dx, dw, db), layernorm_bwd's arguments,
    layernorm_bwd_reduce's), dw and db None where w and b are."""
    T, D = c.T, c.D
    dx = torch.empty_like(c.x)
    dwp = torch.empty(P, D, device=bk.dev) if w is not None else None
    dbp = torch.empty(P, D, device=bk.dev) if b is not None else None
    dw = torch.empty_like(w) if w is not None else None
    db = torch.empty_like(b) if b is not None else None
    bargs = [dx, dwp, dbp, c.dy, c.x, c.arg(w), None if c.rms else c.mean, c.rstd, None, T, D, 1, P, c.rms]
    rargs = [c.arg(dw), c.arg(db), dwp, dbp, T, D, P]
    return (dx, dw, db), bargs, rargs


def poisoned_outputs(launch, outs):
    """outs (None among them kept) filled with NaN, launch() run and
    waited for: copies of what it wrote."""
    for t in outs:
        if t is not None:
            t.fill_(float("nan"))
    launch()
    torch.cuda.synchronize()
    return [None if t is None else t.clone() for t in outs]


def owning_programs(T, P):
    """The programs of a backward launch of T rows at P that own rows (and
    write a partial row), as the kernels count them."""
    return -(-T // -(-T // P))


def grads(k, red, bargs, rargs, outs, config):
    """dx, dw and db (outs, poisoned first; None among them kept) of one
    launch of k at config and of the reduce: copies."""
    return poisoned_outputs(lambda: (k.launch(bargs, config=config), red.launch(rargs)), outs)


def fastest(runs, rounds):
    """The GPU time of each of runs (functions that launch), rounds times
    in turn, the fastest of each."""
    best = [float("inf")] * len(runs)
    for _ in range(rounds):
        for i, fn in enumerate(runs):
            best[i] = min(best[i], bk.graph_time_us(fn))
    return best


def bwd_pct(c, us, copy_gbs):
    """A backward of case c taking us µs as % of the copy bandwidth: three
    passes over the rows (dy and x read, dx written)."""
    return 100.0 * 3 * c.T * c.D * c.es / us / 1e3 / copy_gbs


def config_fields(cfg):
    """Config text "A=1,B=2" as a dict of its fields' texts, in order."""
    return dict(kv.split("=") for kv in cfg.split(","))


def with_fields(cfg, **fields):
    """Config text cfg with the fields named set to the values given."""
    f = config_fields(cfg)
    f.update((k, str(v)) for k, v in fields.items())
    return ",".join("%s=%s" % kv for kv in f.items())


def bwd_times(bwd, red, c, P, weight, config=None):
    """(backward alone, backward + reduce, config, largest error) at P,
    tuned or with config forced; weight False drops weight and bias (and
    the reduce). The error (dx, dw and db against float64, over their
    largest value) is checked with the weight only."""
    w = c.w if weight else None
    b = c.b if weight else None
    (dx, dw, db), bargs, rargs = bwd_buffers(c, P, w, b)
    launch = lambda: bwd.launch(bargs, config=config)  # noqa: E731
    err = None
    if w is not None:
        for t in (dx, dw) + ((db,) if db is not None else ()):
            t.fill_(float("nan"))
        launch()
        red.launch(rargs)
        err = grads_error(c, dx, dw, db)
    launch()
    alone = bk.graph_time_us(launch)
    total = alone
    if w is not None or b is not None:
        def both():
            launch()
            red.launch(rargs)
        total = bk.graph_time_us(both)
    return alone, total, config or bwd.config_for(bargs), err


def weighted_case(fwd, T, D, rms):
    """A bf16 case of T rows of D with the weight (and the bias for
    LayerNorm): the forward's mean and rstd (fwd is layernorm_fwd), a dy,
    and the float64 reference as c.ref."""
    c = bk.NormCase(T, D, "bf16", rms)
    c.mean = None if rms else torch.empty(T, device=bk.dev)
    c.rstd = torch.empty(T, device=bk.dev)
    c.dy = torch.randn_like(c.x)
    y = torch.empty_like(c.x)
    fwd.launch([y, c.x, None, c.nb, c.arg(c.w), c.arg(c.b), c.mean, c.rstd, T, D, 1, c.eps, rms])
    c.ref = reference(c)
    return c


def cases_from_env(default):
    """The cases in $CASES (TxDxRMS, comma-separated), else default (the
    same form): a list of (T, D, rms)."""
    return [tuple(int(v) for v in s.split("x")) for s in os.environ.get("CASES", default).split(",")]


def shipped_programs(c):
    """The P that ktune.ops passes the backward for case c."""
    return ops._bwd_programs(c.x, c.dy, None, c.T, c.D, 1, c.w, c.b is not None)


def case_name(c):
    """A case's label in the tables: the norm and its shape."""
    return "%s %dx%d" % ("rmsnorm" if c.rms else "layernorm", c.T, c.D)


def shipped_pick(copy_gbs, bwd, red, c):
    """Case c at the P that ktune.ops passes, bwd tuned there (run(), its
    row printed, not kept): (the case's label with P, P, the pick or None
    where ktune refused the run)."""
    P = shipped_programs(c)
    name = "%s P=%d" % (case_name(c), P)
    return name, P, run([], copy_gbs, name, "shipped", bwd, red, c, P)


def each_case(fwd, cases, fn):
    """fn(c) for the weighted_case of each (T, D, rms) of cases in turn, its
    memory given back before the next case is made."""
    for T, D, rms in cases:
        fn(weighted_case(fwd, T, D, rms))
        torch.cuda.empty_cache()


def run(out, copy_gbs, name, label, k, red, c, P, weight=True, config=None):
    """bwd_times of one run, added to out as a row and printed; its config,
    or None where ktune refused the run (said why)."""
    try:
        a, t, cfg, err = bwd_times(k, red, c, P, weight, config)
    except ktune.KtuneError as e:
        print("  %s %s: %s" % (name, label, e), flush=True)
        return None
    out.append((name, label, a, bwd_pct(c, a, copy_gbs), t, bwd_pct(c, t, copy_gbs),
                "-" if err is None else "%.1e" % err, cfg))
    print("  %-26s %-16s alone %6.1f us %3.0f%%  with reduce %6.1f us %3.0f%%  err %s  [%s]" % out[-1], flush=True)
    return cfg


def markdown_rows(head, fmt, rows):
    """rows as a markdown table after a blank line. head: the column names,
    each ending in ':' where the column is right-aligned; fmt: the %
    format of one row's cells, joined by ' | '."""
    print("\n| %s |" % " | ".join(h.rstrip(":") for h in head))
    print("| %s |" % " | ".join("---:" if h.endswith(":") else "---" for h in head))
    for r in rows:
        print("| %s |" % (fmt % r))


def print_table(out):
    """The rows of run() as a markdown table."""
    markdown_rows(("case", "run", "bwd alone µs:", "% of copy:", "bwd + reduce µs:", "% of copy:", "error:", "config"),
                  "%s | %s | %.1f | %.0f%% | %.1f | %.0f%% | %s | %s", out)


def variants_of(cfg):
    """Forced configs near a tuned one: its pipeline deeper."""
    if config_fields(cfg)["STAGES"] == "0":
        return []
    return [("stages " + n, with_fields(cfg, STAGES=n)) for n in ("6", "8")]


def main():
    rt, budget, copy_gbs, tmp = probe_start(8)
    rt_short = ktune.Runtime(mode="tune", budget_s=budget / 3)
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    fwd, bwd, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))
    wide = rt.kernel(wide_spec(ktune.kernels_dir(), tmp))
    bwd_short = rt_short.kernel("layernorm_bwd")
    out = []

    def runs_of(c):
        P = shipped_programs(c)
        Pn = norm_programs(c.T, nsm, c.D, sums=False)
        name = case_name(c)
        runs = [("base P=%d" % P, bwd, P, True, None), ("wide P=%d" % P, wide, P, True, None),
                ("no w P=%d" % P, bwd_short, P, False, None), ("no w P=%d" % Pn, bwd_short, Pn, False, None)]
        if c.D <= 4096:
            runs.append(("many P=%d" % Pn, bwd_short, Pn, True, None))
        while runs:
            label, k, p, weight, cfg = runs.pop(0)
            cfg = run(out, copy_gbs, name, label, k, red, c, p, weight, cfg)
            if cfg and label.startswith("base"):
                runs[0:0] = [(v + " P=%d" % P, wide, P, True, f) for v, f in variants_of(cfg)]

    each_case(fwd, CASES, runs_of)
    print_table(out)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
