"""ktune from Python: one runtime per process and device over libktune.so
(through ctypes), kernels loaded from their specs, launches on PyTorch's
current stream. The PyTorch operators live in ktune.ops.

    import ktune
    rt = ktune.runtime()                   # device 0; torch.cuda.current_device() if torch is loaded
    k = rt.kernel("masked_softmax")        # kernels_src/masked_softmax.json
    k.launch([y, x, None, None, rows, cols, 0.125])

A launch never synchronizes: it queues the kernel on the stream given (by
default torch.cuda.current_stream()) and returns. Errors raise KtuneError
with the runtime's message.
"""
import atexit
import ctypes
import operator
import os
import sys
import threading

from . import _capi
from ._version import __version__

__all__ = ["KtuneError", "Runtime", "Kernel", "runtime", "wait_tuning", "null", "kernels_dir", "__version__"]

_lib = None
_lib_lock = threading.Lock()


def lib():
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = _capi.load()
        return _lib


class KtuneError(RuntimeError):
    """A ktune call failed; .status is the kt_status name ("KT_ERR_ALIAS")."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def kernels_candidates():
    """Where the bundled specs are looked for, in order, as (place, folder):
    $KTUNE_KERNELS, the package's own copy, the source tree's kernels_src/,
    the installed prefix's share/ktune/kernels (next to the library found)."""
    here = os.path.dirname(os.path.abspath(__file__))
    places = []
    env = os.environ.get("KTUNE_KERNELS")
    if env:
        places.append(("$KTUNE_KERNELS", env))
    places.append(("the package", os.path.join(here, "kernels")))
    places.append(("the source tree", os.path.normpath(os.path.join(here, "..", "..", "..", "kernels_src"))))
    libdir = _capi._installed_libdir()
    if libdir:
        places.append(("ktune.pc's prefix", os.path.normpath(os.path.join(libdir, "..", "share", "ktune", "kernels"))))
    return places


def kernels_dir():
    """The folder of the bundled specs (see kernels_candidates); KtuneError
    naming every place tried when none has them."""
    tried = []
    for place, d in kernels_candidates():
        if os.path.isfile(os.path.join(d, "rmsnorm.json")):
            return d
        tried.append("%s (%s)" % (place, d))
    raise KtuneError("KT_ERR_IO", "the bundled kernels are not found; tried: " + "; ".join(tried) +
                     ". Install them (make install) or set KTUNE_KERNELS.")


class _Null:
    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype


_nulls = {}


def null(dtype):
    """A null pointer argument that still names its dtype (needed when every
    pointer of a type variable is null, e.g. no weight and no bias)."""
    n = _nulls.get(dtype)
    if n is None:
        n = _nulls[dtype] = _Null(dtype)
    return n


_TORCH_DTYPES = None


def norm_programs(T, sms, D=0, clusters=False, sums=True):
    """Programs (rows of partial sums) for layernorm_bwd over T rows of D on
    sms SMs. Within two rows a program of one wave, two rows each: half the
    partial rows to sum, and a program's fixed cost shared by two rows
    (measured on an H100 at T = 132: D = 4096 and 16384, both norms, as fast
    or faster than T programs of one row). Otherwise one program an SM, or a
    row; but with clusters (the backward can run MG = 2: sm_90 or later, one
    group, 16-byte aligned rows, dw or db to sum) and D >= 8192, half an SM
    each: the tuner then picks programs of two blocks that split their rows,
    which write half the partial rows (H100, bf16: LayerNorm 1024x16384
    55.7 -> 50.5 us, 1366x12288 53.2 -> 49.1, 2048x8192 47.2 -> 45.6; none
    at D = 4096).

    Without sums (no weight and no bias: no partial rows to write or add
    up), programs cost nothing more, and more of them keep more rows in
    flight: a quarter of the rows, between one an SM (or T) and 16 an SM
    (H100, bf16, tuned, µs, one an SM against 16: RMSNorm 16778x1000 38.9
    against 35.7, 65536x256 47.1 against 36.5, 4096x4096 36.8 against 35.5;
    LayerNorm 16778x1000 38.8 against 36.9; at 1024x16384 37.1-38.3 for
    every count from 66 to 1024)."""
    if not sums:
        return max(min(T, sms), min(T // 4, 16 * sms))
    if sms // 2 < T <= 2 * sms:
        return -(-T // 2)
    P = max(1, min(sms, T))
    return max(1, sms // 2) if clusters and D >= 8192 and P == sms else P


# The most elements whose backward layernorm_bwd_row may take (one program).
NORM_ONE_PROGRAM_MAX = 16384


def norm_bwd_one_program(T, D, groups, host_bound=False):
    """Whether the backward of T rows of D in `groups` groups goes to
    layernorm_bwd_row (what ktune.ops and ktune.jax launch): one program
    (a block, or a cluster of up to 8 blocks) writes dw and db itself, with
    no partial rows and no reduce to launch. H100, bf16, tuned, against the
    two launches (µs): 1.7-4.6 where they took 3.4-6.5 at T = 1; RMSNorm
    8x256 2.43 against 3.62, 16x1000 3.55 against 3.83, 2x8192 4.16 against
    4.94, 128x64 3.61 against 3.70; it loses at 4x4096 (4.26 against 4.19,
    LayerNorm 4.89 against 4.52), 32x1000 (4.04 against 3.88) and 256x64
    (4.30 against 3.94): few SMs stream the rows. Several rows need one
    group. host_bound (an eager call, not a graph's capture) takes it up to
    NORM_ONE_PROGRAM_MAX elements whatever T: there the launch, the
    allocation and the reduce that it saves cost the host more than the
    0.4 us of GPU time it may lose."""
    if T == 1:
        return True
    if groups != 1 or T * D > NORM_ONE_PROGRAM_MAX:
        return False
    return host_bound or T <= 2 or (T <= 128 and D < 4096)


def _torch_codes():
    """torch dtype -> kt_dtype code, built on first use (torch loads lazily)."""
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        import torch
        _TORCH_DTYPES = {torch.float32: 1, torch.float16: 2, torch.bfloat16: 3, torch.float64: 4,
                         torch.int32: 5, torch.int64: 6, torch.uint8: 7, torch.bool: 7, torch.int8: 8,
                         torch.int16: 9}
    return _TORCH_DTYPES


def _dtype_code(dt):
    if isinstance(dt, str):
        return _capi.DTYPES[dt]
    code = _torch_codes().get(dt)
    if code is None:
        raise KtuneError("KT_ERR_ARGS", "dtype %s has no ktune equivalent" % (dt,))
    return code


_ARG_FORMATS = {_capi.KT_ARG_PTR: "iiQ", _capi.KT_ARG_I32: "iii4x", _capi.KT_ARG_I64: "iiq", _capi.KT_ARG_F32: "iif4x"}


def arg_struct(kinds):
    """The struct.Struct of a kt_arg array of these param kinds: 16 bytes a
    param (kind, dtype, then the value's 8 bytes)."""
    import struct
    return struct.Struct("=" + "".join(_ARG_FORMATS[k] for k in kinds))


def pack_args(st, view, kinds, values, codes):
    """values into view (a kt_arg array) with one struct call: the ctypes
    path's packing, which ktune._fastcall repeats in C."""
    flat = []
    ext = flat.extend
    for kind, v in zip(kinds, values):
        if kind != 1:
            ext((kind, 0, v))
        elif v is None:
            ext((1, 0, 0))
        elif v.__class__ is _Null:
            ext((1, _dtype_code(v.dtype), 0))
        else:
            c = codes.get(v.dtype)
            ext((1, c if c is not None else _dtype_code(v.dtype), v.data_ptr()))
    st.pack_into(view, 0, *flat)


class Kernel:
    """A loaded spec. Owned by its Runtime; valid while the Runtime is open."""

    def __init__(self, rt, handle, name):
        self._rt = rt
        self._h = handle
        self.name = name
        L = lib()
        n = L.kt_kernel_nparams(handle)
        self.params = []
        info = _capi.ParamInfo()
        for i in range(n):
            L.kt_kernel_param(handle, i, ctypes.byref(info))
            self.params.append((info.name.decode(), info.kind))
        self._kinds = tuple(k for _, k in self.params)
        self._n = n
        # The kt_arg array is packed with one struct call: 16 bytes per
        # param (kind, dtype, then the value's 8 bytes).
        self._ptrs = tuple(i for i, k in enumerate(self._kinds) if k == _capi.KT_ARG_PTR)
        self._tls = threading.local()
        self._struct = arg_struct(self._kinds)
        self._launch = L.kt_launch
        self._launch_config = L.kt_launch_config
        self._fast_tried = False
        self._launcher = None

    def _args(self, values):
        if len(values) != self._n:
            raise KtuneError("KT_ERR_ARGS", "%s: %d args given, the spec has %d params"
                             % (self.name, len(values), self._n))
        tls = self._tls
        arr = getattr(tls, "arr", None)
        if arr is None:
            arr = tls.arr = (_capi.Arg * self._n)()
            tls.view = memoryview(arr).cast("B")
        pack_args(self._struct, tls.view, self._kinds, values, _torch_codes())
        return arr

    def launch(self, values, stream=None, config=None):
        """Queue the kernel. values follow the spec's params: tensors (or
        None / ktune.null(dtype) for optional pointers), ints, floats.
        stream: a CUDA stream handle (int) or None for torch's current
        stream on the runtime's device. Never synchronizes."""
        self._slow_launch(values, stream, config)
        if not self._fast_tried:
            self._install_fastcall()

    def _slow_launch(self, values, stream, config):
        arr = self._args(values)
        if stream is None:
            stream = self._rt._current_stream()
        if config is None:
            st = self._launch(self._h, stream, arr, self._n)
        else:
            st = self._launch_config(self._h, stream, arr, self._n, _c_text("launch: config", config))
        if st:
            self._rt._raise(st)

    def _install_fastcall(self):
        """After a first launch that worked: later ones through ktune._fastcall
        (the same packing and call in C), where it was built."""
        self._fast_tried = True
        fc = _capi.fastcall()
        if fc is None or self._n > fc.MAX_PARAMS or "torch" not in sys.modules:
            return
        try:
            addr = ctypes.cast(self._launch, ctypes.c_void_p).value
            launcher = fc.Launcher(addr, self._h.value, bytes(self._kinds), _torch_codes(), _Null, _dtype_code,
                                   self._rt._stream_callable(), self._rt._raise, self._slow_launch)
        except Exception:  # noqa: BLE001 -- the ctypes path stays
            return
        self.launch = launcher.launch
        self._launcher = launcher

    def _c_launcher(self):
        """The kernel's ktune._fastcall.Launcher, installed now where it was
        not, or None where the C path is not available (for the C bodies of
        ktune.ops, which launch through it)."""
        if not self._fast_tried:
            self._install_fastcall()
        return self._launcher

    def config_for(self, values):
        """The config a launch with these values would use (may tune)."""
        arr = self._args(values)
        buf = ctypes.create_string_buffer(_capi.KT_CONFIG_MAX)
        st = lib().kt_kernel_config_for(self._h, arr, self._n, buf, _capi.KT_CONFIG_MAX)
        if st:
            self._rt._raise(st)
        return buf.value.decode()

    def settle_shape(self, args):
        """Whether the key of the call args describes (a kt_arg array:
        made-up addresses allowed) is settled for good, so that every launch
        of it takes one config: the cache has it (kt_kernel_lookup), or, in
        tune mode, this process settled it or settles it now, tuning on
        inputs the tuning makes (kt_kernel_tune_shape). In async mode a key
        the cache lacks may run on a stand-in until its tuning ends: not
        settled. False also where the call is refused (its launch then says
        why)."""
        got = self._outcome(lib().kt_kernel_lookup, args)
        if got == _capi.KT_TUNE_CACHED or (got == _capi.KT_TUNE_KNOWN and self._rt.mode == "tune"):
            return True
        return self._rt.mode == "tune" and got is not None and \
            self._outcome(lib().kt_kernel_tune_shape, args) in _capi.KT_TUNE_SETTLED

    def _outcome(self, fn, args):
        """fn's kt_tune_report's outcome for args, or None where it failed."""
        rep = ctypes.c_void_p()
        st = fn(self._h, args, self._n, ctypes.byref(rep))
        try:
            return None if st or not rep else ctypes.cast(rep, ctypes.POINTER(ctypes.c_int))[0]
        finally:
            lib().kt_tune_report_free(rep)

    def key(self, values):
        arr = self._args(values)
        buf = ctypes.create_string_buffer(_capi.KT_KEY_MAX)
        st = lib().kt_kernel_key(self._h, arr, self._n, buf, _capi.KT_KEY_MAX)
        if st:
            self._rt._raise(st)
        return buf.value.decode()


_MODE_NAMES = {v: k for k, v in _capi.MODES.items()}  # kt_runtime_mode's answer by name
_LOG_LEVELS = {"error": 0, "warn": 1, "info": 2, "debug": 3}


def _c_text(what, value):
    """value (str, bytes or a path) as the bytes a C string holds; a NUL
    byte would end it early (a path cut there names another file), so it is
    refused, as Python's own open() does."""
    try:
        b = os.fsencode(value)
    except TypeError:
        raise KtuneError("KT_ERR_INVALID", "%s must be a str, bytes or a path, not %s" % (what, type(value).__name__))
    if b"\0" in b:
        raise KtuneError("KT_ERR_INVALID", "%s %r holds a NUL byte" % (what, value))
    return b


def _choice(what, value, table):
    """table[value], or KtuneError naming the option and the values it takes."""
    if value not in table:
        raise KtuneError("KT_ERR_INVALID", "ktune.Runtime: %s %r is not one of %s" % (what, value, ", ".join(table)))
    return table[value]


class Runtime:
    """A kt_runtime on one device. close() (or process exit) frees it.
    mode, cache_path, pdl, budget_s and cache_required are kt_options'
    fields (cache_path: a str, bytes or os.PathLike, without a NUL byte;
    budget_s: the seconds a tuning may spend; None: its strategy's own, 10 s
    for the random search; cache_required: a cache that cannot be opened
    raises KtuneError KT_ERR_CACHE, where by default the runtime runs
    without one and logs why)."""

    def __init__(self, device=0, mode=None, cache_path=None, log=None, log_level=None, pdl=True, budget_s=None,
                 cache_required=False):
        L = lib()
        o = _capi.options(L)
        try:
            device = operator.index(device)
        except TypeError:
            raise KtuneError("KT_ERR_INVALID", "ktune.Runtime: device must be an int, not %s" % type(device).__name__)
        if not 0 <= device < 2 ** 31:
            raise KtuneError("KT_ERR_INVALID", "ktune.Runtime: device %d is not a GPU index" % device)
        o.device = device
        o.no_pdl = 0 if pdl else 1
        if mode is not None:
            o.mode = _choice("mode", mode, _capi.MODES)
        if cache_path is not None:
            o.cache_path = _c_text("ktune.Runtime: cache_path", cache_path)
        if budget_s is not None:
            o.budget_s = float(budget_s)
        if cache_required:
            if not _capi.knows(o, "cache_required"):
                raise KtuneError("KT_ERR_INVALID", "ktune.Runtime: cache_required: the loaded libktune does not have it")
            o.cache_required = 1
        if log_level is not None:
            o.log_level = _choice("log_level", log_level, _LOG_LEVELS)
        self._log_cb = None
        self._coord = _coordinator
        if self._coord is not None:
            o.coord = self._coord.c_struct()
        if log is not None:
            names = {v: k for k, v in _LOG_LEVELS.items()}
            @_capi.callback
            def log_cb(user, lvl, msg):
                try:
                    log(names.get(lvl, lvl), msg.decode(errors="backslashreplace"))
                except KeyboardInterrupt as e:
                    _capi.interrupted_in_callback(e)
            self._log_cb = _capi.LOG_FN(log_cb)
            o.log = self._log_cb
        h = ctypes.c_void_p()
        st = L.kt_runtime_open(ctypes.byref(h), ctypes.byref(o))
        if st:
            msg = L.kt_errmsg(h).decode()  # kt_errmsg(NULL) says why no handle was made
            if h:
                L.kt_runtime_close(h)
            raise KtuneError(L.kt_status_name(st).decode(), msg)
        self._h = h
        _open_handles.add(h.value)
        self.device = device
        # The mode in effect, as the runtime settled it (from $KTUNE_MODE
        # where none was asked for).
        self.mode = _MODE_NAMES[L.kt_runtime_mode(h)]
        self._kernels = {}
        self._lock = threading.Lock()
        self._stream_fn = None

    def _stream_callable(self):
        """() -> torch's current stream on this device, as an int."""
        f = self._stream_fn
        if f is None:
            import functools
            import torch
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            dev = self.device
            f = self._stream_fn = (functools.partial(raw, dev) if raw else
                                   (lambda: torch.cuda.current_stream(dev).cuda_stream))
        return f

    def _current_stream(self):
        return self._stream_callable()()

    def _raise(self, st):
        L = lib()
        raise KtuneError(L.kt_status_name(st).decode(), L.kt_errmsg(self._h).decode())

    def kernel(self, name_or_path):
        """A kernel by bundled name ("layernorm_fwd") or spec path; loaded once."""
        name_or_path = os.fsdecode(_c_text("ktune.Runtime.kernel: name_or_path", name_or_path))
        with self._lock:
            k = self._kernels.get(name_or_path)
            if k is not None:
                return k
            path = name_or_path
            if not path.endswith(".json"):
                path = os.path.join(kernels_dir(), name_or_path + ".json")
            h = ctypes.c_void_p()
            st = lib().kt_kernel_load(self._h, os.fsencode(path), ctypes.byref(h))
            if st:
                self._raise(st)
            k = self._kernels[name_or_path] = Kernel(self, h, os.path.basename(path)[:-5])
            return k

    def stats(self):
        """Counters since the runtime opened (see kt_stats in ktune.h)."""
        s = _capi.Stats()
        st = lib().kt_runtime_stats(self._h, ctypes.byref(s))
        if st:
            self._raise(st)
        return {f: getattr(s, f) for f, _ in _capi.Stats._fields_ if f != "size"}

    def wait_tuning(self, timeout=None):
        """Wait until async mode's background tuner has nothing queued or
        running (timeout in seconds, None: no limit). Raises KtuneError
        (KT_ERR_TIMEOUT) when it still has work after timeout."""
        st = lib().kt_runtime_wait_tuning(self._h, -1.0 if timeout is None else float(timeout))
        if st:
            self._raise(st)

    def stop_tuning(self):
        """Stop tuning in this runtime for good (kt_runtime_stop_tuning):
        what the background tuner has queued is dropped, a running tuning
        stops, and launches go on with stand-ins. Called for every open
        runtime when the interpreter exits."""
        if self._h:
            st = lib().kt_runtime_stop_tuning(self._h)
            if st:
                self._raise(st)

    def close(self):
        """Free the runtime. From a callback of one of its calls (a log
        line, a store's publish or fetch) C refuses, and so does this, with
        KtuneError: the runtime stays open, to close once that call
        returned."""
        if self._h:
            L = lib()
            st = L.kt_runtime_close(self._h)
            if st:
                raise KtuneError(L.kt_status_name(st).decode(), L.kt_errmsg(self._h).decode())
            _open_handles.discard(self._h.value)
            self._h = None


_runtimes = {}
_rt_lock = threading.Lock()
# Every runtime opened and not closed (handles, not Runtime objects: one
# dropped without close() still tunes), for the exit hook.
_open_handles = set()


@atexit.register
def _stop_tuning_at_exit():
    """The interpreter is exiting: background tunings stop now, while
    everything they use is alive. A compile or trial still running when the
    interpreter and the libraries it loaded tear down can crash the exit.
    Exit handlers registered after ktune's import run before this one and
    may still tune."""
    for h in list(_open_handles):
        lib().kt_runtime_stop_tuning(ctypes.c_void_p(h))


_coordinator = None  # set by ktune.distributed before the first runtime


def _set_coordinator(c):
    """ktune.distributed's hook: runtimes opened from now on coordinate
    through c; KtuneError when one is open already (it would not)."""
    global _coordinator
    with _rt_lock:
        if _runtimes:
            raise KtuneError("KT_ERR_INVALID", "ktune.distributed: enable() must come before the first ktune call "
                             "of the process (a runtime is open already, on device %s)" % sorted(_runtimes)[0])
        _coordinator = c


def wait_tuning(timeout=None):
    """Wait for the background tunings of every runtime this process opened
    through runtime() (see Runtime.wait_tuning)."""
    with _rt_lock:
        rts = list(_runtimes.values())
    for rt in rts:
        rt.wait_tuning(timeout)


def runtime(device=None):
    """The process's runtime for a device (default: torch's current device,
    or 0 without torch), opened on first use: in async mode unless
    $KTUNE_MODE says otherwise, so that an op's first call of a new shape
    never waits for its tuning (docs/tuning.md, Async mode)."""
    if device is None:
        try:
            import torch
            device = torch.cuda.current_device()
        except Exception:
            device = 0
    with _rt_lock:
        rt = _runtimes.get(device)
        if rt is None:
            rt = _runtimes[device] = Runtime(device, mode=None if os.environ.get("KTUNE_MODE") else "async")
        return rt
