"""Sharded pre-warm: the (spec, shape) lines of a --shapes file split over
the ranks of a job, each rank tuning its share on its own GPU (ranks share
them where there are fewer GPUs than ranks) into a cache of its own, and
rank 0 merging every rank's export into one cache (the faster config of a
key wins) to ship as KTUNE_SYSTEM_CACHE:

    torchrun --nproc-per-node=8 -m ktune.prewarm --shapes calls.jsonl --out fleet.db

Without torchrun it runs as one rank. Each rank runs the ktune binary
(`ktune tune`, `export`, `import`); the exports travel through
torch.distributed (gloo), so the ranks need no shared file system.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile

from . import kernels_dir, lib


def _binary():
    from .__main__ import _binary as find
    path, tried = find()
    if not path:
        sys.exit("ktune.prewarm: the ktune binary is not found (looked in %s)" % ", ".join(tried))
    return path


def _gpu_of(local):
    """The GPU a rank tunes on: its local rank's, or, where the host has
    fewer GPUs than ranks, one it shares (the local rank modulo their
    number). The local rank where the GPUs cannot be counted."""
    n = ctypes.c_int(0)
    try:
        if lib().kt_device_count(ctypes.byref(n)) or n.value < 1:
            return local
    except Exception:  # noqa: BLE001 -- no library or driver: ktune tune says why
        return local
    return local % n.value


def _lines(path):
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]


def _specs(lines, given):
    if given:
        return given
    names = sorted({json.loads(ln).get("kernel") for ln in lines} - {None})
    d = kernels_dir()
    return [os.path.join(d, n + ".json") for n in names]


def _run(argv):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(r.stdout)
    return r.returncode


def _tune_and_merge(a, lines, rank, world, local, dist, tmp):
    """This rank's share tuned and exported in tmp; on rank 0, every rank's
    export imported into a.out. (rc, ranks that failed)."""
    mine = lines[rank::world]
    ktune = _binary()
    db, exp = os.path.join(tmp, "rank.db"), os.path.join(tmp, "rank.json")
    rc = 0
    if mine:
        shard = os.path.join(tmp, "shapes.jsonl")
        with open(shard, "w") as f:
            f.write("\n".join(mine) + "\n")
        argv = [ktune, "tune"] + _specs(mine, a.spec) + ["--shapes", shard, "--devices", str(local), "--cache", db,
                                                         "--plain"] + (["--isolate"] if a.isolate else [])
        print("rank %d: %d of %d shapes on GPU %d" % (rank, len(mine), len(lines), local), flush=True)
        rc = _run(argv)
        rc = rc or _run([ktune, "export", "--binaries", "-o", exp, "--cache", db])
    text = None
    if mine and not rc:
        with open(exp) as f:
            text = f.read()
    parts = [None] * world
    if dist:
        dist.gather_object(text, parts if rank == 0 else None, dst=0)
    else:
        parts = [text]
    # Ranks without shapes send nothing; any other rank that sent nothing failed.
    failed = 0
    if rank == 0:
        failed = sum(1 for i, p in enumerate(parts) if p is None and lines[i::world])
        for i, p in enumerate(parts):
            if p is None:
                continue
            part = os.path.join(tmp, "part%d.json" % i)
            with open(part, "w") as f:
                f.write(p)
            rc = _run([ktune, "import", part, "--binaries", "--cache", a.out]) or rc
        print("ktune.prewarm: %d shapes over %d ranks merged into %s%s" % (
            len(lines), world, a.out, "; %d ranks failed" % failed if failed else ""), flush=True)
    return rc, failed


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ktune.prewarm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", required=True, help="a --shapes file (KTUNE_RECORD writes one)")
    ap.add_argument("--out", required=True, help="the merged cache rank 0 writes")
    ap.add_argument("--spec", action="append", default=[], help="a spec (default: the bundled specs the lines name)")
    ap.add_argument("--isolate", action="store_true", help="passed to ktune tune")
    a = ap.parse_args(argv)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = _gpu_of(int(os.environ.get("LOCAL_RANK", 0)))
    dist = None
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo")
    lines = _lines(a.shapes)
    # The rank's cache, export and shard are its own: gone when it is done.
    with tempfile.TemporaryDirectory(prefix="ktune-prewarm-") as tmp:
        rc, failed = _tune_and_merge(a, lines, rank, world, local, dist, tmp)
    if dist:
        dist.destroy_process_group()
    return 1 if rc or failed else 0


if __name__ == "__main__":
    sys.exit(main())
