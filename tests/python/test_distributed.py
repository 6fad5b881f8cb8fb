"""Two ranks under torchrun agree on tunings (ktune.distributed), on a GPU
each, or sharing one where the host has one:

    torchrun --nproc-per-node=2 tests/python/test_distributed.py OUTDIR [agree|async|kill]

agree: a model of 6 norm/permute keys, each rank with a cache of its own
and blocking tuning: every key tuned exactly once in the job, the same
config on both ranks (config_for on each), outputs right against float64.
async: the same in async mode (stand-ins first, owners' configs after).
kill: rank 1 dies while it tunes the keys it owns; rank 0 goes on, and the
keys rank 1 owned end in the default config with a warning within the
timeout. Each rank writes OUTDIR/<phase>.<rank>.json; rank 0 checks and
prints the summary line."""
import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

phase = sys.argv[2] if len(sys.argv) > 2 else "agree"
out = sys.argv[1]
rank = int(os.environ["RANK"])
# One GPU a rank, or ranks sharing the GPUs there are (one GPU: both on it).
local = int(os.environ.get("LOCAL_RANK", rank)) % max(1, torch.cuda.device_count())
os.environ["KTUNE_CACHE"] = os.path.join(out, "%s.rank%d.db" % (phase, rank))
os.environ["KTUNE_MODE"] = "async" if phase == "async" else "tune"
torch.cuda.set_device(local)
dist.init_process_group("gloo")

import ktune  # noqa: E402
import ktune.distributed  # noqa: E402
from ktune import ops  # noqa: E402

ktune.distributed.enable(timeout=8 if phase == "kill" else 120)
rt = ktune.runtime(local)
dev = torch.device("cuda", local)
torch.manual_seed(0)


def norm_values(x, w, D, rms):
    T = x.shape[0]
    return [torch.empty_like(x), x, None, ktune.null(x.dtype), w, ktune.null(w.dtype), None, None, T, D, 1,
            1e-5, rms]


def model(shift):
    """Six keys: four norms (D, rms) and two permutes (D); returns
    (errors, configs), the largest error against float64 per key."""
    errs, cfgs = [], []
    for D, rms in ((1024 + shift, 1), (2048 + shift, 1), (1536 + shift, 0), (4096 + shift, 0)):
        x = torch.randn(777, D, device=dev, dtype=torch.bfloat16)
        w = torch.randn(D, device=dev, dtype=torch.bfloat16)
        y = ops.rms_norm(x, w) if rms else ops.layer_norm(x, w, eps=1e-5)
        xd, wd = x.double(), w.double()
        if rms:
            ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd
        else:
            ref = torch.nn.functional.layer_norm(xd, (D,), wd, None, 1e-5)
        errs.append(float((y.double() - ref).abs().max()))
        k = rt.kernel("layernorm_fwd")
        vals = norm_values(x, w, D, rms)
        vals[11] = 1e-6 if rms else 1e-5
        cfgs.append(k.config_for(vals))
    for D in (512 + shift, 3000 + shift):
        x = torch.randn(1000, D, device=dev, dtype=torch.bfloat16)
        perm = torch.randperm(1000, device=dev)
        y, _ = ops.permute_rows(x, perm)
        errs.append(float((y.double() - x.double()[perm]).abs().max()))
        k = rt.kernel("permute_rows")
        rm = perm.to(torch.int32)
        cfgs.append(k.config_for([torch.empty_like(x), x, rm, None, None, 1000, 1000, D]))
    return errs, cfgs


def stats():
    s = rt.stats()
    return {k: s[k] for k in ("tunings", "published", "followed", "coord_failed", "fallbacks")}


if phase in ("agree", "async"):
    t0 = time.time()
    errs, cfgs = model(0)
    if phase == "async":
        # Stand-ins first; once every rank's background work is done the
        # same calls launch the owners' configs.
        ktune.wait_tuning(120)
        errs2, cfgs = model(0)
        errs += errs2
    torch.cuda.synchronize()
    res = {"rank": rank, "errs": errs, "configs": cfgs, "stats": stats(), "seconds": time.time() - t0}
    with open(os.path.join(out, "%s.%d.json" % (phase, rank)), "w") as f:
        json.dump(res, f)
    dist.barrier()
    if rank == 0:
        other = json.load(open(os.path.join(out, "%s.1.json" % phase)))
        tuned = res["stats"]["tunings"] + other["stats"]["tunings"]
        same = res["configs"] == other["configs"]
        ok = tuned == 6 and same and max(res["errs"] + other["errs"]) < 0.1 and \
            res["stats"]["coord_failed"] == 0 and other["stats"]["coord_failed"] == 0
        print(phase + ": tunings in the job %d (want 6), configs identical %s, max error %.4f, rank stats %s / %s, "
              "%.1f s" % (tuned, same, max(res["errs"] + other["errs"]), res["stats"], other["stats"],
                          res["seconds"]))
        for c in res["configs"]:
            print("   ", c)
        print("%d passed, %d failed, 0 skipped" % (1 if ok else 0, 0 if ok else 1))
    dist.destroy_process_group()
    sys.exit(0)

# kill: rank 1 runs the model on a thread and dies 1.5 s in, mid-tuning.
if rank == 1:
    th = threading.Thread(target=model, args=(64,), daemon=True)
    th.start()
    time.sleep(1.5)
    os._exit(0)
t0 = time.time()
errs, cfgs = model(64)
torch.cuda.synchronize()
s = stats()
took = time.time() - t0
ok = s["coord_failed"] >= 1 and s["published"] + s["followed"] + s["coord_failed"] == 6 and max(errs) < 0.1 and \
    took < 6 * 8 + 30
print("kill: rank 0 done in %.1f s with rank 1 dead; stats %s; max error %.4f" % (took, s, max(errs)))
print("%d passed, %d failed, 0 skipped" % (1 if ok else 0, 0 if ok else 1))
os._exit(0)
