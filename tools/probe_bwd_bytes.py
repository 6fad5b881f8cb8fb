"""What layernorm_bwd and its reduce move to and from DRAM, beside an add
of the same bytes: a probe for issue 17's backward target, run under ncu,
not part of `make bench`.

For each case (bf16, with the weight, and the bias for LayerNorm; CASES as
TxDxRMS, comma-separated) the shipped pick is tuned at the P that
ktune.ops passes, run three times with its reduce to settle L2, then, in
an NVTX range named mTxD, three times more with its reduce and twice
`torch.add(x, dy, out=y)` (two streams in, one out: the backward's
traffic without its sums). Run it once plainly to tune (the same
$KTUNE_CACHE), then under ncu with L2 left as the launches leave it:

  ncu --nvtx --nvtx-include "m1024x16384/" --cache-control none \\
      --clock-control none --csv --metrics gpu__time_duration.sum,\\
  dram__bytes_read.sum,dram__bytes_write.sum python3 tools/probe_bwd_bytes.py

(one --nvtx-include per case). The sixty-fifth run in docs/kernels.md is
an example."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_norm_bwd as pb  # noqa: E402

CASES = pb.cases_from_env("1024x16384x0,2048x8192x1,4096x4096x0")


def main():
    rt, _, copy_gbs, _ = pb.probe_start(6)
    fwd, bwd, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))

    def one(c):
        _, P, cfg = pb.shipped_pick(copy_gbs, bwd, red, c)
        if not cfg:
            return
        _, bargs, rargs = pb.bwd_buffers(c, P, c.w, c.b)
        y = torch.empty_like(c.x)

        def pair():
            bwd.launch(bargs, config=cfg)
            red.launch(rargs)
        for _ in range(3):
            pair()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("m%dx%d" % (c.T, c.D))
        for _ in range(3):
            pair()
        for _ in range(2):
            torch.add(c.x, c.dy, out=y)
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()

    pb.each_case(fwd, CASES, one)


if __name__ == "__main__":
    main()
