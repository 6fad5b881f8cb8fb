"""ktune._fastcall (the launch path in C) against the ctypes path, without a
GPU or torch (make test runs it through tests/t_fastcall.c): the kt_arg
bytes it packs equal the ctypes path's for every kind of value (and it
is found beside the library, even where it was asked for before the
library was loaded); a launch
reaches kt_launch (here a ctypes callback) with the values, the stream
given or the current one, and a failing status raises through the
runtime's error; a config or a wrong count goes to the ctypes path; a bad
value raises before anything is launched. Ends with "N passed, N failed,
N skipped"."""
import ctypes
import os
import sys
import sysconfig

import ktune
from checks import check, summary
from ktune import _capi

# Asked before the library is loaded (as ktune.torch_norms.uninstall() may
# be, first thing in a process), the extension cannot be found yet; that
# answer must not stick once the library is loaded beside it.
early = _capi.fastcall()
ktune.lib()  # the extension is looked for beside the library loaded
fc = _capi.fastcall()
built = os.path.exists(os.path.join(os.path.dirname(os.path.abspath(_capi.loaded_path)),
                                    "_fastcall" + sysconfig.get_config_var("EXT_SUFFIX")))
if fc is None and not built:
    print("ktune._fastcall was not built here")
    sys.exit(summary(skipped=6))


def found_once_the_library_is_loaded():
    assert early is None, early  # nothing beside a library not yet loaded (the package holds no copy here)
    assert fc is not None, "ktune._fastcall is beside the library, but fastcall() kept its first answer"
    assert _capi.fastcall() is fc  # kept from now on

P, I32, I64, F32 = _capi.KT_ARG_PTR, _capi.KT_ARG_I32, _capi.KT_ARG_I64, _capi.KT_ARG_F32
KINDS = (P, P, P, P, I32, I64, F32, I32)


class DType:
    def __init__(self, name):
        self.name = name


BF16, F32T, ODD = DType("bf16"), DType("f32"), DType("complex")
CODES = {BF16: 3, F32T: 1}


class Tensor:
    """What the packing reads of a torch tensor: dtype and data_ptr()."""

    def __init__(self, dtype, ptr):
        self.dtype, self._ptr = dtype, ptr

    def data_ptr(self):
        return self._ptr


def dtype_code(dt):
    if isinstance(dt, str):
        return _capi.DTYPES[dt]
    raise ktune.KtuneError("KT_ERR_ARGS", "dtype %s has no ktune equivalent" % dt.name)


VALUES = [Tensor(BF16, 0x7F0000001000), None, ktune.null("f16"), Tensor(F32T, (1 << 64) - 16), -7, -(1 << 40),
          0.1, True]
calls = []
LAUNCH_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_capi.Arg), ctypes.c_int)


@LAUNCH_FN
def fake_launch(kernel, stream, args, n):
    calls.append((kernel, stream, bytes(ctypes.string_at(args, n * ctypes.sizeof(_capi.Arg))), n))
    return 7 if stream == 0xBAD else 0


class Errors(Exception):
    pass


def on_error(st):
    raise Errors("status %d" % st)


slow_calls = []


def slow(values, stream, config):
    slow_calls.append((len(values), stream, config))


def launcher():
    return fc.Launcher(ctypes.cast(fake_launch, ctypes.c_void_p).value, 0x1234, bytes(KINDS), CODES,
                       ktune._Null, dtype_code, lambda: 0x5000, on_error, slow)


def ctypes_bytes(values):
    st = ktune.arg_struct(KINDS)
    arr = (_capi.Arg * len(KINDS))()
    ktune.pack_args(st, memoryview(arr).cast("B"), KINDS, values, CODES)
    return bytes(arr)


class Index:
    """An integer as numpy's are (not an int, but with __index__)."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


def packs_as_ctypes_does():
    want = ctypes_bytes(VALUES)
    got = launcher().pack(VALUES)
    assert got == want, (got.hex(), want.hex())
    assert launcher().pack(tuple(VALUES)) == want
    # integers with __index__ (numpy's) pack as ints on both paths: the C
    # path took them as a TypeError once it replaced the ctypes one
    odd = VALUES[:4] + [Index(-7), Index(-(1 << 40))] + VALUES[6:7] + [Index(1)]
    assert launcher().pack(odd) == ctypes_bytes(odd) == want


def launches_with_the_values_and_stream():
    calls.clear()
    launch = launcher().launch
    assert launch(VALUES) is None
    assert launch(VALUES, 0x77) is None
    assert launch(VALUES, stream=0x78) is None
    assert [(c[0], c[1], c[3]) for c in calls] == [(0x1234, 0x5000, 8), (0x1234, 0x77, 8), (0x1234, 0x78, 8)], calls
    assert all(c[2] == ctypes_bytes(VALUES) for c in calls)


def a_failing_status_raises_the_runtimes_error():
    calls.clear()
    try:
        launcher().launch(VALUES, 0xBAD)
    except Errors as e:
        assert str(e) == "status 7", e
    else:
        raise AssertionError("no error raised")
    assert len(calls) == 1


def a_config_or_a_wrong_count_takes_the_ctypes_path():
    calls.clear()
    slow_calls.clear()
    launch = launcher().launch
    launch(VALUES, config="BLOCK=128")
    launch(VALUES[:3])
    launch(VALUES[:3], 5)
    assert slow_calls == [(8, None, "BLOCK=128"), (3, None, None), (3, 5, None)], slow_calls
    assert calls == []


def bad_values_raise_before_a_launch():
    calls.clear()
    cases = [(4, 1 << 31, OverflowError), (4, "7", TypeError), (4, 1.5, TypeError), (4, Index(1 << 31), OverflowError),
             (5, 1 << 63, OverflowError), (6, "x", TypeError),
             (0, Tensor(ODD, 16), ktune.KtuneError), (0, object(), AttributeError)]
    for i, v, exc in cases:
        vals = list(VALUES)
        vals[i] = v
        try:
            launcher().launch(vals)
        except exc:
            pass
        else:
            raise AssertionError("param %d = %r: no %s" % (i, v, exc.__name__))
    assert calls == []


check("found beside the library once it is loaded, though asked for before", found_once_the_library_is_loaded)
if fc is None:
    sys.exit(summary(skipped=5))
check("the kt_arg bytes equal the ctypes path's", packs_as_ctypes_does)
check("a launch passes the values and the stream given or current", launches_with_the_values_and_stream)
check("a failing status raises the runtime's error", a_failing_status_raises_the_runtimes_error)
check("a config or a wrong count takes the ctypes path", a_config_or_a_wrong_count_takes_the_ctypes_path)
check("bad values raise before a launch", bad_values_raise_before_a_launch)
sys.exit(summary())
