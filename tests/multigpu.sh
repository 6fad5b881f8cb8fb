#!/bin/sh
# Multi-rank and multi-GPU tests (make gpu-test-multi): two ranks agreeing
# under torchrun (a rank killed mid-tuning too), two JAX processes agreeing
# through jax.distributed, the record -> pre-warm -> cache-only loop, ktune
# tune --devices all against --devices 0, and the sharded pre-warm. Each
# rank on a GPU of its own, or, with one GPU, both on it (there --devices
# all is GPU 0 alone). Ends with "N passed, N failed, N skipped".
B=${1:-build}
ROOT=$(pwd)
export KTUNE_LIB="$ROOT/$B/libktune.so" PYTHONPATH="$ROOT/tools/python${PYTHONPATH:+:$PYTHONPATH}"
KT="$ROOT/$B/ktune"
pass=0 fail=0 skip=0
ok() { pass=$((pass + 1)); echo "  ok: $1"; }
bad() { fail=$((fail + 1)); echo "  FAILED: $1"; }
skipped() { skip=$((skip + 1)); echo "  skipped: $1"; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${ngpu:-0}" -lt 1 ]; then
  echo "  skipped: the multi-rank tests need a GPU (found none)"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
run() { # name, command...: passes when the command's last line says 1 passed
  name=$1; shift
  "$@" >"$d/out" 2>&1
  cat "$d/out" | grep -v '^\s*$' | tail -n 12
  if grep -q '^1 passed, 0 failed' "$d/out"; then ok "$name"; else bad "$name"; fi
}
share=$([ "$ngpu" -lt 2 ] && echo " (both on GPU 0)")
torch=$(python3 -c 'import torch' 2>/dev/null && echo yes)
if [ "$torch" ]; then
  run "two ranks: each key tuned once, identical configs$share" \
    torchrun --nproc-per-node=2 tests/python/test_distributed.py "$d" agree
  run "two ranks in async mode: each key tuned once, identical configs$share" \
    torchrun --nproc-per-node=2 tests/python/test_distributed.py "$d" async
  run "a rank killed while it owns a tuning$share" \
    torchrun --nproc-per-node=2 tests/python/test_distributed.py "$d" kill
else skipped "the torchrun ranks: torch does not import here"; fi
if python3 -c 'import jax' 2>/dev/null && make --no-print-directory B="$B" jax >"$d/jax" 2>&1 &&
   [ -f "$B/libktune_jax.so" ]; then
  for phase in agree plain async; do
    run "two JAX processes ($phase): each key tuned once, identical configs$share" \
      python3 tests/python/test_distributed_jax.py "$d" $phase
  done
else skipped "the JAX processes: jax does not import here, or make jax failed ($(tail -n 1 "$d/jax" 2>/dev/null))"; fi
if [ -z "$torch" ]; then
  skipped "record and pre-warm, --devices all, the sharded pre-warm: torch does not import here"
  echo "$pass passed, $fail failed, $skip skipped"
  [ $fail = 0 ]
  exit
fi

# Record, pre-warm on every GPU, run again cache-only: every key a hit.
cat >"$d/job.py" <<'EOF'
import sys, torch, ktune
from ktune import ops
for D in (768, 1000, 2304):
    x = torch.randn(300, D, device="cuda", dtype=torch.bfloat16)
    ops.rms_norm(x, torch.ones(D, device="cuda", dtype=torch.bfloat16))
    ops.layer_norm(x, torch.ones(D, device="cuda", dtype=torch.bfloat16))
torch.cuda.synchronize()
s = ktune.runtime().stats()
print("misses %d cache_loads %d fallbacks %d tunings %d" % (s["misses"], s["cache_loads"], s["fallbacks"], s["tunings"]))
EOF
KTUNE_CACHE="$d/rec.db" KTUNE_MODE=cache-only KTUNE_RECORD="$d/calls.jsonl" python3 "$d/job.py" >"$d/first" 2>&1
cat "$d/first"; echo "  recorded lines: $(wc -l <"$d/calls.jsonl")"; head -2 "$d/calls.jsonl"
"$KT" tune kernels_src/layernorm_fwd.json --shapes "$d/calls.jsonl" --devices all --cache "$d/rec.db" --plain | tail -n 2
KTUNE_CACHE="$d/rec.db" KTUNE_MODE=cache-only python3 "$d/job.py" >"$d/second" 2>&1
cat "$d/second"
lines=$(wc -l <"$d/calls.jsonl")
if [ "$lines" = 6 ] && grep -q 'misses 6 cache_loads 6 fallbacks 0' "$d/second"; then
  ok "KTUNE_RECORD: 6 keys recorded once, pre-warmed, then all cached"
else bad "KTUNE_RECORD round trip"; fi

# Twelve shapes on GPU 0 alone, then on every GPU.
: >"$d/twelve.jsonl"
for D in 640 896 1152 1408 1664 1920 2176 2432 2688 2944 3200 3456; do
  echo "{\"kernel\": \"layernorm_fwd\", \"N\": 4096, \"D\": $D, \"G\": 1, \"T\": \"bf16\", \"W\": \"bf16\", \"rms\": 1, \"b\": null, \"mean\": null, \"res\": null, \"res_out\": null}" >>"$d/twelve.jsonl"
done
for devs in 0 all; do
  t0=$(date +%s%N)
  "$KT" tune kernels_src/layernorm_fwd.json --shapes "$d/twelve.jsonl" --devices $devs --cache "$d/t$devs.db" --plain >"$d/t$devs" 2>&1
  rc=$?
  t1=$(date +%s%N)
  echo "  ktune tune 12 shapes --devices $devs: $(( (t1 - t0) / 1000000 )) ms (exit $rc); $(tail -n 1 "$d/t$devs")"
  # The worker's result line carries where the key was timed (tune_at).
  if [ $rc = 0 ] && grep -q "^tuned   layernorm_fwd N=4096,D=640,.*; timed at N=26215 (the call's N=4096)\$" "$d/t$devs"; then
    ok "ktune tune --devices $devs"
  else bad "ktune tune --devices $devs"; grep "D=640," "$d/t$devs"; fi
done

# Sharded pre-warm: both ranks tune half, rank 0 merges.
torchrun --nproc-per-node=2 -m ktune.prewarm --shapes "$d/twelve.jsonl" --out "$d/fleet.db" >"$d/pw" 2>&1
grep -E 'rank|prewarm|added' "$d/pw" | head -n 8
rows=$(python3 -c "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT count(*) FROM configs WHERE kernel = 'layernorm_fwd'\").fetchone()[0])" "$d/fleet.db" 2>&1)
[ "$rows" = 12 ] && ok "sharded pre-warm: 12 keys merged$share" || bad "sharded pre-warm merged $rows keys, want 12"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
