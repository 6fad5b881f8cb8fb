"""ktune.jax's vmap rules without a GPU: the custom call is replaced by a
float64 emulation of each bundled kernel (the spec's params, in the order
ktune.jax lays them out), so what is checked is ktune.jax's own work: a
mapped axis folded into the rows (one call for the batch), per-example
partial sums that never mix examples, row-map entries moved to their
example's rows and those outside kept outside, the fallback to one call an
example, nested maps. Run by make test (t_coord.c's runner) where jax
imports; ends with "N passed, N failed, N skipped"."""
import contextlib
import os
import re
import sys

try:
    import jax
except ImportError:
    print("  skipped: jax does not import here")
    print("0 passed, 0 failed, 1 skipped")
    sys.exit(0)
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "python"))
import ktune  # noqa: E402
from ktune import jax as kj  # noqa: E402
from checks import check, summary  # noqa: E402

SMS = 132




def bind(params, outs):
    """The emulated call's args by param: arrays, ("o", i) for the i-th
    result, None for a null pointer, numbers."""
    args = []
    for p in params:
        if isinstance(p, tuple) and p[0] in ("i", "a"):
            args.append(p[-1])
        elif isinstance(p, tuple) and p[0] == "o":
            args.append(("o", p[1]))
        elif isinstance(p, tuple):
            args.append(None)
        else:
            args.append(p)
    return args


def norm_stats(h, G, eps, rms):
    T, D = h.shape
    hg = h.reshape(T, G, D // G)
    mean = jnp.zeros((T, G)) if rms else hg.mean(-1)
    var = (hg * hg).mean(-1) if rms else ((hg - mean[..., None]) ** 2).mean(-1)
    return mean, 1 / jnp.sqrt(var + eps)


def layernorm_fwd(a, outs):
    y, x, res, res_out, w, b, mean, rstd, T, D, G, eps, rms = a
    h = x.astype(jnp.float64) + (0 if res is None else res.astype(jnp.float64))
    m, r = norm_stats(h, G, eps, rms)
    yv = ((h.reshape(T, G, -1) - m[..., None]) * r[..., None]).reshape(T, D)
    yv = yv * (1 if w is None else w.astype(jnp.float64)) + (0 if b is None else b.astype(jnp.float64))
    vals = {y: yv, res_out: h, mean: m.reshape(-1), rstd: r.reshape(-1)}
    return [vals[("o", i)] for i in range(len(outs))]


def layernorm_bwd(a, outs):
    dx, dwp, dbp, dy, x, w, mean, rstd, dres, N, D, G, P, rms = a
    assert P <= N, "more programs than rows: partial rows left unwritten"
    xg = x.astype(jnp.float64).reshape(N, G, -1)
    m = 0 if rms else mean.reshape(N, G, 1)
    xhat = ((xg - m) * rstd.reshape(N, G, 1)).reshape(N, D)
    g = dy.astype(jnp.float64) * (1 if w is None else w.astype(jnp.float64))
    gg, xh = g.reshape(N, G, -1), xhat.reshape(N, G, -1)
    c1 = (gg * xh).mean(-1, keepdims=True)
    c2 = 0 if rms else gg.mean(-1, keepdims=True)
    dxv = ((gg - c2 - xh * c1) * rstd.reshape(N, G, 1)).reshape(N, D) + (0 if dres is None else dres)
    bs = -(-N // P)
    prog = jnp.arange(N) // bs
    busy = (jnp.arange(P) * bs < N)[:, None]  # a program without rows writes nothing

    def part(v):
        return jnp.where(busy, jnp.zeros((P, D)).at[prog].add(v), jnp.nan)
    vals = {dx: dxv, dwp: part(dy.astype(jnp.float64) * xhat), dbp: part(dy.astype(jnp.float64))}
    return [vals[("o", i)] for i in range(len(outs))]


def layernorm_bwd_row(a, outs):
    dx, dw, db, dy, x, w, mean, rstd, dres, N, D, G, rms = a
    assert N == 1 or G == 1, "several rows of one program need one group"
    got = layernorm_bwd([dx, dw, db, dy, x, w, mean, rstd, dres, N, D, G, 1, rms], outs)  # one partial row
    return [g.reshape(o.shape) for g, o in zip(got, outs)]


def layernorm_bwd_reduce(a, outs):
    dw, db, dwp, dbp, N, D, P = a
    vals = {dw: None if dwp is None else dwp.sum(0), db: None if dbp is None else dbp.sum(0)}
    return [vals[("o", i)] for i in range(len(outs))]


def rmsnorm(a, outs):
    y, x, res, w, N, D, eps = a
    return layernorm_fwd([y, x, None, None, w, None, None, None, N, D, 1, eps, 1], outs)


def permute_rows(a, outs):
    out, x, rmap, probs, pout, M, N, D = a
    ok = (rmap >= 0) & (rmap < N)
    if N == 0:  # every entry outside: zeros
        x, probs = jnp.zeros((1, D), x.dtype), None if probs is None else jnp.zeros((1,), probs.dtype)
    vals = {out: jnp.where(ok[:, None], x[jnp.clip(rmap, 0, max(N, 1) - 1)], 0)}
    if probs is not None:
        vals[pout] = jnp.where(ok, probs[jnp.clip(rmap, 0, max(N, 1) - 1)], 0)
    return [vals[("o", i)] for i in range(len(outs))]


def permute_rows_bwd(a, outs):
    din, dout, rmap, dpo, dp, M, N, D = a
    ok = (rmap >= 0) & (rmap < N)
    idx = jnp.where(ok, rmap, N)  # out of bounds: dropped
    got = [din.at[idx].set(dout, mode="drop")]  # din and dp: the aliased zeros
    return got + ([dp.at[idx].set(dpo, mode="drop")] if dp is not None else [])


def masked_softmax(a, outs):
    y, x, mask, bias, N, L, scale = a
    z = scale * x.astype(jnp.float64) + (0 if bias is None else bias)
    z = jnp.where(mask != 0, z, -jnp.inf) if mask is not None else z
    e = jnp.exp(z - jnp.max(z, -1, keepdims=True))
    return [jnp.nan_to_num(e / e.sum(-1, keepdims=True))]


KERNELS = {f.__name__: f for f in (layernorm_fwd, layernorm_bwd, layernorm_bwd_row, layernorm_bwd_reduce, rmsnorm,
                                   permute_rows,
                                   permute_rows_bwd, masked_softmax)}


def fake_call(name, params, outs, aliases=None):
    """The emulated kernel as a jitted function named kt_<kernel>, so that
    the program's jaxpr shows each call once (the count of launches)."""
    arrays = [p[-1] for p in params if isinstance(p, tuple) and p[0] in ("i", "a")]

    def run(*arrs):
        it = iter(arrs)
        a = bind(params, outs)
        for i, p in enumerate(params):
            if isinstance(p, tuple) and p[0] == "i":
                a[i] = next(it)
            elif isinstance(p, tuple) and p[0] == "a":  # the aliased output starts from its input
                a[i] = next(it)
        got = KERNELS[name](a, outs)
        assert len(got) == len(outs), (name, len(got), len(outs))
        for g, o in zip(got, outs):
            assert g.shape == o.shape, (name, g.shape, o.shape)
        return [g.astype(o.dtype) for g, o in zip(got, outs)]
    run.__name__ = "kt_" + name
    return jax.jit(run)(*arrays)


kj._call = fake_call
kj._num_sms = lambda: SMS
kj._DT[jnp.dtype(jnp.float64)] = "f64"  # the emulation computes in float64


@contextlib.contextmanager
def calls_of(*names):
    """A list of (kernel, params) of each call to one of names made inside
    the block (the calls still run the emulation)."""
    seen = []

    def spy(name, params, outs, aliases=None):
        if name in names:
            seen.append((name, params))
        return fake_call(name, params, outs, aliases)
    kj._call = spy
    try:
        yield seen
    finally:
        kj._call = fake_call


def counted(f, *a):
    """f's result and the kernels called in its program, in order, with
    "loop" before those called an example at a time (in a lax.map)."""
    found = re.findall(r"name=kt_(\w+)|(scan)\[", str(jax.make_jaxpr(f)(*a)))
    return jax.jit(f)(*a), [k or "loop" for k, _ in found]


def ref_norm(x, w, b, eps, rms, G=1):
    x = jnp.asarray(x, jnp.float64)
    xs = x.reshape(x.shape[:-1] + (G, -1))
    m = 0 if rms else xs.mean(-1, keepdims=True)
    y = ((xs - m) / jnp.sqrt(((xs - m) ** 2).mean(-1, keepdims=True) + eps)).reshape(x.shape)
    return y * (1 if w is None else w) + (0 if b is None else b)


def close(a, b, tol=1e-9):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.allclose(a, b, rtol=tol, atol=tol), float(np.max(np.abs(a - b)))


def forward_folds():
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 8), jnp.float64)
    w = 1 + 0.1 * jax.random.normal(jax.random.PRNGKey(1), (8,), jnp.float64)
    ws = 1 + 0.1 * jax.random.normal(jax.random.PRNGKey(2), (3, 8), jnp.float64)
    b = 0.1 * jnp.arange(8.0)
    y, c = counted(jax.vmap(lambda x: kj.layer_norm(x, w, b, groups=2)), x)
    assert c == ["layernorm_fwd"], c
    close(y, ref_norm(x, w, b, 1e-5, 0, 2))
    y, c = counted(jax.vmap(jax.vmap(lambda r: kj.rms_norm(r, w))), x)
    assert c == ["layernorm_fwd"], c
    close(y, ref_norm(x, w, None, 1e-6, 1))
    y, c = counted(jax.vmap(lambda x: kj.rms_norm(x, w), in_axes=1, out_axes=1), x)
    assert c == ["layernorm_fwd"], c
    close(y, ref_norm(x, w, None, 1e-6, 1))
    r = x[0]
    (y, h), c = counted(jax.vmap(lambda x: kj.rms_norm(x, w, residual=r, return_residual=True)), x)
    assert c == ["layernorm_fwd"], c
    close(h, x + r)
    close(y, ref_norm(x + r, w, None, 1e-6, 1))
    y, c = counted(jax.vmap(lambda x, w: kj.rms_norm(x, w)), x, ws)
    assert c == ["loop", "layernorm_fwd"], c
    close(y, ref_norm(x, ws[:, None, :], None, 1e-6, 1))
    y, c = counted(jax.vmap(lambda x: kj.rms_norm_(x, w)), x)
    assert c == ["rmsnorm"], c
    close(y, ref_norm(x, w, None, 1e-6, 1))


def grads_fold(B, T, D, G, rms, want_calls):
    k = jax.random.split(jax.random.PRNGKey(T * 7 + D), 4)
    x = jax.random.normal(k[0], (B, T, D), jnp.float64)
    w = 1 + 0.1 * jax.random.normal(k[1], (D,), jnp.float64)
    b = 0.1 * jax.random.normal(k[2], (D,), jnp.float64)
    g = jax.random.normal(k[3], (B, T, D), jnp.float64)
    eps = 1e-6 if rms else 1e-5
    f = (lambda x, w, b: kj.rms_norm(x, w)) if rms else (lambda x, w, b: kj.layer_norm(x, w, b, groups=G))
    loss = lambda x, w, b, g: jnp.sum(f(x, w, b) * g)  # noqa: E731
    rloss = lambda x, w, b, g: jnp.sum(ref_norm(x, w, None if rms else b, eps, rms, G) * g)  # noqa: E731
    vg = jax.vmap(jax.grad(loss, argnums=(0, 1, 2)), in_axes=(0, None, None, 0))
    got, c = counted(vg, x, w, b, g)
    want = jax.vmap(jax.grad(rloss, argnums=(0, 1, 2)), in_axes=(0, None, None, 0))(x, w, b, g)
    for a, r in zip(got, want):
        close(a, r, 1e-5)  # partial sums and stats are float32
    assert c == want_calls, c
    # the sum over the batch (grad of the vmapped loss) as well
    got = jax.jit(jax.grad(lambda x, w, b: jnp.sum(jax.vmap(lambda x, g: loss(x, w, b, g))(x, g)),
                           argnums=(0, 1, 2)))(x, w, b)
    want = jax.grad(lambda x, w, b: jnp.sum(jax.vmap(lambda x, g: rloss(x, w, b, g))(x, g)), argnums=(0, 1, 2))(x, w, b)
    for a, r in zip(got, want):
        close(a, r, 1e-5)  # partial sums and stats are float32


def plain_grads():
    """grad without vmap at row counts that leave programs without rows
    when split over one program an SM (4097 over 132: 32 rows a program)."""
    for T in (4097, 133, 1):
        k = jax.random.split(jax.random.PRNGKey(T), 3)
        x = jax.random.normal(k[0], (T, 4), jnp.float64)
        w, b = 1 + 0.1 * jax.random.normal(k[1], (4,), jnp.float64), jnp.arange(4.0)
        g = jax.random.normal(k[2], (T, 4), jnp.float64)
        got = jax.jit(jax.grad(lambda x, w, b: jnp.sum(kj.layer_norm(x, w, b) * g), argnums=(0, 1, 2)))(x, w, b)
        want = jax.grad(lambda x, w, b: jnp.sum(ref_norm(x, w, b, 1e-5, 0) * g), argnums=(0, 1, 2))(x, w, b)
        for a, r in zip(got, want):
            close(a, r, 1e-5)


def few_rows():
    """grad of a few short rows: one call of layernorm_bwd_row (dw and db
    written by it, no reduce); of more rows, or rows in groups, the backward
    and its reduce; under vmap (grads) the batch goes to the latter."""
    fwd, one, two = "layernorm_fwd", ["layernorm_bwd_row"], ["layernorm_bwd", "layernorm_bwd_reduce"]
    for T, D, G, rms, calls in ((1, 4, 1, 0, one), (1, 12, 3, 0, one), (8, 16, 1, 1, one), (13, 1000, 1, 0, one),
                                (2, 8192, 1, 1, one), (4, 4096, 1, 0, two), (7, 12, 3, 0, two), (64, 1024, 1, 1, two)):
        assert ktune.norm_bwd_one_program(T, D, G) == (calls == one), (T, D, G)
        k = jax.random.split(jax.random.PRNGKey(T * 7 + D), 4)
        x = jax.random.normal(k[0], (T, D), jnp.float64)
        w = 1 + 0.1 * jax.random.normal(k[1], (D,), jnp.float64)
        b = 0.1 * jax.random.normal(k[2], (D,), jnp.float64)
        g = jax.random.normal(k[3], (T, D), jnp.float64)
        eps = 1e-6 if rms else 1e-5
        f = (lambda x, w, b: kj.rms_norm(x, w)) if rms else (lambda x, w, b: kj.layer_norm(x, w, b, groups=G))
        rf = lambda x, w, b: ref_norm(x, w, None if rms else b, eps, rms, G)  # noqa: E731
        got, c = counted(jax.grad(lambda x, w, b: jnp.sum(f(x, w, b) * g), argnums=(0, 1, 2)), x, w, b)
        want = jax.grad(lambda x, w, b: jnp.sum(rf(x, w, b) * g), argnums=(0, 1, 2))(x, w, b)
        assert c == [fwd] + calls, (T, D, G, c)
        for a, r in zip(got, want):
            close(a, r, 1e-5)  # stats are float32


def grads():
    fwd, bwd = "layernorm_fwd", "layernorm_bwd"
    grads_fold(3, 8, 16, 1, 1, [fwd, bwd])          # folded: one backward, dw summed per example by XLA
    grads_fold(3, 7, 12, 3, 0, [fwd, bwd])
    grads_fold(2, 4097, 4, 1, 0, [fwd, "loop", bwd])  # 17 * 241 rows: an example at a time
    grads_fold(50, 9, 4, 1, 1, [fwd, bwd])          # 50 programs of 9 rows beat 50 launches of 9 programs


def grads_without_sums():
    """No weight and no bias: the backward writes no partial rows, so a
    folded batch's rows are split as one example's (a quarter of them, at
    most 16 programs an SM) whatever the batch, where the rows' split into
    examples once left no count of programs and the call failed."""
    with calls_of("layernorm_bwd") as seen:
        for B, T, rms in ((2, 4096, 1), (3, 4097, 0), (5, 20, 1)):
            k = jax.random.split(jax.random.PRNGKey(B * T), 2)
            x = jax.random.normal(k[0], (B, T, 4), jnp.float64)
            g = jax.random.normal(k[1], (B, T, 4), jnp.float64)
            f = (lambda x: kj.rms_norm(x)) if rms else (lambda x: kj.layer_norm(x))
            eps = 1e-6 if rms else 1e-5
            del seen[:]
            got, c = counted(jax.vmap(jax.grad(lambda x, g: jnp.sum(f(x) * g))), x, g)
            want = jax.vmap(jax.grad(lambda x, g: jnp.sum(ref_norm(x, None, None, eps, rms) * g)))(x, g)
            close(got, want, 1e-5)
            assert c == ["layernorm_fwd", "layernorm_bwd"], c
            # (an example's call is traced first, then the batch's)
            assert seen[-1][1][12] == ktune.norm_programs(B * T, SMS, 4, sums=False), (B, T, seen[-1][1][12])


def frozen_inputs():
    """Gradients for some inputs only (jax.grad's argnums, stop_gradient):
    a weight or bias no gradient is taken for is read, never summed (its
    partial-row pointer null, no reduce without a sum); a residual output
    whose cotangent is a symbolic zero is not read (dres null), and a y
    whose cotangent is one launches no backward."""
    def nulls(params):  # which of dx, dw(_part), db(_part), ..., dres are null
        return "".join("n" if isinstance(p, tuple) and p[0] == "n" else "p" for p in params[:9])
    fwd, bwd, red, row = "layernorm_fwd", "layernorm_bwd", "layernorm_bwd_reduce", "layernorm_bwd_row"
    with calls_of(bwd, row) as seen:
        for T, D, rms in ((4096, 8, 0), (4096, 8, 1), (3, 16, 0)):
            k = jax.random.split(jax.random.PRNGKey(T + D + rms), 5)
            x = jax.random.normal(k[0], (T, D), jnp.float64)
            w = 1 + 0.1 * jax.random.normal(k[1], (D,), jnp.float64)
            b = None if rms else 0.1 * jax.random.normal(k[2], (D,), jnp.float64)
            g = jax.random.normal(k[3], (T, D), jnp.float64)
            eps = 1e-6 if rms else 1e-5
            f = (lambda x, w, b: kj.rms_norm(x, w)) if rms else (lambda x, w, b: kj.layer_norm(x, w, b))
            loss = lambda x, w, b: jnp.sum(f(x, w, b) * g)  # noqa: E731
            want = jax.grad(lambda x, w, b: jnp.sum(ref_norm(x, w, b, eps, rms) * g), argnums=(0, 1, 2) if b is not
                            None else (0, 1))(x, w, b)
            one = ktune.norm_bwd_one_program(T, D, 1)
            # (argnums, dw and db summed)
            cases = [((0,), False, False), ((0, 1), True, False)]
            if b is not None:
                cases += [((0, 2), False, True), ((2,), False, True)]
            for argnums, sw, sb in cases:
                del seen[:]
                got, c = counted(jax.grad(loss, argnums=argnums), x, w, b)
                for a, i in zip(got, argnums):
                    close(a, want[i], 1e-5)
                sums = sw or sb
                assert c == [fwd] + ([row] if one else [bwd] + ([red] if sums else [])), (argnums, c)
                name, params = seen[-1]
                assert nulls(params) == "p" + ("p" if sw else "n") + ("p" if sb else "n") + "ppp" + \
                    ("n" if rms else "p") + "pn", (argnums, nulls(params))
                if not one and not sums:  # split as a backward without sums is
                    assert params[12] == ktune.norm_programs(T, SMS, D, sums=False), params[12]
            # stop_gradient: the same as leaving the weight out of argnums
            got, c = counted(jax.grad(lambda x, w, b: loss(x, jax.lax.stop_gradient(w), b), argnums=(0, 1)), x, w, b)
            close(got[0], want[0], 1e-5)
            close(got[1], jnp.zeros(D), 0)
            assert seen[-1][1][1][0] == "n", seen[-1][1][1]
        # per-example grads over x alone: one backward over the batch's rows, no partial rows
        x = jax.random.normal(jax.random.PRNGKey(3), (3, 4097, 4), jnp.float64)
        g = jax.random.normal(jax.random.PRNGKey(4), (3, 4097, 4), jnp.float64)
        w, b = 1 + 0.1 * jnp.arange(4.0), 0.1 * jnp.arange(4.0)
        got, c = counted(jax.vmap(jax.grad(lambda x, g: jnp.sum(kj.layer_norm(x, w, b) * g))), x, g)
        close(got, jax.vmap(jax.grad(lambda x, g: jnp.sum(ref_norm(x, w, b, 1e-5, 0) * g)))(x, g), 1e-5)
        assert c == [fwd, bwd], c
        assert seen[-1][1][12] == ktune.norm_programs(3 * 4097, SMS, 4, sums=False), seen[-1][1][12]
        # a residual output: y alone goes on (dres null), h alone (no backward)
        x, r = x[0], g[0]
        del seen[:]
        got, c = counted(jax.grad(lambda x, r: jnp.sum(kj.layer_norm(x, w, b, residual=r, return_residual=True)[0] * r),
                                  argnums=(0, 1)), x, r)
        want = jax.grad(lambda x, r: jnp.sum(ref_norm(x + r, w, b, 1e-5, 0) * r), argnums=(0, 1))(x, r)
        close(got[0], want[0], 1e-5)
        assert c == [fwd, bwd], c
        assert nulls(seen[-1][1])[8] == "n", nulls(seen[-1][1])
        got, c = counted(jax.grad(lambda x, r: jnp.sum(kj.layer_norm(x, w, b, residual=r, return_residual=True)[1] * r),
                                  argnums=(0, 1)), x, r)
        close(got[0], r, 0)
        close(got[1], x + 2 * r, 1e-12)  # h = x + r, times r
        assert c == [fwd], c
        # a bias alone, of another dtype than x: db in the bias's dtype
        b32 = b.astype(jnp.float32)
        db = jax.jit(jax.grad(lambda b: jnp.sum(kj.layer_norm(x, None, b) * r)))(b32)
        assert db.dtype == jnp.float32, db.dtype
        close(db, r.sum(0), 1e-5)


def parts():
    # no partial rows: a quarter of the rows, between one program an SM (or
    # every row) and 16 an SM
    assert [ktune.norm_programs(T, SMS, 1000, sums=False) for T in (1, 50, 132, 600, 1024, 16778, 65536)] == \
        [1, 50, 132, 150, 256, 2112, 2112]
    assert kj._parts(4097, 1) == 129 and kj._parts(5, 1) == 5  # 4097 rows: 32 a program, 129 programs
    assert kj._parts(SMS, 1) == SMS // 2 and kj._parts(SMS + 1, 1) == SMS // 2 + 1  # a wave of rows: 2 a program
    for T in range(1, 300):
        for n in (2, 3, 8, 40, 200):
            p = kj._parts(T, n)
            if p is not None:
                assert 1 <= p <= T and T % p == 0 and n * p >= ktune.norm_programs(T, SMS), (T, n, p)


def indexed():
    B, N, D = 3, 6, 5
    x = jax.random.normal(jax.random.PRNGKey(5), (B, N, D), jnp.float64)
    p = jax.random.uniform(jax.random.PRNGKey(6), (B, N), jnp.float64)
    maps = jnp.array([[5, 4, 3, 2, 1, 0], [0, -1, 2, 6, 4, 1], [1, 1, 0, 0, 5, 7]], jnp.int32)
    (out, pout), c = counted(jax.vmap(kj.permute_rows), x, maps, p)
    assert c == ["permute_rows"], c
    xn, mn, pn = np.asarray(x), np.asarray(maps), np.asarray(p)
    want, wantp = np.zeros((B, N, D)), np.zeros((B, N))
    for i in range(B):
        for j in range(N):
            if 0 <= mn[i, j] < N:
                want[i, j], wantp[i, j] = xn[i, mn[i, j]], pn[i, mn[i, j]]
    close(out, want)
    close(pout, wantp, 1e-6)  # probs are float32
    (out, _), c = counted(jax.vmap(lambda m: kj.permute_rows(x[1], m)), maps)
    assert c == ["permute_rows"], c
    close(out[0], xn[1][::-1])
    perms = jnp.array([[5, 4, 3, 2, 1, 0], [0, 7, 2, 3, 4, -2], [2, 0, 1, 5, 3, 4]], jnp.int32)
    (back, _), c = counted(jax.vmap(lambda o, m: kj.unpermute_rows(o, m, N)), x, perms)
    assert c == ["permute_rows_bwd"], c
    want = np.zeros((B, N, D))
    pm = np.asarray(perms)
    for i in range(B):
        for j in range(N):
            if 0 <= pm[i, j] < N:
                want[i, pm[i, j]] = xn[i, j]
    close(back, want)
    g = jax.random.normal(jax.random.PRNGKey(7), (B, N, D), jnp.float64)
    dx, c = counted(jax.vmap(jax.grad(lambda x, m, g: jnp.sum(kj.permute_rows(x, m)[0] * g))), x, perms, g)
    assert c == ["permute_rows", "permute_rows_bwd"], c
    want = np.zeros((B, N, D))
    for i in range(B):
        for j in range(N):
            if 0 <= pm[i, j] < N:
                want[i, pm[i, j]] += np.asarray(g)[i, j]
    close(dx, want)
    mask = jax.random.uniform(jax.random.PRNGKey(8), (B, N, D)) > 0.3
    bias = jax.random.normal(jax.random.PRNGKey(9), (N, D), jnp.float64)
    y, c = counted(jax.vmap(lambda x, m: kj.masked_softmax(x, m, bias, 0.5)), x, mask)
    assert c == ["masked_softmax"], c
    z = np.where(np.asarray(mask), 0.5 * xn + np.asarray(bias), -np.inf)
    with np.errstate(invalid="ignore"):  # a fully masked row: nan, then 0
        e = np.exp(z - z.max(-1, keepdims=True))
    close(y, np.nan_to_num(e / e.sum(-1, keepdims=True)))


def no_examples():
    """vmap over an axis of no example: every result empty, of an example's
    shape after the axis, and nothing launched; per-example gradients of
    none are empty too (where folding the axis into the rows divided by
    the count of examples)."""
    x = jnp.ones((0, 5, 8), jnp.float64)
    w, b, ws = 1 + 0.1 * jnp.arange(8.0), 0.1 * jnp.arange(8.0), jnp.ones((0, 8), jnp.float64)
    m = jnp.zeros((0, 5), jnp.int32)
    cases = (
        (jax.vmap(lambda x: kj.layer_norm(x, w, b, groups=2)), (x,), [(0, 5, 8)]),
        (jax.vmap(lambda x: kj.rms_norm(x, w, residual=x, return_residual=True)), (x,), [(0, 5, 8)] * 2),
        (jax.vmap(lambda x, w: kj.rms_norm(x, w)), (x, ws), [(0, 5, 8)]),
        (jax.vmap(lambda x: kj.rms_norm_(x, w)), (x,), [(0, 5, 8)]),
        (jax.vmap(lambda x: kj.rms_norm(x, w), in_axes=1, out_axes=1), (jnp.ones((5, 0, 8)),), [(5, 0, 8)]),
        (jax.vmap(jax.vmap(lambda r: kj.rms_norm(r, w))), (jnp.ones((3, 0, 8)),), [(3, 0, 8)]),
        (jax.vmap(jax.vmap(lambda r: kj.rms_norm(r, w))), (x,), [(0, 5, 8)]),
        (jax.vmap(jax.grad(lambda x, w, b, g: jnp.sum(kj.layer_norm(x, w, b) * g), argnums=(0, 1, 2)),
                  in_axes=(0, None, None, 0)), (x, w, b, x), [(0, 5, 8), (0, 8), (0, 8)]),
        (jax.vmap(jax.grad(lambda x, w: jnp.sum(kj.rms_norm(x[:1], w)), argnums=(0, 1)), in_axes=(0, None)),
         (x, w), [(0, 5, 8), (0, 8)]),  # one row an example: the one-program backward
        (jax.vmap(kj.permute_rows), (x, m, jnp.ones((0, 5))), [(0, 5, 8), (0, 5)]),
        (jax.vmap(lambda o, m: kj.unpermute_rows(o, m, 5)), (x, m), [(0, 5, 8)]),
        (jax.vmap(lambda x: kj.masked_softmax(x, None, None, 0.5)), (x,), [(0, 5, 8)]),
    )
    for i, (f, a, shapes) in enumerate(cases):
        got, c = counted(f, *a)
        leaves = [g for g in jax.tree.leaves(got)]
        assert [g.shape for g in leaves] == shapes, (i, [g.shape for g in leaves])
        assert c == [], (i, c)
    # a grad through the vmap: its sum over no example is zero
    dw = jax.jit(jax.grad(lambda w: jnp.sum(jax.vmap(lambda x: kj.rms_norm(x, w))(x))))(w)
    close(dw, jnp.zeros(8), 0)


def refused_shapes():
    """An array shorter or longer than the call's sizes make its param (the
    kernels index by those sizes) is refused while JAX traces, by name,
    before any call; a gather from no rows and a scatter of none give
    zeros, launching nothing; map entries of 64 bits outside the rows stay
    outside; a residual of x's elements in another shape gets its gradient
    in its shape; a mask of any dtype keeps what is nonzero."""
    x, w = jnp.ones((5, 8)), jnp.ones((8,))
    m = jnp.arange(5, dtype=jnp.int32)
    bad = (
        (lambda: kj.rms_norm(x, jnp.ones((4,))), "ktune.jax: weight has shape (4,); the rows have 8 elements"),
        (lambda: kj.layer_norm(x, w, jnp.ones((2, 8))), "ktune.jax: bias has shape (2, 8); the rows have 8 elements"),
        (lambda: kj.rms_norm(x, w, residual=jnp.ones((2, 8))), "ktune.jax: residual has shape (2, 8); x has (5, 8)"),
        (lambda: kj.rms_norm(jnp.ones(())), "ktune.jax: x is a scalar; a norm is over its last dim"),
        (lambda: kj.layer_norm(x, groups=3),
         "ktune.jax: groups=3 does not split the rows' 8 elements into equal parts"),
        (lambda: kj.layer_norm(x, groups=0),
         "ktune.jax: groups=0 does not split the rows' 8 elements into equal parts"),
        (lambda: kj.rms_norm_(x, jnp.ones((9,))), "ktune.jax: weight has shape (9,); the rows have 8 elements"),
        (lambda: kj.masked_softmax(x, jnp.ones((5, 4), bool)),
         "ktune.jax: mask has shape (5, 4); x has (5, 8) (the mask and the bias are of x's shape)"),
        (lambda: kj.masked_softmax(x, None, jnp.ones((8,))),
         "ktune.jax: bias has shape (8,); x has (5, 8) (the mask and the bias are of x's shape)"),
        (lambda: kj.permute_rows(x, m, jnp.ones((4,))), "ktune.jax: probs has shape (4,); x has 5 rows"),
        (lambda: kj.permute_rows(x, m.reshape(5, 1)),
         "ktune.jax: row_map has shape (5, 1) and x (5, 8); the map holds one index an output row (1-D) of x's "
         "rows (x has at least one dim)"),
        (lambda: kj.unpermute_rows(x, m[:4], 5),
         "ktune.jax: row_map has 4 entries, n is 5; unpermute_rows takes one entry a row of dout (5) and n >= 0"),
        (lambda: kj.unpermute_rows(x, m, -1),
         "ktune.jax: row_map has 5 entries, n is -1; unpermute_rows takes one entry a row of dout (5) and n >= 0"),
        (lambda: kj.unpermute_rows(x, m, 5, jnp.ones((3,))), "ktune.jax: dprobs has shape (3,); x has 5 rows"),
        (lambda: kj.permute_rows(x, m.astype(jnp.float32)), "ktune.jax: row_map has dtype float32; a row map holds "
         "integers"),
        (lambda: kj.unpermute_rows(x, m > 2, 5), "ktune.jax: row_map has dtype bool; a row map holds integers"),
    )
    with calls_of(*KERNELS) as seen:
        for f, want in bad:
            try:
                f()
            except kj.KtuneError as e:
                assert str(e) == want and e.status == "KT_ERR_ARGS", (str(e), want)
            else:
                raise AssertionError("no error: " + want)
        assert seen == [], seen
    (out, p), c = counted(kj.permute_rows, jnp.ones((0, 4)), m[:3], jnp.ones((0,)))
    assert c == [], c  # nothing to gather
    close(out, jnp.zeros((3, 4)), 0)
    close(p, jnp.zeros(3), 0)
    (din, dp), c = counted(lambda d, m, p: kj.unpermute_rows(d, m, 3, p), jnp.ones((0, 4)), m[:0], jnp.ones((0,)))
    assert c == [], c  # nothing to scatter
    close(din, jnp.zeros((3, 4)), 0)
    close(dp, jnp.zeros(3), 0)
    # map entries of 64 bits outside [0, N) stay outside: a cast alone
    # wrapped 2**32 + 1 to 1
    m64 = jnp.array([2 ** 32 + 1, 1, -2 ** 32 + 2, 4], jnp.int64)
    out, _ = kj.permute_rows(x, m64)
    close(out, jnp.stack([jnp.zeros(8), x[1], jnp.zeros(8), x[4]]), 0)
    back, _ = kj.unpermute_rows(x[:4], m64, 5)
    close(back, jnp.stack([jnp.zeros(8), x[1], jnp.zeros(8), jnp.zeros(8), x[3]]), 0)
    # a residual of x's elements in another shape: its gradient in its own
    # shape (it came in x's, which JAX refuses)
    r, g = jnp.arange(40.0) / 40, jnp.cos(jnp.arange(40.0)).reshape(5, 8)
    got = jax.jit(jax.grad(lambda x, r: jnp.sum(kj.rms_norm(x, residual=r) * g), argnums=(0, 1)))(x + w, r)
    want = jax.grad(lambda x, r: jnp.sum(ref_norm(x + r.reshape(5, 8), None, None, 1e-6, 1) * g), argnums=(0, 1))(
        x + w, r)
    assert got[1].shape == (40,), got[1].shape
    close(got[0], want[0], 1e-5)
    close(got[1], want[1], 1e-5)
    z = jnp.array([[0.5, 0.0, 2.0, 0.0]])
    want = kj.masked_softmax(z, z != 0)
    for mask in (z, (z * 512).astype(jnp.int32), (z * 2).astype(jnp.int8)):
        close(kj.masked_softmax(z, mask), want, 0)


def other_layouts():
    """A weight and bias of D elements as (1, D), probs as (N, 1), dprobs
    as (M, 1) and a softmax bias flattened: the same results as the usual
    shapes, each cotangent in its primal's shape (JAX refuses any other)."""
    x = jnp.sin(jnp.arange(40.0)).reshape(5, 8)
    w, b, g = 1 + jnp.arange(8.0).reshape(1, 8) / 8, jnp.cos(jnp.arange(8.0)).reshape(1, 8), jnp.cos(x * 3)

    def norm_loss(x, w, b):
        return jnp.sum(kj.layer_norm(x, w, b) * g)

    got = jax.jit(jax.grad(norm_loss, argnums=(0, 1, 2)))(x, w, b)
    want = jax.grad(lambda x, w, b: jnp.sum(ref_norm(x, w, b, 1e-5, 0) * g), argnums=(0, 1, 2))(x, w[0], b[0])
    for a, v, p in zip(got, want, (x, w, b)):
        assert a.shape == p.shape, (a.shape, p.shape)
        close(a.reshape(v.shape), v, 1e-5)
    dw = jax.grad(lambda w: jnp.sum(kj.rms_norm(x, w) * g))(w)
    assert dw.shape == (1, 8), dw.shape
    close(dw[0], jax.grad(lambda w: jnp.sum(ref_norm(x, w, None, 1e-6, 1) * g))(w[0]), 1e-5)
    m = jnp.array([4, 0, 2], jnp.int32)
    one = jnp.ones((5, 1), jnp.float32)
    dp = jax.grad(lambda p: jnp.sum(kj.permute_rows(x, m, p)[1] * jnp.array([1.0, 2.0, 3.0])))(one)
    assert dp.shape == (5, 1), dp.shape
    close(dp[:, 0], jnp.array([2.0, 0.0, 3.0, 0.0, 1.0]), 0)
    dq = jax.grad(lambda q: jnp.sum(kj.unpermute_rows(x[:3], m, 5, q)[1] * jnp.arange(5.0)))(one[:3])
    assert dq.shape == (3, 1), dq.shape
    close(dq[:, 0], jnp.array([4.0, 0.0, 2.0]), 0)
    bias = jnp.cos(jnp.arange(40.0))
    db = jax.grad(lambda bb: jnp.sum(kj.masked_softmax(x, None, bb, 0.5) * g))(bias)
    want = jax.grad(lambda bb: jnp.sum(jax.nn.softmax(0.5 * x + bb, -1) * g))(bias.reshape(5, 8))
    assert db.shape == (40,), db.shape
    close(db.reshape(5, 8), want, 1e-6)


def no_gpu():
    """On a JAX without GPUs (this test's), a kernel is refused by name
    before anything is registered or traced (XLA's own error said only
    that an attribute was None)."""
    try:
        kj._ensure("rmsnorm")
    except kj.KtuneError as e:
        assert str(e) == "ktune.jax: JAX has no GPU here (its devices: cpu); ktune's kernels run on CUDA GPUs", str(e)
        assert e.status == "KT_ERR_NO_DEVICE"
    else:
        raise AssertionError("no error")


def wrong_dtype():
    """A dtype no bundled kernel takes is refused by name before any call."""
    f64 = kj._DT.pop(jnp.dtype(jnp.float64))
    try:
        kj.rms_norm(jnp.ones((2, 8), jnp.float64))
    except kj.KtuneError as e:
        assert str(e) == "ktune.jax: float64 is not a dtype of the bundled kernels (bfloat16, float16, float32)", str(e)
        assert e.status == "KT_ERR_ARGS"
    else:
        raise AssertionError("no error")
    finally:
        kj._DT[jnp.dtype(jnp.float64)] = f64


def shape_args():
    """The args ktune.jax settles a key with while tracing: every buffer at
    an address of its own, 256-byte aligned, none overlapping the next;
    dtypes by ktune code (a bool mask as u8, a null pointer's by name);
    scalars by the param's kind. A dtype ktune has no code for: none. No
    GPU here: the call stays on the plain entry."""
    P, I, F = ktune._capi.KT_ARG_PTR, ktune._capi.KT_ARG_I32, ktune._capi.KT_ARG_F32
    kind = {"y": P, "x": P, "mask": P, "bias": P, "rows": I, "cols": I, "scale": F}
    k = type("K", (), {"params": list(kind.items())})()
    x, mask = jnp.ones((3, 100), jnp.bfloat16), jnp.ones((3, 100), jnp.bool_)
    outs = [jax.ShapeDtypeStruct((3, 100), jnp.bfloat16)]
    args = kj._shape_args(k, [("o", 0), ("i", x), ("i", mask), ("n", "f32"), 3, 100, 0.125], outs)
    codes = ktune._capi.DTYPES
    got = [(a.kind, a.dtype) for a in args]
    assert got == [(P, codes["bf16"]), (P, codes["bf16"]), (P, codes["u8"]), (P, codes["f32"]), (I, 0), (I, 0),
                   (F, 0)], got
    ptrs = [args[i].v.ptr for i in range(3)]
    assert all(p % 256 == 0 for p in ptrs) and ptrs[1] >= ptrs[0] + 600 and ptrs[2] >= ptrs[1] + 600, ptrs
    assert args[3].v.ptr == 0 and args[4].v.i32 == 3 and args[5].v.i32 == 100 and args[6].v.f32 == 0.125
    assert kj._shape_args(k, [("o", 0), ("i", x.astype(jnp.complex64)), ("n", "u8"), ("n", "f32"), 3, 100, 1.0],
                          outs) is None
    assert not kj._graph_ready("rmsnorm", [("o", 0), ("i", x)], outs)


def main():
    check("forward ops fold the mapped axis into one call (nested, axis 1, residual, in place); "
          "a mapped weight loops", forward_folds)
    check("per-example grads: folded backward, one example at a time where rows do not split evenly", grads)
    check("grad at row counts that leave programs of one an SM without rows", plain_grads)
    check("grad of a few short rows: one call that writes dw and db; more rows, two", few_rows)
    check("grads without weight or bias: one backward over the batch's rows, no partial rows", grads_without_sums)
    check("frozen weight or bias: read, never summed; an output without a cotangent is not read",
          frozen_inputs)
    check("programs per example split the rows evenly; without partial rows, a quarter of the rows", parts)
    check("gather, scatter, softmax under vmap: one call, entries outside stay outside", indexed)
    check("vmap over no example: empty results of an example's shape, nothing launched", no_examples)
    check("arrays of other sizes than the call's refused by name; a gather from no rows; masks of any dtype",
          refused_shapes)
    check("a dtype the kernels do not take: ktune's error, by name", wrong_dtype)
    check("no GPU under JAX: ktune's error, by name", no_gpu)
    check("inputs laid out otherwise ((1, D), (N, 1), flattened): cotangents in their shapes", other_layouts)
    check("a call settled while tracing: made-up addresses, dtypes and scalars; no GPU, the plain entry",
          shape_args)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
