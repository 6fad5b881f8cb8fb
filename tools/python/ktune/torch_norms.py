"""torch's own norm operators run by ktune's kernels on CUDA.

    import ktune.torch_norms
    ktune.torch_norms.install()      # every F.rms_norm / F.layer_norm / nn.LayerNorm on CUDA
    ...
    ktune.torch_norms.uninstall()    # torch's own kernels back

install() registers ktune's kernels (through ktune._fastcall and torch's
stable C ABI) as the CUDA kernels of aten::_fused_rms_norm,
aten::native_layer_norm and their backwards, for the whole process. torch's
autograd nodes, which are C++, stay: a forward plus backward then costs the
host what torch's own costs, where a Python autograd.Function (how
ktune.ops reaches autograd otherwise) costs about 100 us more. While it is
installed, ktune.ops.rms_norm and ktune.ops.layer_norm under autograd,
without a residual or groups, go through these operators.

The kernels take f32, f16 and bf16 tensors, a weight and a bias in x's
dtype, on a device ktune has kernels for; a strided one is copied
contiguous first (torch's copy_, on the current stream). Any other call
(float64, RMSNorm with a weight of another dtype, a failed launch or copy) is
computed here from torch's elementwise operators in float32 (float64 for
float64), with torch's results' shapes and dtypes; a call torch refuses (a
shape that does not match, LayerNorm with a weight or bias of another
dtype) raises RuntimeError naming the operator and what is wrong.

Outside it, torch.compile traces these operators through their
decompositions, so compiled code does not reach the kernels here.
"""
import os

import torch

from . import KtuneError, _capi

__all__ = ["install", "uninstall", "installed"]

_OPS = ("_fused_rms_norm", "_fused_rms_norm_backward", "native_layer_norm", "native_layer_norm_backward")


def _module():
    """ktune._fastcall with the aten functions, or a KtuneError."""
    from . import lib, ops
    lib()
    ops._bind()
    fc = _capi.fastcall()
    if fc is None or not hasattr(fc, "aten_install"):
        raise KtuneError("KT_ERR_NOT_FOUND", "ktune.torch_norms: needs ktune._fastcall (built by make where "
                         "Python's headers are installed)")
    return fc


def install():
    """Registers ktune's kernels as torch's CUDA kernels of the four norm
    operators; again: nothing. Raises KtuneError where ktune._fastcall or
    torch's stable C ABI lacks what it needs (nothing is then installed)."""
    fc = _module()
    if fc.aten_installed():
        return
    for name in ("alloc_tensors_by_stealing_from_void_ptrs", "unsafe_alloc_void_ptrs_from_tensors"):
        if not hasattr(torch._C._aoti, name):
            raise KtuneError("KT_ERR_NOT_FOUND", "ktune.torch_norms: this torch lacks torch._C._aoti.%s" % name)
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    paths = tuple(os.path.join(libdir, n) for n in ("libtorch_cpu.so", "libtorch_cuda.so"))
    from . import ops
    try:
        fc.aten_install(paths, _fallback, ops._aten_plan, ops._register_dev)
    except (ValueError, RuntimeError) as e:
        raise KtuneError("KT_ERR_NOT_FOUND", "ktune.torch_norms: %s" % e) from None
    ops._aten_on[0] = True


def uninstall():
    """torch's own kernels back. Call it while no norm runs on another
    thread."""
    from . import ops
    fc = _capi.fastcall()
    ops._aten_on[0] = False
    if fc is not None and hasattr(fc, "aten_uninstall"):
        fc.aten_uninstall()


def installed():
    """Whether install() is in effect."""
    fc = _capi.fastcall()
    return bool(fc is not None and hasattr(fc, "aten_installed") and fc.aten_installed())


# The fallback: torch's elementwise operators, in float32 (float64 for
# float64), where torch's own kernels compute. It never calls the four
# operators (they are ktune's while installed).

def _acc(t):
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _check(op, x, shape, *vecs):
    k = len(shape)
    if k < 1 or x.dim() < k or list(x.shape[x.dim() - k:]) != list(shape):
        raise RuntimeError("%s: normalized_shape %s does not end input's shape %s"
                           % (op, list(shape), list(x.shape)))
    for name, v in vecs:
        if v is not None and list(v.shape) != list(shape):
            raise RuntimeError("%s: %s has shape %s; normalized_shape is %s" % (op, name, list(v.shape), list(shape)))
    return tuple(range(-k, 0)), tuple(range(x.dim() - k))


def _sum_outer(t, outer):
    return t.sum(outer) if outer else t


def _rms(x, w, shape, eps, mask):
    dims, _ = _check("_fused_rms_norm", x, shape, ("weight", w))
    acc = _acc(x)
    xf = x.to(acc)
    rstd = torch.rsqrt(xf.square().mean(dims, keepdim=True) + (torch.finfo(acc).eps if eps is None else eps))
    y = xf * rstd
    if w is not None:
        y = y * w.to(acc)
    return y.to(x.dtype).contiguous(), rstd


def _rms_bwd(dy, x, rstd, w, shape, eps, mask):
    dims, outer = _check("_fused_rms_norm_backward", x, shape, ("weight", w))
    acc = _acc(x)
    xf, dyf, rstd = x.to(acc), dy.to(acc), rstd.to(acc)
    xhat = xf * rstd
    g = dyf * w.to(acc) if w is not None else dyf
    dx = rstd * (g - xhat * (g * xhat).mean(dims, keepdim=True)) if mask[0] else None
    dw = _sum_outer(dyf * xhat, outer).to(w.dtype) if w is not None and mask[1] else None
    return (dx.to(x.dtype) if dx is not None else None), dw


def _same_dtype(op, x, *vecs):
    for name, v in vecs:
        if v is not None and v.dtype != x.dtype:
            raise RuntimeError("%s: %s is %s and input %s; torch takes one dtype" % (op, name, v.dtype, x.dtype))


def _ln(x, w, b, shape, eps, mask):
    dims, _ = _check("native_layer_norm", x, shape, ("weight", w), ("bias", b))
    _same_dtype("native_layer_norm", x, ("weight", w), ("bias", b))
    acc = _acc(x)
    xf = x.to(acc)
    mean = xf.mean(dims, keepdim=True)
    xc = xf - mean
    rstd = torch.rsqrt(xc.square().mean(dims, keepdim=True) + eps)
    y = xc * rstd
    if w is not None:
        y = y * w.to(acc)
    if b is not None:
        y = y + b.to(acc)
    return y.to(x.dtype).contiguous(), mean, rstd


def _ln_bwd(dy, x, mean, rstd, w, b, shape, eps, mask):
    dims, outer = _check("native_layer_norm_backward", x, shape, ("weight", w), ("bias", b))
    _same_dtype("native_layer_norm_backward", x, ("weight", w), ("bias", b))
    acc = _acc(x)
    xf, dyf, mean, rstd = x.to(acc), dy.to(acc), mean.to(acc), rstd.to(acc)
    xhat = (xf - mean) * rstd
    g = dyf * w.to(acc) if w is not None else dyf
    dx = None
    if mask[0]:
        dx = rstd * (g - g.mean(dims, keepdim=True) - xhat * (g * xhat).mean(dims, keepdim=True))
        dx = dx.to(x.dtype)
    dw = _sum_outer(dyf * xhat, outer).to(w.dtype) if w is not None and mask[1] else None
    db = _sum_outer(dyf, outer).to(b.dtype) if b is not None and mask[2] else None
    return dx, dw, db


_FALLBACKS = (_rms, _rms_bwd, _ln, _ln_bwd)


def _fallback(op, handles, shape, eps, mask):
    """One call that ktune's kernels did not take: the tensors come as
    handles that this steals; the outputs go back as new handles (None: an
    undefined tensor), or a str, the error to raise."""
    try:
        have = [h for h in handles if h is not None]
        got = iter(torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs(have) if have else ())
        ts = [next(got) if h is not None else None for h in handles]
        outs = _FALLBACKS[op](*ts, shape, eps, mask)
        made = [o for o in outs if o is not None]
        caps = iter(torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors(made) if made else ())
        return tuple(next(caps) if o is not None else None for o in outs)
    except Exception as e:  # raised to torch's caller by the C kernel
        return "ktune (aten::%s): %s" % (_OPS[op], e)
