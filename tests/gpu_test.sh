#!/bin/sh
# make gpu-test: the C GPU tests, the PyTorch tests (when torch imports) and
# the JAX tests (when jax imports), as six lanes that share the GPU, each a
# process with a cache of its own: the norm sweep (norm_backward_tile), the
# other C tests in two interleaved halves (together they took 409 s, the
# longest lane), tests/python/test_ops.py in two interleaved halves (alone
# it took longer than the other lanes together), and the four test_jax.py
# runs in turn (they share one cache: the last finds what the first tuned). One
# after another these take longer than a device call is allowed; side by
# side the GPU is busy while each waits on NVRTC and Python.
# A line says when each lane ends; once all have, their logs are printed
# whole, in the order above, then a last line adds up every "N passed, N
# failed, N skipped" the lanes printed; the exit status is nonzero when any
# lane's is. GPU_TEST_SERIAL=1 runs the lanes one after another, each log as
# it comes. GPU_TEST_LOGS=DIR keeps each lane's log (LANE.log) and caches
# there, so that a run cut short still leaves what each lane printed.
B=${1:-build}
ROOT=$(pwd)
LANES="tile rest1 rest2 torch1 torch2 jax"
if [ -n "$GPU_TEST_LOGS" ]; then
  d=$GPU_TEST_LOGS
  mkdir -p "$d" || exit 1
  # Only what the lanes write, so that each run starts cold.
  for f in $LANES; do rm -f "$d/$f.log" "$d/$f.rc" "$d/$f.db" "$d/$f.db-wal" "$d/$f.db-shm"; done
else
  d=$(mktemp -d)
  trap 'rm -rf "$d"' EXIT
fi
export KTUNE_BIN="$ROOT/$B/ktune"

tile() { "$B/ktune-gpu-test" norm_backward_tile; }
rest1() { "$B/ktune-gpu-test" '!norm_backward_tile' --part=1/2; }
rest2() { "$B/ktune-gpu-test" '!norm_backward_tile' --part=2/2; }
# Whether python3 imports module $1; where it does not, says that the tests
# of $2 ($3 names them) are skipped.
imports() {
  python3 -c "import $1" 2>/dev/null && return 0
  echo "$2: $1 does not import here; the $3 tests are skipped"
  return 1
}
# Half $1 of test_ops.py's checks (every other one), with a cache of its own.
torch_half() {
  imports torch tests/python PyTorch || return 0
  KTUNE_LIB="$ROOT/$B/libktune.so" KTUNE_CACHE="$d/torch$1.db" python3 tests/python/test_ops.py --part="$1/2"
}
torch1() { torch_half 1; }
torch2() { torch_half 2; }
jax() {
  imports jax tests/python/test_jax.py JAX || return 0
  make --no-print-directory B="$B" jax || return 1
  export KTUNE_LIB="$ROOT/$B/libktune.so" PYTHONPATH="$ROOT/tools/python" KTUNE_CACHE="$d/jax.db" \
    XLA_PYTHON_CLIENT_PREALLOCATE=false
  python3 tests/python/test_jax.py &&
    KTUNE_MODE=tune KTUNE_JAX_GRAPHS=0 python3 tests/python/test_jax.py inplace &&
    KTUNE_MODE=tune python3 tests/python/test_jax.py cmdbuf &&
    python3 tests/python/test_jax.py prewarmed
}

start=$(date +%s)
for l in $LANES; do
  if [ "$GPU_TEST_SERIAL" = 1 ]; then
    echo "== $l"
    { $l; echo $? >"$d/$l.rc"; } 2>&1 | tee "$d/$l.log"
  else
    ( $l >"$d/$l.log" 2>&1; echo $? >"$d/$l.rc"; echo "== $l ended after $(($(date +%s) - start)) s" ) &
  fi
done
wait
rc=0
for l in $LANES; do
  [ "$GPU_TEST_SERIAL" = 1 ] || { echo "== $l"; cat "$d/$l.log"; }
  r=$(cat "$d/$l.rc" 2>/dev/null || echo 1)
  [ "$r" = 0 ] || { echo "== $l exited $r"; rc=1; }
done
for l in $LANES; do cat "$d/$l.log"; done | awk '/^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$/ { p += $1; f += $3; s += $5 }
  END { printf "gpu-test: %d passed, %d failed, %d skipped (every lane)\n", p, f, s; exit f > 0 }' || rc=1
exit $rc
