#!/bin/sh
# Check for the headers ktune builds against; install the Debian packages
# that provide them when they are missing. Usage: deps.sh CC CUDA_HOME
cc=${1:-cc}
cuda=${2:-/usr/local/cuda}
missing=""
for pair in sqlite3.h:libsqlite3-dev cjson/cJSON.h:libcjson-dev xxhash.h:libxxhash-dev; do
  h=${pair%%:*}
  pkg=${pair#*:}
  if ! printf '#include <%s>\n' "$h" | $cc -E -x c - >/dev/null 2>&1; then
    missing="$missing $pkg"
  fi
done
if [ -n "$missing" ]; then
  echo "ktune: missing build dependencies:$missing; installing them with apt-get"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "ktune: apt-get not found; install$missing (SQLite, cJSON and xxHash headers) by hand" >&2
    exit 1
  fi
  $sudo apt-get update -qq >/dev/null 2>&1 || true
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null || {
    echo "ktune: could not install$missing" >&2
    exit 1
  }
fi
if [ ! -f "$cuda/include/cuda.h" ] || [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "ktune: the CUDA toolkit was not found at $cuda (set CUDA_HOME)" >&2
  exit 1
fi
