"""make bench, JAX part: each ktune.jax op under jax.jit against the same
computation in jax.numpy (XLA's fusion). GPU time per op: one jitted call
runs the op REPS times in a lax.fori_loop, each on the previous result, so
that JAX's per-call dispatch is paid once per REPS ops. Host cost: a tiny
shape called back to back from Python, one sync at the end. Keys are tuned
first (blocking), so the table measures tuned configs."""
import os
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import ktune  # noqa: E402
from ktune import jax as kj  # noqa: E402


REPS = 50


def looped(op):
    """op applied REPS times, each to the previous result (first arg)."""
    return jax.jit(lambda x, *rest: jax.lax.fori_loop(0, REPS, lambda i, y: op(y, *rest).astype(x.dtype), x))


def per_call_us(f, args, n):
    jax.block_until_ready(f(*args))
    t0 = time.perf_counter()
    for _ in range(n):
        y = f(*args)
    jax.block_until_ready(y)
    return (time.perf_counter() - t0) / n * 1e6


def jnp_rms(x, w):
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + 1e-6) * w.astype(jnp.float32)).astype(x.dtype)


def jnp_ln(x, w, b):
    xf = x.astype(jnp.float32)
    m = jnp.mean(xf, -1, keepdims=True)
    v = jnp.mean((xf - m) ** 2, -1, keepdims=True)
    return ((xf - m) * jax.lax.rsqrt(v + 1e-5) * w.astype(jnp.float32) + b.astype(jnp.float32)).astype(x.dtype)


def jnp_softmax(x, mask):
    z = jnp.where(mask, x.astype(jnp.float32) * 0.125, -jnp.inf)
    return jax.nn.softmax(z, -1).astype(x.dtype)


def cases(T, D):
    k = jax.random.PRNGKey(0)
    x = jax.random.normal(k, (T, D), jnp.float32).astype(jnp.bfloat16)
    w = jnp.ones((D,), jnp.bfloat16)
    b = jnp.zeros((D,), jnp.bfloat16)
    perm = jax.random.permutation(k, T).astype(jnp.int32)
    mask = jax.random.uniform(k, (T, D)) > 0.1
    return [
        ("rms_norm", (x, w), lambda x, w: kj.rms_norm(x, w), jnp_rms),
        ("layer_norm", (x, w, b), lambda x, w, b: kj.layer_norm(x, w, b), jnp_ln),
        ("rms_norm grad", (x, w), jax.grad(lambda x, w: kj.rms_norm(x, w).astype(jnp.float32).sum()),
         jax.grad(lambda x, w: jnp_rms(x, w).astype(jnp.float32).sum())),
        ("permute_rows", (x, perm), lambda x, p: kj.permute_rows(x, p)[0], lambda x, p: x[p]),
        ("masked_softmax", (x, mask), lambda x, m: kj.masked_softmax(x, m, None, 0.125), jnp_softmax),
    ]


def main():
    if not kj.available():
        print("bench_jax.py: libktune_jax.so is not built (make jax); the JAX table is skipped")
        return
    print("\nJAX (bf16, jit): GPU time per op (%d chained in one call), us" % REPS)
    print("| op | shape | ktune | jax.numpy | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for T, D in ((4096, 4096), (16384, 2048), (1000, 1536)):
        for name, args, ours, theirs in cases(T, D):
            f, g = looped(ours), looped(theirs)
            jax.block_until_ready(f(*args))
            ktune.wait_tuning(600)
            a, b = per_call_us(f, args, 20) / REPS, per_call_us(g, args, 20) / REPS
            print("| %s | %dx%d | %.1f | %.1f | %.2fx |" % (name, T, D, a, b, b / a))
    print("\nJAX host cost per call at 4x4096 (bf16, jit, 5000 calls, one sync), us")
    print("| op | ktune | jax.numpy |")
    print("| --- | ---: | ---: |")
    for name, args, ours, theirs in cases(4, 4096)[:2]:
        f, g = jax.jit(ours), jax.jit(theirs)
        jax.block_until_ready(f(*args))
        ktune.wait_tuning(600)
        print("| %s | %.1f | %.1f |" % (name, per_call_us(f, args, 5000), per_call_us(g, args, 5000)))


if __name__ == "__main__":
    main()
