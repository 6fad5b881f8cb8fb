"""Programs whose blocks split the columns (CL > 1) at a cluster's worth
of SMs a program, against the shipped pick: a probe for issue 17's
backward target, not part of `make bench`.

At D >= 8192 the shipped pick is a cluster of MG = 2 blocks that split a
program's rows; each block sums dw/db over all D columns, and at the end
the two merge 2 x D x 4 bytes a sum through distributed shared memory
before one partial row is stored. A cluster of CL blocks that split the
columns instead holds a CL-th of the sums a block: nothing to merge at
the end, the same partial rows at P = SMs / CL, but every tile's row
sums meet through a cluster barrier (cluster_sum2). For each case (bf16,
with the weight, and the bias for LayerNorm; CASES as TxDxRMS,
comma-separated):

- shipped: layernorm_bwd tuned at the P that ktune.ops passes;
- clN: a copy of the spec with CL = N alone (MG = 1), tuned at P = SMs / N;
- clN no sums: that pick forced on a copy whose tiles' row sums stay in
  the block (group_sum2, no cluster barrier a tile): dx is wrong, the
  bytes moved the same; what an exchange that never waits would give.

Graph times, the backward alone and with its reduce, ROUNDS times in
turn, the fastest of each; % of the copy measured at the start; dx, dw
and db of the tuned runs against float64. $KTUNE_CACHE should name a
fresh cache."""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

CASES = pb.cases_from_env("1024x16384x0,1024x16384x1,2048x8192x0,2048x8192x1,1366x12288x0,4096x4096x0")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
CLS = [int(n) for n in os.environ.get("CLS", "2,4").split(",")]
NO_SUMS = [("      r = kt::cluster_sum2<TPR, CL>(s1, s2, part[phase]);\n",
            "      r = kt::group_sum2<TPR>(s1, s2, part[phase]);\n")]


def only_cl(n):
    """A spec edit: CL = n alone, MG = 1."""
    def edit(spec):
        spec["config"].update({"CL": [n], "MG": [1]})
        spec["default"]["CL"] = n
    return edit


def timed(k, red, c, P, config):
    """(alone, with reduce) of config forced on k at P, ROUNDS in turn."""
    _, bargs, rargs = pb.bwd_buffers(c, P, c.w, c.b)
    return tuple(pb.fastest([lambda: k.launch(bargs, config=config),
                             lambda: (k.launch(bargs, config=config), red.launch(rargs))], ROUNDS))


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(8)
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    fwd, shipped, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))

    def copy_of(name, patches, edit):
        d = os.path.join(tmp, name)
        os.mkdir(d)
        return rt.kernel(pb.patched_copy(ktune.kernels_dir(), d, "layernorm_bwd", name, patches, edit))

    tuned = {n: copy_of("layernorm_bwd_cl%d" % n, [], only_cl(n)) for n in CLS}
    nosum = {n: copy_of("layernorm_bwd_cl%dns" % n, NO_SUMS, only_cl(n)) for n in CLS}
    out, rows = [], []

    def one(c):
        name = pb.case_name(c)
        P = pb.shipped_programs(c)
        cfg = pb.run(out, copy_gbs, name, "shipped P=%d" % P, shipped, red, c, P)
        for n in CLS:
            p = nsm // n
            got = pb.run(out, copy_gbs, name, "cl%d P=%d" % (n, p), tuned[n], red, c, p)
            if not got or not cfg:
                continue
            base = timed(shipped, red, c, P, cfg)
            mine = timed(tuned[n], red, c, p, got)
            free = timed(nosum[n], red, c, p, got)
            rows.append((name, n, p) + tuple(v for us in (base, mine, free) for t in us
                                              for v in (t, pb.bwd_pct(c, t, copy_gbs))) + (got,))
            print("  %s cl%d: shipped %.2f/%.2f, cl %.2f/%.2f, no sums %.2f/%.2f us (alone/with reduce)"
                  % ((name, n) + base + mine + free), flush=True)

    pb.each_case(fwd, CASES, one)
    pb.print_table(out)
    pb.markdown_rows(("case", "CL:", "P:", "shipped alone µs:", "%:", "with reduce µs:", "%:", "CL alone µs:", "%:",
                      "with reduce µs:", "%:", "no sums alone µs:", "%:", "with reduce µs:", "%:", "CL pick"),
                     "%s | %d | %d" + " | %.2f | %.1f%%" * 6 + " | %s", rows)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
