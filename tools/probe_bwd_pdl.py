"""Whether the weighted norm backward gains from being launched early
(programmatic dependent launch, as the forward and the reduce are): a probe
for issue 17's backward target, not part of `make bench`.

The shipped kernels are copied into a temporary folder as a spec with
options.pdl the other way: layernorm_bwd_nopdl where the shipped spec
sets it, else layernorm_bwd_pdl. The backward code both entries share
already waits for the kernel before (kt::grid_wait) before a program's
first access to global memory, and a launch without the attribute returns
from that wait at once, so the two differ in the launch alone.

For each case (CASES as TxDxRMS, comma-separated; bf16, the weight, and the
bias for LayerNorm; at the P that ktune.ops passes): the shipped key tuned
cold, then its pick forced on both specs, timed in turn ROUNDS times
through CUDA graphs of 20 launches:
- bwd + reduce: the backward and its reduce, back to back;
- fwd + bwd + reduce: the forward (training: statistics written, its own
  tuned pick) before them, whose blocks let the next kernel launch as
  soon as they start, so the backward's blocks may sit beside them.
Each spec's dx, dw and db are checked against float64 (the largest error
over the largest value). % of the copy bandwidth measured at the start,
for the backward's three activation streams, as make bench counts it.

ROW=1 does the same for layernorm_bwd_row (one program, no reduce) at
ROW_CASES, a few rows each."""
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_kernels as bk  # noqa: E402
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

CASES = ("65536x256x0,16778x1000x0,10923x1536x0,4096x4096x0,3277x5120x0,2048x8192x0,1366x12288x0,1024x16384x0,"
         "16778x1000x1,4096x4096x1,1024x16384x1")
ROW_CASES = "1x1000x0,1x4096x0,1x16384x0,16x4096x0,64x4096x0,1x4096x1,16x1000x1"
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def toggled_spec(src_dir, out_dir, base):
    """Spec base with options.pdl the other way, as base_pdl or base_nopdl
    in out_dir, beside an unchanged copy of its source; (its path, whether
    the shipped spec sets options.pdl)."""
    with open(os.path.join(src_dir, base + ".json")) as f:
        shipped = json.load(f).get("options", {}).get("pdl", False)
    name = base + ("_nopdl" if shipped else "_pdl")
    edit = lambda spec: spec.setdefault("options", {}).__setitem__("pdl", not shipped)  # noqa: E731
    return pb.patched_copy(src_dir, out_dir, base, name, [], edit), shipped


def call_args(c, P):
    """The backward's and the reduce's arguments for case c at P, and the
    (dx, dw, db) they write (db None for RMSNorm). P 0: layernorm_bwd_row's
    arguments, which write dw and db themselves, and no reduce (None)."""
    dx, dw = torch.empty_like(c.x), torch.empty_like(c.w)
    db = torch.empty_like(c.b) if not c.rms else None
    mean = None if c.rms else c.mean
    if not P:
        return [dx, dw, c.arg(db), c.dy, c.x, c.w, mean, c.rstd, None, c.T, c.D, 1, c.rms], None, (dx, dw, db)
    dwp = torch.empty(P, c.D, device=bk.dev)
    dbp = torch.empty(P, c.D, device=bk.dev) if not c.rms else None
    return ([dx, dwp, dbp, c.dy, c.x, c.w, mean, c.rstd, None, c.T, c.D, 1, P, c.rms],
            [dw, c.arg(db), dwp, dbp, c.T, c.D, P], (dx, dw, db))


def launcher(red, call, k, cfg):
    """A function that launches k at config cfg on call's arguments (a
    call_args result), then the reduce where there is one."""
    bargs, rargs, _ = call

    def go():
        k.launch(bargs, config=cfg)
        if rargs:
            red.launch(rargs)
    return go


def checked(red, c, call, k, cfg):
    """k's dx, dw (and db) at config cfg against c.ref, their outputs
    poisoned first: the largest error."""
    outs = [t for t in call[2] if t is not None]
    for t in outs:
        t.fill_(float("nan"))
    launcher(red, call, k, cfg)()
    torch.cuda.synchronize()
    return pb.grads_error(c, *call[2])


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(6)
    row = os.environ.get("ROW") == "1"
    base = "layernorm_bwd_row" if row else "layernorm_bwd"
    fwd, bwd, red = (rt.kernel(n) for n in ("layernorm_fwd", base, "layernorm_bwd_reduce"))
    path, shipped_pdl = toggled_spec(ktune.kernels_dir(), tmp, base)
    other = rt.kernel(path)
    specs = (("pdl", bwd), ("no pdl", other)) if shipped_pdl else (("no pdl", bwd), ("pdl", other))
    out = []

    def one(c):
        P = 0 if row else pb.shipped_programs(c)
        name = "%s %s" % (pb.case_name(c), "row" if row else "P=%d" % P)
        call = call_args(c, P)
        fargs = [torch.empty_like(c.x), c.x, None, c.nb, c.w, c.arg(c.b), c.mean, c.rstd, c.T, c.D, 1, c.eps, c.rms]
        bwd.launch(call[0])
        cfg = bwd.config_for(call[0])
        errs = {s: checked(red, c, call, k, cfg) for s, k in specs}
        pair = lambda k, cfg: launcher(red, call, k, cfg)  # noqa: E731

        def triple(k, cfg):
            both = launcher(red, call, k, cfg)

            def go():
                fwd.launch(fargs)
                both()
            return go
        pct = lambda us: pb.bwd_pct(c, us, copy_gbs)  # noqa: E731
        timed = ("bwd", "fwd + bwd") if row else ("bwd + reduce", "fwd + bwd + reduce")
        for what, make in zip(timed, (pair, triple)):
            times = {s: [] for s, _ in specs}
            for _ in range(ROUNDS):
                for s, k in specs:
                    times[s].append(bk.graph_time_us(make(k, cfg)))
            for s, _ in specs:
                t = min(times[s])
                out.append((name, what, s, t, pct(t), " ".join("%.2f" % v for v in times[s]), "%.1e" % errs[s], cfg))
                print("  %-26s %-18s %-6s %6.2f us %3.0f%%  [%s]  err %s  %s" % out[-1], flush=True)

    pb.each_case(fwd, pb.cases_from_env(ROW_CASES if row else CASES), one)
    pb.markdown_rows(("case", "timed", "backward", "µs (best):", "% of copy:", "rounds", "error:", "config"),
                     "%s | %s | %s | %.2f | %.0f%% | %s | %s | %s", out)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
