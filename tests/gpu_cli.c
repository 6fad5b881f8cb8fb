/* ktune tune and ktune bench on the GPU, run as a user would ($KTUNE_BIN). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "harness.h"

static char out[1 << 18];

/* Row counts of a cache file, read by a runtime without a device. */
static int counts(const char *path, long c[4]) {
  kt_options o;
  t_offline_options(&o);
  o.cache_path = path;
  kt_runtime *rt;
  int rc = kt_runtime_open(&rt, &o) || kt_cache_counts(rt, c);
  kt_runtime_close(rt);
  return rc;
}

/* The line of out that starts with prefix, without its newline; "" when
** there is none. */
static const char *line_of(const char *out, const char *prefix) {
  static char buf[2048];
  const char *l = strstr(out, prefix), *e = l ? strchr(l, '\n') : NULL;
  snprintf(buf, sizeof buf, "%.*s", e ? (int)(e - l) : 0, e ? l : "");
  return buf;
}

/* Whether s ends with tail. */
static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), m = strlen(tail);
  return n >= m && !strcmp(s + n - m, tail);
}

/* Every bundled spec over a shapes file: each key tuned once (two shapes
** share one), then a second run finds every key cached and compiles
** nothing; ktune bench times a cached key. */
static void cli_tune_every_bundled_spec(void) {
  kt_runtime *rt = g_open();
  if (!rt) return;
  kt_runtime_close(rt);
  const char *dir = t_tmpdir();
  int rc = t_sh(out, sizeof out, "%s tune kernels_src/*.json --shapes tests/fixtures/shapes.jsonl --plain --cache %s/c.db",
                t_bin(), dir);
  printf("%s", strstr(out, "\n| kernel") ? strstr(out, "\n| kernel") : out);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "10 tuned, 0 cached, 1 with the key of an earlier shape, 0 failed");
  ASSERT_CONTAINS(out, "same    layernorm_fwd N=77,");
  /* A key timed at its tune_at sizes says where; one without tune_at does not. */
  ASSERT_TRUE(ends_with(line_of(out, "tuned   layernorm_fwd N=4096,"), " s; timed at N=16384 (the call's N=4096)"));
  const char *bwd = line_of(out, "tuned   layernorm_bwd N=4096,");
  ASSERT_TRUE(ends_with(bwd, " s") && !strstr(bwd, "timed at"));
  rc = t_sh(out, sizeof out, "%s tune kernels_src/*.json --shapes tests/fixtures/shapes.jsonl --json --cache %s/c.db",
            t_bin(), dir);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "\"tuned\":0,\"cached\":10,\"same_key\":1,\"failed\":0");
  ASSERT_CONTAINS(out, "\"compiles\":0,");
  ASSERT_CONTAINS(out, "{\"kernel\":\"masked_softmax\",\"shape\":\"N=4096,L=1000,T=bf16,bias=null\",\"key\":{");
  ASSERT_CONTAINS(out, "\"timed_at\":\"N=16778 (the call's N=4096)\",\"message\":null}");
  rc = t_sh(out, sizeof out, "%s bench kernels_src/masked_softmax.json --shape 'N=4096,L=1000,T=bf16,bias=null' --cache %s/c.db",
            t_bin(), dir);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "(cached)");
  rc = t_sh(out, sizeof out,
            "%s bench kernels_src/masked_softmax.json --shape 'N=4096,L=1000,T=bf16,bias=null' "
            "--config BLOCK=128,ROWS=1,VEC=8,ITEMS=1 --cache %s/c.db",
            t_bin(), dir);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "BLOCK=128,ROWS=1,VEC=8,ITEMS=1: ");
  /* A config the constraints refuse for the call is named. */
  rc = t_sh(out, sizeof out,
            "%s bench kernels_src/masked_softmax.json --shape 'N=4096,L=1000,T=bf16,bias=null' "
            "--config BLOCK=128,ROWS=1,VEC=1,ITEMS=0 --cache %s/c.db",
            t_bin(), dir);
  ASSERT_EQ(rc, 1);
  ASSERT_CONTAINS(out, "violates constraints[");
  /* --force tunes a cached key again. */
  rc = t_sh(out, sizeof out, "%s tune kernels_src/masked_softmax.json --shape 'N=64,L=1000,T=bf16,bias=null' --force "
            "--strategy local --plain --cache %s/c.db", t_bin(), dir);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "1 tuned, 0 cached");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* Without --isolate, a faulting config ends the run, named and quarantined. */
static void cli_fault_ends_the_run(void) {
  kt_runtime *rt = g_open();
  if (!rt) return;
  kt_runtime_close(rt);
  const char *dir = t_tmpdir();
  int rc = t_sh(out, sizeof out, "%s tune tests/specs/fault.json --shape n=1000 --plain --cache %s/f.db", t_bin(), dir);
  ASSERT_EQ(rc, 1);
  ASSERT_CONTAINS(out, "{\"FAULT\":1} faulted");
  ASSERT_CONTAINS(out, "the run stops (use --isolate to go on)");
  long c[4];
  ASSERT_EQ(counts(strcat(strcpy(out, dir), "/f.db"), c), 0);
  ASSERT_EQ(c[3], 1);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* With --isolate the same spec completes; exactly the faulting config is
** quarantined. A spec with configs that fault and hang: both hangs are
** killed after --trial-timeout and quarantined, and a correct config wins. */
static void cli_isolated_fault_and_hang(void) {
  kt_runtime *rt = g_open();
  if (!rt) return;
  kt_runtime_close(rt);
  const char *dir = t_tmpdir();
  char path[600];
  /* --devices all: one worker per GPU (here, at least one). */
  int rc = t_sh(out, sizeof out,
                "%s tune tests/specs/fault.json --shape n=1000 --isolate --devices all --plain --cache %s/f.db", t_bin(),
                dir);
  printf("%s", out);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "quarantined in this run:\n  fault_maybe {\"n\":1000,\"y\":16}: {\"FAULT\":1}: fault");
  ASSERT_CONTAINS(out, "1 tuned, 0 cached");
  long c[4];
  snprintf(path, sizeof path, "%s/f.db", dir);
  ASSERT_EQ(counts(path, c), 0);
  ASSERT_EQ(c[3], 1);
  rc = t_sh(out, sizeof out,
            "%s tune tests/specs/hang.json --shape n=1000 --isolate --trial-timeout 4 --plain --cache %s/h.db", t_bin(),
            dir);
  printf("%s", out);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "{\"BLOCK\":64,\"MODE\":2}: hang: no progress for 4 s; worker killed");
  ASSERT_CONTAINS(out, "{\"BLOCK\":128,\"MODE\":2}: hang: no progress for 4 s; worker killed");
  ASSERT_CONTAINS(out, "{\"BLOCK\":64,\"MODE\":1}: fault");
  ASSERT_CONTAINS(out, "tuned   hang_maybe n=1000: {\"BLOCK\":");
  ASSERT_CONTAINS(out, ",\"MODE\":0}");
  snprintf(path, sizeof path, "%s/h.db", dir);
  ASSERT_EQ(counts(path, c), 0);
  ASSERT_EQ(c[3], 4);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* A shape far larger than the GPU (8 TiB a buffer: 2^30 rows of 4096) is
** tuned at its tune_at sizes, with no buffer of the call's size made (there
** could be none), then found cached without touching the GPU. */
static void cli_tune_a_call_larger_than_the_gpu(void) {
  kt_runtime *rt = g_open();
  if (!rt) return;
  kt_runtime_close(rt);
  const char *dir = t_tmpdir();
  static const char shape[] =
      "N=1073741824,D=4096,G=1,T=bf16,W=bf16,rms=1,b=null,res=null,res_out=null,mean=null,rstd=null";
  int rc = t_sh(out, sizeof out, "%s tune kernels_src/layernorm_fwd.json --shape '%s' --budget 2 --plain --cache %s/big.db",
                t_bin(), shape, dir);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "1 tuned, 0 cached");
  ASSERT_CONTAINS(out, "; timed at N=4096 (the call's N=1073741824)");
  rc = t_sh(out, sizeof out, "%s tune kernels_src/layernorm_fwd.json --shape '%s' --plain --cache %s/big.db", t_bin(),
            shape, dir);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "0 tuned, 1 cached");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

const kt_test gpu_cli_tests[] = {
    {"cli_tune_every_bundled_spec", cli_tune_every_bundled_spec},
    {"cli_tune_a_call_larger_than_the_gpu", cli_tune_a_call_larger_than_the_gpu},
    {"cli_fault_ends_the_run", cli_fault_ends_the_run},
    {"cli_isolated_fault_and_hang", cli_isolated_fault_and_hang},
    {NULL, NULL},
};
