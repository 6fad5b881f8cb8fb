"""The bundled norms as JAX operations, through one XLA FFI custom call
("ktune") whose handler is C (tools/jax/ffi.c, built by `make jax` into
libktune_jax.so beside libktune.so). Under jax.jit, jax.grad (custom_vjp)
and jax.vmap (the mapped axis folded into the rows: one launch for the
whole batch, or one an example where a weight is mapped too):

    from ktune import jax as kj
    y = kj.rms_norm(x, w)                  # x: [..., D]
    y, h = kj.layer_norm(x, w, b, residual=r, return_residual=True)
    x = kj.rms_norm_(x, w)                 # in place: y shares x's buffer

Launches go on XLA's stream, through the process's ktune runtime of the
device XLA chose (the one ktune.runtime() gives, shared with PyTorch).
A ktune error is raised with ktune's message.
"""
import contextvars
import ctypes
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from . import KtuneError, _capi, lib, norm_bwd_one_program, norm_programs, runtime

__all__ = ["rms_norm", "layer_norm", "rms_norm_", "permute_rows", "unpermute_rows", "masked_softmax", "available"]

_jl = None
_registered = {}
_sms = {}
# ktune's dtype names of JAX's dtypes, and those the bundled kernels take.
_CODES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int32": "i32",
          "int64": "i64", "uint8": "u8", "bool": "u8", "int8": "i8", "int16": "i16", "uint32": "u32"}
_DT = {jnp.dtype(n): _CODES[n] for n in ("float32", "float16", "bfloat16")}


def _jdt(name):
    """The JAX dtype of one of ktune's dtype names in _DT."""
    return next(k for k, v in _DT.items() if v == name)


def _dt(dtype):
    """ktune's name of a JAX dtype the bundled kernels take."""
    got = _DT.get(jnp.dtype(dtype))
    if got is None:
        raise KtuneError("KT_ERR_ARGS", "ktune.jax: %s is not a dtype of the bundled kernels (bfloat16, float16, "
                         "float32)" % jnp.dtype(dtype).name)
    return got


def _last_dim(x, op):
    """x's last dim, over which op works; a scalar has none."""
    if x.ndim == 0:
        raise KtuneError("KT_ERR_ARGS", "ktune.jax: x is a scalar; %s is over its last dim" % op)
    return x.shape[-1]


def _fits(a, n, what, whose):
    """Refuse a that is not None and does not hold n elements: the kernels
    index by the call's sizes, so a shorter array would be read past its
    end. whose: what n counts ("x has (3, 8)")."""
    if a is not None and a.size != n:
        raise KtuneError("KT_ERR_ARGS", "ktune.jax: %s has shape %s; %s" % (what, tuple(a.shape), whose))


def _jax_lib():
    """libktune_jax.so: $KTUNE_JAX_LIB, else beside the libktune.so loaded."""
    global _jl
    if _jl is None:
        base = lib()
        here = os.path.dirname(base._name) if os.path.isabs(base._name) else ""
        path = os.environ.get("KTUNE_JAX_LIB") or os.path.join(here, "libktune_jax.so")
        if not os.path.isfile(path):
            raise KtuneError("KT_ERR_IO", "ktune.jax: %s is not there; build it with `make jax` (or set "
                             "KTUNE_JAX_LIB)" % path)
        jl = ctypes.CDLL(path)
        jl.ktune_jax_register.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        jax.ffi.register_ffi_target("ktune", jax.ffi.pycapsule(jl.ktune_jax_call), platform="CUDA")
        jax.ffi.register_ffi_target("ktune_graph", jax.ffi.pycapsule(jl.ktune_jax_call_graph), platform="CUDA")
        _jl = jl
    return _jl


def available():
    """Whether the handler library loads here."""
    try:
        _jax_lib()
        return True
    except (KtuneError, OSError):
        return False


def _devices():
    return [d.local_hardware_id for d in jax.local_devices() if d.platform == "gpu"]


def _ensure(name):
    """The kernel (a bundled spec's file name) registered with the handler
    on every local GPU; returns the spec's kernel name."""
    got = _registered.get(name)
    if got:
        return got
    devs = _devices()
    if not devs:  # else no kernel would be registered, and XLA's error would not say why
        raise KtuneError("KT_ERR_NO_DEVICE", "ktune.jax: JAX has no GPU here (its devices: %s); ktune's kernels run "
                         "on CUDA GPUs" % ", ".join(sorted({d.platform for d in jax.local_devices()})))
    jl = _jax_lib()
    for dev in devs:
        rt = runtime(dev)
        k = rt.kernel(name)
        if jl.ktune_jax_register(dev, rt._h, k._h):
            raise KtuneError("KT_ERR_INVALID", "ktune.jax: cannot register %s for device %d" % (name, dev))
        got = lib().kt_kernel_name(k._h).decode()
    _registered[name] = got
    return got


def _num_sms():
    dev = _devices()[0]
    n = _sms.get(dev)
    if n is None:
        info = _capi.RuntimeInfo()
        lib().kt_runtime_get_info(runtime(dev)._h, ctypes.byref(info))
        n = _sms[dev] = info.num_sms
    return n


# Calls whose key is settled while JAX traces them go to the handler's
# command-buffer-compatible entry ("ktune_graph"): XLA may then record them
# into its CUDA graphs with the work around them and replay them without a
# host round trip each. Settled: in the cache, or in tune mode tuned then
# (as XLA tunes its own GEMMs while compiling), on inputs the tuning makes
# (Kernel.settle_shape). Every other call, and every call where
# $KTUNE_JAX_GRAPHS=0 (read once, at import: JAX reuses its traces), goes to
# the plain entry, which XLA runs outside its graphs, as a call of its own
# that may tune (tune mode) or queue a tuning (async mode) on a miss.
_GRAPHS = os.environ.get("KTUNE_JAX_GRAPHS", "1") != "0"
_settled = set()
# False while a call is traced for its results' shapes alone (a vmap over
# no example): no key is settled for a launch that never runs.
_settling = contextvars.ContextVar("ktune_settling", default=True)


def _shape_args(k, params, outs):
    """The kt_args of a call as ktune settles it before any buffer exists:
    the scalars, the buffers' dtypes, each buffer at a made-up address of
    its own, 256-byte aligned as XLA places them and overlapping none.
    None where a dtype has no ktune code."""
    args = (_capi.Arg * len(params))()
    addr = 1 << 40
    for a, p, (_, kind) in zip(args, params, k.params):
        a.kind = kind
        if not isinstance(p, tuple):
            if kind == _capi.KT_ARG_F32:
                a.v.f32 = float(p)
            elif kind == _capi.KT_ARG_I64:
                a.v.i64 = int(p)
            else:
                a.v.i32 = int(p)
            continue
        if p[0] == "n":  # a null pointer of a ktune dtype
            a.dtype = _capi.DTYPES[p[1]]
            continue
        buf = p[1] if p[0] == "i" else outs[p[1]]
        code = _CODES.get(jnp.dtype(buf.dtype).name)
        if code is None:
            return None
        a.dtype = _capi.DTYPES[code]
        a.v.ptr = addr
        addr += -(-int(np.prod(buf.shape, dtype=np.int64)) * jnp.dtype(buf.dtype).itemsize // 256) * 256 + 256
    return args


def _graph_ready(name, params, outs):
    """Whether every local GPU's runtime has the call's key settled, after
    settling it where the mode allows (a tuning in tune mode), where
    $KTUNE_JAX_GRAPHS allows. Only a yes is kept: a key not settled now may
    be cached by the next trace (async mode's tuning ended)."""
    if not _GRAPHS:
        return False
    sig = (name, tuple(_sig(p) for p in params), tuple((o.shape, jnp.dtype(o.dtype).name) for o in outs))
    if sig in _settled:
        return True
    devs = _devices()
    for dev in devs:
        k = runtime(dev).kernel(name)
        args = _shape_args(k, params, outs)
        if args is None or not k.settle_shape(args):
            return False
    if devs:
        _settled.add(sig)
    return bool(devs)


def _sig(p):
    """What of a param decides its key: an input's shape and dtype, not the
    array (a tracer while JAX traces)."""
    if not isinstance(p, tuple):
        return p
    return ("i", p[1].shape, jnp.dtype(p[1].dtype).name) if p[0] == "i" else p[:2]


def _call(name, params, outs, aliases=None, graph=None):
    """One launch of kernel name. params follow the spec: ("i", array),
    ("o", index into outs), ("a", index into outs, array: the result
    aliased to that input), ("n", dtype name), or a number. graph: None
    settles the key now and records the call into XLA's graphs where that
    worked; True or False forces the entry (tests)."""
    kernel = _ensure(name)
    layout, ins, nulls, scalars = [], [], [], []
    aliases = dict(aliases or {})
    for p in params:
        if isinstance(p, tuple) and p[0] == "i":
            layout.append("i")
            ins.append(p[1])
        elif isinstance(p, tuple) and p[0] == "a":
            layout.append("a")
            aliases[len(ins)] = p[1]
            ins.append(p[2])
        elif isinstance(p, tuple) and p[0] == "o":
            layout.append("o")
        elif isinstance(p, tuple) and p[0] == "n":
            layout.append("n")
            nulls.append(p[1])
        else:
            layout.append("s")
            scalars.append(float(p))
    if graph is None:
        graph = _settling.get() and _graph_ready(name, params, outs)
    f = jax.ffi.ffi_call("ktune_graph" if graph else "ktune", outs, vmap_method="sequential",
                         input_output_aliases=aliases or None)
    return f(*ins, kernel=kernel, layout="".join(layout), nulls=",".join(nulls),
             scalars=np.asarray(scalars, dtype=np.float64))


def _flat(a):
    """a (None: None) as the kernels read it: its elements one after
    another, whatever its shape ((1, D) weights, (N, 1) probs)."""
    return None if a is None else a.reshape(-1)


def _in_shape(g, shape):
    """A cotangent in its primal's shape (None: no primal), which holds the
    same elements, maybe laid out otherwise (probs as (N, 1))."""
    return None if shape is None or g is None else g.reshape(shape)


def _opt(a, dtype):
    return ("i", a) if a is not None else ("n", dtype)


# vmap. An op below is impl(batch, statics, *arrays) -> tuple of arrays, its
# arrays rows first. Under jax.vmap, _op's rule asks the op's fold for the
# batch folded into the rows (examples one after another), launches once on
# those, and unfolds every result ([n * r, ...] -> [n, r, ...]); where fold
# says no (a weight that differs per example, partial sums that would mix
# examples) the examples run one after another (lax.map).

def _spread(a, n):
    return jnp.broadcast_to(a, (n,) + a.shape)


def _fold(a):
    return a.reshape((-1,) + a.shape[2:])


@functools.lru_cache(maxsize=1024)
def _op(impl, fold, batch, statics):
    """impl with these statics, batch examples folded into its rows."""
    f = jax.custom_batching.custom_vmap(lambda *a: impl(batch, statics, *a))

    @f.def_vmap
    def rule(n, batched, *a):
        batched = [b is True for b in batched]
        if n == 0:
            out = _no_examples(impl, batch, statics, batched, a)
            return out, jax.tree.map(lambda _: True, out)
        folded = fold(n, batch, statics, batched, a)
        if folded is None:
            idx = [i for i, b in enumerate(batched) if b]

            def one(xs):
                b = list(a)
                for i, v in zip(idx, xs):
                    b[i] = v
                return f(*b)
            out = jax.lax.map(one, [a[i] for i in idx])
        else:
            out = tuple(o.reshape((n, -1) + o.shape[1:]) for o in _op(impl, fold, batch * n, statics)(*folded))
        return out, jax.tree.map(lambda _: True, out)
    return f


def _no_examples(impl, batch, statics, batched, a):
    """impl's results over a mapped axis of no example: each empty, of the
    shape one example's would have after the axis, with nothing launched
    (an example's shapes traced alone, no key settled for them)."""
    one = [None if x is None else jax.ShapeDtypeStruct(x.shape[1:] if b else x.shape, x.dtype)
           for x, b in zip(a, batched)]
    token = _settling.set(False)
    try:
        shapes = jax.eval_shape(lambda *e: impl(batch, statics, *e), *one)
    finally:
        _settling.reset(token)
    return tuple(jnp.zeros((0,) + s.shape, s.dtype) for s in shapes)


def _rows_fold(shared):
    """A fold for ops whose arrays are all per row but those at the indices
    `shared` (a weight, a bias), which must not be mapped."""
    def fold(n, batch, statics, batched, a):
        if any(b for i, b in enumerate(batched) if i in shared):
            return None
        return [x if x is None or i in shared else _fold(x if b else _spread(x, n))
                for i, (x, b) in enumerate(zip(a, batched))]
    return fold


_NORM_FOLD = _rows_fold((2, 3))     # x, res, w, b
_ROWS_FOLD = _rows_fold(())         # every array per row
_INPLACE_FOLD = _rows_fold((1,))    # x, w


def _fwd_launch(batch, st, x2, res2, w, b):
    eps, rms, groups, store, stats, td, wd = st
    T, D = x2.shape
    outs = [jax.ShapeDtypeStruct((T, D), x2.dtype)]
    lay = {}
    if store:
        lay["h"] = len(outs)
        outs.append(jax.ShapeDtypeStruct((T, D), x2.dtype))
    if stats and not rms:
        lay["mean"] = len(outs)
        outs.append(jax.ShapeDtypeStruct((T * groups,), jnp.float32))
    if stats:
        lay["rstd"] = len(outs)
        outs.append(jax.ShapeDtypeStruct((T * groups,), jnp.float32))
    return tuple(_call("layernorm_fwd", [
        ("o", 0), ("i", x2), _opt(res2, td), ("o", lay["h"]) if store else ("n", td), _opt(w, wd), _opt(b, wd),
        ("o", lay["mean"]) if "mean" in lay else ("n", "f32"), ("o", lay["rstd"]) if stats else ("n", "f32"),
        T, D, groups, eps, 1 if rms else 0], outs))


def _no_elements(x):
    """Whether x holds no element (no rows, or rows of none): a call on it
    launches nothing."""
    return x.size == 0


def _fwd_impl(x, res, w, b, eps, rms, groups, store, stats):
    D = _last_dim(x, "a norm")
    if groups < 1 or D % groups:
        raise KtuneError("KT_ERR_ARGS", "ktune.jax: groups=%d does not split the rows' %d elements into equal parts"
                         % (groups, D))
    for a, what in ((w, "weight"), (b, "bias")):
        _fits(a, D, what, "the rows have %d elements" % D)
    _fits(res, x.size, "residual", "x has %s" % (tuple(x.shape),))
    w, b = _flat(w), _flat(b)  # D elements in any shape: one row
    if _no_elements(x):
        none = jnp.zeros((0,), jnp.float32)
        return (jnp.zeros(x.shape, x.dtype), jnp.zeros(x.shape, x.dtype) if store else None,
                none if stats and not rms else None, none if stats else None)
    td = _dt(x.dtype)
    wd = _dt(w.dtype if w is not None else b.dtype if b is not None else x.dtype)
    st = (float(eps), bool(rms), int(groups), bool(store), bool(stats), td, wd)
    r = list(_op(_fwd_launch, _NORM_FOLD, 1, st)(x.reshape(-1, D), None if res is None else res.reshape(-1, D), w, b))
    y = r.pop(0).reshape(x.shape)
    h = r.pop(0).reshape(x.shape) if store else None
    mean = r.pop(0) if stats and not rms else None
    return y, h, mean, (r.pop(0) if stats else None)


def _parts(T, n):
    """Programs (partial rows of dw and db) an example of T rows gets when n
    examples share one backward launch: a count that splits its rows
    evenly (no program's rows reach into the next example). None where
    such a launch would have fewer programs than one launch an example
    (rows split over ktune.norm_programs(T, SMs)), which then is faster. Either
    way every program gets rows, so every partial row is written."""
    sms = _num_sms()
    if n == 1:  # every program gets rows: the reduce sums each partial row
        bs = -(-T // norm_programs(T, sms))
        return -(-T // bs)
    p = max(1, min(sms // n, T))
    while T % p:  # the most programs, at most p, that divide the rows evenly
        p -= 1
    return p if n * p >= norm_programs(T, sms) else None


_BWD_ROWS = _rows_fold((2,))        # dy, h, w, mean, rstd, dres


def _bwd_fold(n, batch, st, batched, a):
    if st[0] or st[1]:  # partial sums of dw / db: a program's rows must be one example's
        rows = a[1].shape[1] if batched[1] else a[1].shape[0]
        if _parts(rows // batch, n * batch) is None:
            return None
    return _BWD_ROWS(n, batch, st, batched, a)


def _bwd_launch(batch, st, dy2, h2, w, mean, rstd, dres2):
    sum_w, sum_b, rms, groups, td, wd = st
    T, D = h2.shape
    # Partial rows must each be one example's; without them (no sums: no
    # weight and bias, or frozen ones) the batch's rows are split as one
    # example's would be.
    P = batch * _parts(T // batch, batch) if sum_w or sum_b else norm_programs(T, _num_sms(), D, sums=False)
    outs = [jax.ShapeDtypeStruct((T, D), h2.dtype)] + [jax.ShapeDtypeStruct((P, D), jnp.float32)] * (sum_w + sum_b)
    return tuple(_call("layernorm_bwd", [
        ("o", 0), ("o", 1) if sum_w else ("n", "f32"), ("o", len(outs) - 1) if sum_b else ("n", "f32"),
        ("i", dy2), ("i", h2), _opt(w, wd), ("n", "f32") if rms else ("i", mean), ("i", rstd),
        _opt(dres2, td), T, D, groups, P, 1 if rms else 0], outs))


@functools.lru_cache(maxsize=None)
def _reducer(D, wdt, sum_w, sum_b):
    """The partial rows of dw and db summed by layernorm_bwd_reduce; under
    vmap, each example's summed by XLA. The reduce consumes them (they are
    undefined after it): the backward's outputs that only it reads."""
    wd = _dt(wdt)

    def launch(dwp, dbp):
        P = (dwp if sum_w else dbp).shape[0]
        routs = [jax.ShapeDtypeStruct((D,), wdt)] * (sum_w + sum_b)
        return tuple(_call("layernorm_bwd_reduce", [
            ("o", 0) if sum_w else ("n", wd), ("o", len(routs) - 1) if sum_b else ("n", wd),
            ("i", dwp) if sum_w else ("n", "f32"), ("i", dbp) if sum_b else ("n", "f32"), P, D, P], routs))
    f = jax.custom_batching.custom_vmap(launch)

    @f.def_vmap
    def rule(n, batched, dwp, dbp):
        out = tuple(jnp.sum(p if b is True else _spread(p, n), 1).astype(wdt)
                    for p, b in ((dwp, batched[0]), (dbp, batched[1])) if p is not None)
        return out, tuple(True for _ in out)
    return f


def _two_launches(st, dy2, h2, w, mean, rstd, dres2):
    """dx, then dw and db where present: layernorm_bwd's partial rows summed
    by layernorm_bwd_reduce."""
    sum_w, sum_b = st[0], st[1]
    r = _op(_bwd_launch, _bwd_fold, 1, st)(dy2, h2, w, mean, rstd, dres2)
    if not sum_w and not sum_b:
        return (r[0],)
    red = _reducer(h2.shape[1], _jdt(st[5]), sum_w, sum_b)(r[1] if sum_w else None, r[-1] if sum_b else None)
    return (r[0],) + tuple(red)


@functools.lru_cache(maxsize=None)
def _one_program(st):
    """The same results from layernorm_bwd_row alone, one program that writes
    dw and db itself (a few rows: ktune.norm_bwd_one_program). Under vmap an
    example's dw and db must stay its own, so the batch goes to the two
    launches, which fold it into their rows."""
    sum_w, sum_b, rms, groups, td, wd = st

    def launch(dy2, h2, w, mean, rstd, dres2):
        T, D = h2.shape
        outs = [jax.ShapeDtypeStruct((T, D), h2.dtype)] + [jax.ShapeDtypeStruct((D,), _jdt(wd))] * (sum_w + sum_b)
        return tuple(_call("layernorm_bwd_row", [
            ("o", 0), ("o", 1) if sum_w else ("n", wd), ("o", len(outs) - 1) if sum_b else ("n", wd),
            ("i", dy2), ("i", h2), _opt(w, wd), ("n", "f32") if rms else ("i", mean), ("i", rstd),
            _opt(dres2, td), T, D, groups, 1 if rms else 0], outs))
    f = jax.custom_batching.custom_vmap(launch)

    @f.def_vmap
    def rule(n, batched, *a):
        axes = [0 if b is True else None for b in batched]
        out = jax.vmap(functools.partial(_two_launches, st), in_axes=axes)(*a)
        return out, tuple(True for _ in out)
    return f


def _bwd_impl(dy, h, w, wdt, sums, mean, rstd, dres, rms, groups):
    """dx, dw and db; sums: (dw, db) wanted. wdt: the dtype of the weight
    and bias (dw and db), or None where neither exists."""
    D = h.shape[-1]
    if _no_elements(h):  # sums over no rows are 0
        z = jnp.zeros((D,), wdt if wdt is not None else h.dtype)
        return jnp.zeros(h.shape, h.dtype), (z if sums[0] else None), (z if sums[1] else None)
    td = _dt(h.dtype)
    st = (bool(sums[0]), bool(sums[1]), bool(rms), int(groups), td, _dt(wdt) if wdt is not None else td)
    a = (dy.reshape(-1, D), h.reshape(-1, D), w, mean, rstd, None if dres is None else dres.reshape(-1, D))
    if norm_bwd_one_program(a[1].shape[0], D, groups):
        r = _one_program(st)(*a)
    else:
        r = _two_launches(st, *a)
    return r[0].reshape(h.shape), (r[1] if sums[0] else None), (r[-1] if sums[1] else None)


# The rules below see which inputs are differentiated (symbolic_zeros): a
# weight or bias no gradient is taken for (jax.grad over x alone,
# stop_gradient, a frozen norm) is only read, nothing is summed for it; an
# output whose cotangent is a symbolic zero is neither read nor filled.
@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def _norm(x, res, w, b, eps, rms, groups, ret_res):
    y, h, _, _ = _fwd_impl(x, res, w, b, eps, rms, groups, ret_res or res is not None, False)
    return (y, h) if ret_res else y


def _value(p):
    return None if p is None else p.value


def _norm_fwd(x, res, w, b, eps, rms, groups, ret_res):
    store = ret_res or res is not None
    xv, rv, wv, bv = _value(x), _value(res), _value(w), _value(b)
    y, h, mean, rstd = _fwd_impl(xv, rv, wv, bv, eps, rms, groups, store, True)
    # Which inputs want a gradient: (x, res, w, b), absent ones never. The
    # bias is kept (without a weight) for db's dtype alone.
    wants = tuple(p is not None and p.perturbed for p in (x, res, w, b))
    # The residual's, weight's and bias's own shapes, for their cotangents
    # (the elements the kernels read, maybe laid out otherwise: (1, D)).
    shapes = tuple(None if a is None else tuple(a.shape) for a in (rv, wv, bv))
    wv, bv = _flat(wv), _flat(bv)
    saved = (h if store else xv, wv, bv if wv is None else None, mean, rstd, wants, shapes)
    return ((y, h) if ret_res else y), saved


def _zero(g):
    return g is None or isinstance(g, jax.custom_derivatives.SymbolicZero)


def _norm_bwd(eps, rms, groups, ret_res, saved, g):
    h, w, b, mean, rstd, wants, (rshape, wshape, bshape) = saved
    wdt = w.dtype if w is not None else b.dtype if b is not None else None
    dy, dh = g if ret_res else (g, None)
    dh = None if _zero(dh) else dh
    if _zero(dy):  # y takes no part: h's cotangent goes on to x and res alone
        dx, dw, db = dh, None, None
    else:
        dx, dw, db = _bwd_impl(dy, h, w, wdt, wants[2:], mean, rstd, dh, rms, groups)
    dres = _in_shape(dx, rshape) if wants[1] else None
    return tuple(d if want else None for d, want in zip((dx, dres, _in_shape(dw, wshape), _in_shape(db, bshape)),
                                                         wants))


_norm.defvjp(_norm_fwd, _norm_bwd, symbolic_zeros=True)


def rms_norm(x, weight=None, eps=1e-6, residual=None, return_residual=False):
    """RMSNorm over the last dim of (x + residual); with return_residual also
    x + residual, stored by the same kernel."""
    return _norm(x, residual, weight, None, eps, True, 1, return_residual)


def layer_norm(x, weight=None, bias=None, eps=1e-5, residual=None, return_residual=False, groups=1):
    """LayerNorm over the last dim of (x + residual), or a group norm over
    `groups` equal parts of it."""
    return _norm(x, residual, weight, bias, eps, False, groups, return_residual)


def _inplace_launch(batch, st, x2, w):
    eps, td, wd = st
    return (_call("rmsnorm", [("o", 0), ("i", x2), ("n", td), _opt(w, wd), x2.shape[0], x2.shape[1], eps],
                  [jax.ShapeDtypeStruct(x2.shape, x2.dtype)], aliases={0: 0})[0],)


def rms_norm_(x, weight, eps=1e-6):
    """RMSNorm written over x's buffer (input_output_aliases; donate x to
    jit for XLA to reuse it): one application, also on the call that
    tunes. Not differentiable."""
    D = _last_dim(x, "a norm")
    _fits(weight, D, "weight", "the rows have %d elements" % D)
    if _no_elements(x):
        return x
    td = _dt(x.dtype)
    st = (float(eps), td, _dt(weight.dtype) if weight is not None else td)
    return _op(_inplace_launch, _INPLACE_FOLD, 1, st)(x.reshape(-1, D), _flat(weight))[0].reshape(x.shape)


def _rows(x):
    D = int(np.prod(x.shape[1:]))  # 1 for rows of one element; also where x has no row
    return x.reshape(x.shape[0], D), D


def _index_fold(n, batch, st, batched, a):
    """Gather and scatter: (rows, map, per-row floats) each folded, map
    entries moved to their example's rows (entries outside stay outside).
    statics[0]: the rows a scatter writes per example (0 for a gather)."""
    src, rmap, extra = a
    rows = st[0] * batch if st[0] else (src.shape[1] if batched[0] else src.shape[0])
    src, rmap = (_fold(v if b else _spread(v, n)) for v, b in ((src, batched[0]), (rmap, batched[1])))
    off = jnp.repeat(jnp.arange(n, dtype=jnp.int32) * rows, rmap.shape[0] // n)
    rmap = jnp.where((rmap >= 0) & (rmap < rows), rmap + off, -1)
    return [src, rmap, None if extra is None else _fold(extra if batched[2] else _spread(extra, n))]


def _gather_launch(batch, st, x2, row_map, probs):
    N, D = x2.shape
    M = row_map.shape[0]
    outs = [jax.ShapeDtypeStruct((M, D), x2.dtype)] + ([jax.ShapeDtypeStruct((M,), jnp.float32)] if probs is not None else [])
    return tuple(_call("permute_rows", [("o", 0), ("i", x2), ("i", row_map), _opt(probs, "f32"),
                                        ("o", 1) if probs is not None else ("n", "f32"), M, N, D], outs))


def _index_args(x, row_map, per_row, what):
    """Refuse a row map that is not one index an output row, or per-row
    floats (probs) that are not one an input row of x."""
    if x.ndim == 0 or row_map.ndim != 1:
        raise KtuneError("KT_ERR_ARGS", "ktune.jax: row_map has shape %s and x %s; the map holds one index an "
                         "output row (1-D) of x's rows (x has at least one dim)"
                         % (tuple(row_map.shape), tuple(x.shape)))
    if not jnp.issubdtype(row_map.dtype, jnp.integer):
        # a cast would make 1.7 row 1 and True row 1
        raise KtuneError("KT_ERR_ARGS", "ktune.jax: row_map has dtype %s; a row map holds integers"
                         % jnp.dtype(row_map.dtype).name)
    _fits(per_row, x.shape[0], what, "x has %d rows" % x.shape[0])


def _map32(row_map, n):
    """A row map as the kernels read it, int32, its entries outside [0, n)
    made -1 first: a cast alone would wrap 2**32 + 5 to 5, a row inside."""
    if jnp.dtype(row_map.dtype) == jnp.dtype(jnp.int32):
        return row_map
    return jnp.where((row_map >= 0) & (row_map < n), row_map, -1).astype(jnp.int32)


def _gather(x, row_map, probs):
    _index_args(x, row_map, probs, "probs")
    if x.shape[0] == 0:
        # Every entry is outside [0, N): zero rows. No launch, as empty
        # probs have a null address, which the spec reads as no probs.
        M = row_map.shape[0]
        return jnp.zeros((M,) + x.shape[1:], x.dtype), (jnp.zeros((M,), jnp.float32) if probs is not None else None)
    x2, D = _rows(x)
    probs = _flat(probs)  # one float a row
    r = _op(_gather_launch, _index_fold, 1, (0,))(x2, _map32(row_map, x.shape[0]), probs)
    return r[0].reshape(r[0].shape[:1] + x.shape[1:]), (r[1] if probs is not None else None)


def _scatter_launch(batch, st, d2, row_map, dprobs):
    n = st[0] * batch
    M, D = d2.shape
    outs = [jax.ShapeDtypeStruct((n, D), d2.dtype)] + ([jax.ShapeDtypeStruct((n,), jnp.float32)] if dprobs is not None else [])
    return tuple(_call("permute_rows_bwd", [
        ("a", 0, jnp.zeros((n, D), d2.dtype)), ("i", d2), ("i", row_map), _opt(dprobs, "f32"),
        ("a", 1, jnp.zeros((n,), jnp.float32)) if dprobs is not None else ("n", "f32"), M, n, D], outs))


def _scatter(dout, row_map, n, dprobs):
    _index_args(dout, row_map, dprobs, "dprobs")
    if row_map.shape[0] != dout.shape[0] or n < 0:
        raise KtuneError("KT_ERR_ARGS", "ktune.jax: row_map has %d entries, n is %d; unpermute_rows takes one entry "
                         "a row of dout (%d) and n >= 0" % (row_map.shape[0], n, dout.shape[0]))
    if dout.shape[0] == 0:  # nothing scattered: zeros, without a launch (as for a gather from no rows)
        dp = jnp.zeros((n,), jnp.float32) if dprobs is not None else None
        return jnp.zeros((n,) + dout.shape[1:], dout.dtype), dp
    d2, D = _rows(dout)
    dprobs = _flat(dprobs)  # one float a row
    r = _op(_scatter_launch, _index_fold, 1, (int(n),))(d2, _map32(row_map, n), dprobs)
    return r[0].reshape((n,) + dout.shape[1:]), (r[1] if dprobs is not None else None)


@jax.custom_vjp
def permute_rows(x, row_map, probs=None):
    """Rows of x reordered by row_map (each row of x named at most once for
    the gradient); probs (float32 per row) follow. Returns (out, probs_out)."""
    return _gather(x, row_map, probs)


def _permute_fwd(x, row_map, probs=None):
    return _gather(x, row_map, probs), (row_map, x.shape[0], None if probs is None else tuple(probs.shape))


def _permute_bwd(saved, g):
    row_map, n, pshape = saved
    dout, dpout = g
    dx, dp = _scatter(dout, row_map, n, dpout if pshape is not None else None)
    return dx, None, _in_shape(dp, pshape)


permute_rows.defvjp(_permute_fwd, _permute_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def unpermute_rows(dout, row_map, n, dprobs=None):
    """The inverse scatter: out[row_map[j]] = dout[j]; rows not named are 0."""
    return _scatter(dout, row_map, n, dprobs)


def _unpermute_fwd(dout, row_map, n, dprobs=None):
    return _scatter(dout, row_map, n, dprobs), (row_map, None if dprobs is None else tuple(dprobs.shape))


def _unpermute_bwd(n, saved, g):
    row_map, pshape = saved
    dx, dp = g
    y, yp = _gather(dx, row_map, dp if pshape is not None else None)
    return y, None, _in_shape(yp, pshape)


unpermute_rows.defvjp(_unpermute_fwd, _unpermute_bwd)


def _softmax_launch(batch, st, x2, m, bias):
    scale, td = st
    return (_call("masked_softmax", [("o", 0), ("i", x2), _opt(m, "u8"), _opt(bias, td), x2.shape[0], x2.shape[1],
                                     scale], [jax.ShapeDtypeStruct(x2.shape, x2.dtype)])[0],)


_MASK_BYTES = tuple(jnp.dtype(t) for t in (jnp.bool_, jnp.uint8, jnp.int8))  # masks cast to u8 as they are


def _softmax(x, mask, bias, scale):
    L = _last_dim(x, "masked_softmax")
    for a, what in ((mask, "mask"), (bias, "bias")):
        _fits(a, x.size, what, "x has %s (the mask and the bias are of x's shape)" % (tuple(x.shape),))
    if _no_elements(x):
        return jnp.zeros(x.shape, x.dtype)
    if mask is not None and jnp.dtype(mask.dtype) not in _MASK_BYTES:
        mask = mask != 0  # a byte an element as the kernel reads it, nonzero kept (0.5 too)
    m = mask.reshape(-1, L).astype(jnp.uint8) if mask is not None else None
    y = _op(_softmax_launch, _ROWS_FOLD, 1, (float(scale), _dt(x.dtype)))(
        x.reshape(-1, L), m, None if bias is None else bias.reshape(-1, L))[0]
    return y.reshape(x.shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def masked_softmax(x, mask=None, bias=None, scale=1.0):
    """softmax(scale * x + bias) over the last dim; mask and bias of x's
    shape (the same number of elements); mask == 0 (any dtype) excludes an
    element; a fully masked row is all zeros."""
    return _softmax(x, mask, bias, scale)


def _softmax_fwd(x, mask, bias, scale):
    y = _softmax(x, mask, bias, scale)
    return y, (y, None if bias is None else tuple(bias.shape))


def _softmax_bwd(scale, saved, dy):
    y, bshape = saved
    yf, df = y.astype(jnp.float32), dy.astype(jnp.float32)
    dz = yf * (df - jnp.sum(df * yf, -1, keepdims=True))
    return (dz * scale).astype(y.dtype), None, _in_shape(dz.astype(y.dtype), bshape)


masked_softmax.defvjp(_softmax_fwd, _softmax_bwd)
