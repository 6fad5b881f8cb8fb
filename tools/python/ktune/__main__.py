"""python -m ktune: the ktune CLI's read-only commands through the library
(version, info, list), and where the ktune binary is for the others."""
import ctypes
import json
import os
import shutil
import sys

from . import _capi, _version, lib

USAGE = """usage: python -m ktune COMMAND
  version          the package's and the library's versions
  info             the library, the GPUs the driver sees, the cache
  list [KERNEL]    the cached configs (--json for a JSON array)
Every other command (tune, compile, bench, ...) is in the ktune binary."""


def _binary():
    """The ktune binary and where it was looked for."""
    tried = ["$PATH"]
    found = shutil.which("ktune")
    if found:
        return found, tried
    libdir = _capi._installed_libdir()
    here = os.path.dirname(os.path.abspath(__file__))
    cands = ([os.path.join(libdir, "..", "bin", "ktune")] if libdir else []) + \
        [os.path.join(here, "..", "..", "..", "build", "ktune")]
    for c in cands:
        c = os.path.normpath(c)
        tried.append(c)
        if os.access(c, os.X_OK):
            return c, tried
    return None, tried


def _runtime():
    L = lib()
    o = _capi.Options()
    L.kt_options_init(ctypes.byref(o))
    o.no_device = 1
    o.cache_readonly = 1
    o.log_level = 0
    h = ctypes.c_void_p()
    st = L.kt_runtime_open(ctypes.byref(h), ctypes.byref(o))
    if st:
        msg = L.kt_errmsg(h).decode()
        L.kt_runtime_close(h)
        raise SystemExit("ktune: %s" % msg)
    return L, h


def info():
    L, h = _runtime()
    i = _capi.RuntimeInfo()
    L.kt_runtime_get_info(h, ctypes.byref(i))
    n = ctypes.c_int(0)
    devices = L.kt_device_count(ctypes.byref(n))
    print("ktune      %s (package %s)" % (L.kt_libversion().decode(), _version.__version__))
    print("nvrtc      %s" % ("%d.%d" % (i.nvrtc_version // 1000, i.nvrtc_version % 1000 // 10) if i.nvrtc_version
                             else "missing"))
    print("gpus       %s" % (n.value if not devices else "none (%s)" % L.kt_errmsg(None).decode()))
    counts = (ctypes.c_long * 4)()
    if i.cache_path and i.cache_path.decode() and not L.kt_cache_counts(h, ctypes.byref(counts)):
        print("cache      %s (%d configs, %d trials, %d binaries, %d quarantined)" % ((i.cache_path.decode(),) +
                                                                                     tuple(counts)))
    else:
        print("cache      %s" % i.cache_error.decode())
    L.kt_runtime_close(h)
    return 0


def list_configs(args):
    as_json = "--json" in args
    names = [a for a in args if a != "--json"]
    L, h = _runtime()
    rows = []

    def keep_row(user, r):
        r = r.contents
        rows.append({"kernel": r.kernel.decode(), "device": r.device.decode(), "key": r.key.decode(),
                     "config": r.config.decode(), "time_us": r.time_us})
        return 0

    cb = _capi.CACHE_ROW_FN(keep_row)
    st = L.kt_cache_list(h, names[0].encode() if names else None, cb, None)
    if st:
        print("ktune list: %s" % L.kt_errmsg(h).decode(), file=sys.stderr)
    L.kt_runtime_close(h)
    if st:
        return 1
    if as_json:
        print(json.dumps([dict(r, key=json.loads(r["key"]), config=json.loads(r["config"])) for r in rows]))
        return 0
    cols = ["kernel", "device", "key", "config"]
    width = {c: max([len(c)] + [len(r[c]) for r in rows]) for c in cols}
    print("  ".join(c.ljust(width[c]) for c in cols) + "  time_us")
    for r in rows:
        print("  ".join(r[c].ljust(width[c]) for c in cols) + "  %.2f" % r["time_us"])
    return 0


def main(argv):
    cmd = argv[0] if argv else None
    if cmd in (None, "-h", "--help", "help"):
        print(USAGE)
        return 0 if cmd else 2
    if cmd == "version":
        print("ktune %s (library %s)" % (_version.__version__, lib().kt_libversion().decode()))
        return 0
    if cmd == "info":
        return info()
    if cmd == "list":
        return list_configs(argv[1:])
    path, tried = _binary()
    if path:
        print("ktune %s: run the ktune binary: %s %s" % (cmd, path, " ".join(argv)), file=sys.stderr)
    else:
        print("ktune %s: this command is in the ktune binary, which was not found (looked in %s); build it with "
              "make in the project's root, or make install" % (cmd, ", ".join(tried)), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
