"""make bench, JAX part: each ktune.jax op under jax.jit against the same
computation in jax.numpy (XLA's fusion), and against the same ktune kernel
called from PyTorch (ktune.ops, timed through CUDA graphs as in
bench_kernels.py) when torch imports. GPU time per op: one jitted call
applies the op REPS times in a row, each to the previous result, with an
optimization barrier after each (unrolled, so no loop carries a copy; the
barrier keeps XLA from fusing a chain of norms into one kernel or composing
a chain of gathers into one), and JAX's per-call dispatch is paid once per
REPS ops. The gradient rows are a forward and a backward of x alone
(jax.vjp with a cotangent given, autograd.grad with one in PyTorch): the
weight and bias are constants, so no dw or db is summed. Each row names the
handler's entry its calls took: "graph" (keys settled while tracing, which
XLA may record into its command buffers) or "plain" (KTUNE_JAX_GRAPHS=0, or
a key that did not settle). Host cost: a tiny shape called back to
back from Python, one sync at the end. Keys are tuned first (blocking), so
the table measures tuned configs. BENCH_JAX_SHAPES="TxD,..." picks the
rows."""
import os
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("KTUNE_MODE", "tune")  # tuned times, not the stand-ins of background tuning
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import ktune  # noqa: E402
from ktune import jax as kj  # noqa: E402


REPS = 50


def chained(op):
    """op applied REPS times, each to the previous result (first arg)."""
    def run(x, *rest):
        for _ in range(REPS):
            x = jax.lax.optimization_barrier(op(x, *rest).astype(x.dtype))
        return x
    return jax.jit(run)


def shapes():
    """The rows: $BENCH_JAX_SHAPES ("1000x1536,4096x4096"), else three."""
    got = os.environ.get("BENCH_JAX_SHAPES")
    if not got:
        return ((4096, 4096), (16384, 2048), (1000, 1536))
    return tuple(tuple(int(v) for v in s.split("x")) for s in got.split(","))


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
    dy = jax.random.normal(jax.random.PRNGKey(1), (T, D), jnp.float32).astype(jnp.bfloat16)
    mask = jax.random.uniform(k, (T, D)) > 0.1
    return [
        ("rms_norm", (x, w), lambda x, w: kj.rms_norm(x, w), jnp_rms),
        ("layer_norm", (x, w, b), lambda x, w, b: kj.layer_norm(x, w, b), jnp_ln),
        ("rms_norm fwd+bwd", (x, w, dy), lambda x, w, dy: jax.vjp(lambda x: kj.rms_norm(x, w), x)[1](dy)[0],
         lambda x, w, dy: jax.vjp(lambda x: jnp_rms(x, w), x)[1](dy)[0]),
        ("layer_norm fwd+bwd", (x, w, b, dy),
         lambda x, w, b, dy: jax.vjp(lambda x: kj.layer_norm(x, w, b), x)[1](dy)[0],
         lambda x, w, b, dy: jax.vjp(lambda x: jnp_ln(x, w, b), x)[1](dy)[0]),
        ("permute_rows", (x, perm), lambda x, p: kj.permute_rows(x, p)[0], lambda x, p: x[p]),
        ("masked_softmax", (x, mask), lambda x, m: kj.masked_softmax(x, m, None, 0.125), jnp_softmax),
    ]


def torch_ops():
    """The same kernels through ktune.ops: name -> (make(T, D) -> fn), or
    {} where torch does not import."""
    try:
        import torch
        from ktune import ops
    except ImportError:
        return {}
    dev = torch.device("cuda")

    def tensors(T, D):
        x = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
        return x, torch.ones(D, device=dev, dtype=torch.bfloat16), torch.zeros(D, device=dev, dtype=torch.bfloat16)

    def rms(T, D):
        x, w, _ = tensors(T, D)
        return lambda: ops.rms_norm(x, w)

    def ln(T, D):
        x, w, b = tensors(T, D)
        return lambda: ops.layer_norm(x, w, b)

    def rms_grad(T, D):
        x, w, _ = tensors(T, D)
        dy = torch.randn_like(x)
        x.requires_grad_(True)
        return lambda: torch.autograd.grad(ops.rms_norm(x, w), x, dy)

    def ln_grad(T, D):
        x, w, b = tensors(T, D)
        dy = torch.randn_like(x)
        x.requires_grad_(True)
        return lambda: torch.autograd.grad(ops.layer_norm(x, w, b), x, dy)

    def permute(T, D):
        x, _, _ = tensors(T, D)
        p = torch.randperm(T, device=dev, dtype=torch.int32)
        return lambda: ops.permute_rows(x, p)

    def softmax(T, D):
        x, _, _ = tensors(T, D)
        m = torch.rand(T, D, device=dev) > 0.1
        return lambda: ops.masked_softmax(x, m, None, 0.125)
    return {"rms_norm": rms, "layer_norm": ln, "rms_norm fwd+bwd": rms_grad, "layer_norm fwd+bwd": ln_grad,
            "permute_rows": permute, "masked_softmax": softmax}


def torch_time(name, make, T, D):
    """GPU time through graphs; autograd's backward, which graphs do not
    capture here, in eager bursts (bench_kernels.py's two timers)."""
    from bench_kernels import eager_time_us, graph_time_us
    fn = make(T, D)
    fn()
    ktune.wait_tuning(600)
    return eager_time_us(fn) if "bwd" in name else graph_time_us(fn)


def torch_host_us(make, n):
    import torch
    fn = make(4, 4096)
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    if not kj.available():
        print("bench_jax.py: libktune_jax.so is not built (make jax); the JAX table is skipped")
        return
    th = torch_ops()
    print("\nJAX (bf16, jit): GPU time per op (%d chained in one call), us; PyTorch: the same ktune kernel "
          "from ktune.ops, through CUDA graphs (fwd+bwd: eager bursts)%s" % (REPS, "" if th else " (torch does not import: -)"))
    print("| op | shape | ktune.jax | jax.numpy | jax.numpy / ktune.jax | ktune from PyTorch |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for T, D in shapes():
        for name, args, ours, theirs in cases(T, D):
            f, g = chained(ours), chained(theirs)
            jax.block_until_ready(f(*args))
            ktune.wait_tuning(600)
            entry = "graph" if "ktune_graph" in f.lower(*args).as_text() else "plain"
            a, b = per_call_us(f, args, 20) / REPS, per_call_us(g, args, 20) / REPS
            pt = "%.1f" % torch_time(name, th[name], T, D) if name in th else "-"
            print("| %s (%s entry) | %dx%d | %.1f | %.1f | %.2fx | %s |" % (name, entry, T, D, a, b, b / a, pt),
                  flush=True)
    print("\nHost cost per call at 4x4096 (bf16, 5000 calls, one sync), us")
    print("| op | ktune.jax (jit) | jax.numpy (jit) | ktune from PyTorch (eager) |")
    print("| --- | ---: | ---: | ---: |")
    for name, args, ours, theirs in cases(4, 4096)[:2]:
        f, g = jax.jit(ours), jax.jit(theirs)
        jax.block_until_ready(f(*args))
        ktune.wait_tuning(600)
        pt = "%.1f" % torch_host_us(th[name], 5000) if name in th else "-"
        print("| %s | %.1f | %.1f | %s |" % (name, per_call_us(f, args, 5000), per_call_us(g, args, 5000), pt))


if __name__ == "__main__":
    main()
