"""The bundled norms as JAX operations, through one XLA FFI custom call
("ktune") whose handler is C (tools/jax/ffi.c, built by `make jax` into
libktune_jax.so beside libktune.so). Under jax.jit, jax.grad (custom_vjp)
and jax.vmap (sequential over the mapped axis):

    from ktune import jax as kj
    y = kj.rms_norm(x, w)                  # x: [..., D]
    y, h = kj.layer_norm(x, w, b, residual=r, return_residual=True)
    x = kj.rms_norm_(x, w)                 # in place: y shares x's buffer

Launches go on XLA's stream, through the process's ktune runtime of the
device XLA chose (the one ktune.runtime() gives, shared with PyTorch).
A ktune error is raised with ktune's message.
"""
import ctypes
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from . import KtuneError, _capi, lib, runtime

__all__ = ["rms_norm", "layer_norm", "rms_norm_", "permute_rows", "unpermute_rows", "masked_softmax", "available"]

_jl = None
_registered = {}
_sms = {}
_DT = {jnp.dtype(jnp.float32): "f32", jnp.dtype(jnp.float16): "f16", jnp.dtype(jnp.bfloat16): "bf16"}


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
    jl = _jax_lib()
    for dev in _devices():
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


def _call(name, params, outs, aliases=None):
    """One launch of kernel name. params follow the spec: ("i", array),
    ("o", index into outs), ("n", dtype name), or a number."""
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
    f = jax.ffi.ffi_call("ktune", outs, vmap_method="sequential", input_output_aliases=aliases or None)
    return f(*ins, kernel=kernel, layout="".join(layout), nulls=",".join(nulls),
             scalars=np.asarray(scalars, dtype=np.float64))


def _opt(a, dtype):
    return ("i", a) if a is not None else ("n", dtype)


def _fwd_impl(x, res, w, b, eps, rms, groups, store, stats):
    D = x.shape[-1]
    x2 = x.reshape(-1, D)
    T = x2.shape[0]
    td = _DT[jnp.dtype(x.dtype)]
    wd = _DT[jnp.dtype(w.dtype if w is not None else b.dtype if b is not None else x.dtype)]
    outs = [jax.ShapeDtypeStruct((T, D), x.dtype)]
    lay = {}
    if store:
        lay["h"] = len(outs)
        outs.append(jax.ShapeDtypeStruct((T, D), x.dtype))
    if stats and not rms:
        lay["mean"] = len(outs)
        outs.append(jax.ShapeDtypeStruct((T * groups,), jnp.float32))
    if stats:
        lay["rstd"] = len(outs)
        outs.append(jax.ShapeDtypeStruct((T * groups,), jnp.float32))
    r = _call("layernorm_fwd", [
        ("o", 0), ("i", x2), _opt(None if res is None else res.reshape(-1, D), td),
        ("o", lay["h"]) if store else ("n", td), _opt(w, wd), _opt(b, wd),
        ("o", lay["mean"]) if "mean" in lay else ("n", "f32"), ("o", lay["rstd"]) if stats else ("n", "f32"),
        T, D, groups, eps, 1 if rms else 0], outs)
    y = r[0].reshape(x.shape)
    h = r[lay["h"]].reshape(x.shape) if store else None
    return y, h, (r[lay["mean"]] if "mean" in lay else None), (r[lay["rstd"]] if stats else None)


def _bwd_impl(dy, h, w, has_bias, mean, rstd, dres, rms, groups):
    D = h.shape[-1]
    h2, dy2 = h.reshape(-1, D), dy.reshape(-1, D)
    T = h2.shape[0]
    P = max(1, min(_num_sms(), T))
    td = _DT[jnp.dtype(h.dtype)]
    wd = _DT[jnp.dtype(w.dtype)] if w is not None else td
    outs = [jax.ShapeDtypeStruct((T, D), h.dtype)]
    if w is not None:
        outs.append(jax.ShapeDtypeStruct((P, D), jnp.float32))
    if has_bias:
        outs.append(jax.ShapeDtypeStruct((P, D), jnp.float32))
    r = _call("layernorm_bwd", [
        ("o", 0), ("o", 1) if w is not None else ("n", "f32"), ("o", len(outs) - 1) if has_bias else ("n", "f32"),
        ("i", dy2), ("i", h2), _opt(w, wd), ("n", "f32") if rms else ("i", mean), ("i", rstd),
        _opt(None if dres is None else dres.reshape(-1, D), td), T, D, groups, P, 1 if rms else 0], outs)
    dx = r[0].reshape(h.shape)
    dw = db = None
    if w is not None or has_bias:
        routs = ([jax.ShapeDtypeStruct((D,), w.dtype)] if w is not None else []) + \
            ([jax.ShapeDtypeStruct((D,), w.dtype if w is not None else h.dtype)] if has_bias else [])
        red = _call("layernorm_bwd_reduce", [
            ("o", 0) if w is not None else ("n", wd), ("o", len(routs) - 1) if has_bias else ("n", wd),
            ("i", r[1]) if w is not None else ("n", "f32"), ("i", r[-1]) if has_bias else ("n", "f32"), T, D, P],
            routs)
        dw = red[0] if w is not None else None
        db = red[-1] if has_bias else None
    return dx, dw, db


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def _norm(x, res, w, b, eps, rms, groups, ret_res):
    y, h, _, _ = _fwd_impl(x, res, w, b, eps, rms, groups, ret_res or res is not None, False)
    return (y, h) if ret_res else y


def _norm_fwd(x, res, w, b, eps, rms, groups, ret_res):
    store = ret_res or res is not None
    y, h, mean, rstd = _fwd_impl(x, res, w, b, eps, rms, groups, store, True)
    saved = (h if store else x, w, b is not None, mean, rstd, res is not None, b)
    return ((y, h) if ret_res else y), saved


def _norm_bwd(eps, rms, groups, ret_res, saved, g):
    h, w, has_bias, mean, rstd, has_res, b = saved
    dy, dh = g if ret_res else (g, None)
    dx, dw, db = _bwd_impl(dy, h, w, has_bias, mean, rstd, dh if ret_res else None, rms, groups)
    return dx, (dx if has_res else None), dw, db


_norm.defvjp(_norm_fwd, _norm_bwd)


def rms_norm(x, weight=None, eps=1e-6, residual=None, return_residual=False):
    """RMSNorm over the last dim of (x + residual); with return_residual also
    x + residual, stored by the same kernel."""
    return _norm(x, residual, weight, None, eps, True, 1, return_residual)


def layer_norm(x, weight=None, bias=None, eps=1e-5, residual=None, return_residual=False, groups=1):
    """LayerNorm over the last dim of (x + residual), or a group norm over
    `groups` equal parts of it."""
    return _norm(x, residual, weight, bias, eps, False, groups, return_residual)


def rms_norm_(x, weight, eps=1e-6):
    """RMSNorm written over x's buffer (input_output_aliases; donate x to
    jit for XLA to reuse it): one application, also on the call that
    tunes. Not differentiable."""
    D = x.shape[-1]
    x2 = x.reshape(-1, D)
    wd = _DT[jnp.dtype(weight.dtype)] if weight is not None else _DT[jnp.dtype(x.dtype)]
    y = _call("rmsnorm", [("o", 0), ("i", x2), ("n", _DT[jnp.dtype(x.dtype)]), _opt(weight, wd), x2.shape[0], D, eps],
              [jax.ShapeDtypeStruct(x2.shape, x.dtype)], aliases={0: 0})[0]
    return y.reshape(x.shape)


def _rows(x):
    return x.reshape(x.shape[0], -1), (int(np.prod(x.shape[1:])) if x.ndim > 1 else 1)


def _gather(x, row_map, probs):
    N = x.shape[0]
    x2, D = _rows(x)
    M = row_map.shape[0]
    outs = [jax.ShapeDtypeStruct((M, D), x.dtype)] + ([jax.ShapeDtypeStruct((M,), jnp.float32)] if probs is not None else [])
    r = _call("permute_rows", [("o", 0), ("i", x2), ("i", row_map.astype(jnp.int32)), _opt(probs, "f32"),
                               ("o", 1) if probs is not None else ("n", "f32"), M, N, D], outs)
    return r[0].reshape((M,) + x.shape[1:]), (r[1] if probs is not None else None)


def _scatter(dout, row_map, n, dprobs):
    M = dout.shape[0]
    d2, D = _rows(dout)
    outs = [jax.ShapeDtypeStruct((n, D), dout.dtype)] + \
        ([jax.ShapeDtypeStruct((n,), jnp.float32)] if dprobs is not None else [])
    r = _call("permute_rows_bwd", [
        ("a", 0, jnp.zeros((n, D), dout.dtype)), ("i", d2), ("i", row_map.astype(jnp.int32)), _opt(dprobs, "f32"),
        ("a", 1, jnp.zeros((n,), jnp.float32)) if dprobs is not None else ("n", "f32"), M, n, D], outs)
    return r[0].reshape((n,) + dout.shape[1:]), (r[1] if dprobs is not None else None)


@jax.custom_vjp
def permute_rows(x, row_map, probs=None):
    """Rows of x reordered by row_map (each row of x named at most once for
    the gradient); probs (float32 per row) follow. Returns (out, probs_out)."""
    return _gather(x, row_map, probs)


def _permute_fwd(x, row_map, probs=None):
    return _gather(x, row_map, probs), (row_map, x.shape[0], probs is not None)


def _permute_bwd(saved, g):
    row_map, n, has_probs = saved
    dout, dpout = g
    dx, dp = _scatter(dout, row_map, n, dpout if has_probs else None)
    return dx, None, dp


permute_rows.defvjp(_permute_fwd, _permute_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def unpermute_rows(dout, row_map, n, dprobs=None):
    """The inverse scatter: out[row_map[j]] = dout[j]; rows not named are 0."""
    return _scatter(dout, row_map, n, dprobs)


def _unpermute_fwd(dout, row_map, n, dprobs=None):
    return _scatter(dout, row_map, n, dprobs), (row_map, dprobs is not None)


def _unpermute_bwd(n, saved, g):
    row_map, has_probs = saved
    dx, dp = g
    y, yp = _gather(dx, row_map, dp if has_probs else None)
    return y, None, yp


unpermute_rows.defvjp(_unpermute_fwd, _unpermute_bwd)


def _softmax(x, mask, bias, scale):
    L = x.shape[-1]
    x2 = x.reshape(-1, L)
    td = _DT[jnp.dtype(x.dtype)]
    m = mask.reshape(-1, L).astype(jnp.uint8) if mask is not None else None
    y = _call("masked_softmax", [("o", 0), ("i", x2), _opt(m, "u8"), _opt(None if bias is None else bias.reshape(-1, L),
                                                                             td), x2.shape[0], L, scale],
              [jax.ShapeDtypeStruct(x2.shape, x.dtype)])[0]
    return y.reshape(x.shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def masked_softmax(x, mask=None, bias=None, scale=1.0):
    """softmax(scale * x + bias) over the last dim; mask == 0 excludes an
    element; a fully masked row is all zeros."""
    return _softmax(x, mask, bias, scale)


def _softmax_fwd(x, mask, bias, scale):
    y = _softmax(x, mask, bias, scale)
    return y, (y, bias is not None)


def _softmax_bwd(scale, saved, dy):
    y, has_bias = saved
    yf, df = y.astype(jnp.float32), dy.astype(jnp.float32)
    dz = yf * (df - jnp.sum(df * yf, -1, keepdims=True))
    return (dz * scale).astype(y.dtype), None, (dz.astype(y.dtype) if has_bias else None)


masked_softmax.defvjp(_softmax_fwd, _softmax_bwd)
