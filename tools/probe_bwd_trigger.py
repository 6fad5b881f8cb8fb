"""Where layernorm_bwd lets its reduce launch: a probe for issue 17's
backward target, not part of `make bench`.

The reduce is launched early (options.pdl) and waits (griddepcontrol.wait)
for the whole backward and its memory, wherever the backward triggers
(griddepcontrol.launch_dependents), so the trigger decides only when the
reduce's blocks are placed, never what they read. The shipped backward
triggers once a program's rows are done, before its partial row is
written. A copy (layernorm_bwd_early) triggers right after its own wait at
the start, so the reduce's blocks are placed (where resources allow) while
the backward streams. For each case (bf16, with the weight, and the bias
for LayerNorm; CASES as TxDxRMS, comma-separated), the shipped pick at the
P that ktune.ops passes, forced on both specs, each with its reduce, ROUNDS
rounds in turn, the fastest of each; dx, dw and db of the two compared
bit for bit. $KTUNE_CACHE should name a fresh cache."""
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

CASES = pb.cases_from_env("16778x1000x1,16778x1000x0,65536x256x0,32768x512x0,10923x1536x0,4096x4096x0,"
                          "4096x4096x1,2048x8192x1,1024x16384x0")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
EARLY = [("  kt::grid_wait();\n  const long long p1 = min(p0 + bs, (long long)n_rows);\n",
          "  kt::grid_wait();\n  kt::grid_trigger();\n  const long long p1 = min(p0 + bs, (long long)n_rows);\n"),
         ("  // the streaming programs for the whole kernel.\n  kt::grid_trigger();\n",
          "  // the streaming programs for the whole kernel.\n")]


def grads(k, red, bargs, rargs, outs, config):
    """dx, dw and db of k and the reduce, poisoned first, as bytes."""
    return [t.view(torch.int16) for t in pb.grads(k, red, bargs, rargs, outs, config)]


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(6)
    fwd, shipped, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))
    early = rt.kernel(pb.patched_copy(ktune.kernels_dir(), tmp, "layernorm_bwd", "layernorm_bwd_early", EARLY,
                                      lambda spec: None))
    rows = []

    def one(c):
        name, P, cfg = pb.shipped_pick(copy_gbs, shipped, red, c)
        if not cfg:
            return
        outs, bargs, rargs = pb.bwd_buffers(c, P, c.w, c.b)
        outs = [t for t in outs if t is not None]
        same = all(torch.equal(a, b) for a, b in zip(grads(shipped, red, bargs, rargs, outs, cfg),
                                                     grads(early, red, bargs, rargs, outs, cfg)))
        t = pb.fastest([lambda k=k: (k.launch(bargs, config=cfg), red.launch(rargs)) for k in (shipped, early)],
                       ROUNDS)
        rows.append((name, t[0], pb.bwd_pct(c, t[0], copy_gbs), t[1], pb.bwd_pct(c, t[1], copy_gbs),
                     "yes" if same else "NO", cfg))
        print("  %-28s shipped %6.2f us %4.1f%%  early trigger %6.2f us %4.1f%%  same bytes %s" % rows[-1][:6],
              flush=True)

    pb.each_case(fwd, CASES, one)
    pb.markdown_rows(("case", "shipped with reduce µs:", "% of copy:", "early trigger µs:", "% of copy:",
                      "same dx, dw, db", "config"), "%s | %.2f | %.1f%% | %.2f | %.1f%% | %s | %s", rows)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
