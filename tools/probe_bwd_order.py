"""Whether layernorm_bwd's pipelined programs stream faster walking their
rows strided across the programs than in one contiguous run each: a probe
for issue 17's backward target, not part of `make bench`.

The shipped kernels are copied into a temporary folder and layernorm.cu is
patched (PATCHES; each anchor must be found once): where STAGES > 0, tile
k (ROWS rows) of block r of program p is tile (k * NW + p * MG + r) of the
whole input, NW = MG times the programs that own rows, in place of the
program's own contiguous share. Which rows a program owns is still fixed by
N, P and the config, so dw and db keep the same bits from run to run; the
reduce is unchanged (every program it reads writes a partial row, zeros
where it owns no tile). The copy is a spec of its own,
layernorm_bwd_strided, with STAGES > 0 added to its constraints.

For each case (bf16, with the weight, and the bias for LayerNorm, T*D =
16M, at the P that ktune.ops passes; CASES as TxDxRMS, comma-separated):
the shipped spec tuned; the strided spec tuned; the strided spec forced
to the shipped pick where that is pipelined; the shipped pick again (how
far two timings of one config differ). Graph times of the backward alone
and with its reduce; dx, dw and db against float64
(probe_norm_bwd.reference). The thirty-first run in docs/kernels.md is an
example."""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

PATCHES = [
    ("  const long long seg_end = row1 * G;\n",
     "  const long long seg_end = row1 * G;\n"
     "  const long long nw_ = (long long)((n_rows + bs - 1) / bs) * MG;\n"
     "  const long long wid_ = (long long)prog * MG + (int)blockIdx.x % MG;\n"
     "  const long long ntile_ = ((long long)n_rows + ROWS - 1) / ROWS, rstep_ = nw_ * ROWS;\n"),
    ("    const long long tiles = (row1 - row0 + ROWS - 1) / ROWS;\n",
     "    const long long tiles = wid_ < ntile_ ? (ntile_ - 1 - wid_) / nw_ + 1 : 0;\n"),
    ("    const long long step = (long long)ROWS * L;\n    long long seg_in = row0 + sub, off_in = seg_in * L;\n",
     "    const long long step = rstep_ * L;\n    long long seg_in = wid_ * ROWS + sub, off_in = seg_in * L;\n"),
    ("      if (seg_in < row1) {\n", "      if (seg_in < n_rows) {\n"),
    ("      seg_in += ROWS;\n", "      seg_in += rstep_;\n"),
    ("    long long seg = row0 + sub, off = seg * L;\n", "    long long seg = wid_ * ROWS + sub, off = seg * L;\n"),
    ("    if (seg < row1) {\n      mu_n", "    if (seg < n_rows) {\n      mu_n"),
    ("t < tiles; t++, seg += ROWS, off += step)", "t < tiles; t++, seg += rstep_, off += step)"),
    ("      if (seg + ROWS < row1) {\n        mu_n = IS_RMS_NORM ? 0.f : mean[seg + ROWS];\n"
     "        rs_n = rstd[seg + ROWS];\n",
     "      if (seg + rstep_ < n_rows) {\n        mu_n = IS_RMS_NORM ? 0.f : mean[seg + rstep_];\n"
     "        rs_n = rstd[seg + rstep_];\n"),
    ("      segment(sx, sx + CAP, sx + 2 * CAP, seg, off, mu, rs, seg < row1);\n",
     "      segment(sx, sx + CAP, sx + 2 * CAP, seg, off, mu, rs, seg < n_rows);\n"),
]
CASES = pb.cases_from_env("16778x1000x0,16778x1000x1,4096x4096x0,1024x16384x0,1024x16384x1,65536x256x0")


def strided_spec(src_dir, out_dir):
    """layernorm.cu with PATCHES and layernorm_bwd as layernorm_bwd_strided
    (pipelined configs only), in out_dir; the spec's path."""
    return pb.patched_copy(src_dir, out_dir, "layernorm_bwd", "layernorm_bwd_strided", PATCHES,
                           lambda spec: spec["constraints"].append("STAGES > 0"))


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(6)
    fwd, bwd, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))
    strided = rt.kernel(strided_spec(ktune.kernels_dir(), tmp))
    out = []

    def runs_of(c):
        P = pb.shipped_programs(c)
        name = "%s P=%d" % (pb.case_name(c), P)
        cfg = pb.run(out, copy_gbs, name, "shipped", bwd, red, c, P)
        pb.run(out, copy_gbs, name, "strided", strided, red, c, P)
        if cfg and "STAGES=0" not in cfg:
            pb.run(out, copy_gbs, name, "strided, forced", strided, red, c, P, config=cfg)
        if cfg:
            pb.run(out, copy_gbs, name, "shipped again", bwd, red, c, P, config=cfg)

    pb.each_case(fwd, CASES, runs_of)
    pb.print_table(out)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
