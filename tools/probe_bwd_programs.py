"""layernorm_bwd with a weight at other P, and with clusters of up to eight
blocks that split a program's rows (MG = 8; the shipped spec stops at 4):
a probe for issue 17's backward target, not part of `make bench`.

For each case (bf16, with the weight, and the bias for LayerNorm; CASES as
TxDxRMS, comma-separated): the shipped spec tuned at the P that ktune.ops
passes; then a copy of the spec with MG in {1, 2, 4, 8}
(layernorm_bwd_wide, probe_norm_bwd.wide_spec) tuned at that P and at a
quarter, a half, one and two programs an SM. Each P is a key of its own
(P is in the key as its power-of-two bucket). Graph times of the backward
alone and with its reduce, % of the copy bandwidth measured at the start,
and dx, dw and db against float64 (probe_norm_bwd.reference). The
thirty-first run in docs/kernels.md is an example. PROBE_P=32,... : the
shipped spec at those P instead of the wide spec's runs. With PICK_MG=4 as
well, after each such P is tuned, the pick at the shipped P forced there
with MG = PICK_MG, and forced at the shipped P as it is, in two rounds
taken in turn (the sixty-second run: P = 30, the clusters of four that fit
an H100 at once)."""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

pb.WIDE = {"MG": [1, 2, 4, 8]}
CASES = pb.cases_from_env("16778x1000x0,16778x1000x1,4096x4096x0,4096x4096x1,1024x16384x0,65536x256x0,3277x5120x0")


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(8)
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    fwd, bwd, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))
    wide = rt.kernel(pb.wide_spec(ktune.kernels_dir(), tmp))
    out = []

    only = [int(p) for p in os.environ.get("PROBE_P", "").split(",") if p]
    pick_mg = os.environ.get("PICK_MG")

    def runs_of(c):
        P = pb.shipped_programs(c)
        name = pb.case_name(c)
        cfg = pb.run(out, copy_gbs, name, "base P=%d" % P, bwd, red, c, P)
        if only:
            for p in only:
                pb.run(out, copy_gbs, name, "base P=%d" % p, bwd, red, c, p)
                for _ in range(2 if pick_mg and cfg else 0):
                    pb.run(out, copy_gbs, name, "pick MG=%s P=%d" % (pick_mg, p), bwd, red, c, p,
                           config=pb.with_fields(cfg, MG=pick_mg))
                    pb.run(out, copy_gbs, name, "pick P=%d" % P, bwd, red, c, P, config=cfg)
            return
        for p in sorted({P, nsm, nsm // 2, 2 * nsm, nsm // 4}):
            pb.run(out, copy_gbs, name, "mg8 P=%d" % p, wide, red, c, p)

    pb.each_case(fwd, CASES, runs_of)
    pb.print_table(out)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
