"""ktune.jax on a GPU (make gpu-test, when jax imports and make jax built
the handler): the norms under jit, grad and vmap against float64 at ragged
shapes in bf16, f16 and f32 (vmap in one launch where the batch folds
into the rows), groups > 1; an in-place RMSNorm through XLA's
input_output_aliases applied exactly once, also on the call that tunes; a
ktune error raised with ktune's message; a key tuned by ktune tune or
PyTorch is a hit; under XLA's command buffers (`cmdbuf`), calls on the graph
entry replayed without ktune, the plain entry launched every run, and an
unsettled key forced onto the graph entry right through its miss and the
replays. Ends with "N passed, N failed, N skipped"."""
import os
import sys

if sys.argv[1:] == ["cmdbuf"]:
    # XLA records custom calls into CUDA graphs, however short the run of
    # commands: those on ktune's command-buffer entry (keys settled while
    # tracing), never those on its plain one (a miss may tune).
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + \
        " --xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"
else:
    # No command buffers: every run of a jitted function calls the handler,
    # so the runtime's launch count says how many kernels an op launches.
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_gpu_enable_command_buffer="
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import ktune  # noqa: E402
from ktune import jax as kj  # noqa: E402
from checks import check, summary  # noqa: E402

TOL = {jnp.bfloat16: 0.04, jnp.float16: 6e-3, jnp.float32: 2e-5}




def ref_norm(x, w, b, eps, rms):
    x = x.astype(jnp.float64)
    if rms:
        y = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps)
    else:
        m = jnp.mean(x, -1, keepdims=True)
        y = (x - m) * jax.lax.rsqrt(jnp.mean((x - m) ** 2, -1, keepdims=True) + eps)
    if w is not None:
        y = y * w.astype(jnp.float64)
    if b is not None:
        y = y + b.astype(jnp.float64)
    return y


def err(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(a - ref)) / (1.0 + np.max(np.abs(ref)))) if a.size else 0.0


def forward_and_grad(T, D, dt, rms):
    key = jax.random.PRNGKey(T * 131 + D)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    x = jax.random.normal(k1, (T, D), jnp.float32).astype(dt)
    w = (1 + 0.1 * jax.random.normal(k2, (D,), jnp.float32)).astype(dt)
    b = None if rms else (0.1 * jax.random.normal(k3, (D,), jnp.float32)).astype(dt)
    g = jax.random.normal(k4, (T, D), jnp.float32).astype(dt)
    eps = 1e-6 if rms else 1e-5
    f = (lambda x, w, b: kj.rms_norm(x, w, eps)) if rms else (lambda x, w, b: kj.layer_norm(x, w, b, eps))
    y = jax.jit(f)(x, w, b)
    assert y.dtype == dt and y.shape == x.shape
    e = err(y, ref_norm(x, w, b, eps, rms))
    assert e < TOL[dt], "forward error %g" % e
    loss = lambda x, w, b: jnp.sum(f(x, w, b).astype(jnp.float32) * g.astype(jnp.float32))  # noqa: E731
    rloss = lambda x, w, b: jnp.sum(ref_norm(x, w, b, eps, rms) * g.astype(jnp.float64))  # noqa: E731
    argn = (0, 1) if rms else (0, 1, 2)
    got = jax.jit(jax.grad(loss, argnums=argn))(x, w, b)
    want = jax.grad(rloss, argnums=argn)(x.astype(jnp.float64), w.astype(jnp.float64),
                                          None if b is None else b.astype(jnp.float64))
    for name, a, r in zip("xwb", got, want):
        e = err(a, r)
        # dw and db sum over T rows: their rounding grows with T in 16 bits.
        tol = TOL[dt] * (1 if name == "x" else max(1.0, np.sqrt(T) / 4))
        assert e < tol, "d%s error %g (T=%d D=%d %s)" % (name, e, T, D, dt.__name__)


def grid():
    for dt in (jnp.bfloat16, jnp.float16, jnp.float32):
        for T, D in ((1, 3), (7, 100), (4097, 4096), (7, 4096), (4097, 100), (1, 4096)):
            for rms in (1, 0):
                forward_and_grad(T, D, dt, rms)


def launches():
    return ktune.runtime(kj._devices()[0]).stats()["launches"]


def launched(f, *a):
    """f's result, and the kernels its second run launched (the first may
    tune)."""
    jax.block_until_ready(f(*a))
    n = launches()
    y = jax.block_until_ready(f(*a))
    return y, launches() - n


def frozen_grads():
    """Gradients for some inputs only (argnums, stop_gradient) against
    float64: a weight or bias left out is read for dx and never summed (no
    reduce where nothing is), and an output without a cotangent is not
    read: h alone going on launches no backward (on an H200 XLA dropped
    the forward as well: no launch at all)."""
    for dt in (jnp.bfloat16, jnp.float16):
        for T, D in ((4097, 4096), (3000, 1000), (7, 100)):
            k = jax.random.split(jax.random.PRNGKey(T + D), 4)
            x = jax.random.normal(k[0], (T, D), jnp.float32).astype(dt)
            w = (1 + 0.1 * jax.random.normal(k[1], (D,), jnp.float32)).astype(dt)
            b = (0.1 * jax.random.normal(k[2], (D,), jnp.float32)).astype(dt)
            g = jax.random.normal(k[3], (T, D), jnp.float32).astype(dt)
            loss = lambda x, w, b: jnp.sum(kj.layer_norm(x, w, b).astype(jnp.float32) * g.astype(jnp.float32))  # noqa
            rloss = lambda x, w, b: jnp.sum(ref_norm(x, w, b, 1e-5, 0) * g.astype(jnp.float64))  # noqa: E731
            want = jax.grad(rloss, argnums=(0, 1, 2))(*(a.astype(jnp.float64) for a in (x, w, b)))
            one = ktune.norm_bwd_one_program(T, D, 1)
            for argnums, n_want in (((0,), 2), ((0, 2), 2 if one else 3), ((1,), 2 if one else 3)):
                got, n = launched(jax.jit(jax.grad(loss, argnums=argnums)), x, w, b)
                assert n == n_want, (T, D, argnums, n)
                for i, a in zip(argnums, got):
                    tol = TOL[dt] * (1 if i == 0 else max(1.0, np.sqrt(T) / 4))
                    assert a.dtype == dt and err(a, want[i]) < tol, (T, D, argnums, i, err(a, want[i]))
            sg = jax.jit(jax.grad(lambda x, w, b: loss(x, jax.lax.stop_gradient(w), b), argnums=(0, 1)))
            got, n = launched(sg, x, w, b)
            assert n == 2 and err(got[0], want[0]) < TOL[dt] and not np.any(np.asarray(got[1], np.float32)), n
    x = jax.random.normal(jax.random.PRNGKey(9), (300, 256), jnp.float32)
    r = jax.random.normal(jax.random.PRNGKey(10), (300, 256), jnp.float32)
    w = jnp.ones((256,), jnp.float32)
    got, n = launched(jax.jit(jax.grad(lambda x: jnp.sum(kj.rms_norm(x, w, residual=r, return_residual=True)[1]))),
                      x)
    # No backward; XLA may drop the forward too, as nothing reads its results.
    assert n <= 1 and np.array_equal(np.asarray(got), np.ones((300, 256), np.float32)), n


def vmapped():
    """vmap folds the mapped axis into the rows: one launch for the batch
    (also nested, also mapped on axis 1), one an example where the weight
    is mapped too; results per example as the float64 reference."""
    B, T, D = 3, 5, 100
    x = jax.random.normal(jax.random.PRNGKey(1), (B, T, D), jnp.float32)
    w = 1 + 0.1 * jax.random.normal(jax.random.PRNGKey(2), (D,), jnp.float32)
    ws = 1 + 0.1 * jax.random.normal(jax.random.PRNGKey(3), (B, D), jnp.float32)
    b = 0.1 * jax.random.normal(jax.random.PRNGKey(4), (D,), jnp.float32)
    tol = TOL[jnp.float32]
    y, n = launched(jax.jit(jax.vmap(lambda x: kj.rms_norm(x, w))), x)
    assert n == 1 and err(y, ref_norm(x, w, None, 1e-6, 1)) < tol, n
    y, n = launched(jax.jit(jax.vmap(lambda x: kj.layer_norm(x, w, b))), x)
    assert n == 1 and err(y, ref_norm(x, w, b, 1e-5, 0)) < tol, n
    y, n = launched(jax.jit(jax.vmap(jax.vmap(lambda r: kj.rms_norm(r, w)))), x)
    assert n == 1 and err(y, ref_norm(x, w, None, 1e-6, 1)) < tol, n
    y, n = launched(jax.jit(jax.vmap(lambda x: kj.rms_norm(x, w), in_axes=1, out_axes=1)), x)
    assert n == 1 and err(y, ref_norm(x, w, None, 1e-6, 1)) < tol, n
    y, n = launched(jax.jit(jax.vmap(lambda x, w: kj.rms_norm(x, w))), x, ws)
    assert n == B and err(y, ref_norm(x, ws[:, None, :], None, 1e-6, 1)) < tol, n
    y, n = launched(jax.jit(jax.vmap(lambda x: kj.rms_norm_(x, w))), x)
    assert n == 1 and err(y, ref_norm(x, w, None, 1e-6, 1)) < tol, n


def vmapped_grads():
    """Per-example gradients (vmap of grad) of x, w and b against float64,
    where the backward folds the batch (rows split evenly over programs)
    and where it cannot (T = 4097 = 17 * 241) and runs an example at a
    time."""
    for B, T, D, dt in ((3, 8, 256, jnp.float32), (3, 7, 100, jnp.bfloat16), (2, 4097, 96, jnp.float32)):
        k = jax.random.split(jax.random.PRNGKey(T + D), 4)
        x = jax.random.normal(k[0], (B, T, D), jnp.float32).astype(dt)
        w = (1 + 0.1 * jax.random.normal(k[1], (D,), jnp.float32)).astype(dt)
        b = (0.1 * jax.random.normal(k[2], (D,), jnp.float32)).astype(dt)
        g = jax.random.normal(k[3], (B, T, D), jnp.float32)
        for rms in (1, 0):
            f = (lambda x, w, b: kj.rms_norm(x, w)) if rms else (lambda x, w, b: kj.layer_norm(x, w, b))
            eps = 1e-6 if rms else 1e-5
            loss = lambda x, w, b, g: jnp.sum(f(x, w, b).astype(jnp.float32) * g)  # noqa: E731
            rloss = lambda x, w, b, g: jnp.sum(ref_norm(x, w, None if rms else b, eps, rms) * g)  # noqa: E731
            got = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=(0, None, None, 0)))(x, w, b, g)
            want = jax.vmap(jax.grad(rloss, argnums=(0, 1, 2)), in_axes=(0, None, None, 0))(
                x.astype(jnp.float64), w.astype(jnp.float64), b.astype(jnp.float64), g.astype(jnp.float64))
            for name, a, r in zip("xwb" if not rms else "xw", got, want):
                assert a.shape == r.shape, (name, a.shape, r.shape)
                e = err(a, r)
                assert e < TOL[dt] * (1 if name == "x" else max(1.0, np.sqrt(T) / 4)), \
                    "d%s error %g (B=%d T=%d D=%d rms=%d)" % (name, e, B, T, D, rms)


def few_rows_one_launch():
    """The backward of a few short rows is one launch (layernorm_bwd_row,
    which writes dw and db itself), of more rows two (layernorm_bwd, then
    its reduce); x, w and b's gradients against float64 either way."""
    for T, D, dt, bwd in ((1, 4096, jnp.bfloat16, 1), (8, 256, jnp.float32, 1), (13, 1000, jnp.float16, 1),
                          (64, 1024, jnp.float32, 2)):
        assert ktune.norm_bwd_one_program(T, D, 1) == (bwd == 1), (T, D)
        k = jax.random.split(jax.random.PRNGKey(T * 7 + D), 4)
        x = jax.random.normal(k[0], (T, D), jnp.float32).astype(dt)
        w = (1 + 0.1 * jax.random.normal(k[1], (D,), jnp.float32)).astype(dt)
        b = (0.1 * jax.random.normal(k[2], (D,), jnp.float32)).astype(dt)
        g = jax.random.normal(k[3], (T, D), jnp.float32)
        for rms in (1, 0):
            f = (lambda x, w, b: kj.rms_norm(x, w)) if rms else (lambda x, w, b: kj.layer_norm(x, w, b))
            eps = 1e-6 if rms else 1e-5
            loss = lambda x, w, b, g: jnp.sum(f(x, w, b).astype(jnp.float32) * g)  # noqa: E731
            rloss = lambda x, w, b, g: jnp.sum(ref_norm(x, w, None if rms else b, eps, rms) * g)  # noqa: E731
            _, nf = launched(jax.jit(f), x, w, b)
            got, n = launched(jax.jit(jax.grad(loss, argnums=(0, 1, 2))), x, w, b, g)
            assert n == nf + bwd, "T=%d D=%d rms=%d: %d launches, forward %d" % (T, D, rms, n, nf)
            want = jax.grad(rloss, argnums=(0, 1, 2))(x.astype(jnp.float64), w.astype(jnp.float64),
                                                      b.astype(jnp.float64), g.astype(jnp.float64))
            for name, a, r in zip("xw" if rms else "xwb", got, want):
                e = err(a, r)
                assert e < TOL[dt] * (1 if name == "x" else max(1.0, np.sqrt(T) / 4)), \
                    "d%s error %g (T=%d D=%d rms=%d)" % (name, e, T, D, rms)


def vmapped_indexed():
    """vmap of the gather, the scatter and the softmax: one launch each;
    map entries outside the rows stay outside (a zero row, a skipped one)
    and never reach a neighbour example."""
    B, N, D = 3, 6, 40
    x = jax.random.normal(jax.random.PRNGKey(5), (B, N, D), jnp.float32)
    maps = jnp.array([[5, 4, 3, 2, 1, 0], [0, -1, 2, 6, 4, 1], [1, 1, 0, 0, 5, 2]], jnp.int32)
    (out, _), n = launched(jax.jit(jax.vmap(lambda x, m: kj.permute_rows(x, m))), x, maps)
    want = np.zeros((B, N, D), np.float32)
    xn, mn = np.asarray(x), np.asarray(maps)
    for i in range(B):
        for j in range(N):
            if 0 <= mn[i, j] < N:
                want[i, j] = xn[i, mn[i, j]]
    assert n == 1 and np.array_equal(np.asarray(out), want), n
    (out, _), n = launched(jax.jit(jax.vmap(lambda m: kj.permute_rows(x[0], m))), maps)
    assert n == 1 and np.array_equal(np.asarray(out[0]), xn[0][::-1]), n
    perms = jnp.array([[5, 4, 3, 2, 1, 0], [0, 7, 2, 3, 4, -2], [2, 0, 1, 5, 3, 4]], jnp.int32)
    (back, _), n = launched(jax.jit(jax.vmap(lambda o, m: kj.unpermute_rows(o, m, N))), x, perms)
    want = np.zeros((B, N, D), np.float32)
    pn = np.asarray(perms)
    for i in range(B):
        for j in range(N):
            if 0 <= pn[i, j] < N:
                want[i, pn[i, j]] = xn[i, j]
    assert n == 1 and np.array_equal(np.asarray(back), want), n
    mask = jax.random.uniform(jax.random.PRNGKey(6), (B, N, D)) > 0.3
    y, n = launched(jax.jit(jax.vmap(lambda x, m: kj.masked_softmax(x, m, None, 0.5))), x, mask)
    z = np.where(np.asarray(mask), 0.5 * xn.astype(np.float64), -np.inf)
    e = np.exp(z - z.max(-1, keepdims=True))
    assert n == 1 and err(y, np.nan_to_num(e / e.sum(-1, keepdims=True))) < TOL[jnp.float32], n


def ref_group(x, w, b, eps, groups):
    """LayerNorm of each of `groups` equal parts of a row, then w and b."""
    x = np.asarray(x, np.float64)
    xs = x.reshape(x.shape[:-1] + (groups, -1))
    m = xs.mean(-1, keepdims=True)
    y = ((xs - m) / np.sqrt(((xs - m) ** 2).mean(-1, keepdims=True) + eps)).reshape(x.shape)
    return y * np.asarray(w, np.float64) + np.asarray(b, np.float64)


def grouped():
    """layer_norm with groups > 1 (a group norm over parts of each row),
    forward and gradients against float64, at ragged rows."""
    for T, D, G, dt in ((7, 96, 4, jnp.float32), (33, 4096, 2, jnp.bfloat16), (1, 48, 3, jnp.float16)):
        k = jax.random.split(jax.random.PRNGKey(G * D), 4)
        x = jax.random.normal(k[0], (T, D), jnp.float32).astype(dt)
        w = (1 + 0.1 * jax.random.normal(k[1], (D,), jnp.float32)).astype(dt)
        b = (0.1 * jax.random.normal(k[2], (D,), jnp.float32)).astype(dt)
        g = jax.random.normal(k[3], (T, D), jnp.float32)
        y = jax.jit(lambda x, w, b: kj.layer_norm(x, w, b, groups=G))(x, w, b)
        assert err(y, ref_group(x.astype(jnp.float32), w.astype(jnp.float32), b.astype(jnp.float32), 1e-5, G)) < TOL[dt]
        got = jax.jit(jax.grad(lambda x, w, b: jnp.sum(kj.layer_norm(x, w, b, groups=G).astype(jnp.float32) * g),
                               argnums=(0, 1, 2)))(x, w, b)

        def rloss(x, w, b):
            xs = x.reshape(T, G, -1)
            m = jnp.mean(xs, -1, keepdims=True)
            y = ((xs - m) * jax.lax.rsqrt(jnp.mean((xs - m) ** 2, -1, keepdims=True) + 1e-5)).reshape(T, D)
            return jnp.sum((y * w + b) * g.astype(jnp.float64))
        want = jax.grad(rloss, argnums=(0, 1, 2))(*(a.astype(jnp.float64) for a in (x, w, b)))
        for name, a, r in zip("xwb", got, want):
            e = err(a, r)
            assert e < TOL[dt] * (1 if name == "x" else max(1.0, np.sqrt(T) / 4)), "d%s error %g (T=%d D=%d G=%d)" % (
                name, e, T, D, G)


def residual_out():
    x = jax.random.normal(jax.random.PRNGKey(2), (33, 256), jnp.bfloat16)
    r = jax.random.normal(jax.random.PRNGKey(3), (33, 256), jnp.bfloat16)
    w = jnp.ones((256,), jnp.bfloat16)
    y, h = jax.jit(lambda x, r: kj.rms_norm(x, w, residual=r, return_residual=True))(x, r)
    hs = x.astype(jnp.float32) + r.astype(jnp.float32)
    assert err(h, hs) < TOL[jnp.bfloat16] and err(y, ref_norm(hs, w, None, 1e-6, 1)) < TOL[jnp.bfloat16]


def in_place_once():
    """x donated and aliased to the output: the first call (which tunes, in
    tune mode with KTUNE_JAX_GRAPHS=0; ktune.jax otherwise settles the key
    while tracing) applies the norm exactly once: bit for bit what the same
    kernel writes out of place, and far from two applications (w is not
    1, so a second one changes every row)."""
    T, D = 1000, 1536
    x0 = jax.random.normal(jax.random.PRNGKey(4), (T, D), jnp.float32).astype(jnp.bfloat16)
    w = (1.5 + 0.25 * jax.random.normal(jax.random.PRNGKey(5), (D,), jnp.float32)).astype(jnp.bfloat16)
    host = np.asarray(x0.astype(jnp.float32))
    y = jax.jit(lambda x: kj.rms_norm_(x, w), donate_argnums=0)(jnp.array(x0))
    s = ktune.runtime(kj._devices()[0]).stats()
    assert s["tunings"] == 1, s

    def out_of_place(x):
        return kj._call("rmsnorm", [("o", 0), ("i", x), ("n", "bf16"), ("i", w), T, D, 1e-6],
                        [jax.ShapeDtypeStruct((T, D), jnp.bfloat16)])[0]
    once = jax.jit(out_of_place)(x0)
    assert np.array_equal(np.asarray(y, np.float32), np.asarray(once, np.float32)), "not the out-of-place result"
    assert err(y, ref_norm(host, np.asarray(w, np.float64), None, 1e-6, 1)) < TOL[jnp.bfloat16]
    twice = jax.jit(out_of_place)(once)
    assert err(twice, y) > 0.1


def error_message():
    """An output whose dtype is not the input's, or a buffer shorter than the
    call's sizes: ktune refuses the call and XLA raises ktune's message."""
    x = jnp.ones((4, 64), jnp.float32)
    try:
        y = kj._call("layernorm_fwd", [("o", 0), ("i", x), ("n", "f32"), ("n", "f32"), ("n", "f32"), ("n", "f32"),
                                       ("n", "f32"), ("n", "f32"), 4, 64, 1, 1e-5, 1],
                     [jax.ShapeDtypeStruct((4, 64), jnp.bfloat16)])
        jax.block_until_ready(y)
    except Exception as e:
        assert "ktune: KT_ERR_ARGS: layernorm_fwd" in str(e), str(e)
        print("    raised: " + str(e).splitlines()[0][:160])
    else:
        raise AssertionError("no error")
    # A buffer shorter than its param's extent at the call's sizes (ktune.jax's
    # own checks passed by): refused by the handler before any launch, the
    # output left as XLA made it.
    n = launches()
    x, b = jnp.ones((3, 40), jnp.float32), jnp.ones((1, 40), jnp.float32)
    for params, want in (
            ([("o", 0), ("i", x), ("n", "u8"), ("i", b), 3, 40, 1.0],
             "ktune: KT_ERR_ARGS: masked_softmax: bias holds 40 elements; the call's sizes reach 120 (N * L)"),
            ([("o", 0), ("i", x), ("n", "u8"), ("n", "f32"), 4, 40, 1.0],
             "ktune: KT_ERR_ARGS: masked_softmax: y holds 120 elements; the call's sizes reach 160 (N * L)")):
        try:
            jax.block_until_ready(kj._call("masked_softmax", params, [jax.ShapeDtypeStruct((3, 40), jnp.float32)],
                                           graph=False))
        except Exception as e:
            assert want in str(e), str(e)
        else:
            raise AssertionError("no error: " + want)
    assert launches() == n, launches() - n


def permutes():
    """Gather and scatter are exact: out == x[perm], grads == scatter of g,
    in every dtype and ragged shapes; probs follow their rows."""
    for dt in (jnp.bfloat16, jnp.float16, jnp.float32):
        for N, D in ((1, 3), (7, 100), (4097, 96), (300, 4096)):
            x = jax.random.normal(jax.random.PRNGKey(N + D), (N, D), jnp.float32).astype(dt)
            perm = jax.random.permutation(jax.random.PRNGKey(N), N).astype(jnp.int32)
            p = jax.random.uniform(jax.random.PRNGKey(D), (N,), jnp.float32)
            out, pout = jax.jit(kj.permute_rows)(x, perm, p)
            xn = np.asarray(x.astype(jnp.float32))
            assert np.array_equal(np.asarray(out, np.float32), xn[np.asarray(perm)])
            assert np.array_equal(np.asarray(pout), np.asarray(p)[np.asarray(perm)])
            g = jax.random.normal(jax.random.PRNGKey(3), (N, D), jnp.float32).astype(dt)
            dx = jax.jit(jax.grad(lambda x: jnp.sum(kj.permute_rows(x, perm)[0].astype(jnp.float32) *
                                                   g.astype(jnp.float32))))(x)
            want = np.zeros((N, D), np.float32)
            want[np.asarray(perm)] = np.asarray(g.astype(jnp.float32))
            assert np.array_equal(np.asarray(dx, np.float32), want), "dx (N=%d D=%d)" % (N, D)
            back, _ = jax.jit(lambda o: kj.unpermute_rows(o, perm, N))(out)
            assert np.array_equal(np.asarray(back, np.float32), xn)


def unpermute_partial():
    """Rows the map does not name come back zero (the output starts from
    zeros aliased into the call)."""
    x = jnp.ones((5, 8), jnp.float32)
    back, _ = jax.jit(lambda o: kj.unpermute_rows(o, jnp.array([4, 0], jnp.int32), 6))(x[:2])
    want = np.zeros((6, 8), np.float32)
    want[[4, 0]] = 1
    assert np.array_equal(np.asarray(back), want)


def donated_not_in_place():
    """x donated to a kernel that cannot run in place: XLA must not hand the
    output x's buffer; the result is right either way."""
    x = jax.random.normal(jax.random.PRNGKey(9), (64, 256), jnp.float32)
    xn = np.asarray(x)
    perm = jnp.arange(63, -1, -1, dtype=jnp.int32)
    out, _ = jax.jit(lambda x: kj.permute_rows(x, perm), donate_argnums=0)(x)
    assert np.array_equal(np.asarray(out), xn[::-1])


def softmax():
    for dt in (jnp.bfloat16, jnp.float16, jnp.float32):
        for N, L in ((1, 3), (7, 100), (4097, 1000)):
            k1, k2, k3 = jax.random.split(jax.random.PRNGKey(N * L), 3)
            x = jax.random.normal(k1, (N, L), jnp.float32).astype(dt)
            mask = jax.random.uniform(k2, (N, L)) > 0.2
            g = jax.random.normal(k3, (N, L), jnp.float32)
            y = jax.jit(lambda x: kj.masked_softmax(x, mask, None, 0.5))(x)
            z = np.where(np.asarray(mask), 0.5 * np.asarray(x.astype(jnp.float32), np.float64), -np.inf)
            z = z - z.max(-1, keepdims=True)
            e = np.exp(z)
            ref = np.nan_to_num(e / e.sum(-1, keepdims=True))
            assert err(y, ref) < TOL[dt], "softmax %g" % err(y, ref)
            dx = jax.jit(jax.grad(lambda x: jnp.sum(kj.masked_softmax(x, mask, None, 0.5).astype(jnp.float32) * g)))(x)
            gd = np.asarray(g, np.float64)
            want = 0.5 * ref * (gd - (gd * ref).sum(-1, keepdims=True))
            assert err(dx, want) < 2 * TOL[dt], "softmax grad %g" % err(dx, want)


def command_buffers():
    """An unseen key under command buffers for custom calls: 100 runs of
    one jitted step, every result right."""
    x = jax.random.normal(jax.random.PRNGKey(11), (999, 2304), jnp.float32).astype(jnp.bfloat16)
    w = jnp.full((2304,), 0.5, jnp.bfloat16)
    step = jax.jit(lambda x: kj.rms_norm(x * 2, w) + 1)
    want = ref_norm(np.asarray(x.astype(jnp.float32)) * 2, np.full(2304, 0.5), None, 1e-6, 1) + 1
    for i in range(100):
        y = step(x)
        assert err(y, want) < TOL[jnp.bfloat16], "run %d" % i


def graphs_replay():
    """A key settled while tracing: XLA records the call into its CUDA graph
    and replays it, ktune launching only where XLA records it again (new
    buffer addresses); on the plain entry every run is a launch. Every
    result right either way."""
    T, D = 1234, 2560
    x = jax.random.normal(jax.random.PRNGKey(12), (T, D), jnp.float32).astype(jnp.bfloat16)
    w = jnp.full((D,), 0.75, jnp.bfloat16)
    want = ref_norm(np.asarray(x.astype(jnp.float32)) * 2, np.full(D, 0.75), None, 1e-6, 1) + 1
    assert "ktune_graph" in jax.jit(lambda x: kj.rms_norm(x * 2, w) + 1).lower(x).as_text()

    def step(graph):  # the same call, settled (None) or on the plain entry (False)
        out = [jax.ShapeDtypeStruct((T, D), jnp.bfloat16)]
        return jax.jit(lambda x: kj._call("rmsnorm", [("o", 0), ("i", x * 2), ("n", "bf16"), ("i", w), T, D, 1e-6],
                                          out, graph=graph)[0] + 1)
    settled, plain = step(None), step(False)
    assert "ktune_graph" in settled.lower(x).as_text() and "ktune_graph" not in plain.lower(x).as_text()
    for f, plain_entry in ((settled, False), (plain, True)):
        for i in range(3):  # XLA records its graph after a run or two
            jax.block_until_ready(f(x))
        n = launches()
        for i in range(20):
            assert err(f(x), want) < TOL[jnp.bfloat16], "run %d" % i
        # XLA calls the graph entry again only to record it for buffers at
        # addresses it has not recorded.
        got = launches() - n
        assert got == 20 if plain_entry else got <= 4, (got, plain_entry)


def graph_entry_on_a_miss():
    """A key nobody settled, forced onto the command-buffer entry: XLA runs
    the handler on its first runs (a miss, which tunes in tune mode), then
    records it and replays what it recorded; every result right."""
    T, D = 77, 3328
    x = jax.random.normal(jax.random.PRNGKey(13), (T, D), jnp.float32).astype(jnp.bfloat16)
    w = jnp.full((D,), 1.25, jnp.bfloat16)
    rt = ktune.runtime(kj._devices()[0])
    before = rt.stats()
    f = jax.jit(lambda x: kj._call("rmsnorm", [("o", 0), ("i", x), ("n", "bf16"), ("i", w), T, D, 1e-6],
                                   [jax.ShapeDtypeStruct((T, D), jnp.bfloat16)], graph=True)[0])
    want = ref_norm(np.asarray(x.astype(jnp.float32)), np.full(D, 1.25), None, 1e-6, 1)
    for i in range(5):
        assert err(f(x), want) < TOL[jnp.bfloat16], "run %d" % i
    assert rt.stats()["misses"] == before["misses"] + 1
    n = launches()
    for i in range(20):
        assert err(f(x), want) < TOL[jnp.bfloat16], "run %d" % (i + 5)
    assert launches() - n <= 4, launches() - n


def prewarmed_is_a_hit():
    """A key ktune tune stored is a hit from JAX: read from the cache, not
    tuned again."""
    import subprocess
    ktb = os.environ.get("KTUNE_BIN", "build/ktune")
    r = subprocess.run([ktb, "tune", "kernels_src/layernorm_fwd.json", "--plain", "--shape",
                        "N=512,D=1792,G=1,T=bf16,W=bf16,rms=1,b=null,mean=null,rstd=null,res=null,res_out=null"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    rt = ktune.runtime(kj._devices()[0])
    before = rt.stats()
    x = jnp.ones((512, 1792), jnp.bfloat16)
    jax.block_until_ready(jax.jit(lambda x: kj.rms_norm(x, jnp.ones((1792,), jnp.bfloat16)))(x))
    after = rt.stats()
    assert after["cache_loads"] == before["cache_loads"] + 1 and after["tunings"] == before["tunings"] and \
        after["standins"] == before["standins"], (before, after)


def no_rows():
    """A batch of no rows, or rows of no element (a last dim of 0): the
    norms' forward and their grads under jit give empty outputs and dw and
    db of zeros, rms_norm_ gives x, masked_softmax and its grad empty
    outputs, and none of it launches; nor does a vmap over no example."""
    for shape in ((0, 1024), (3, 0, 1024), (4, 0), (2, 3, 0)):
        D = shape[-1]
        for rms in (True, False):
            x = jnp.zeros(shape, jnp.bfloat16)
            w = jnp.ones((D,), jnp.bfloat16)
            b = None if rms else jnp.ones((D,), jnp.bfloat16)
            f = (lambda x, w, b: kj.rms_norm(x, w)) if rms else (lambda x, w, b: kj.layer_norm(x, w, b))
            y, n = launched(jax.jit(f), x, w, b)
            assert y.shape == shape and y.dtype == x.dtype and n == 0, (y.shape, n)
            loss = lambda x, w, b: f(x, w, b).astype(jnp.float32).sum()  # noqa: E731
            g, n = launched(jax.jit(jax.grad(loss, argnums=(0, 1) if rms else (0, 1, 2))), x, w, b)
            assert g[0].shape == shape and n == 0, (g[0].shape, n)
            for d in g[1:]:
                assert d.shape == (D,) and not np.asarray(d, np.float32).any(), d
        y, n = launched(jax.jit(lambda x, w: kj.rms_norm_(x, w)), x, w)
        assert y.shape == shape and n == 0, (y.shape, n)
        sm = lambda x: kj.masked_softmax(x, None, None, 0.5).astype(jnp.float32).sum()  # noqa: E731
        (y, g), n = launched(jax.jit(jax.value_and_grad(sm)), x)
        assert g.shape == shape and n == 0, (g.shape, n)
    # vmap over no example: empty results of an example's shape; nothing
    # launched, nothing tuned or queued for the example's shapes.
    rt = ktune.runtime(kj._devices()[0])
    before = rt.stats()
    x, w, b = jnp.ones((0, 7, 776), jnp.bfloat16), jnp.ones((776,), jnp.bfloat16), jnp.ones((776,), jnp.bfloat16)
    gs, n = launched(jax.jit(jax.vmap(jax.grad(lambda x, w, b: kj.layer_norm(x, w, b).astype(jnp.float32).sum(),
                                               argnums=(0, 1, 2)), in_axes=(0, None, None))), x, w, b)
    assert [g.shape for g in gs] == [(0, 7, 776), (0, 776), (0, 776)] and n == 0, ([g.shape for g in gs], n)
    y, n = launched(jax.jit(jax.vmap(lambda x: kj.masked_softmax(x, None, None, 0.5))), x)
    assert y.shape == (0, 7, 776) and n == 0, (y.shape, n)
    # a gather from no rows: rows of zeros, with probs; nothing launched
    (out, p), n = launched(jax.jit(kj.permute_rows), x.reshape(0, 776), jnp.arange(3, dtype=jnp.int32), jnp.ones((0,)))
    assert out.shape == (3, 776) and not np.asarray(out, np.float32).any() and not np.asarray(p).any() and n == 0
    after = rt.stats()
    # Tunings queued by earlier checks may end meanwhile (tunings and
    # async_done both count them): no other tuning may start.
    assert all(after[k] == before[k] for k in ("launches", "misses", "async_queued")), (before, after)
    assert after["tunings"] - after["async_done"] == before["tunings"] - before["async_done"], (before, after)


def other_layouts():
    """A residual of x's elements in another shape, a weight and bias of D
    elements as (1, D), probs as (N, 1), dprobs as (M, 1) and a softmax
    bias flattened: each cotangent in its primal's shape (JAX refuses any
    other), equal to the gradient of the usual shapes."""
    D = 64
    ks = jax.random.split(jax.random.PRNGKey(21), 5)
    x = jax.random.normal(ks[0], (4, 3, D), jnp.float32)
    r = jax.random.normal(ks[1], (12, D), jnp.float32)
    w = 1.0 + 0.25 * jax.random.normal(ks[2], (1, D), jnp.float32)
    b = jax.random.normal(ks[3], (1, D), jnp.float32)
    g = jax.random.normal(ks[4], (4, 3, D), jnp.float32)

    def loss(x, r, w, b, shaped):
        if not shaped:
            r, w, b = r.reshape(x.shape), w.reshape(D), b.reshape(D)
        y, h = kj.layer_norm(x, w, b, residual=r, return_residual=True)
        return jnp.sum(y * g) + jnp.sum(h)
    got = jax.jit(jax.grad(lambda *a: loss(*a, True), argnums=(0, 1, 2, 3)))(x, r, w, b)
    want = jax.jit(jax.grad(lambda *a: loss(*a, False), argnums=(0, 1, 2, 3)))(x, r, w, b)
    for name, a, v, p in zip(("x", "residual", "weight", "bias"), got, want, (x, r, w, b)):
        assert a.shape == p.shape, (name, a.shape, p.shape)
        assert err(a, v) < 1e-5, (name, err(a, v))
    dw = jax.jit(jax.grad(lambda w: jnp.sum(kj.rms_norm(x, w) * g)))(w)
    assert dw.shape == (1, D), dw.shape
    s = jax.random.normal(ks[0], (5, 8), jnp.float32)
    bias = jax.random.normal(ks[1], (40,), jnp.float32)
    wts = jnp.arange(40.0, dtype=jnp.float32).reshape(5, 8)
    db = jax.jit(jax.grad(lambda bias: jnp.sum(kj.masked_softmax(s, None, bias, 0.5) * wts)))(bias)
    db_ref = jax.grad(lambda bb: jnp.sum(jax.nn.softmax(0.5 * s + bb, -1) * wts))(bias.reshape(5, 8))
    assert db.shape == (40,) and err(db.reshape(5, 8), db_ref) < 1e-5, (db.shape, err(db.reshape(5, 8), db_ref))
    m = jnp.array([4, 0, 2], jnp.int32)
    probs = jnp.arange(1.0, 6.0, dtype=jnp.float32).reshape(5, 1)
    dp = jax.jit(jax.grad(lambda p: jnp.sum(kj.permute_rows(s, m, p)[1] * jnp.array([1.0, 2.0, 3.0]))))(probs)
    assert dp.shape == (5, 1) and np.asarray(dp).ravel().tolist() == [2.0, 0.0, 3.0, 0.0, 1.0], dp
    dq = jax.jit(jax.grad(lambda q: jnp.sum(kj.unpermute_rows(s[:3], m, 5, q)[1] * jnp.arange(5.0))))(
        jnp.ones((3, 1), jnp.float32))
    assert dq.shape == (3, 1) and np.asarray(dq).ravel().tolist() == [4.0, 0.0, 2.0], dq


MAIN_CHECKS = [
    ("norms under jit and grad against float64 (bf16, f16, f32; T 1..4097, D 3..4096)", grid),
    ("grads of some inputs only: frozen weight and bias read, never summed", frozen_grads),
    ("vmap: one launch for the batch (nested, axis 1, in place); a mapped weight an example at a time", vmapped),
    ("vmap of grad: per-example dx, dw, db against float64 (folded and one example at a time)", vmapped_grads),
    ("a few short rows: the backward in one launch, dw and db by it; more rows in two", few_rows_one_launch),
    ("vmap of permute_rows, unpermute_rows, masked_softmax: one launch, entries outside stay outside",
     vmapped_indexed),
    ("layer_norm with groups > 1: forward and grads against float64", grouped),
    ("residual in and out", residual_out),
    ("permute_rows / unpermute_rows: exact, with grads and probs", permutes),
    ("unpermute_rows leaves rows not named zero", unpermute_partial),
    ("a donated input of a kernel that cannot run in place", donated_not_in_place),
    ("masked_softmax under jit and grad against float64", softmax),
    ("a bad call raises with ktune's message", error_message),
    ("a batch of no rows, a vmap over no example: empty outputs, zero dw and db, no launch", no_rows),
    ("inputs laid out otherwise ((1, D), (N, 1), flattened): cotangents in their shapes", other_layouts),
]


def main():
    if not kj.available():
        print("  skipped: libktune_jax.so is not built (make jax)")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    if not kj._devices():  # GPU tests skip where there is none, never pass
        print("  skipped: JAX has no GPU here (its devices: %s)"
              % ", ".join(sorted({d.platform for d in jax.local_devices()})))
        print("0 passed, 0 failed, 1 skipped")
        return 0
    if sys.argv[1:] == ["inplace"]:
        check("in place through input_output_aliases: one application on the tuning call", in_place_once)
    elif sys.argv[1:] == ["cmdbuf"]:
        check("command buffers for custom calls: an unseen key, 100 runs right", command_buffers)
        check("command buffers: a key settled while tracing replays without ktune; the plain entry launches",
              graphs_replay)
        check("command buffers: an unsettled key on the graph entry: a miss, then replays, every run right",
              graph_entry_on_a_miss)
    elif sys.argv[1:] == ["prewarmed"]:
        # A process of its own: no background tuning of another check runs
        # beside it, so its counts are its own call's.
        check("a key pre-warmed by ktune tune is a hit from JAX", prewarmed_is_a_hit)
    else:
        # A name given runs the checks whose function it names in part.
        for name, fn in MAIN_CHECKS:
            if not sys.argv[1:] or sys.argv[1] in fn.__name__:
                check(name, fn)
    s = ktune.runtime(kj._devices()[0]).stats()
    print("  stats: %s" % {k: s[k] for k in ("launches", "misses", "tunings", "standins", "fallbacks")})
    return summary()


if __name__ == "__main__":
    sys.exit(main())
