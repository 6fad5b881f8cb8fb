"""ctypes declarations of runtime/ktune.h: the structs and calls the Python
package uses. Kept beside the header's order; a field added there is added
here."""
import ctypes
import ctypes.util
import functools
import os
import subprocess
import sys
import threading
import _thread

KT_ARG_PTR, KT_ARG_I32, KT_ARG_I64, KT_ARG_F32 = 1, 2, 3, 4
KT_KEY_MAX, KT_CONFIG_MAX = 8451, 2115  # bytes that hold any key, any config
DTYPES = {"f32": 1, "f16": 2, "bf16": 3, "f64": 4, "i32": 5, "i64": 6, "u8": 7, "i8": 8, "i16": 9, "u32": 10}
KT_TEXT_CONTROLS, KT_TEXT_JSON = 1, 2  # kt_text_flag
MODES = {"default": 0, "tune": 1, "cache-only": 2, "off": 3, "async": 4}
KT_TUNE_CACHED, KT_TUNE_KNOWN, KT_TUNE_TUNED, KT_TUNE_TUNED_LOCAL = 0, 1, 2, 3  # kt_tune_outcome
KT_TUNE_SETTLED = (KT_TUNE_CACHED, KT_TUNE_KNOWN, KT_TUNE_TUNED, KT_TUNE_TUNED_LOCAL)  # one config from now on
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


_callbacks = set()  # the code of the callbacks C calls: callback(fn) adds it
_resend = {"armed": False}


def callback(fn):
    """fn, a callback C will call, known to interrupted_in_callback."""
    _callbacks.add(fn.__code__)
    return fn


def interrupted_in_callback(e):
    """For a callback C called (see callback()), ended by e. No exception
    crosses C, so a Ctrl-C (KeyboardInterrupt) is raised again, in the main
    thread, once Python code runs that no callback called: the ktune call
    has returned. Not sooner: an interrupt re-sent at once would land at
    the entry of the next callback the same call makes, before its try, and
    ctypes would print it and return garbage. A profile hook on this thread
    (chained to any profiler there) watches for that code; it sees nothing
    of other threads, and a loop that calls nothing gets the interrupt when
    it next calls something. Where Python handles no SIGINT (it was ignored
    when the process started, as in a shell's background job), nothing is
    raised again: the call has failed the exchange all the same."""
    if not isinstance(e, KeyboardInterrupt) or _resend["armed"] or \
            threading.current_thread() is not threading.main_thread():
        return
    old = sys.getprofile()

    def hook(frame, event, arg):
        if old is not None:
            old(frame, event, arg)
        f = frame
        while f is not None:
            if f.f_code in _callbacks:
                return
            f = f.f_back
        sys.setprofile(old)
        _resend["armed"] = False
        _thread.interrupt_main()
    _resend["armed"] = True
    sys.setprofile(hook)


class ArgValue(ctypes.Union):
    _fields_ = [("ptr", ctypes.c_uint64), ("i32", ctypes.c_int32), ("i64", ctypes.c_int64),
                ("f32", ctypes.c_float)]


class Arg(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("dtype", ctypes.c_int), ("v", ArgValue)]


PUBLISH_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
FETCH_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.POINTER(ctypes.c_size_t), ctypes.c_int)


class Coordinator(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int), ("size", ctypes.c_int), ("timeout_s", ctypes.c_double),
                ("user", ctypes.c_void_p), ("publish", PUBLISH_FN), ("fetch", FETCH_FN)]


class Options(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("device", ctypes.c_int), ("no_device", ctypes.c_int),
                ("arch", ctypes.c_char_p), ("cuda_home", ctypes.c_char_p), ("cache_path", ctypes.c_char_p),
                ("no_cache", ctypes.c_int), ("mode", ctypes.c_int), ("log", LOG_FN),
                ("log_user", ctypes.c_void_p), ("log_level", ctypes.c_int),
                ("system_cache_path", ctypes.c_char_p), ("stage_aliased", ctypes.c_int),
                ("miss_runs_default", ctypes.c_int), ("progress", ctypes.c_void_p),
                ("progress_user", ctypes.c_void_p), ("retune", ctypes.c_int), ("strategy", ctypes.c_int),
                ("budget_s", ctypes.c_double), ("no_pdl", ctypes.c_int), ("cache_readonly", ctypes.c_int),
                ("async_copy_limit", ctypes.c_size_t), ("coord", Coordinator), ("record_path", ctypes.c_char_p),
                ("no_prune", ctypes.c_int), ("cache_required", ctypes.c_int)]


def options(lib, cls=Options):
    """A cls (this package's kt_options) holding the defaults the loaded
    library's kt_options_init gives. That function writes its own version's
    sizeof(kt_options) bytes whatever the caller declared, which past a
    shorter declaration is memory of something else; so it fills a scratch
    buffer larger than any version's, and the fields both know are kept.
    size says how many bytes the library reads; it takes its defaults for
    the rest."""
    scratch = (ctypes.c_char * (1 << 16))()
    if lib.kt_options_init(ctypes.cast(scratch, ctypes.POINTER(Options))):
        raise OSError("kt_options_init failed")
    theirs = ctypes.c_size_t.from_buffer(scratch).value
    if not ctypes.sizeof(ctypes.c_size_t) <= theirs <= len(scratch):
        raise OSError("kt_options_init gave a kt_options of %d bytes" % theirs)
    o = cls()
    n = min(theirs, ctypes.sizeof(cls))
    ctypes.memmove(ctypes.byref(o), scratch, n)
    o.size = n
    return o


def knows(o, field):
    """Whether the library reads field of o (its kt_options has it)."""
    f = getattr(type(o), field)
    return f.offset + f.size <= o.size


class Sized(ctypes.Structure):
    """A struct whose first field says its size, set on creation (the
    library fills only what the caller's version of it holds)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.size = ctypes.sizeof(self)


class ParamInfo(Sized):
    _fields_ = [("size", ctypes.c_size_t), ("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("dtype", ctypes.c_char_p),
                ("access", ctypes.c_char_p), ("optional", ctypes.c_int), ("key", ctypes.c_char_p),
                ("init", ctypes.c_char_p), ("extent", ctypes.c_char_p)]


class Stats(Sized):
    _fields_ = [("size", ctypes.c_size_t), ("launches", ctypes.c_uint64), ("hits", ctypes.c_uint64),
                ("misses", ctypes.c_uint64), ("tunings", ctypes.c_uint64), ("trials", ctypes.c_uint64),
                ("tuning_ms", ctypes.c_double),
                ("compiles", ctypes.c_uint64), ("compile_ms", ctypes.c_double), ("cache_loads", ctypes.c_uint64),
                ("binary_loads", ctypes.c_uint64), ("fallbacks", ctypes.c_uint64), ("standins", ctypes.c_uint64),
                ("async_queued", ctypes.c_uint64), ("async_done", ctypes.c_uint64), ("async_failed", ctypes.c_uint64),
                ("async_pending", ctypes.c_uint64), ("published", ctypes.c_uint64), ("followed", ctypes.c_uint64),
                ("coord_failed", ctypes.c_uint64)]


class RuntimeInfo(Sized):
    _fields_ = [("size", ctypes.c_size_t), ("device_name", ctypes.c_char_p), ("arch", ctypes.c_char_p), ("fingerprint", ctypes.c_char_p),
                ("num_sms", ctypes.c_int), ("l2_bytes", ctypes.c_int), ("smem_per_block_optin", ctypes.c_int),
                ("driver_version", ctypes.c_int), ("nvrtc_version", ctypes.c_int), ("cache_path", ctypes.c_char_p),
                ("cache_error", ctypes.c_char_p)]


class CacheRow(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_char_p), ("spec_hash", ctypes.c_char_p), ("device", ctypes.c_char_p),
                ("key", ctypes.c_char_p), ("config", ctypes.c_char_p), ("time_us", ctypes.c_double),
                ("candidates", ctypes.c_int), ("rejected", ctypes.c_int), ("nvrtc_version", ctypes.c_char_p),
                ("driver_version", ctypes.c_char_p), ("created_at", ctypes.c_int64), ("updated_at", ctypes.c_int64),
                ("from_system", ctypes.c_int)]


CACHE_ROW_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(CacheRow))


def _here():
    return os.path.dirname(os.path.abspath(__file__))


@functools.lru_cache(maxsize=1)
def _installed_libdir():
    """The libdir of an installed ktune: pkg-config's word for ktune.pc,
    else None."""
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "ktune"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    d = out.stdout.strip()
    return d if out.returncode == 0 and d else None


def library_candidates():
    """Where libktune is looked for, in order, as (place, path or name):
    $KTUNE_LIB, a library shipped inside the package, the installed prefix
    (ktune.pc, then the loader's cache), the source tree's build/."""
    places = []
    env = os.environ.get("KTUNE_LIB")
    if env:
        places.append(("$KTUNE_LIB", env))
    places.append(("the package", os.path.join(_here(), "lib", "libktune.so.0")))
    libdir = _installed_libdir()
    if libdir:
        places.append(("ktune.pc's libdir", os.path.join(libdir, "libktune.so.0")))
    found = ctypes.util.find_library("ktune")
    if found:
        places.append(("the loader's cache", found))
    places.append(("the source tree", os.path.normpath(os.path.join(_here(), "..", "..", "..", "build", "libktune.so"))))
    return places


loaded_path = None  # the library _open_library loaded


def _open_library():
    global loaded_path
    tried = []
    for place, path in library_candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s (%s: no such file)" % (place, path))
            continue
        try:
            lib = ctypes.CDLL(path)
            loaded_path = path
            return lib
        except OSError as e:
            tried.append("%s (%s: %s)" % (place, path, e))
    raise OSError("libktune not found; tried: " + "; ".join(tried) +
                  ". Build it (make), install it (make install), or set KTUNE_LIB to its path.")


def load():
    lib = _open_library()
    P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    sig = {
        "kt_options_init": (I, [ctypes.POINTER(Options)]),
        "kt_runtime_open": (I, [ctypes.POINTER(P), ctypes.POINTER(Options)]),
        "kt_runtime_close": (I, [P]),
        "kt_errmsg": (S, [P]),
        "kt_status_name": (S, [I]),
        "kt_kernel_load": (I, [P, S, ctypes.POINTER(P)]),
        "kt_kernel_nparams": (I, [P]),
        "kt_kernel_name": (S, [P]),
        "kt_kernel_param": (I, [P, I, ctypes.POINTER(ParamInfo)]),
        "kt_launch": (I, [P, P, ctypes.POINTER(Arg), I]),
        "kt_launch_config": (I, [P, P, ctypes.POINTER(Arg), I, S]),
        "kt_kernel_config_for": (I, [P, ctypes.POINTER(Arg), I, ctypes.c_char_p, ctypes.c_size_t]),
        "kt_kernel_key": (I, [P, ctypes.POINTER(Arg), I, ctypes.c_char_p, ctypes.c_size_t]),
        "kt_kernel_tune_shape": (I, [P, ctypes.POINTER(Arg), I, ctypes.POINTER(P)]),
        "kt_kernel_lookup": (I, [P, ctypes.POINTER(Arg), I, ctypes.POINTER(P)]),
        "kt_tune_report_free": (None, [P]),
        "kt_runtime_stats": (I, [P, ctypes.POINTER(Stats)]),
        "kt_device_count": (I, [ctypes.POINTER(I)]),
        "kt_runtime_wait_tuning": (I, [P, ctypes.c_double]),
        "kt_runtime_stop_tuning": (I, [P]),
        "kt_libversion": (S, []),
        "kt_runtime_get_info": (I, [P, ctypes.POINTER(RuntimeInfo)]),
        "kt_runtime_mode": (I, [P]),
        "kt_cache_list": (I, [P, S, CACHE_ROW_FN, P]),
        "kt_cache_counts": (I, [P, ctypes.POINTER(ctypes.c_long * 4)]),
        "kt_text_visible": (ctypes.c_size_t, [S, ctypes.c_uint, ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_fastcall_found = []  # fastcall()'s answer, once it can no longer change


def fastcall():
    """ktune._fastcall (the launch path in C), or None: where it was not
    built, where $KTUNE_FASTCALL is 0, or where its kt_arg differs from
    this file's. Looked for in the package, then beside the library. The
    answer is kept once the module was found or the library is loaded: a
    None from before (ktune.torch_norms.uninstall() as a process's first
    call) would otherwise leave the process without the C path for good,
    though the module sits beside the library loaded later."""
    if not _fastcall_found:
        mod = _find_fastcall()
        if mod is None and loaded_path is None:
            return None
        _fastcall_found.append(mod)  # two threads may both look; the first answer stays
    return _fastcall_found[0]


def _find_fastcall():
    if os.environ.get("KTUNE_FASTCALL", "1") == "0":
        return None
    import importlib.machinery
    import importlib.util
    import sysconfig
    name = "_fastcall" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    dirs = [_here()] + ([os.path.dirname(os.path.abspath(loaded_path))] if loaded_path else [])
    for d in dirs:
        path = os.path.join(d, name)
        if not os.path.exists(path):
            continue
        try:
            loader = importlib.machinery.ExtensionFileLoader("ktune._fastcall", path)
            spec = importlib.util.spec_from_file_location("ktune._fastcall", path, loader=loader)
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
        except ImportError:
            continue
        return mod if mod.ARG_SIZE == ctypes.sizeof(Arg) else None
    return None
