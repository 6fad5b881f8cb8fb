"""ktune._fastcall's norm bodies (norm_eager, norm_forward, norm_backward)
without a GPU or torch (make test runs it through tests/t_fastcall.c), on
stand-in tensors that have what the bodies read (shape, is_contiguous,
get_device, dtype, data_ptr, new_empty): the kt_arg arrays each launch
passes, byte for byte, with the pointers of the outputs made; what is
saved for the backward; the backward's one-program and P-program plans;
every call that is not the common case handed to the Python body with its
arguments and nothing launched; errors raised with nothing leaked. Ends
with "N passed, N failed, N skipped"."""
import ctypes
import struct
import sys

import ktune
from checks import check, summary
from ktune import _capi

ktune.lib()
fc = _capi.fastcall()
if fc is None:
    print("ktune._fastcall was not built here")
    sys.exit(summary(skipped=9))

P, I32, F32K = _capi.KT_ARG_PTR, _capi.KT_ARG_I32, _capi.KT_ARG_F32
KINDS = {"fwd": [P] * 8 + [I32, I32, I32, F32K, I32], "row": [P] * 9 + [I32] * 4, "bwd": [P] * 9 + [I32] * 5,
         "reduce": [P] * 4 + [I32] * 3}


class DType:
    def __init__(self, name):
        self.name = name


BF16, F32 = DType("bf16"), DType("f32")
CODES = {BF16: 3, F32: 1}


class Tensor:
    """A tensor as the bodies read it; each one made gets its own address."""
    next_ptr = 0x7F0000000000

    def __init__(self, shape, dtype=BF16, device=0, contiguous=True):
        self.shape, self.dtype, self.device, self.contiguous = tuple(shape), dtype, device, contiguous
        self.ptr = Tensor.next_ptr
        Tensor.next_ptr += 0x100000

    def is_contiguous(self):
        return self.contiguous

    def get_device(self):
        return self.device

    def data_ptr(self):
        return self.ptr

    def new_empty(self, shape, dtype):
        return Tensor((shape,) if isinstance(shape, int) else shape, dtype, self.device)


def empty_like(t):
    return Tensor(t.shape, t.dtype, t.device)


class Ctx:
    needs_input_grad = (True,) * 8  # torch's: x residual weight bias, then the scalars

    def save_for_backward(self, *ts):
        self.saved_tensors = ts

    def set_materialize_grads(self, on):
        self.materialize = on


launches = []
LAUNCH_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_capi.Arg), ctypes.c_int)


@LAUNCH_FN
def fake_launch(kernel, stream, args, n):
    launches.append((kernel, bytes(ctypes.string_at(args, n * ctypes.sizeof(_capi.Arg)))))
    return 9 if kernel == FAIL else 0


NAMES = {1: "fwd", 2: "row", 3: "bwd", 4: "reduce"}
FAIL = 99


class Errors(Exception):
    pass


def on_error(st):
    raise Errors("status %d" % st)


def dtype_code(dt):
    raise ktune.KtuneError("KT_ERR_ARGS", "dtype %s has no ktune equivalent" % dt.name)


def launcher(kernel, kinds):
    return fc.Launcher(ctypes.cast(fake_launch, ctypes.c_void_p).value, kernel, bytes(kinds), CODES, ktune._Null,
                       dtype_code, lambda: 0x5000, on_error, lambda *a: None)


python_calls = []
plans = []


def plan(h, dy, dres, T, D, groups, w, has_bias, has_dw):
    plans.append((T, D, groups, has_bias, has_dw))
    return PLAN[0]


PLAN = [0]


def body(name):
    def fn(*args):
        python_calls.append((name, args))
        return ("python", name)
    return fn


fc.norm_setup(CODES, dtype_code, empty_like, F32, plan, body("eager"), body("forward"), body("backward"))
fc.norm_register(0, tuple(launcher(k, KINDS[NAMES[k]]) for k in (1, 2, 3, 4)))


def ptr(t, code=None):
    if t is None:
        return struct.pack("=iiQ", P, code or 0, 0)
    return struct.pack("=iiQ", P, CODES[t.dtype] if code is None else code, t.ptr)


def i32(v):
    return struct.pack("=iii4x", I32, 0, v)


def f32(v):
    return struct.pack("=iif4x", F32K, 0, v)


def reset():
    launches.clear()
    python_calls.clear()
    plans.clear()


def eager_packs_the_python_bodys_args():
    reset()
    x, w = Tensor((2, 3, 1000)), Tensor((1000,))
    refs = sys.getrefcount(x), sys.getrefcount(w)
    for _ in range(3):
        y, h = fc.norm_eager(x, None, w, None, 1, 1e-6, True, False)
    assert h is None and y.shape == x.shape and y.dtype is BF16, (y.shape, h)
    want = (ptr(y) + ptr(x) + ptr(None) + ptr(None, 3) + ptr(w) + ptr(None, 3) + ptr(None) + ptr(None) + i32(6) +
            i32(1000) + i32(1) + f32(1e-6) + i32(1))
    assert launches[-1] == (1, want), (launches[-1][1].hex(), want.hex())
    assert len(launches) == 3 and python_calls == []
    assert (sys.getrefcount(x), sys.getrefcount(w)) == refs


def a_weight_and_a_bias_keep_their_own_dtypes():
    """Each passes its own dtype code, so that the library refuses a weight
    and a bias of two dtypes rather than read one as the other's type; an
    absent one is a null pointer of the present one's dtype."""
    reset()
    x, w, b = Tensor((4, 256)), Tensor((256,)), Tensor((256,), F32)
    y, _ = fc.norm_eager(x, None, w, b, 1, 1e-5, False, False)
    tail = ptr(None) + ptr(None) + i32(4) + i32(256) + i32(1) + f32(1e-5) + i32(0)
    assert launches[-1] == (1, ptr(y) + ptr(x) + ptr(None) + ptr(None, 3) + ptr(w) + ptr(b, 1) + tail), \
        launches[-1][1].hex()
    y, _ = fc.norm_eager(x, None, None, b, 1, 1e-5, False, False)
    assert launches[-1] == (1, ptr(y) + ptr(x) + ptr(None) + ptr(None, 3) + ptr(None, 1) + ptr(b, 1) + tail), \
        launches[-1][1].hex()


def forward_saves_what_the_backward_reads():
    reset()
    x, r, w, b = Tensor((4, 256)), Tensor((4, 256)), Tensor((256,), F32), Tensor((256,), F32)
    ctx = Ctx()
    y, h = fc.norm_forward(ctx, x, r, w, b, 2, 1e-5, False, True)
    hh, ww, mean, rstd = ctx.saved_tensors
    assert hh is h and ww is w and mean.shape == (8,) and rstd.shape == (8,) and mean.dtype is F32
    assert ctx.kt == (2, False, True, True, True) and ctx.materialize is False, ctx.kt
    want = (ptr(y) + ptr(x) + ptr(r) + ptr(h) + ptr(w) + ptr(b) + ptr(mean) + ptr(rstd) + i32(4) + i32(256) + i32(2) +
            f32(1e-5) + i32(0))
    assert launches == [(1, want)], launches
    ctx = Ctx()
    y, h = fc.norm_forward(ctx, x, None, None, None, 1, 1e-6, True, False)
    assert h is None and ctx.saved_tensors[0] is x and ctx.saved_tensors[2] is None and ctx.kt[1] is True


def backward_launches_one_program_or_p_and_a_reduce():
    reset()
    x, w, b = Tensor((4, 256)), Tensor((256,)), Tensor((256,))
    ctx = Ctx()
    fc.norm_forward(ctx, x, None, w, b, 1, 1e-5, False, False)
    _, _, mean, rstd = ctx.saved_tensors
    dy = Tensor((4, 256))
    launches.clear()
    PLAN[0] = 0
    g = fc.norm_backward(ctx, dy, None)
    dx, dw, db = g[0], g[2], g[3]
    assert g[1] is None and g[4:] == (None,) * 4 and dx.shape == (4, 256) and dw.shape == (256,) and db.dtype is BF16
    tail = ptr(dy) + ptr(x) + ptr(w) + ptr(mean) + ptr(rstd) + ptr(None) + i32(4) + i32(256) + i32(1)
    assert launches == [(2, ptr(dx) + ptr(dw) + ptr(db) + tail + i32(0))], launches
    assert plans == [(4, 256, 1, True, True)], plans
    launches.clear()
    PLAN[0] = 3
    g = fc.norm_backward(ctx, dy, None)
    assert [k for k, _ in launches] == [3, 4], launches
    bwd, red = launches[0][1], launches[1][1]
    assert bwd[:16] == ptr(g[0]) and bwd[48:] == tail + i32(3) + i32(0), bwd.hex()
    dwp_ptr, dbp_ptr = struct.unpack_from("=8xQ", bwd, 16)[0], struct.unpack_from("=8xQ", bwd, 32)[0]
    assert red == (ptr(g[2]) + ptr(g[3]) + struct.pack("=iiQ", P, 1, dwp_ptr) + struct.pack("=iiQ", P, 1, dbp_ptr) +
                   i32(4) + i32(256) + i32(3)), red.hex()
    PLAN[0] = 0


def a_frozen_weight_or_bias_is_read_not_summed():
    """Where autograd asks no gradient of the weight (or the bias), the
    kernels read w for dx and sum no dw (db): no output, no partial row, and
    without either no reduce."""
    reset()
    x, w, b = Tensor((4, 256)), Tensor((256,)), Tensor((256,))
    dy = Tensor((4, 256))
    for need_w, need_b, P, kernels in ((False, False, 0, [2]), (False, False, 3, [3]), (False, True, 3, [3, 4]),
                                       (True, False, 0, [2])):
        ctx = Ctx()
        ctx.needs_input_grad = (True, False, need_w, need_b) + (False,) * 4
        fc.norm_forward(ctx, x, None, w, b, 1, 1e-5, False, False)
        _, _, mean, rstd = ctx.saved_tensors
        tail = ptr(dy) + ptr(x) + ptr(w) + ptr(mean) + ptr(rstd) + ptr(None) + i32(4) + i32(256) + i32(1)
        launches.clear()
        plans.clear()
        PLAN[0] = P
        g = fc.norm_backward(ctx, dy, None)
        assert [k for k, _ in launches] == kernels, (need_w, need_b, P, launches)
        assert (g[2] is not None) == need_w and (g[3] is not None) == need_b, g
        assert plans == [(4, 256, 1, need_b, need_w)], plans
        got = launches[0][1]
        if P == 0:
            assert got == ptr(g[0]) + (ptr(g[2]) if need_w else ptr(None, 3)) + \
                (ptr(g[3]) if need_b else ptr(None, 3)) + tail + i32(0), got.hex()
        else:
            assert got[:16] == ptr(g[0]) and got[16:32] == ptr(None) and got[48:] == tail + i32(3) + i32(0), got.hex()
            assert (got[32:48] == ptr(None)) == (not need_b), got.hex()
        if kernels[-1] == 4:
            red = launches[1][1]
            assert red[:32] == ptr(None, 3) + ptr(g[3]) and red[32:48] == ptr(None), red.hex()
    PLAN[0] = 0


def other_calls_go_to_the_python_body():
    reset()
    x, w = Tensor((4, 256)), Tensor((256,))
    cases = [(Tensor((4, 256), contiguous=False), w), (x, Tensor((255,))), (x, Tensor((256,), device=1)),
             (Tensor((4, 256), device=3), None), (Tensor((0, 256)), None), (x, Tensor((256,), contiguous=False))]
    for xx, ww in cases:
        assert fc.norm_eager(xx, None, ww, None, 1, 1e-6, True, False) == ("python", "eager")
        assert python_calls[-1] == ("eager", (xx, None, ww, None, 1, 1e-6, True, False))
    assert fc.norm_eager(x, Tensor((3, 256)), w, None, 1, 1e-6, True, True) == ("python", "eager")
    # x's elements in another shape, D elements as (1, D): their gradients
    # take their own shapes, which the Python body records
    for r, ww, b in ((Tensor((2, 2, 256)), w, None), (None, Tensor((1, 256)), None), (None, w, Tensor((1, 256)))):
        assert fc.norm_eager(x, r, ww, b, 1, 1e-6, False, False) == ("python", "eager")
        assert fc.norm_forward(Ctx(), x, r, ww, b, 1, 1e-6, False, False) == ("python", "forward")
    for i, odd in ((2, (1, 256)), (3, (2, 2, 256))):
        ctx = Ctx()
        fc.norm_forward(ctx, x, None, w, None, 1, 1e-6, False, False)
        ctx.kt = ctx.kt[:i] + (odd,) + ctx.kt[i + 1:]
        assert fc.norm_backward(ctx, Tensor((4, 256)), None) == ("python", "backward")
    ctx = Ctx()
    fc.norm_forward(ctx, x, None, w, None, 1, 1e-6, False, False)
    ctx.saved_tensors = (ctx.saved_tensors[0], Tensor((1, 256))) + ctx.saved_tensors[2:]
    assert fc.norm_backward(ctx, Tensor((4, 256)), None) == ("python", "backward")
    assert fc.norm_eager(x, None, w, None, 3, 1e-6, True, False) == ("python", "eager")  # 256 % 3
    ctx = Ctx()
    assert fc.norm_forward(ctx, x, None, w, None, 1, 1, True, False) == ("python", "forward")  # an int eps
    assert python_calls[-1] == ("forward", (ctx, x, None, w, None, 1, 1, True, False))
    ctx = Ctx()
    fc.norm_forward(ctx, x, None, w, None, 1, 1e-6, True, False)
    assert fc.norm_backward(ctx, None, None) == ("python", "backward")
    assert fc.norm_backward(ctx, Tensor((4, 256), contiguous=False), None) == ("python", "backward")
    assert python_calls[-1][0] == "backward" and len(python_calls) == 20 and launches and \
        all(k == 1 for k, _ in launches)


def errors_raise_and_launch_nothing_after():
    reset()
    x, w = Tensor((4, 256)), Tensor((256,))
    bad = Tensor((256,), DType("complex"))
    try:
        fc.norm_eager(x, None, bad, None, 1, 1e-6, True, False)
    except ktune.KtuneError as e:
        assert "complex" in str(e), e
    else:
        raise AssertionError("no error for a dtype ktune lacks")
    assert launches == []
    fc.norm_register(5, tuple(launcher(k if k != 1 else FAIL, KINDS[NAMES[k]]) for k in (1, 2, 3, 4)))
    x5 = Tensor((4, 256), device=5)
    refs = sys.getrefcount(x5)
    try:
        fc.norm_eager(x5, None, None, None, 1, 1e-6, True, False)
    except Errors as e:
        assert str(e) == "status 9"
    else:
        raise AssertionError("a failing launch did not raise")
    assert sys.getrefcount(x5) == refs


def register_checks_the_kernels_params():
    for i, kinds in enumerate([KINDS["row"], KINDS["fwd"][:12] + [I32], KINDS["bwd"][:13]]):
        ls = [launcher(k, KINDS[NAMES[k]]) for k in (1, 2, 3, 4)]
        ls[i] = launcher(7, kinds)
        try:
            fc.norm_register(1, tuple(ls))
        except ValueError as e:
            assert str(e) == "norm_register: launcher %d does not have the params of its kernel" % i, e
        else:
            raise AssertionError("launcher %d accepted" % i)


def the_backward_passes_dh_only_where_h_was_stored():
    reset()
    x, r = Tensor((2, 64)), Tensor((2, 64))
    for store, want_res in ((True, True), (False, False)):
        ctx = Ctx()
        fc.norm_forward(ctx, x, r if store else None, None, None, 1, 1e-6, True, store)
        dy, dh = Tensor((2, 64)), Tensor((2, 64))
        launches.clear()
        g = fc.norm_backward(ctx, dy, dh)
        args = launches[0][1]
        assert args[8 * 16:9 * 16] == (ptr(dh) if want_res else ptr(None)), args.hex()
        assert (g[1] is g[0]) == store and g[2] is None and g[3] is None


check("the eager body packs the Python body's kt_args", eager_packs_the_python_bodys_args)
check("a weight and a bias keep their own dtypes", a_weight_and_a_bias_keep_their_own_dtypes)
check("the forward saves what the backward reads", forward_saves_what_the_backward_reads)
check("the backward launches one program, or P and a reduce", backward_launches_one_program_or_p_and_a_reduce)
check("a frozen weight or bias is read, not summed", a_frozen_weight_or_bias_is_read_not_summed)
check("other calls go to the Python body", other_calls_go_to_the_python_body)
check("errors raise and leak nothing", errors_raise_and_launch_nothing_after)
check("registration checks each kernel's params", register_checks_the_kernels_params)
check("the backward passes dh only where h was stored", the_backward_passes_dh_only_where_h_was_stored)
sys.exit(summary())
