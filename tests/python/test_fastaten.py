"""ktune._fastcall's torch norms (_fastaten.c: torch's norm operators run by
ktune's kernels) without torch or a GPU (make test runs it through
tests/t_fastcall.c), against build/libfake_torch_abi.so, a stand-in for
torch's stable C ABI: what install() asks of the libraries; the kernels
registered; each operator's stack read as torch's boxed kernels lay it out
(tensors, lists, optionals in boxes, an absent weight as an undefined
tensor), the kt_arg arrays each launch passes, byte for byte, the outputs
in torch's shapes and dtypes, an undefined tensor where the mask asks for
none; the backward's plan asked once a key outside a capture; strided
tensors copied (copy_) and the copies launched on; every call
the kernels do not take handed to the fallback with its
tensors; the fallback's error raised; nothing leaked. Ends with "N passed,
N failed, N skipped"."""
import ctypes
import os
import struct
import sys

import ktune
from checks import check, summary
from ktune import _capi

ktune.lib()
fc = _capi.fastcall()
FAKE = os.path.abspath("build/libfake_torch_abi.so")
if fc is None or not os.path.exists(FAKE):
    print("ktune._fastcall was not built here")
    sys.exit(summary(skipped=8))

P, I32, F32K = _capi.KT_ARG_PTR, _capi.KT_ARG_I32, _capi.KT_ARG_F32
KINDS = {1: [P] * 8 + [I32, I32, I32, F32K, I32], 2: [P] * 9 + [I32] * 4, 3: [P] * 9 + [I32] * 5,
         4: [P] * 4 + [I32] * 3}
F32T, F16T, BF16T, F64T = 6, 5, 15, 7  # torch's dtype codes
CODE = {F32T: 1, F16T: 2, BF16T: 3}    # ktune's
FAIL = 99
OP_RMS, OP_RMS_BWD, OP_LN, OP_LN_BWD = range(4)

abi = ctypes.CDLL(FAKE)
i64p = ctypes.POINTER(ctypes.c_int64)
abi.fake_tensor.restype = ctypes.c_void_p
abi.fake_tensor.argtypes = [ctypes.c_int64, i64p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int]
abi.fake_undefined.restype = ctypes.c_void_p
abi.fake_box.restype = ctypes.c_void_p
abi.fake_box.argtypes = [ctypes.c_uint64]
abi.fake_list.restype = ctypes.c_void_p
abi.fake_list.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]
abi.fake_call.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint64, ctypes.c_uint64]
abi.fake_live.restype = ctypes.c_long
abi.fake_last_error.restype = ctypes.c_char_p
abi.fake_copies.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
abi.aoti_torch_delete_tensor_object.argtypes = [ctypes.c_void_p]
capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype, capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
capsule_ptr.restype, capsule_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


class FTensor(ctypes.Structure):
    _fields_ = [("dim", ctypes.c_int64), ("sizes", ctypes.c_int64 * 16), ("dtype", ctypes.c_int32),
                ("dev", ctypes.c_int32), ("contiguous", ctypes.c_int), ("defined", ctypes.c_int),
                ("data", ctypes.c_uint64)]


def tensor(shape, dtype=BF16T, dev=0, contiguous=True):
    return abi.fake_tensor(len(shape), (ctypes.c_int64 * len(shape))(*shape), dtype, dev, int(contiguous))


def info(h):
    """(shape, dtype, data) of a handle; None for an undefined tensor."""
    t = FTensor.from_address(h)
    return (tuple(t.sizes[:t.dim]), t.dtype, t.data) if t.defined else None


def box(v):
    return abi.fake_box(v)


def dbl(x):
    return struct.unpack("=Q", struct.pack("=d", x))[0]


def lst(vals):
    return abi.fake_list(len(vals), (ctypes.c_uint64 * len(vals))(*vals))


launches = []
LAUNCH_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_capi.Arg), ctypes.c_int)


@LAUNCH_FN
def fake_launch(kernel, stream, args, n):
    launches.append((kernel, stream, bytes(ctypes.string_at(args, n * ctypes.sizeof(_capi.Arg)))))
    return 9 if kernel == FAIL else 0


def launcher(kernel, kinds):
    return fc.Launcher(ctypes.cast(fake_launch, ctypes.c_void_p).value, kernel, bytes(kinds), {}, ktune._Null,
                       None, lambda: 0x5000, None, lambda *a: None)


registered, plans, fallbacks, PLAN, RESULT = [], [], [], [0], [None]


def register(dev):
    registered.append(dev)
    if dev == 2:  # a device whose launches fail
        fc.norm_register(2, tuple(launcher(FAIL, KINDS[k]) for k in (1, 2, 3, 4)))


def plan(*args):
    plans.append(args)
    return PLAN[0]


def fallback(op, tensors, shape, eps, mask):
    """Records the call, steals its tensors (as torch does), and answers
    RESULT: a str (the error), or outputs made from (shape, dtype) or None."""
    ptrs = [capsule_ptr(t, None) if t is not None else None for t in tensors]
    fallbacks.append((op, ptrs, shape, eps, mask))
    for p in ptrs:
        if p is not None:
            abi.aoti_torch_delete_tensor_object(p)
    if isinstance(RESULT[0], str):
        return RESULT[0]
    return tuple(capsule_new(tensor(*o), None, None) if o is not None else None for o in RESULT[0])


fc.norm_setup({}, None, None, None, None, None, None, None)
fc.norm_register(0, tuple(launcher(k, KINDS[k]) for k in (1, 2, 3, 4)))


def ptr(data, code):
    return struct.pack("=iiQ", P, code, data)


def i32(v):
    return struct.pack("=iii4x", I32, 0, v)


def f32(v):
    return struct.pack("=iif4x", F32K, 0, v)


def call(name, vals, nret):
    """Runs the operator's kernel on a stack of vals; the outputs' handles."""
    stack = (ctypes.c_uint64 * max(len(vals), nret))(*vals)
    assert abi.fake_call(name.encode(), stack, len(vals), nret) == 0, name + " is not registered"
    return list(stack[:nret])


def free(handles):
    for h in handles:
        abi.aoti_torch_delete_tensor_object(h)


def reset():
    launches.clear()
    plans.clear()
    fallbacks.clear()
    registered.clear()


def install_registers_the_four_kernels():
    for paths, want in (((os.path.abspath("build/libktune.so"),), "aten_install: torch's libraries lack "
                         "aoti_torch_get_data_ptr (its stable C ABI)"),
                        (("/nonexistent/libtorch_cpu.so",), "aten_install: /nonexistent/libtorch_cpu.so is not "
                         "loaded (import torch first)")):
        try:
            fc.aten_install(paths, fallback, plan, register)
        except ValueError as e:
            assert str(e) == want, (str(e), want)
        else:
            raise AssertionError("no error for %s" % (paths,))
    assert not fc.aten_installed() and abi.fake_registered() == 0
    fc.aten_install((FAKE,), fallback, plan, register)
    fc.aten_install((FAKE,), fallback, plan, register)  # again: nothing
    assert fc.aten_installed() and abi.fake_registered() == 4, abi.fake_registered()


def forward_launches_with_torchs_shapes():
    reset()
    x, w = tensor((4, 4096)), tensor((4096,))
    xd, wd = info(x)[2], info(w)[2]
    y, rstd = call("_fused_rms_norm", [x, lst([4096]), box(w), box(dbl(1e-6))], 2)
    assert info(y)[:2] == ((4, 4096), BF16T) and info(rstd)[:2] == ((4, 1), F32T), (info(y), info(rstd))
    want = (ptr(info(y)[2], 3) + ptr(xd, 3) + ptr(0, 0) + ptr(0, 3) + ptr(wd, 3) + ptr(0, 3) + ptr(0, 0) +
            ptr(info(rstd)[2], 1) + i32(4) + i32(4096) + i32(1) + f32(1e-6) + i32(1))
    assert launches == [(1, 0x5000, want)], (launches, want)
    free([y, rstd])
    x = tensor((4, 4096), F32T)
    y, rstd = call("_fused_rms_norm", [x, lst([4096]), 0, 0], 2)  # no weight; torch's default eps
    assert launches[-1][2][-32:] == f32(1.1920928955078125e-07) + i32(1) and launches[-1][2][64:80] == ptr(0, 1)
    free([y, rstd])
    x, w, b = tensor((2, 3, 1000), F16T), tensor((3, 1000), F16T), tensor((3, 1000), F16T)
    y, mean, rstd = call("native_layer_norm", [x, lst([3, 1000]), box(w), box(b), dbl(1e-5)], 3)
    assert [info(h)[:2] for h in (y, mean, rstd)] == [((2, 3, 1000), F16T), ((2, 1, 1), F32T), ((2, 1, 1), F32T)]
    assert launches[-1][2][96:] == ptr(info(mean)[2], 1) + ptr(info(rstd)[2], 1) + i32(2) + i32(3000) + i32(1) + \
        f32(1e-5) + i32(0)
    free([y, mean, rstd])
    assert fallbacks == [] and abi.fake_live() == 0, abi.fake_live()


def shared(d, T):
    """The backward's shared pointers and sizes for the addresses of dy x
    mean rstd w b (T rows of 512)."""
    return ptr(d[0], 3) + ptr(d[1], 3) + ptr(d[4], 3) + ptr(d[2], 1) + ptr(d[3], 1) + ptr(0, 0) + i32(T) + i32(512) + \
        i32(1)


def backward_launches_one_program_or_p_and_a_reduce():
    reset()
    for T, P, mask in ((8, 0, (1, 1, 1)), (16, 3, (1, 0, 1))):  # two keys: each plan is its own
        PLAN[0] = P
        shapes = [(T, 512), (T, 512), (T, 1), (T, 1), (512,), (512,)]
        h = [tensor(s, F32T if s[-1] == 1 else BF16T) for s in shapes]
        d = [info(t)[2] for t in h]  # the call takes the handles
        launches.clear()
        dx, dw, db = call("native_layer_norm_backward",
                          h[:2] + [lst([512])] + h[2:4] + [box(h[4]), box(h[5]), lst(list(mask))], 3)
        if P == 0:
            assert [(k, a) for k, _, a in launches] == [(2, ptr(info(dx)[2], 3) + ptr(info(dw)[2], 3) +
                                                         ptr(info(db)[2], 3) + shared(d, T) + i32(0))], launches
            assert info(dw)[:2] == ((512,), BF16T) and info(db)[:2] == ((512,), BF16T)
        else:
            assert [k for k, _, _ in launches] == [3, 4], launches
            bwd, red = launches[0][2], launches[1][2]
            # The mask asks no dw: w is read for dx, no dw partial row summed.
            dbp = struct.unpack_from("=8xQ", bwd, 32)[0]
            assert bwd == ptr(info(dx)[2], 3) + ptr(0, 0) + ptr(dbp, 1) + shared(d, T) + i32(3) + i32(0), bwd.hex()
            assert info(dw) is None and info(db)[:2] == ((512,), BF16T), (info(dw), info(db))
            assert red[:16] == ptr(0, 3) and red[32:] == ptr(0, 0) + ptr(dbp, 1) + i32(T) + i32(512) + i32(3), red.hex()
        assert plans[-1] == (0, T, 512, 2, d[1], d[0], d[4], 2, mask[1], 1), plans
        free([dx, dw, db])
    assert fallbacks == [] and abi.fake_live() == 0, abi.fake_live()


def rms_backward_takes_an_undefined_weight_as_none():
    reset()
    PLAN[0] = 0
    dy, x, rstd = tensor((2, 64)), tensor((2, 64)), tensor((2, 1), F32T)
    d = [info(h)[2] for h in (dy, x, rstd)]
    dx, dw = call("_fused_rms_norm_backward", [dy, x, lst([64]), rstd, box(abi.fake_undefined()), lst([1, 1])], 2)
    assert info(dw) is None and info(dx)[:2] == ((2, 64), BF16T)
    assert launches[-1][2] == (ptr(info(dx)[2], 3) + ptr(0, 3) + ptr(0, 3) + ptr(d[0], 3) + ptr(d[1], 3) + ptr(0, 3) +
                               ptr(0, 0) + ptr(d[2], 1) + ptr(0, 0) + i32(2) + i32(64) + i32(1) + i32(1)), launches
    free([dx, dw])
    assert abi.fake_live() == 0, abi.fake_live()


def rms_backward(T, D):
    """One RMSNorm backward of T rows of D, its outputs freed."""
    dy, x, rstd, w = tensor((T, D)), tensor((T, D)), tensor((T, 1), F32T), tensor((D,))
    free(call("_fused_rms_norm_backward", [dy, x, lst([D]), rstd, box(w), lst([1, 1])], 2))


def the_backward_plan_is_asked_once_a_key():
    reset()
    PLAN[0] = 0
    for T, D in ((4, 256), (4, 256), (8, 256), (4, 256), (8, 256), (4, 512)):
        rms_backward(T, D)
    assert [p[1:3] for p in plans] == [(4, 256), (8, 256), (4, 512)], plans
    abi.fake_set_capturing(1)  # a capture: asked every call (the plan then differs)
    rms_backward(4, 256)
    rms_backward(4, 256)
    abi.fake_set_capturing(0)
    rms_backward(4, 256)
    assert [p[1:3] for p in plans[3:]] == [(4, 256), (4, 256)], plans
    assert fallbacks == [] and abi.fake_live() == 0, abi.fake_live()


def copies():
    """copy_'s calls since the last look: (destination, source) data."""
    pairs = (ctypes.c_uint64 * 32)()
    n = abi.fake_copies(pairs)
    return [(pairs[2 * i], pairs[2 * i + 1]) for i in range(n)]


def strided_tensors_are_copied_for_the_kernels():
    """A strided x (forward) and a strided dy (backward: the expanded
    gradient of y.sum()) are copied into contiguous tensors by copy_, and
    the kernels read the copies; where copy_ fails, the fallback gets the
    caller's tensors. Nothing leaks."""
    reset()
    copies()
    x, w = tensor((4, 4096), contiguous=False), tensor((4096,))
    xd, wd = info(x)[2], info(w)[2]
    y, rstd = call("_fused_rms_norm", [x, lst([4096]), box(w), box(dbl(1e-6))], 2)
    made = copies()
    assert len(made) == 1 and made[0][1] == xd, (made, xd)
    assert launches == [(1, 0x5000, ptr(info(y)[2], 3) + ptr(made[0][0], 3) + ptr(0, 0) + ptr(0, 3) + ptr(wd, 3) +
                         ptr(0, 3) + ptr(0, 0) + ptr(info(rstd)[2], 1) + i32(4) + i32(4096) + i32(1) + f32(1e-6) +
                         i32(1))], launches
    free([y, rstd])
    PLAN[0] = 0
    launches.clear()
    dy, x, rstd, w = tensor((2, 64), contiguous=False), tensor((2, 64)), tensor((2, 1), F32T), tensor((64,))
    d = [info(h)[2] for h in (dy, x, rstd, w)]
    dx, dw = call("_fused_rms_norm_backward", [dy, x, lst([64]), rstd, box(w), lst([1, 1])], 2)
    made = copies()
    assert len(made) == 1 and made[0][1] == d[0], (made, d)
    assert launches[-1][2][48:80] == ptr(made[0][0], 3) + ptr(d[1], 3), launches
    free([dx, dw])
    abi.fake_set_copy_fails(1)
    try:
        RESULT[0] = [((3, 64), BF16T), ((3, 1), F32T)]
        x, w = tensor((3, 64), contiguous=False), tensor((64,))
        free(call("_fused_rms_norm", [x, lst([64]), box(w), box(dbl(0.5))], 2))
        assert fallbacks == [(OP_RMS, [x, w], [64], 0.5, (False, False, False))], fallbacks
        x = tensor((3, 64), F64T, contiguous=False)  # no kernel takes it: not copied
        free(call("_fused_rms_norm", [x, lst([64]), 0, 0], 2))
    finally:
        abi.fake_set_copy_fails(0)
    assert copies() == [] and abi.fake_live() == 0, abi.fake_live()


def other_calls_go_to_the_fallback():
    reset()
    RESULT[0] = [((3, 64), BF16T), ((3, 1), F32T)]
    cases = [(dict(dtype=F64T), "float64"), (dict(dtype=F64T, contiguous=False), "strided float64"),
             (dict(dev=1), "no kernels"), (dict(dev=2), "a failed launch"),
             (dict(shape=(3, 65)), "a shape that does not end with 64"), (dict(shape=(0, 64)), "no rows"),
             (dict(shape=(1 << 40, 1 << 40, 0, 64)), "sizes whose product overflows")]
    for kw, why in cases:
        fallbacks.clear()
        x = tensor(kw.get("shape", (3, 64)), kw.get("dtype", BF16T), kw.get("dev", 0), kw.get("contiguous", True))
        w = tensor((64,), dev=kw.get("dev", 0))
        y, rstd = call("_fused_rms_norm", [x, lst([64]), box(w), box(dbl(0.5))], 2)
        assert fallbacks == [(OP_RMS, [x, w], [64], 0.5, (False, False, False))], (why, fallbacks)
        assert info(y)[:2] == ((3, 64), BF16T) and info(rstd)[:2] == ((3, 1), F32T), why
        free([y, rstd])
    assert registered == [1, 2] and [k for k, _, _ in launches] == [FAIL], (registered, launches)
    RESULT[0] = "native_layer_norm: weight is torch.float32 and input torch.bfloat16"
    x, w = tensor((3, 64)), tensor((64,), F32T)
    stack = (ctypes.c_uint64 * 5)(x, lst([64]), box(w), 0, dbl(1e-5))
    abi.fake_call(b"native_layer_norm", stack, 5, 3)
    assert abi.fake_last_error() == b"native_layer_norm: " + RESULT[0].encode(), abi.fake_last_error()
    assert fallbacks[-1][0] == OP_LN and fallbacks[-1][1] == [x, w, None], fallbacks[-1]
    assert abi.fake_live() == 0, abi.fake_live()


def uninstall_gives_torchs_kernels_back():
    fc.aten_uninstall()
    assert not fc.aten_installed() and abi.fake_registered() == 0
    assert abi.fake_call(b"_fused_rms_norm", (ctypes.c_uint64 * 4)(), 4, 2) == 1
    fc.aten_uninstall()  # again: nothing


for t in (install_registers_the_four_kernels, forward_launches_with_torchs_shapes,
          backward_launches_one_program_or_p_and_a_reduce, rms_backward_takes_an_undefined_weight_as_none,
          the_backward_plan_is_asked_once_a_key, strided_tensors_are_copied_for_the_kernels,
          other_calls_go_to_the_fallback, uninstall_gives_torchs_kernels_back):
    check(t.__name__, t)
sys.exit(summary())
