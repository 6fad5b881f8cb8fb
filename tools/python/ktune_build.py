"""A PEP 517/660 build backend for the ktune package, with no dependency:
it zips the package's files into a wheel (and a source archive). Written
here because the package must install where no package index is reachable
(GPU machines), and a backend from an index would have to be fetched first.

When built inside the project's source tree, the wheel also carries the
bundled kernels (ktune/kernels/) and, if $KTUNE_WHEEL_LIB names one, a
libktune.so (ktune/lib/libktune.so.0), with the ktune-nvrtc helper and
the ktune._fastcall module built beside it."""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "ktune"


def _version():
    text = open(os.path.join(HERE, NAME, "_version.py")).read()
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


def _metadata():
    summary = "Autotuning GPU kernel runtime: PyTorch operators over libktune"
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: >=3.9\n"
            "Provides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n" % (NAME, _version(), summary))


def _package_files():
    """(path in the wheel, path on disk) of every file to ship."""
    out = []
    pkg = os.path.join(HERE, NAME)
    for f in sorted(os.listdir(pkg)):
        if f.endswith(".py"):
            out.append(("%s/%s" % (NAME, f), os.path.join(pkg, f)))
    kernels = os.path.normpath(os.path.join(HERE, "..", "..", "kernels_src"))
    if os.path.isdir(kernels):
        for f in sorted(os.listdir(kernels)):
            if f.endswith((".json", ".cu", ".cuh")):
                out.append(("%s/kernels/%s" % (NAME, f), os.path.join(kernels, f)))
    lib = os.environ.get("KTUNE_WHEEL_LIB")
    if lib:
        out.append(("%s/lib/libktune.so.0" % NAME, lib))
        # The process NVRTC runs in: the library looks for it beside itself.
        helper = os.path.join(os.path.dirname(os.path.abspath(lib)), "ktune-nvrtc")
        if os.path.isfile(helper):
            out.append(("%s/lib/ktune-nvrtc" % NAME, helper))
        # The C launch path built beside that library (make), for the
        # interpreter its name says; others take the ctypes path.
        libdir = os.path.dirname(os.path.abspath(lib))
        for f in sorted(os.listdir(libdir)):
            if f.startswith("_fastcall.") and f.endswith(".so"):
                out.append(("%s/%s" % (NAME, f), os.path.join(libdir, f)))
    return out


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def _wheel(wheel_directory, files):
    """files: (arcname, bytes). Returns the wheel's file name."""
    dist = "%s-%s" % (NAME, _version())
    name = "%s-py3-none-any.whl" % dist
    info = "%s.dist-info" % dist
    files = list(files) + [
        ("%s/METADATA" % info, _metadata().encode()),
        ("%s/WHEEL" % info, b"Wheel-Version: 1.0\nGenerator: ktune_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        ("%s/top_level.txt" % info, (NAME + "\n").encode()),
    ]
    record = [_record_line(a, d) for a, d in files] + ["%s/RECORD,," % info]
    files.append(("%s/RECORD" % info, ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files:
            zi = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            # Installers keep the mode: the helper must stay executable.
            zi.external_attr = (0o100755 if arcname.endswith("/ktune-nvrtc") else 0o100644) << 16
            z.writestr(zi, data)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(a, open(p, "rb").read()) for a, p in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """The package is imported from this folder: a .pth file names it."""
    return _wheel(wheel_directory, [("_ktune_editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    dist = "%s-%s" % (NAME, _version())
    name = dist + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for f in ("pyproject.toml", "ktune_build.py", "README.md"):
            t.add(os.path.join(HERE, f), arcname="%s/%s" % (dist, f))
        for arc, path in _package_files():
            if arc.startswith(NAME + "/") and arc.endswith(".py"):
                t.add(path, arcname="%s/%s" % (dist, arc))
        info = tarfile.TarInfo("%s/PKG-INFO" % dist)
        data = _metadata().encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
