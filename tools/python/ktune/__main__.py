"""python -m ktune: the ktune CLI's read-only commands through the library
(version, info, list), and where the ktune binary is for the others."""
import argparse
import ctypes
import json
import os
import shutil
import sys

from . import _c_text, _capi, _version, lib

USAGE = """usage: python -m ktune COMMAND
  version          the package's and the library's versions
  info             the library, the GPUs the driver sees, the cache
  list [KERNEL] [--json] [--cache PATH]
                   the cached configs (--json: a JSON array; --cache: this
                   cache file, not $KTUNE_CACHE's or the default)
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


def _runtime(cache_path=None):
    L = lib()
    o = _capi.options(L)
    o.no_device = 1
    o.cache_readonly = 1
    o.log_level = 0
    if cache_path is not None:
        o.cache_path = _c_text("python -m ktune: --cache", cache_path)
    h = ctypes.c_void_p()
    st = L.kt_runtime_open(ctypes.byref(h), ctypes.byref(o))
    if st:
        msg = L.kt_errmsg(h).decode(errors="backslashreplace")
        L.kt_runtime_close(h)
        raise SystemExit("ktune: %s" % msg)
    return L, h


def _visible(s):
    """s with its control characters and those that move text on a
    terminal as \\xNN of their UTF-8 bytes, as the ktune binary shows them
    (kt_text_visible): a cached row's text cannot move the cursor."""
    b = s.encode("utf-8", "surrogateescape")
    buf = ctypes.create_string_buffer(4 * len(b) + 1)
    lib().kt_text_visible(b, _capi.KT_TEXT_CONTROLS, buf, len(buf))
    return buf.value.decode("utf-8", "surrogateescape")


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
    path = (i.cache_path or b"").decode(errors="backslashreplace")  # the user's, in any encoding
    if path and not L.kt_cache_counts(h, ctypes.byref(counts)):
        print("cache      %s (%d configs, %d trials, %d binaries, %d quarantined)" % ((_visible(path),) +
                                                                                     tuple(counts)))
    else:
        print("cache      %s" % _visible(i.cache_error.decode()))
    L.kt_runtime_close(h)
    return 0


def _json_value(text):
    """A key or config as JSON, or the text itself where a row another
    program wrote holds none (as the ktune binary's --json shows it)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _list_args(args):
    """list's arguments; argparse's usage error (exit 2) on others."""
    p = argparse.ArgumentParser(prog="python -m ktune list", description="the cached configs")
    p.add_argument("kernel", nargs="?", help="only this kernel's configs")
    p.add_argument("--json", action="store_true", help="a JSON array")
    p.add_argument("--cache", metavar="PATH", help="this cache file, not $KTUNE_CACHE's or the default")
    return p.parse_args(args)


def list_configs(args):
    opts = _list_args(args)
    as_json, kernel = opts.json, opts.kernel
    kernel = _c_text("python -m ktune list: KERNEL", kernel) if kernel is not None else None
    L, h = _runtime(opts.cache)
    rows, failed = [], []

    def keep_row(user, r):
        try:
            r = r.contents
            text = lambda b: b.decode(errors="backslashreplace")  # noqa: E731 -- UTF-8 from the library
            rows.append({"kernel": text(r.kernel), "device": text(r.device), "key": text(r.key),
                         "config": text(r.config), "time_us": r.time_us if r.time_us >= 0 else None})
            return 0
        except BaseException as e:  # noqa: BLE001 -- raised once kt_cache_list returns
            failed.append(e)
            return 1

    cb = _capi.CACHE_ROW_FN(keep_row)
    st = L.kt_cache_list(h, kernel, cb, None)
    if failed:
        L.kt_runtime_close(h)
        raise failed[0]
    if st:
        print("ktune list: %s" % L.kt_errmsg(h).decode(), file=sys.stderr)
    L.kt_runtime_close(h)
    if st:
        return 1
    if as_json:
        print(json.dumps([dict(r, key=_json_value(r["key"]), config=_json_value(r["config"])) for r in rows]))
        return 0
    cols = ["kernel", "device", "key", "config"]
    rows = [dict(r, **{c: _visible(r[c]) for c in cols}) for r in rows]
    width = {c: max([len(c)] + [len(r[c]) for r in rows]) for c in cols}
    print("  ".join(c.ljust(width[c]) for c in cols) + "  time_us")
    for r in rows:
        t = r["time_us"]
        print("  ".join(r[c].ljust(width[c]) for c in cols) + ("  %.2f" % t if t is not None else "  -"))
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
