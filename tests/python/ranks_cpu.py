"""Ranks without a GPU, for the coordinator tests (test_coord_cpu.py,
test_coord_jax_cpu.py): a runtime without a device over a coordinator,
the bundled-for-tests RMSNorm (tests/specs/small.json) and a call of it
at made-up addresses, one key per D."""
import ctypes

import ktune
from ktune import _capi

L = ktune.lib()
L.kt_kernel_config_for.argtypes = [ctypes.c_void_p, ctypes.POINTER(_capi.Arg), ctypes.c_int, ctypes.c_char_p,
                                   ctypes.c_size_t]


def args(d):
    a = (_capi.Arg * 7)()
    for i, p in enumerate((1 << 24, 2 << 24, 0, 3 << 24)):
        a[i].kind, a[i].dtype, a[i].v.ptr = _capi.KT_ARG_PTR, _capi.DTYPES["bf16"], p
    for i, v in ((4, 64), (5, d)):
        a[i].kind, a[i].v.i32 = _capi.KT_ARG_I32, v
    a[6].kind, a[6].v.f32 = _capi.KT_ARG_F32, 1e-6
    return a


def open_rank(coord, path):
    o = _capi.options(L)
    o.no_device, o.arch, o.cache_path, o.log_level = 1, b"sm_90", path.encode(), 0
    o.coord = coord.c_struct()
    h = ctypes.c_void_p()
    st = L.kt_runtime_open(ctypes.byref(h), ctypes.byref(o))
    assert st == 0, L.kt_errmsg(h)
    k = ctypes.c_void_p()
    assert L.kt_kernel_load(h, b"tests/specs/small.json", ctypes.byref(k)) == 0, L.kt_errmsg(h)
    return h, k


def config_for(k, d):
    """The config rank k's runtime settles for the key of D = d."""
    buf = ctypes.create_string_buffer(128)
    assert L.kt_kernel_config_for(k, args(d), 7, buf, 128) == 0
    return buf.value


def stats(h):
    s = _capi.Stats()
    L.kt_runtime_stats(h, ctypes.byref(s))
    return s
