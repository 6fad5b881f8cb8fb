"""The bundled kernels as PyTorch operators (torch.library), with autograd
and fake implementations, so that they work in eager mode, under
torch.compile (as opaque custom ops) and inside CUDA graph captures.

    from ktune import ops
    y = ops.rms_norm(x, weight, eps=1e-6)                 # differentiable
    y, h = ops.rms_norm(x, weight, residual=r, return_residual=True)
    out, p = ops.permute_rows(x, row_map, probs)          # out[j] = x[row_map[j]]
    a = ops.masked_softmax(scores, mask, scale=0.125)

Every launch goes on the tensors' device's current stream and never
synchronizes it. A key seen for the first time is tuned on scratch copies
(the caller's tensors are untouched); inside a CUDA graph capture nothing is
tuned: the cached or the default config is used and the runtime says so
once (pre-warm with `ktune tune` or one eager call before capturing).
"""
import math

import torch
from torch.autograd.function import once_differentiable as _once_differentiable

from . import (NORM_ONE_PROGRAM_MAX, KtuneError, _capi, _dtype_code, _torch_codes, norm_bwd_one_program, norm_programs,
               null, runtime)

__all__ = ["rms_norm", "layer_norm", "rms_norm_", "permute_rows", "unpermute_rows", "masked_softmax", "norm_fwd",
           "norm_bwd"]

_kernels = {}
_devices = {}  # device index -> (SMs, whether it runs clusters: sm_90 and later)


def _k(t, name):
    """The kernel for t's device, from a dict: no lock on the common path."""
    return _kd(t.get_device(), name, t)


def _kd(dev, name, t=None):
    k = _kernels.get((dev, name))
    if k is None:
        if dev < 0:
            # get_device() is -1 off CUDA: runtime(-1) would say "device -1
            # requested", which names neither the tensor's place nor the op.
            raise KtuneError("KT_ERR_ARGS", "ktune.ops: %s's tensors are on %s; ktune's kernels take CUDA tensors"
                             % (name, t.device if t is not None else "no CUDA device"))
        k = _kernels[(dev, name)] = runtime(dev).kernel(name)
    return k


def _programs(t, T, D, sums=True):
    """norm_programs for t's device: without programs of two blocks, and with
    them where the device runs clusters (else the same); both the same
    without sums (no weight, no bias)."""
    return _programs_dev(t.get_device(), T, D, sums)


def _programs_dev(dev, T, D, sums=True):
    n = _devices.get(dev)
    if n is None:
        props = torch.cuda.get_device_properties(dev)
        n = _devices[dev] = (props.multi_processor_count, props.major >= 9)
    # About one backward program per SM: the pipelined backward keeps an SM's
    # memory busy with one program, and each program adds a partial row to sum.
    P = norm_programs(T, n[0], D, sums=sums)
    return P, (norm_programs(T, n[0], D, True) if n[1] and sums else P)


def _mergeable(D, groups, weight, sums, h2, dy2, dres):
    """Whether layernorm_bwd can split a program's rows over two blocks: the
    pipeline (one group, whole 16-byte vectors, VEC of them for the weight)
    and sums to merge (sums: whether dw or db is summed)."""
    ptrs = [t.data_ptr() for t in (h2, dy2, dres) if t is not None]
    return _mergeable_ptrs(D, groups, h2.element_size(), ptrs, weight is not None and weight.data_ptr(),
                           weight is not None and weight.element_size(), sums)


def _mergeable_ptrs(D, groups, esize, ptrs, wptr, wsize, sums):
    """_mergeable from the rows' element size and addresses (wptr: 0 or
    False without a weight; sums: whether dw or db is summed)."""
    vec = 16 // esize
    if groups != 1 or D % vec or not sums:
        return False
    if any(p % 16 for p in ptrs):
        return False
    return not wptr or wptr % (vec * wsize) == 0


def _bwd_programs(h2, dy2, dres, T, D, groups, weight, has_bias, has_dw=True):
    """The P that layernorm_bwd gets: _programs', and programs of two blocks
    where they would be used and can run (asked only then)."""
    sums = (weight is not None and has_dw) or has_bias
    P, Pm = _programs(h2, T, D, sums)
    if Pm != P and _mergeable(D, groups, weight, sums, h2, dy2, dres):
        return Pm
    return P


def _one_program(T, D, groups):
    """Whether layernorm_bwd_row (one program) takes the backward. Eager at
    a few elements the host's cost is what the caller waits on; a capture
    keeps the faster GPU schedule."""
    host_bound = T * D <= NORM_ONE_PROGRAM_MAX and not torch.cuda.is_current_stream_capturing()
    return norm_bwd_one_program(T, D, groups, host_bound)


def _bwd_plan(h2, dy2, dres, T, D, groups, weight, has_bias, has_dw=True):
    """The backward's programs P, or 0 where layernorm_bwd_row takes it.
    has_bias and has_dw: whether db and dw are summed."""
    if _one_program(T, D, groups):
        return 0
    return _bwd_programs(h2, dy2, dres, T, D, groups, weight, has_bias, has_dw)


def _aten_plan(dev, T, D, esize, hptr, dyptr, wptr, wsize, has_dw, has_bias):
    """_bwd_plan for ktune.torch_norms's backward (one group, no residual),
    from addresses: what its C kernel can hand over without tensors. has_dw:
    whether dw is summed (a weight whose gradient torch asks for); has_bias
    likewise for db."""
    if _one_program(T, D, 1):
        return 0
    sums = bool(has_dw or has_bias)
    P, Pm = _programs_dev(dev, T, D, sums)
    if Pm != P and _mergeable_ptrs(D, 1, esize, (hptr, dyptr), wptr, wsize, sums):
        return Pm
    return P


def _nrows(t):
    """The rows of t over its last dim: the product of the other dims (also
    where the last is 0, which x.numel() // D cannot say)."""
    return math.prod(t.shape[:-1])


def _rows(t, D):
    """t as contiguous rows of D: t itself where it already is."""
    return t if t.dim() == 2 and t.is_contiguous() else t.reshape(-1, D).contiguous()


def _fast(a, b=None, c=None, d=None):
    """Eager call without autograd on a plain tensor: the operator's Python
    layers are skipped (they cost more than the kernel for small shapes)."""
    return not _is_compiling() and _plain(a) and not _wants_grad(a, b, c, d)


_Tensor = torch.Tensor


def _plain(x):
    """Whether x is a plain tensor with data: not on the meta device, not a
    subclass (a FakeTensor under FakeTensorMode, a DTensor). Only plain
    tensors take the paths that skip torch's dispatcher; the others go
    through the operators, whose fake implementations give meta and fake
    tensors their outputs' shapes, and whose dispatch subclasses see (the
    paths that skip it read data pointers those tensors do not have)."""
    return type(x) is _Tensor and not x.is_meta


def _wants_grad(a, b=None, c=None, d=None):
    """Whether autograd records this call (grad mode on, an input needing
    gradients)."""
    return torch.is_grad_enabled() and (a.requires_grad or (b is not None and b.requires_grad) or
                                        (c is not None and c.requires_grad) or (d is not None and d.requires_grad))


_is_compiling = torch.compiler.is_compiling


def _vec(t, x, D, what):
    """A weight or bias as the kernels read it: D contiguous elements on x's
    device (a copy where it was strided)."""
    if t is None:
        return None
    if t.numel() != D or t.device != x.device:
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: %s has %d elements on %s; the rows have %d on %s"
                         % (what, t.numel(), t.device, D, x.device))
    return t if t.is_contiguous() else t.contiguous()


def _norm_dims(x, groups):
    """x's last dim, which groups must split into equal parts: refused
    by name before any launch (a kernel would find no config, or divide
    by 0)."""
    if x.dim() == 0:
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: x is a scalar; a norm is over its last dim")
    D = x.shape[-1]
    if groups < 1 or D % groups:
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: groups=%d does not split the rows' %d elements into equal parts"
                         % (groups, D))
    return D


def _norm_fwd_impl(x, residual, weight, bias, groups, eps, rms, store_residual, stats):
    D = _norm_dims(x, groups)
    weight, bias = _vec(weight, x, D, "weight"), _vec(bias, x, D, "bias")
    if residual is not None and (residual.numel() != x.numel() or residual.device != x.device):
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: residual has shape %s on %s; x has %s on %s"
                         % (tuple(residual.shape), residual.device, tuple(x.shape), x.device))
    if x.numel() == 0:
        # No rows, or rows of no element (torch gives empty outputs): nothing
        # to launch; the stats are never read.
        st = torch.zeros(_nrows(x) * groups, device=x.device, dtype=torch.float32) if stats else None
        h = torch.empty(x.shape, device=x.device, dtype=x.dtype) if store_residual else None
        return torch.empty(x.shape, device=x.device, dtype=x.dtype), h, (None if rms else st), st
    flat = x.dim() == 2
    x2 = _rows(x, D)
    T = x2.shape[0]
    y = torch.empty_like(x2)
    res2 = _rows(residual, D) if residual is not None else None
    h = torch.empty_like(x2) if store_residual else None
    dev = x.device if stats else None
    mean = torch.empty(T * groups, device=dev, dtype=torch.float32) if stats and not rms else None
    rstd = torch.empty(T * groups, device=dev, dtype=torch.float32) if stats else None
    wd = weight.dtype if weight is not None else (bias.dtype if bias is not None else x.dtype)
    _k(x, "layernorm_fwd").launch([
        y, x2, res2, h if h is not None else null(x.dtype),
        weight if weight is not None else null(wd), bias if bias is not None else null(wd),
        mean, rstd, T, D, groups, eps, 1 if rms else 0])
    if flat:
        return y, h, mean, rstd
    return y.view(x.shape), (h.view(x.shape) if h is not None else None), mean, rstd


def _stats(t, n, h, what):
    """A forward's mean or rstd as the backward reads it: n float32s on h's
    device, contiguous (norm_bwd is public: any tensors may come)."""
    if t is None or t.numel() != n or t.dtype != torch.float32 or t.device != h.device:
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: %s is %s; the backward reads %d float32s on %s (one a group of "
                         "a row)" % (what, "None" if t is None else "%s of shape %s on %s"
                                     % (str(t.dtype).replace("torch.", ""), tuple(t.shape), t.device), n, h.device))
    return t if t.is_contiguous() else t.contiguous()


def _norm_bwd_impl(dy, h, weight, mean, rstd, dresidual, groups, rms, has_bias, has_dw=True):
    D = _norm_dims(h, groups)
    dev = h.device
    weight = _vec(weight, h, D, "weight")
    for t, what in ((dy, "dy"), (dresidual, "dresidual")):
        _fits(t, h.numel(), h, what, "h has %s" % (tuple(h.shape),))
    T = _nrows(h)
    mean = None if rms else _stats(mean, T * groups, h, "mean")
    rstd = _stats(rstd, T * groups, h, "rstd")
    wd = weight.dtype if weight is not None else h.dtype
    # A weight whose gradient is not asked for is read for dx, no dw summed.
    dw = torch.empty(D, device=dev, dtype=wd) if weight is not None and has_dw else None
    db = torch.empty(D, device=dev, dtype=wd) if has_bias else None
    if h.numel() == 0:
        # No rows, or rows of no element: nothing to launch, and sums over
        # no rows are 0.
        return torch.empty(h.shape, device=dev, dtype=h.dtype), (dw.zero_() if dw is not None else None), \
            (db.zero_() if db is not None else None)
    h2 = _rows(h, D)
    dy2 = _rows(dy, D)
    dx = torch.empty_like(h2)
    dres = _rows(dresidual, D) if dresidual is not None else None
    w_arg = weight if weight is not None else null(wd)
    dw_arg, db_arg = (dw if dw is not None else null(wd)), (db if db is not None else null(wd))
    P = _bwd_plan(h2, dy2, dres, T, D, groups, weight, has_bias, dw is not None)
    if not P:
        _k(h, "layernorm_bwd_row").launch([dx, dw_arg, db_arg, dy2, h2, w_arg, None if rms else mean, rstd, dres,
                                           T, D, groups, 1 if rms else 0])
    else:
        # The partial rows: written by the backward, consumed by the reduce.
        dwp = torch.empty(P, D, device=dev, dtype=torch.float32) if dw is not None else None
        dbp = torch.empty(P, D, device=dev, dtype=torch.float32) if has_bias else None
        _k(h, "layernorm_bwd").launch([dx, dwp, dbp, dy2, h2, w_arg, None if rms else mean, rstd, dres, T, D, groups,
                                       P, 1 if rms else 0])
        if dw is not None or has_bias:
            _k(h, "layernorm_bwd_reduce").launch([dw_arg, db_arg, dwp, dbp, T, D, P])
    # A view costs more than the kernel's launch at small T: only where h
    # was not already rows of D.
    return (dx if h2 is h else dx.view(h.shape)), dw, db


# LayerNorm / RMSNorm over the last dim, split into `groups` groups.
@torch.library.custom_op("ktune::norm_fwd", mutates_args=())
def norm_fwd(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None,
             bias: torch.Tensor | None, groups: int, eps: float, rms: bool,
             store_residual: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    y, h, mean, rstd = _norm_fwd_impl(x, residual, weight, bias, groups, eps, rms, store_residual, True)
    return y, (h if h is not None else x.new_empty(0)), (mean if mean is not None else rstd.new_empty(0)), rstd


@norm_fwd.register_fake
def _(x, residual, weight, bias, groups, eps, rms, store_residual):
    T = _nrows(x)
    h = torch.empty_like(x) if store_residual else x.new_empty(0)
    mean = x.new_empty(0 if rms else T * groups, dtype=torch.float32)
    return torch.empty_like(x), h, mean, x.new_empty(T * groups, dtype=torch.float32)


@torch.library.custom_op("ktune::norm_bwd", mutates_args=())
def norm_bwd(dy: torch.Tensor, h: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
             rstd: torch.Tensor, dresidual: torch.Tensor | None, groups: int, rms: bool,
             has_bias: bool, has_dw: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = _norm_bwd_impl(dy, h, weight, mean, rstd, dresidual, groups, rms, has_bias, has_dw)
    return dx, (dw if dw is not None else h.new_empty(0)), (db if db is not None else h.new_empty(0))


@norm_bwd.register_fake
def _(dy, h, weight, mean, rstd, dresidual, groups, rms, has_bias, has_dw=True):
    D = h.shape[-1]
    wd = weight.dtype if weight is not None else h.dtype
    return (torch.empty_like(h), h.new_empty(D if weight is not None and has_dw else 0, dtype=wd),
            h.new_empty(D if has_bias else 0, dtype=wd))


def _norm_setup(ctx, inputs, output):
    x, residual, weight, bias, groups, eps, rms, store_residual = inputs
    y, h, mean, rstd = output
    # The backward reads the normalised input: h when it was stored, else x.
    ctx.save_for_backward(h if store_residual else x, weight, mean, rstd)
    # (groups, rms, bias, residual, store): ktune._fastcall's backward
    # reads the same tuple. bias and residual: False (none), True (one row
    # of D; x's shape), or their own shape (the same elements laid out
    # otherwise, (1, D) say), which their gradients must take
    # (ktune._fastcall leaves that case to the Python body).
    b = bias is not None and (bias.dim() == 1 or tuple(bias.shape))
    res = residual is not None and (residual.shape == x.shape or tuple(residual.shape))
    ctx.kt = (groups, bool(rms), b, res, bool(store_residual))


def _as_input(g, shape):
    """A gradient g in the shape of the input it is for: shape as ctx.kt's
    residual entry or a saved shape says (True: g's own; False: no input)."""
    if shape is False or g is None:
        return None
    return g if shape is True or g.shape == shape else g.reshape(shape)


def _norm_grads(ctx, dy, dh):
    h, weight, mean, rstd = ctx.saved_tensors
    groups, rms, bias_shape, res_shape, store = ctx.kt
    # h also went on to the next layer: its gradient joins dx.
    dres = dh if store and dh is not None and dh.numel() else None
    if dy is None:
        # Only h went on (_NormFn does not materialise a zero dy): x's
        # gradient is h's, and the weight and bias have none.
        return (dres, _as_input(dres, res_shape), None, None)
    # Only the sums autograd asks for (a frozen weight or bias: none); a ctx
    # that does not say gets every sum.
    need = getattr(ctx, "needs_input_grad", None) or (True,) * 4
    has_dw, has_db = weight is not None and bool(need[2]), bias_shape is not False and bool(need[3])
    bwd = norm_bwd if torch.compiler.is_compiling() or not _plain(h) else _norm_bwd_impl
    dx, dw, db = bwd(dy, h, weight, mean, rstd, dres, groups, rms, has_db, has_dw)
    return (dx, _as_input(dx, res_shape), _as_input(dw, has_dw and tuple(weight.shape)),
            _as_input(db, has_db and bias_shape))


def _once(backward):
    """backward as autograd calls it, never differentiated again. The
    kernels' gradients are nothing autograd can follow: under
    create_graph=True (grad mode on in a backward) they came out as
    constants, so a second-order gradient (a gradient penalty) silently
    lost the norm's terms. There the gradients are marked as torch's
    once_differentiable marks them, and a second backward that reaches
    them raises. The usual backward (grad mode off) runs as it is."""
    def marked(ctx, *grads):
        return backward(ctx, *grads[:-1])
    twice = _once_differentiable(marked)

    def wrapper(ctx, *grads):
        if not torch.is_grad_enabled():
            return backward(ctx, *grads)
        # once_differentiable marks only where an argument requires grad;
        # the saved x and weight count as well, so one always does.
        return twice(ctx, *grads, torch.empty(0, requires_grad=True))
    return wrapper


def _norm_backward(ctx, dy, dh, dmean, drstd):
    return _norm_grads(ctx, dy, dh) + (None, None, None, None)


norm_fwd.register_autograd(_once(_norm_backward), setup_context=_norm_setup)

# The norms' per-call bodies: in C (ktune._fastcall's norm_eager,
# norm_forward and norm_backward) where it was built, which hand any call
# that is not the common case (dense tensors on one registered device) to
# the Python bodies below; the Python ones alone elsewhere.
_NORM_KERNELS = ("layernorm_fwd", "layernorm_bwd_row", "layernorm_bwd", "layernorm_bwd_reduce")
_fc = None
_registered = set()


def _register(t):
    """t's device's kernels handed to the C bodies, once a device."""
    _register_dev(t.get_device())


def _register_dev(dev):
    if _fc is None or dev < 0 or dev in _registered:
        return
    _registered.add(dev)
    launchers = tuple(_kd(dev, name)._c_launcher() for name in _NORM_KERNELS)
    if None not in launchers:
        _fc.norm_register(dev, launchers)


def _eager_py(x, residual, weight, bias, groups, eps, rms, store):
    _register(x)
    y, h, _, _ = _norm_fwd_impl(x, residual, weight, bias, groups, eps, rms, store, False)
    return y, h


def _forward_py(ctx, x, residual, weight, bias, groups, eps, rms, store):
    _register(x)
    y, h, mean, rstd = _norm_fwd_impl(x, residual, weight, bias, groups, eps, rms, store, True)
    _norm_setup(ctx, (x, residual, weight, bias, groups, eps, rms, store), (y, h, mean, rstd))
    # An output that received no gradient comes as None, not as zeros to
    # allocate, fill and add.
    ctx.set_materialize_grads(False)
    return y, h


def _backward_py(ctx, dy, dh):
    if dy is not None:
        _register(dy)
    return _norm_grads(ctx, dy, dh) + (None, None, None, None)


class _NormFn(torch.autograd.Function):
    """Eager autograd without the operator's dispatch layers."""
    forward = staticmethod(_forward_py)
    backward = staticmethod(_once(_backward_py))


def _bind():
    """The bodies bound on first use (the library is loaded by then, and
    ktune._fastcall is looked for beside it): C where it was built."""
    global _fc, _eager, _apply
    from . import lib
    lib()
    fc = _capi.fastcall()
    if fc is None or not hasattr(fc, "norm_setup"):
        _eager, _apply = _eager_py, _NormFn.apply
        return
    fc.norm_setup(_torch_codes(), _dtype_code, torch.empty_like, torch.float32, _bwd_plan, _eager_py, _forward_py,
                  _backward_py)

    class _NormFnC(torch.autograd.Function):
        """_NormFn with ktune._fastcall's bodies."""
        forward = staticmethod(fc.norm_forward)
        backward = staticmethod(_once(fc.norm_backward))

    _fc, _eager, _apply = fc, fc.norm_eager, _NormFnC.apply


def _eager(*args):
    _bind()
    return _eager(*args)


def _apply(*args):
    _bind()
    return _apply(*args)


def _norm(x, residual, weight, bias, groups, eps, rms, return_residual):
    store = return_residual or residual is not None
    if _fast(x, residual, weight, bias):
        y, h = _eager(x, residual, weight, bias, groups, eps, rms, store)
    elif torch.compiler.is_compiling() or not _plain(x):
        y, h, _, _ = norm_fwd(x, residual, weight, bias, groups, eps, rms, store)
    else:
        y, h = _apply(x, residual, weight, bias, groups, eps, rms, store)
    return (y, h) if return_residual else y


# [True] while ktune.torch_norms is installed: autograd then goes through
# torch's own norm operators (C++ nodes), which run ktune's kernels.
_aten_on = [False]


def _vec1(t):
    """A weight or bias as one row of D, as torch's operators take it."""
    return t if t is None or t.dim() == 1 else t.reshape(-1)


def rms_norm(x, weight=None, eps=1e-6, residual=None, return_residual=False):
    """RMSNorm over the last dim of (x + residual); with return_residual also
    x + residual (for the next layer's residual), stored by the same kernel."""
    # A plain norm that wants gradients, not under torch.compile, goes
    # through torch's operator (its C++ node) while ktune.torch_norms is
    # installed: checked first, so that it costs little more than torch's call.
    if _aten_on[0] and residual is None and not return_residual and not _is_compiling() and _wants_grad(x, weight):
        return torch.rms_norm(x, (x.shape[-1],), _vec1(weight), eps)
    return _norm(x, residual, weight, None, 1, eps, True, return_residual)


def layer_norm(x, weight=None, bias=None, eps=1e-5, residual=None, return_residual=False, groups=1):
    """LayerNorm over the last dim of (x + residual), or a group norm over
    `groups` equal parts of it (weight and bias span the whole dim)."""
    if (_aten_on[0] and residual is None and not return_residual and groups == 1 and not _is_compiling() and
            _wants_grad(x, weight, bias)):
        return torch.layer_norm(x, (x.shape[-1],), _vec1(weight), _vec1(bias), eps)
    return _norm(x, residual, weight, bias, groups, eps, False, return_residual)


@torch.library.custom_op("ktune::rms_norm_", mutates_args=("x",))
def rms_norm_(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> None:
    """In place: x = rms_norm(x). The kernel may run in place, so the call
    passes x as input and output; tuning (on a new key) works on scratch."""
    D = _norm_dims(x, 1)
    if not x.is_contiguous():
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: rms_norm_ writes x in place, and x of shape %s is not contiguous"
                         % (tuple(x.shape),))
    weight = _vec(weight, x, D, "weight")
    if x.numel() == 0:
        return
    T = x.numel() // D
    wd = weight.dtype if weight is not None else x.dtype
    _k(x, "layernorm_fwd").launch([x, x, None, null(x.dtype), weight if weight is not None else null(wd),
                                            null(wd), None, None, T, D, 1, eps, 1])


@rms_norm_.register_fake
def _(x, weight, eps):
    return None


def _fits(t, n, x, what, whose):
    """Refuse t that is not None and does not hold n elements on x's
    device: the kernels index by the call's sizes, so a shorter tensor
    would be read past its end. whose: what n counts."""
    if t is not None and (t.numel() != n or t.device != x.device):
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: %s has shape %s on %s; %s on %s"
                         % (what, tuple(t.shape), t.device, whose, x.device))


def _index_args(x, row_map, per_row, what):
    """Refuse a row map that is not one index an output row on x's device,
    or per-row floats that are not one an input row of x."""
    if x.dim() == 0 or row_map.dim() != 1 or row_map.device != x.device:
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: row_map has shape %s on %s and x %s on %s; the map holds one "
                         "index an output row (1-D) of x's rows (x has at least one dim)"
                         % (tuple(row_map.shape), row_map.device, tuple(x.shape), x.device))
    if row_map.dtype.is_floating_point or row_map.dtype.is_complex or row_map.dtype == torch.bool:
        # a cast would make 1.7 row 1 and True row 1
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: row_map has dtype %s; a row map holds integers"
                         % str(row_map.dtype).replace("torch.", ""))
    _fits(per_row, x.shape[0], x, what, "x has %d rows" % x.shape[0])


def _map32(m, n):
    """A row map as the kernels read it, contiguous int32, its entries
    outside [0, n) made -1 first: a cast alone would wrap 2**32 + 5 to 5, a
    row inside."""
    if m.dtype == torch.int32:
        return m if m.is_contiguous() else m.contiguous()
    return torch.where((m >= 0) & (m < n), m, -1).to(torch.int32).contiguous()


def _floats(t):
    """Per-row floats (probs) as the kernels read them, one after another:
    t itself where it already is (the common case costs no new tensor)."""
    if t is None or (t.dim() == 1 and t.is_contiguous()):
        return t
    return t.reshape(-1).contiguous()


# Token permutation: out[j] = x[row_map[j]], probs_out[j] = probs[row_map[j]].
def _permute_impl(x, row_map, probs):
    _index_args(x, row_map, probs, "probs")
    N, D = x.shape[0], math.prod(x.shape[1:])  # also where x has no row
    M = row_map.shape[0]
    if N == 0:
        # Every entry is outside [0, N): zero rows. No launch, as empty
        # probs have a null address, which the spec reads as no probs.
        return x.new_zeros((M,) + tuple(x.shape[1:])), (probs.new_zeros(M) if probs is not None else None)
    out = x.new_empty((M,) + tuple(x.shape[1:]))
    pout = probs.new_empty(M) if probs is not None else None
    rm = _map32(row_map, N)
    _k(x, "permute_rows").launch([out, x if x.is_contiguous() else x.contiguous(), rm, _floats(probs), pout, M, N, D])
    return out, pout


@torch.library.custom_op("ktune::permute_rows", mutates_args=())
def _permute(x: torch.Tensor, row_map: torch.Tensor, probs: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    out, pout = _permute_impl(x, row_map, probs)
    return out, (pout if pout is not None else x.new_empty(0, dtype=torch.float32))


@_permute.register_fake
def _(x, row_map, probs):
    M = row_map.shape[0]
    return x.new_empty((M,) + tuple(x.shape[1:])), x.new_empty(M if probs is not None else 0, dtype=torch.float32)


@torch.library.custom_op("ktune::unpermute_rows", mutates_args=())
def _unpermute(dout: torch.Tensor, row_map: torch.Tensor, dprobs_out: torch.Tensor | None,
               n: int) -> tuple[torch.Tensor, torch.Tensor]:
    _index_args(dout, row_map, dprobs_out, "dprobs")
    if row_map.shape[0] != dout.shape[0] or n < 0:
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: row_map has %d entries, n is %d; unpermute_rows takes one entry "
                         "a row of dout (%d) and n >= 0" % (row_map.shape[0], n, dout.shape[0]))
    M, D = dout.shape[0], math.prod(dout.shape[1:])
    din = dout.new_zeros((n,) + tuple(dout.shape[1:]))
    dpr = dout.new_zeros(n, dtype=torch.float32) if dprobs_out is not None else dout.new_empty(0, dtype=torch.float32)
    if M == 0:  # nothing scattered: zeros, without a launch (as for a gather from no rows)
        return din, dpr
    dp = _floats(dprobs_out)
    _k(dout, "permute_rows_bwd").launch([din, dout.contiguous(), _map32(row_map, n), dp,
                                         dpr if dp is not None else None, M, n, D])
    return din, dpr


@_unpermute.register_fake
def _(dout, row_map, dprobs_out, n):
    return (dout.new_empty((n,) + tuple(dout.shape[1:])),
            dout.new_empty(n if dprobs_out is not None else 0, dtype=torch.float32))


def _permute_setup(ctx, inputs, output):
    x, row_map, probs = inputs
    ctx.save_for_backward(row_map)
    # probs' own shape (one float a row of x, maybe as (N, 1)): its gradient's
    ctx.n, ctx.probs_shape = x.shape[0], (False if probs is None else tuple(probs.shape))


def _permute_backward(ctx, dout, dpout):
    (row_map,) = ctx.saved_tensors
    has_probs = ctx.probs_shape is not False
    din, dpr = _unpermute(dout, row_map, dpout if has_probs else None, ctx.n)
    return din, None, _as_input(dpr, ctx.probs_shape)


_permute.register_autograd(_permute_backward, setup_context=_permute_setup)


def permute_rows(x, row_map, probs=None):
    """Rows of x reordered by row_map (each row named at most once for the
    backward); probs (float32 per row) follow. Returns (out, probs_out)."""
    if _fast(x, probs):
        return _permute_impl(x, row_map, probs)
    out, pout = _permute(x, row_map, probs)
    return out, (pout if probs is not None else None)


def unpermute_rows(dout, row_map, n, dprobs=None):
    """The inverse scatter: din[row_map[j]] = dout[j]; rows not named are 0."""
    din, dpr = _unpermute(dout, row_map, dprobs, n)
    return din, (dpr if dprobs is not None else None)


# softmax(scale * x + bias) over the last dim, mask == 0 excluded.
def _softmax_impl(x, mask, bias, scale):
    if x.dim() == 0:
        raise KtuneError("KT_ERR_ARGS", "ktune.ops: x is a scalar; masked_softmax is over its last dim")
    for t, what in ((mask, "mask"), (bias, "bias")):
        _fits(t, x.numel(), x, what, "x has %s (the mask and the bias are of x's shape)" % (tuple(x.shape),))
    if x.numel() == 0:  # no rows, or rows of no element: nothing to launch
        return torch.empty(x.shape, device=x.device, dtype=x.dtype)
    L = x.shape[-1]
    x2 = x.reshape(-1, L)
    if not x2.is_contiguous():
        x2 = x2.contiguous()
    y = torch.empty_like(x2)
    if mask is not None and mask.dtype not in (torch.bool, torch.uint8, torch.int8):
        mask = mask != 0  # one byte an element, as the kernel reads it
    m = mask.reshape(-1, L).contiguous().view(torch.uint8) if mask is not None else None
    b = bias.reshape(-1, L).contiguous() if bias is not None else null(x.dtype)
    _k(x, "masked_softmax").launch([y, x2, m, b, x2.shape[0], L, scale])
    return y.view(x.shape)


@torch.library.custom_op("ktune::masked_softmax", mutates_args=())
def _softmax(x: torch.Tensor, mask: torch.Tensor | None, bias: torch.Tensor | None, scale: float) -> torch.Tensor:
    return _softmax_impl(x, mask, bias, scale)


@_softmax.register_fake
def _(x, mask, bias, scale):
    return torch.empty_like(x)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)
    # the bias's own shape (x's elements, maybe laid out otherwise): its gradient's
    ctx.scale, ctx.bias_shape = inputs[3], (False if inputs[2] is None else tuple(inputs[2].shape))


def _softmax_backward(ctx, dy):
    (y,) = ctx.saved_tensors
    yf, df = y.float(), dy.float()
    dz = yf * (df - (df * yf).sum(-1, keepdim=True))
    db = _as_input(dz.to(y.dtype), ctx.bias_shape) if ctx.bias_shape is not False else None
    return (dz * ctx.scale).to(y.dtype), None, db, None


_softmax.register_autograd(_softmax_backward, setup_context=_softmax_setup)


def masked_softmax(x, mask=None, bias=None, scale=1.0):
    """softmax(scale * x + bias) over the last dim; mask and bias of x's
    shape (the same number of elements); mask == 0 (any dtype) excludes an
    element; a fully masked row is all zeros."""
    if _fast(x, bias):
        return _softmax_impl(x, mask, bias, scale)
    return _softmax(x, mask, bias, scale)
