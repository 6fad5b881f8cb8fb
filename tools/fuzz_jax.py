"""Differential fuzzing of ktune.jax on a GPU, as tools/fuzz_ops.py does
for ktune.ops: random norms (shapes, three dtypes for x, the weight and the
bias each, a residual in and out, groups, eps), permutations and masked
softmax, under jit, with gradients of a random subset of inputs and, now
and then, under vmap, against float64 (jax_enable_x64). A call ktune
refuses must raise an error carrying ktune's message; one it takes must
match the reference.

    python3 tools/fuzz_jax.py [SECONDS] [SEED|s1,s2,...]

Prints one line a failing case (its seed rebuilds it) and ends with
"N cases, N refused, N failed"; exit status 1 when any failed."""
import math
import os
import random
import sys
import traceback

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_gpu_enable_command_buffer="
_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_here, "python"))
sys.path.insert(1, _here)
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import fuzz_seeds  # noqa: E402
from ktune import jax as kj  # noqa: E402

DT = [jnp.bfloat16, jnp.float16, jnp.float32]
TOL = {jnp.bfloat16: 3e-2, jnp.float16: 5e-3, jnp.float32: 1e-4}
DS = [1, 2, 3, 8, 17, 64, 100, 255, 256, 1000, 1024, 1536, 2049, 4096, 5000, 8192, 12288, 16384]
TS = [0, 1, 2, 3, 7, 16, 33, 131, 132, 133, 264, 1000, 4099]


class Bad(Exception):
    pass


def close(name, got, want, atol, rtol):
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if g.shape != w.shape:
        raise Bad("%s: shape %s, reference %s" % (name, g.shape, w.shape))
    bad = ~(np.abs(g - w) <= atol + rtol * np.abs(w))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise Bad("%s: %d of %d differ; first [%d] %.6g vs %.6g" % (name, int(bad.sum()), bad.size, i,
                                                                    g.flat[i], w.flat[i]))


def ref_norm(h, w, b, eps, rms, groups):
    D = h.shape[-1]
    hs = h.reshape(h.shape[:-1] + (groups, D // groups))
    if rms:
        y = hs * jax.lax.rsqrt(jnp.mean(hs * hs, -1, keepdims=True) + eps)
    else:
        m = jnp.mean(hs, -1, keepdims=True)
        y = (hs - m) * jax.lax.rsqrt(jnp.mean((hs - m) ** 2, -1, keepdims=True) + eps)
    y = y.reshape(h.shape)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def rand(rng, shape, dt, lo=None):
    a = np.random.default_rng(rng.getrandbits(32)).standard_normal(shape)
    if lo is not None:
        a = lo + np.abs(a) * 0.5
    return jnp.asarray(a, jnp.float32).astype(dt)


def norm_case(rng):
    rms = rng.random() < 0.5
    T, D = rng.choice(TS), rng.choice(DS)
    dt = rng.choice(DT)
    wdt = dt if rng.random() < 0.8 else rng.choice(DT)
    bdt = wdt if rng.random() < 0.9 else rng.choice(DT)
    has_w, has_b = rng.random() < 0.75, (not rms) and rng.random() < 0.6
    has_r, ret_r = rng.random() < 0.3, rng.random() < 0.3
    groups = rng.choice([g for g in (1, 2, 4, 8) if D % g == 0]) if not rms and rng.random() < 0.2 else 1
    eps = rng.choice([1e-5, 1e-6, 1e-3])
    vmap = rng.random() < 0.2 and T > 0
    argn = [k for k in ("x", "r", "w", "b") if rng.random() < 0.6]
    desc = dict(rms=rms, T=T, D=D, dt=dt.__name__, wdt=wdt.__name__, bdt=bdt.__name__, w=has_w, b=has_b, r=has_r,
                ret_r=ret_r, groups=groups, eps=eps, vmap=vmap, grads=argn)
    return desc, lambda: run_norm(rng, rms, T, D, dt, wdt, bdt, has_w, has_b, has_r, ret_r, groups, eps, vmap, argn)


def run_norm(rng, rms, T, D, dt, wdt, bdt, has_w, has_b, has_r, ret_r, groups, eps, vmap, argn):
    lead = (3, T) if vmap else (T,)
    ins = {"x": rand(rng, lead + (D,), dt)}
    if has_r:
        ins["r"] = rand(rng, lead + (D,), dt)
    if has_w:
        ins["w"] = rand(rng, (D,), wdt, lo=0.5)
    if has_b:
        ins["b"] = rand(rng, (D,), bdt)
    dy = rand(rng, lead + (D,), dt)

    def f(a):
        x, r, w, b = (a.get(k) for k in ("x", "r", "w", "b"))
        if rms:
            return kj.rms_norm(x, w, eps, residual=r, return_residual=ret_r)
        return kj.layer_norm(x, w, b, eps, residual=r, return_residual=ret_r, groups=groups)

    def ref(a):
        h = a["x"].astype(jnp.float64)
        if has_r:  # x + residual as the forward stores it: rounded to x's dtype
            h = (a["x"].astype(jnp.float64) + a["r"].astype(jnp.float64)).astype(dt).astype(jnp.float64)
        y = ref_norm(h, a["w"].astype(jnp.float64) if has_w else None, a["b"].astype(jnp.float64) if has_b else None,
                     eps, rms, groups)
        return (y, h) if ret_r else y

    run = f
    if vmap:  # the batch over x, residual and dy; weight and bias shared
        axes = {k: (0 if k in ("x", "r") else None) for k in ins}
        run = jax.vmap(f, in_axes=(axes,))
    out = jax.jit(run)(ins)
    want = ref(ins) if not vmap else jax.vmap(ref, in_axes=({k: (0 if k in ("x", "r") else None) for k in ins},))(ins)
    y, h = out if ret_r else (out, None)
    y64, h64 = want if ret_r else (want, None)
    tol = max(TOL[dt], TOL[wdt] if has_w else 0, TOL[bdt] if has_b else 0)
    close("y", y, y64, tol, tol)
    if ret_r:
        close("x + residual", h, h64, TOL[dt], TOL[dt])
    asked = [k for k in argn if k in ins]
    if not asked or T == 0:
        return

    def loss(sub, fn, full):
        a = dict(full, **sub)
        o = fn(a)
        o = o[0] if ret_r else o
        return jnp.sum(o.astype(jnp.float64) * dy.astype(jnp.float64))

    got = jax.jit(jax.grad(lambda s: loss(s, run, ins)))({k: ins[k] for k in asked})
    ins64 = {k: v.astype(jnp.float64) for k, v in ins.items()}
    rrun = ref if not vmap else jax.vmap(ref, in_axes=({k: (0 if k in ("x", "r") else None) for k in ins},))
    want = jax.grad(lambda s: loss(s, rrun, ins))({k: ins64[k] for k in asked})
    rows = T * (3 if vmap else 1)
    for k in asked:
        s = 1 + (rows ** 0.5 if k in ("w", "b") else 0)
        close("d" + k, got[k], want[k], tol * s * 2, tol)


def softmax_case(rng):
    L = rng.choice([1, 3, 32, 33, 100, 1000, 1024, 4096, 5000])
    R = rng.choice([0, 1, 2, 7, 64, 131, 1000])
    dt = rng.choice(DT)
    mask, bias = rng.random() < 0.5, rng.random() < 0.5
    scale = rng.choice([1.0, 0.125, -1.0])
    desc = dict(R=R, L=L, dt=dt.__name__, mask=mask, bias=bias, scale=scale)
    return desc, lambda: run_softmax(rng, R, L, dt, mask, bias, scale)


def run_softmax(rng, R, L, dt, mask, bias, scale):
    x = rand(rng, (R, L), dt)
    keep = None
    if mask:
        keep = np.random.default_rng(rng.getrandbits(32)).random((R, L)) < 0.7
        if R > 1:
            keep[rng.randrange(R)] = False
        keep = jnp.asarray(keep)
    bi = rand(rng, (R, L), dt) if bias else None
    y = jax.jit(lambda x: kj.masked_softmax(x, keep, bi, scale))(x)
    z = scale * x.astype(jnp.float64) + (bi.astype(jnp.float64) if bias else 0)
    if mask:
        z = jnp.where(keep, z, -jnp.inf)
    want = jnp.nan_to_num(jax.nn.softmax(z, -1), nan=0.0)
    close("y", y, want, TOL[dt], TOL[dt])


def permute_case(rng):
    N = rng.choice([0, 1, 3, 64, 1000])
    D = rng.choice([1, 8, 63, 1000, 4096])
    M = rng.choice([0, 1, N, N + 3]) if N else rng.choice([0, 3])
    dt = rng.choice(DT)
    probs = rng.random() < 0.5
    desc = dict(N=N, D=D, M=M, dt=dt.__name__, probs=probs)
    return desc, lambda: run_permute(rng, N, D, M, dt, probs)


def run_permute(rng, N, D, M, dt, probs):
    x = rand(rng, (N, D), dt)
    rows = list(range(N))
    rng.shuffle(rows)
    m = np.array([rows[j] if j < N else -1 for j in range(M)], np.int32)
    p = jnp.asarray(np.random.default_rng(rng.getrandbits(32)).random(N), jnp.float32) if probs else None
    out, pout = jax.jit(lambda x, p: kj.permute_rows(x, jnp.asarray(m), p))(x, p)
    js = np.flatnonzero((m >= 0) & (m < N))  # the output rows named, and the rows they take
    src = m[js]
    want = np.zeros((M, D), np.float32)
    want[js] = np.asarray(x.astype(jnp.float32))[src]
    close("out", out, want, 0, 0)
    if probs:
        pw = np.zeros(M, np.float32)
        pw[js] = np.asarray(p)[src]
        close("probs_out", pout, pw, 0, 0)
    if M and D and N:
        dout = rand(rng, (M, D), dt)
        g = jax.grad(lambda x: jnp.sum(kj.permute_rows(x, jnp.asarray(m), None)[0].astype(jnp.float32) *
                                       dout.astype(jnp.float32)))(x)
        dx = np.zeros((N, D), np.float32)
        dx[src] = np.asarray(dout.astype(jnp.float32))[js]
        close("dx", g, dx, 0, 0)


CASES = [(norm_case, 6), (softmax_case, 2), (permute_case, 2)]


def attempt(kind, seed, desc):
    """Run one case (built from its seed): None when it matched, "refused"
    when ktune refused it, else the failure, printed."""
    try:
        kind(random.Random(seed))[1]()
        return None
    except Bad as e:
        why = str(e)
    except Exception as e:  # noqa: BLE001 - ktune's refusals reach here through XLA too
        text = str(e)
        if "ktune" in text or type(e).__name__ == "KtuneError":
            print("refused %s %d %s: %s" % (kind.__name__, seed, desc, text.strip().splitlines()[-1][:300]))
            return "refused"
        why = traceback.format_exc(limit=4).replace("\n", " | ")
    print("FAILED %s %d %s: %s" % (kind.__name__, seed, desc, why))
    return why


def main():
    run = fuzz_seeds.Run(sys.argv[1:3], CASES)
    refused, failed = 0, 0
    for seed, kind in run:
        r = attempt(kind, seed, kind(random.Random(seed))[0])
        refused += r == "refused"
        failed += r is not None and r != "refused"
    return run.close(refused, failed)


if __name__ == "__main__":
    sys.exit(main())
