"""Whether the weighted norm backward gains from being launched early
(programmatic dependent launch, as the forward and the reduce are): a probe
for issue 17's backward target, not part of `make bench`.

The shipped kernels are copied into a temporary folder as a spec with
options.pdl the other way: layernorm_bwd_nopdl where the shipped spec
sets it, else layernorm_bwd_pdl, whose layernorm.cu gets a wait for the
kernel before (griddepcontrol.wait, without letting the next kernel
launch: the backward does that once its rows are done) before a
program's first access to global memory. A launch without the attribute
returns from that wait at once, so the two differ in the launch alone.

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
PATCHES = [
    ("  if (p0 >= n_rows) return;  // the whole cluster: one program's rows\n",
     "  if (p0 >= n_rows) return;  // the whole cluster: one program's rows\n"
     "#if __CUDA_ARCH__ >= 900\n"
     "  asm volatile(\"griddepcontrol.wait;\\n\" ::: \"memory\");\n"
     "#endif\n"),
]


def toggled_spec(src_dir, out_dir, base):
    """Spec base with options.pdl the other way, as base_pdl or base_nopdl
    in out_dir (layernorm.cu with PATCHES where the shipped spec lacks
    it, so that its backward waits); (its path, whether the shipped spec
    sets options.pdl)."""
    with open(os.path.join(src_dir, base + ".json")) as f:
        shipped = json.load(f).get("options", {}).get("pdl", False)
    name = base + ("_nopdl" if shipped else "_pdl")
    edit = lambda spec: spec.setdefault("options", {}).__setitem__("pdl", not shipped)  # noqa: E731
    return pb.patched_copy(src_dir, out_dir, base, name, [] if shipped else PATCHES, edit), shipped


def checked(k, red, c, P, cfg):
    """k's dx, dw (and db) at config cfg against c.ref: the largest error.
    P 0: k is layernorm_bwd_row (no reduce)."""
    dx = torch.full_like(c.x, float("nan"))
    if not P:
        dw = torch.full_like(c.w, float("nan"))
        db = torch.full_like(c.b, float("nan")) if not c.rms else None
        k.launch([dx, dw, c.arg(db), c.dy, c.x, c.w, None if c.rms else c.mean, c.rstd, None, c.T, c.D, 1, c.rms],
                 config=cfg)
        torch.cuda.synchronize()
        errs = [pb.worst(dx, c.ref[0]), pb.worst(dw, c.ref[1])] + ([] if c.rms else [pb.worst(db, c.ref[2])])
        return max(errs) if all(e == e for e in errs) else float("nan")
    dwp, dw = torch.empty(P, c.D, device=bk.dev), torch.full_like(c.w, float("nan"))
    dbp = torch.empty(P, c.D, device=bk.dev) if not c.rms else None
    db = torch.full_like(c.b, float("nan")) if not c.rms else None
    k.launch([dx, dwp, dbp, c.dy, c.x, c.w, None if c.rms else c.mean, c.rstd, None, c.T, c.D, 1, P, c.rms],
             config=cfg)
    red.launch([dw, c.arg(db), dwp, dbp, c.T, c.D, P])
    torch.cuda.synchronize()
    errs = [pb.worst(dx, c.ref[0]), pb.worst(dw, c.ref[1])] + ([] if c.rms else [pb.worst(db, c.ref[2])])
    return max(errs) if all(e == e for e in errs) else float("nan")


def launchers(fwd, red, c, P):
    """(backward + reduce, forward + backward + reduce) for a backward kernel
    and config: functions of (k, cfg) that return what graph_time_us times;
    and the backward's arguments. P 0: layernorm_bwd_row, no reduce."""
    dx = torch.empty_like(c.x)
    dwp, dw = torch.empty(P, c.D, device=bk.dev), torch.empty_like(c.w)
    dbp = torch.empty(P, c.D, device=bk.dev) if not c.rms else None
    db = torch.empty_like(c.b) if not c.rms else None
    y = torch.empty_like(c.x)
    fargs = [y, c.x, None, c.nb, c.w, c.arg(c.b), c.mean, c.rstd, c.T, c.D, 1, c.eps, c.rms]
    bargs = [dx, dwp, dbp, c.dy, c.x, c.w, None if c.rms else c.mean, c.rstd, None, c.T, c.D, 1, P, c.rms]
    rargs = [dw, c.arg(db), dwp, dbp, c.T, c.D, P]
    if not P:
        bargs = [dx, dw, c.arg(db), c.dy, c.x, c.w, None if c.rms else c.mean, c.rstd, None, c.T, c.D, 1, c.rms]

    def pair(k, cfg):
        def go():
            k.launch(bargs, config=cfg)
            if P:
                red.launch(rargs)
        return go

    def triple(k, cfg):
        def go():
            fwd.launch(fargs)
            pair(k, cfg)()
        return go
    return pair, triple, bargs


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
        pair, triple, bargs = launchers(fwd, red, c, P)
        bwd.launch(bargs)
        cfg = bwd.config_for(bargs)
        errs = {s: checked(k, red, c, P, cfg) for s, k in specs}
        pct = lambda us: 100.0 * 3 * c.T * c.D * c.es / us / 1e3 / copy_gbs  # noqa: E731
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
