"""What layernorm_bwd_reduce adds to the backward, config by config: a
probe for issue 17's backward target, not part of `make bench`.

For each case (bf16, with the weight, and the bias for LayerNorm; CASES as
TxDxRMS, comma-separated) the shipped backward is tuned at the P that
ktune.ops passes, then timed alone and followed by the reduce at the
reduce's tuned config and at each of REDUCE_CONFIGS, graph times, ROUNDS
rounds in turn, the fastest of each; then the reduce alone at its first
three configs. The reduce launches early (options.pdl), so what it adds
to the pair is what its blocks do after the backward's last one, not its
time alone. WIDE=1 times a copy of the reduce's spec whose BD and SP go
further (BD down to 8 columns a block, SP up to 128 threads a column:
more blocks at small D), tuned, beside the shipped one. $KTUNE_CACHE
should name a fresh cache."""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_norm_bwd as pb  # noqa: E402
import ktune  # noqa: E402

CASES = pb.cases_from_env("16778x1000x1,65536x256x0,4096x4096x0,2048x8192x1")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
REDUCE_CONFIGS = ["BD=%d,SP=%d" % c for c in ((32, 32), (64, 16), (128, 8), (256, 4), (32, 8), (64, 4), (128, 2),
                                               (256, 1))]
WIDE = {"BD": [8, 16, 32, 64, 128, 256], "SP": [1, 2, 4, 8, 16, 32, 64, 128]}


def main():
    rt, _, copy_gbs, tmp = pb.probe_start(6)
    fwd, bwd, red = (rt.kernel(n) for n in ("layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce"))
    wide = None
    if os.environ.get("WIDE") == "1":
        wide = rt.kernel(pb.patched_copy(ktune.kernels_dir(), tmp, "layernorm_bwd_reduce", "layernorm_bwd_reduce_wide",
                                         [], lambda spec: spec["config"].update(WIDE)))

    def one(c):
        name, P, cfg = pb.shipped_pick(copy_gbs, bwd, red, c)
        if not cfg:
            return
        _, bargs, rargs = pb.bwd_buffers(c, P, c.w, c.b)
        tuned = red.config_for(rargs)
        reds = [(red, tuned)] + [(red, rc) for rc in REDUCE_CONFIGS if rc != tuned]
        if wide:
            reds.append((wide, wide.config_for(rargs)))
        runs = [lambda: bwd.launch(bargs, config=cfg)]
        runs += [lambda k=k, rc=rc: (bwd.launch(bargs, config=cfg), k.launch(rargs, config=rc)) for k, rc in reds]
        runs += [lambda k=k, rc=rc: k.launch(rargs, config=rc) for k, rc in reds[:3]]
        t = pb.fastest(runs, ROUNDS)
        print("%s [%s]: backward alone %.2f us (%.1f%%)" % (name, cfg, t[0], pb.bwd_pct(c, t[0], copy_gbs)))
        for i, (k, rc) in enumerate(reds):
            label = ("wide " if k is wide else "") + rc + (" (tuned)" if i == 0 or k is wide else "")
            both = t[1 + i]
            print("  + reduce %-24s %6.2f us (+%.2f) %.1f%%" % (label, both, both - t[0],
                                                                 pb.bwd_pct(c, both, copy_gbs)))
        for (k, rc), alone in zip(reds[:3], t[1 + len(reds):]):
            print("  reduce alone %-20s %6.2f us" % (rc, alone))

    pb.each_case(fwd, CASES, one)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
