"""Two JAX processes joined by jax.distributed agree on tunings
(ktune.distributed.enable_jax), each on a GPU of its own, or both on one
GPU where the host has one (make gpu-test-multi):

    python3 tests/python/test_distributed_jax.py OUTDIR [agree|plain|async]

A model of 6 keys (four norms, two permutations) under jax.jit, each
process with a cache of its own: every key tuned exactly once in the job,
published once and followed once, the same config in both processes
(kt_kernel_config_for on each, at the key ktune.jax settled), outputs
right against float64. Each process writes OUTDIR/jax-<phase>.<rank>.json
and keeps its cache in OUTDIR/jax-<phase>.rank<rank>.db (names of their
own: a cache left by the torchrun ranks' test would answer the same keys).
agree: tune mode; keys settled while JAX traces (the graph entry), so the
coordinator's callbacks run on the tracing thread.
plain: tune mode with KTUNE_JAX_GRAPHS=0; keys settled on the handler's
miss inside XLA's run of the call, the callbacks on the thread XLA runs it
on.
async: async mode; stand-ins first, the owners' configs once every
process's background tunings are done.
Ends with "N passed, N failed, N skipped"."""
import ctypes
import json
import os
import subprocess
import sys
import time

from procs import free_port, run_all

R = 2


def rank_main(phase, r, port, out):
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.distributed.initialize(coordinator_address="127.0.0.1:%d" % port, num_processes=R, process_id=r)
    import ktune
    import ktune.distributed as kd
    from ktune import _capi
    from ktune import jax as kj
    kd.enable_jax(timeout=120)
    calls = {}
    call = kj._call

    def recorded(name, params, outs, aliases=None, graph=None):
        sig = (name, tuple(kj._sig(p) for p in params), tuple((o.shape, str(o.dtype)) for o in outs))
        calls.setdefault(sig, (name, params, outs))
        return call(name, params, outs, aliases, graph)
    kj._call = recorded

    def f64(a):
        return np.asarray(a.astype(jnp.float32), np.float64)

    def model():
        errs = []
        key = jax.random.PRNGKey(0)
        for D, rms in ((1024, 1), (2048, 1), (1536, 0), (4096, 0)):
            k1, k2, key = jax.random.split(key, 3)
            x = jax.random.normal(k1, (777, D), jnp.float32).astype(jnp.bfloat16)
            w = jax.random.normal(k2, (D,), jnp.float32).astype(jnp.bfloat16)
            fn = (lambda x, w: kj.rms_norm(x, w)) if rms else (lambda x, w: kj.layer_norm(x, w, eps=1e-5))
            y = f64(jax.jit(fn)(x, w))
            xd, wd = f64(x), f64(w)
            if rms:
                ref = xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-6) * wd
            else:
                c = xd - xd.mean(-1, keepdims=True)
                ref = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * wd
            errs.append(float(np.abs(y - ref).max()))
        for D in (512, 3000):
            k1, k2, key = jax.random.split(key, 3)
            x = jax.random.normal(k1, (1000, D), jnp.float32).astype(jnp.bfloat16)
            perm = jax.random.permutation(k2, 1000).astype(jnp.int32)
            y, _ = jax.jit(kj.permute_rows)(x, perm)
            errs.append(float(np.abs(f64(y) - f64(x)[np.asarray(perm)]).max()))
        return errs

    t0 = time.time()
    errs = model()
    if phase == "async":
        # Stand-ins first; once every process's background work is done
        # the same calls launch the owners' configs.
        ktune.wait_tuning(240)
        errs += model()
    rt = ktune.runtime(0)
    configs = []
    for name, params, outs in calls.values():
        k = rt.kernel(name)
        buf = ctypes.create_string_buffer(_capi.KT_CONFIG_MAX)
        st = ktune.lib().kt_kernel_config_for(k._h, kj._shape_args(k, params, outs), len(params), buf,
                                              _capi.KT_CONFIG_MAX)
        configs.append("%s %s" % (name, buf.value.decode() if st == 0 else "status %d" % st))
    s = rt.stats()
    res = {"errs": errs, "configs": configs, "seconds": time.time() - t0,
           "stats": {k: s[k] for k in ("tunings", "published", "followed", "coord_failed", "fallbacks")}}
    with open(os.path.join(out, "jax-%s.%d.json" % (phase, r)), "w") as f:
        json.dump(res, f)
    jax.distributed.shutdown()


def gpus():
    try:
        return max(1, subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU "))
    except OSError:
        return 1


def main(out, phase):
    n, port = gpus(), free_port()
    argvs, envs = [], []
    for r in range(R):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(r % n), XLA_PYTHON_CLIENT_PREALLOCATE="false",
                   KTUNE_CACHE=os.path.join(out, "jax-%s.rank%d.db" % (phase, r)),
                   KTUNE_MODE="async" if phase == "async" else "tune")
        if phase == "plain":
            env["KTUNE_JAX_GRAPHS"] = "0"
        argvs.append([sys.executable, os.path.abspath(__file__), out, phase, "rank", str(r), str(port)])
        envs.append(env)
    ran = run_all(argvs, envs, 400)
    bad = [r for r, (rc, _) in enumerate(ran) if rc != 0]
    for r in bad:
        print("rank %d exited %s:\n%s" % (r, ran[r][0], ran[r][1][-3000:]))
    if bad:
        print("0 passed, 1 failed, 0 skipped")
        return 1
    res = [json.load(open(os.path.join(out, "jax-%s.%d.json" % (phase, r)))) for r in range(R)]
    st = [x["stats"] for x in res]
    total = {k: sum(s[k] for s in st) for k in ("tunings", "published", "followed", "coord_failed")}
    same = res[0]["configs"] == res[1]["configs"]
    err = max(res[0]["errs"] + res[1]["errs"])
    ok = total == {"tunings": 6, "published": 6, "followed": 6, "coord_failed": 0} and same and err < 0.1 and \
        len(res[0]["configs"]) == 6
    print("%s: %d GPU(s) for %d processes; in the job %s (want 6, 6, 6, 0); configs identical %s; max error %.4f; "
          "process stats %s / %s; %.1f s" % (phase, n, R, total, same, err, st[0], st[1], res[0]["seconds"]))
    for c in res[0]["configs"]:
        print("   ", c)
    if not same:
        for c in res[1]["configs"]:
            print("    rank 1:", c)
    print("%d passed, %d failed, 0 skipped" % (1 if ok else 0, 0 if ok else 1))
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[3:4] == ["rank"]:
        rank_main(sys.argv[2], int(sys.argv[4]), int(sys.argv[5]), sys.argv[1])
        sys.exit(0)
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "agree"))
