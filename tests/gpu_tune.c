/* The tuner on the GPU: in-place calls, broken and faulting configs, stream
** capture. Each test uses a cache file of its own. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/driver.h"
#include "device/nvrtc.h"
#include "device/rcompile.h"
#include "tune/compare.h"
#include "tune/devcompare.h"
#include "gpu_util.h"
#include "harness.h"

const char *g_self;  /* this binary, for child processes */

typedef struct logbuf {
  char text[65536];
  int tunings;
} logbuf;

static void capture_log(void *user, kt_log_level level, const char *msg) {
  logbuf *l = user;
  (void)level;
  if (!strncmp(msg, "tuned ", 6)) l->tunings++;
  size_t n = strlen(l->text);
  snprintf(l->text + n, sizeof l->text - n, "%s\n", msg);
}

/* Options for a runtime on cache whose log at level and above, from now
** on, goes to l (cleared first). */
static void log_options(kt_options *o, const char *cache, logbuf *l, kt_log_level level) {
  memset(l, 0, sizeof *l);
  kt_options_init(o);
  o->cache_path = cache;
  o->log = capture_log;
  o->log_user = l;
  o->log_level = level;
}

/* A runtime on cache whose log, from now on, goes to l (cleared first). */
static kt_runtime *open_with(const char *cache, logbuf *l) {
  kt_options o;
  log_options(&o, cache, l, KT_LOG_INFO);
  return g_open_with(&o);
}

static const char *fresh_cache(void) {
  static char path[8][700];
  static int next;
  char *p = path[next++ % 8];
  snprintf(p, sizeof path[0], "%s/ktune.db", t_tmpdir());
  return p;
}

typedef struct status_count {
  int ok, mismatch, oob, fault, other, rows;
} status_count;

static int on_trial(void *user, const kt_trial_row *t) {
  status_count *c = user;
  if (!strcmp(t->status, "ok")) c->ok++;
  else if (!strcmp(t->status, "mismatch")) c->mismatch++;
  else if (!strcmp(t->status, "oob_write")) c->oob++;
  else if (!strcmp(t->status, "fault")) c->fault++;
  else c->other++;
  return 0;
}

typedef struct lister {
  kt_runtime *rt;
  status_count c;
} lister;

static int on_row(void *user, const kt_cache_row *r) {
  lister *l = user;
  l->c.rows++;
  kt_cache_trials(l->rt, r, on_trial, &l->c);
  return 0;
}

/* In tune mode after kt_runtime_stop_tuning: a miss runs the default
** config, untuned and correct, and nothing is stored. */
static void stopped_runtime_runs_misses_untuned(void) {
  static logbuf lb;
  kt_options o;
  log_options(&o, fresh_cache(), &lb, KT_LOG_INFO);
  o.mode = KT_MODE_TUNE;
  kt_runtime *rt = g_open_with(&o);
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/add_one.json", &k), KT_OK);
  ASSERT_STATUS(kt_runtime_stop_tuning(rt), KT_OK);
  enum { N = 1000 };
  float h[N];
  for (int i = 0; i < N; i++) h[i] = (float)i;
  uint64_t x;
  ASSERT_STATUS(kt_device_alloc(rt, sizeof h, &x), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, x, h, sizeof h), KT_OK);
  kt_arg a[] = {kt_arg_ptr(x, KT_F32), kt_arg_i64(N)};
  ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt_device_download(rt, h, x, sizeof h), KT_OK);
  kt_device_free(rt, x);
  long bad = 0;
  for (int i = 0; i < N; i++) bad += h[i] != (float)i + 1.0f;
  ASSERT_EQ(bad, 0);
  kt_stats s = {.size = sizeof s};
  ASSERT_STATUS(kt_runtime_stats(rt, &s), KT_OK);
  ASSERT_EQ(s.tunings * 10 + s.fallbacks, 1);
  ASSERT_EQ(lb.tunings, 0);
  lister l = {rt, {0}};
  ASSERT_STATUS(kt_cache_list(rt, "add_one", on_row, &l), KT_OK);
  ASSERT_EQ(l.c.rows, 0);
  kt_runtime_close(rt);
}

/* An in-place call (output is input): after tuning, the caller's buffer
** holds exactly one application of the kernel. (The upstream bug: an
** autotuner ran every candidate on the caller's buffer; x + 1 came back as
** x + 4187.) */
static void in_place_call_applies_once(void) {
  static logbuf lb;
  kt_runtime *rt = open_with(fresh_cache(), &lb);
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/add_one.json", &k), KT_OK);
  const long long n = (1 << 20) + 3;
  float *h = malloc((size_t)n * 4);
  ASSERT_TRUE(h);
  for (long long i = 0; i < n; i++) h[i] = (float)(i % 1000) * 0.5f - 7.0f;
  uint64_t x;
  ASSERT_STATUS(kt_device_alloc(rt, (size_t)n * 4, &x), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, x, h, (size_t)n * 4), KT_OK);
  kt_arg a[] = {kt_arg_ptr(x, KT_F32), kt_arg_i64(n)};
  ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt_device_download(rt, h, x, (size_t)n * 4), KT_OK);
  long bad = 0;
  for (long long i = 0; i < n; i++)
    if (h[i] != (float)(i % 1000) * 0.5f - 7.0f + 1.0f) bad++;
  free(h);
  kt_device_free(rt, x);
  ASSERT_EQ(bad, 0);
  ASSERT_EQ(lb.tunings, 1);
  lister l = {rt, {0}};
  ASSERT_STATUS(kt_cache_list(rt, "add_one", on_row, &l), KT_OK);
  ASSERT_EQ(l.c.rows, 1);
  ASSERT_EQ(l.c.ok, 12);
  /* A spec with one more candidate (same spec hash): only it is measured. */
  const char *cache = kt_cache_path(rt);
  char path[700];
  snprintf(path, sizeof path, "%s", cache);
  kt_runtime_close(rt);
  rt = open_with(path, &lb);
  ASSERT_TRUE(rt);
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/add_one_more.json", &k), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, (size_t)n * 4, &x), KT_OK);
  ASSERT_STATUS(kt_device_fill(rt, x, 0x3f, (size_t)n * 4), KT_OK);
  a[0] = kt_arg_ptr(x, KT_F32);
  ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  kt_device_free(rt, x);
  ASSERT_EQ(lb.tunings, 1);
  ASSERT_CONTAINS(lb.text, "15 tried (3 measured now)"); /* BLOCK=1024 with 3 ITEMS */
  lister l2 = {rt, {0}};
  ASSERT_STATUS(kt_cache_list(rt, "add_one", on_row, &l2), KT_OK);
  ASSERT_EQ(l2.c.rows, 1);
  ASSERT_EQ(l2.c.ok, 15);
  kt_runtime_close(rt);
}

/* One call of add_one (1000 elements) by a runtime on cache whose log goes
** to l; the runtime's counters, tunings (uint64_t)-1 where a step failed
** or the result was wrong. */
static kt_stats add_one_once(const char *cache, logbuf *l) {
  kt_stats n = {.size = sizeof n, .tunings = (uint64_t)-1};
  kt_runtime *rt = open_with(cache, l);
  kt_kernel *k;
  enum { N = 1000 };
  float h[N];
  uint64_t x = 0;
  if (!rt) return n;
  for (int i = 0; i < N; i++) h[i] = (float)i;
  kt_arg a[] = {kt_arg_ptr(0, KT_F32), kt_arg_i64(N)};
  int bad = kt_kernel_load(rt, "tests/specs/add_one.json", &k) || kt_device_alloc(rt, sizeof h, &x) ||
            kt_device_upload(rt, x, h, sizeof h);
  a[0] = kt_arg_ptr(x, KT_F32);
  bad = bad || kt_launch(k, NULL, a, 2) || kt_stream_sync(rt, NULL) || kt_device_download(rt, h, x, sizeof h);
  for (int i = 0; i < N && !bad; i++) bad = h[i] != (float)i + 1.0f;
  if (bad) printf("    %s\n", kt_errmsg(rt));
  if (bad || kt_runtime_stats(rt, &n)) n.tunings = (uint64_t)-1;
  if (x) kt_device_free(rt, x);
  kt_runtime_close(rt);
  return n;
}

/* A stored config the spec's space no longer holds (a candidate taken out
** of a list keeps the spec hash) is ignored, and the tuning that follows
** replaces it, however fast it was said to be: the next process loads
** the new winner instead of tuning the key again, every time. */
static void a_stale_stored_config_is_replaced(void) {
  static logbuf lb;
  kt_runtime *probe = open_with(fresh_cache(), &lb);
  if (!probe) return;
  kt_runtime_close(probe);
  const char *cache = fresh_cache();
  kt_stats n = add_one_once(cache, &lb);
  ASSERT_EQ(n.tunings, 1);
  ASSERT_EQ(t_db_exec(cache, "UPDATE configs SET config = '{\"BLOCK\":1024,\"ITEMS\":1}', time_us = 0.001"), 0);
  n = add_one_once(cache, &lb);
  ASSERT_EQ(n.tunings * 10 + n.cache_loads, 10);
  ASSERT_CONTAINS(lb.text, "cached config {\"BLOCK\":1024,\"ITEMS\":1} is not in the spec's space");
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM configs WHERE json_extract(config, '$.BLOCK') IN (64, 128, 256, 512)"
                            " AND time_us > 0.001"), 1);
  n = add_one_once(cache, &lb);
  ASSERT_EQ(n.tunings * 10 + n.cache_loads, 1);
}

/* A runtime on a fresh cache with a tuning budget of budget_s, its log at
** info and above going to l (cleared first). */
static kt_runtime *open_budget(logbuf *l, double budget_s) {
  kt_options o;
  log_options(&o, fresh_cache(), l, KT_LOG_INFO);
  o.budget_s = budget_s;
  return g_open_with(&o);
}

/* layernorm_fwd's rows are timed at tune_at (16M elements), not at the one
** row of the call that missed: the log names where, the caller's buffer
** (in place: y is x) holds one application of the norm and nothing past
** its row is written, and a later call at other rows is a hit. */
static void a_key_met_at_one_row_is_timed_at_tune_at(void) {
  static logbuf lb;
  kt_runtime *rt = open_budget(&lb, 3);
  if (!rt) return;
  kt_kernel *k;
  if (g_load_kernels(rt, "kernels_src/layernorm_fwd.json", &k, NULL)) return;
  enum { D = 1000 };
  g_buf x, w, b;
  uint64_t seed = 17;
  double ref[3 * D];
  ASSERT_EQ(g_buf_make(&w, rt, KT_BF16, D, 0) || g_buf_make(&b, rt, KT_BF16, D, 0), 0);
  g_buf_rand(&w, &seed, 0.5, 1.5);
  g_buf_rand(&b, &seed, -0.5, 0.5);
  ASSERT_EQ(g_buf_upload(&w) || g_buf_upload(&b), 0);
  char msg[512];
  for (int rows = 1; rows <= 3; rows += 2) {
    ASSERT_EQ(g_buf_make(&x, rt, KT_BF16, (size_t)rows * D, 0), 0);
    g_buf_rand(&x, &seed, -2, 3);
    ASSERT_EQ(g_buf_upload(&x), 0);
    g_norm_ref(x.h, w.h, b.h, rows, D, 0, 1e-5, ref);
    kt_arg a[] = {kt_arg_ptr(x.ptr, KT_BF16), kt_arg_ptr(x.ptr, KT_BF16), kt_arg_ptr(0, KT_BF16),
                  kt_arg_ptr(0, KT_BF16),     kt_arg_ptr(w.ptr, KT_BF16), kt_arg_ptr(b.ptr, KT_BF16),
                  kt_arg_ptr(0, KT_F32),      kt_arg_ptr(0, KT_F32),      kt_arg_i32(rows),
                  kt_arg_i32(D),              kt_arg_i32(1),              kt_arg_f32(1e-5f),
                  kt_arg_i32(0)};
    ASSERT_STATUS(kt_launch(k, NULL, a, 13), KT_OK);
    ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
    long bad = g_buf_check(&x, ref, (size_t)rows * D, 0.03, 0.02, "layernorm_fwd in place", msg, sizeof msg);
    if (bad) t_fail(__FILE__, __LINE__, "%d rows: %ld bad: %s", rows, bad, msg);
    g_buf_free(&x);
  }
  ASSERT_EQ(lb.tunings, 1);
  ASSERT_CONTAINS(lb.text, "tuned layernorm_fwd {");
  ASSERT_CONTAINS(lb.text, "} at N=16778 (the call's N=1): {");
  ASSERT_EQ(t_db_int(kt_cache_path(rt), "SELECT count(*) FROM configs WHERE kernel = 'layernorm_fwd'"), 1);
  g_buf_free(&w);
  g_buf_free(&b);
  kt_runtime_close(rt);
}

/* How many times needle occurs in text. */
static int occurrences(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* permute_rows and permute_rows_bwd leave their row counts out of the key
** too: a key met at three rows is timed at 16M elements (tune_at on M and
** N), both directions' results are exact, and each kernel stores one
** config. */
static void a_permutation_met_at_few_rows_is_timed_at_tune_at(void) {
  static logbuf lb;
  kt_runtime *rt = open_budget(&lb, 3);
  if (!rt) return;
  kt_kernel *kf, *kb;
  if (g_load_kernels(rt, "kernels_src/permute_rows.json", &kf, "kernels_src/permute_rows_bwd.json", &kb, NULL)) {
    kt_runtime_close(rt);
    return;
  }
  enum { N = 3, D = 1000 };
  static const int perm[N] = {2, 0, 1};
  static double ref[N * D];
  g_buf in, out, map, din;
  uint64_t seed = 23;
  ASSERT_EQ(g_buf_make(&in, rt, KT_BF16, N * D, 0) || g_buf_make(&out, rt, KT_BF16, N * D, 0) ||
                g_buf_make(&map, rt, KT_I32, N, 0) || g_buf_make(&din, rt, KT_BF16, N * D, 0),
            0);
  g_buf_rand(&in, &seed, -3, 3);
  for (int j = 0; j < N; j++) {
    map.h[j] = perm[j];
    for (int i = 0; i < D; i++) ref[j * D + i] = in.h[perm[j] * D + i];
  }
  ASSERT_EQ(g_buf_upload(&in) || g_buf_upload(&map) || g_buf_poison(&out) || g_buf_poison(&din), 0);
  kt_arg a[8] = {kt_arg_ptr(out.ptr, KT_BF16), kt_arg_ptr(in.ptr, KT_BF16), kt_arg_ptr(map.ptr, KT_I32),
                 kt_arg_ptr(0, KT_F32),        kt_arg_ptr(0, KT_F32),       kt_arg_i32(N),
                 kt_arg_i32(N),                kt_arg_i32(D)};
  kt_arg b[8] = {kt_arg_ptr(din.ptr, KT_BF16), kt_arg_ptr(out.ptr, KT_BF16), kt_arg_ptr(map.ptr, KT_I32),
                 kt_arg_ptr(0, KT_F32),        kt_arg_ptr(0, KT_F32),        kt_arg_i32(N),
                 kt_arg_i32(N),                kt_arg_i32(D)};
  ASSERT_STATUS(kt_launch(kf, NULL, a, 8), KT_OK);
  ASSERT_STATUS(kt_launch(kb, NULL, b, 8), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  char msg[512];
  long bad = g_buf_check(&out, ref, N * D, 0, 0, "permute_rows out", msg, sizeof msg);
  if (!bad) bad = g_buf_check(&din, in.h, N * D, 0, 0, "permute_rows_bwd din", msg, sizeof msg);
  if (bad) t_fail(__FILE__, __LINE__, "%ld bad: %s", bad, msg);
  ASSERT_EQ(bad, 0);
  ASSERT_EQ(lb.tunings, 2);
  ASSERT_CONTAINS(lb.text, "tuned permute_rows {");
  ASSERT_CONTAINS(lb.text, "tuned permute_rows_bwd {");
  ASSERT_EQ(occurrences(lb.text, "} at M=16778,N=16778 (the call's M=3,N=3): {"), 2);
  ASSERT_EQ(t_db_int(kt_cache_path(rt), "SELECT count(*) FROM configs WHERE kernel = 'permute_rows'"), 1);
  ASSERT_EQ(t_db_int(kt_cache_path(rt), "SELECT count(*) FROM configs WHERE kernel = 'permute_rows_bwd'"), 1);
  g_buf_free(&in), g_buf_free(&out), g_buf_free(&map), g_buf_free(&din);
  kt_runtime_close(rt);
}

/* A consumed input (drain's x: read, then overwritten with the config's
** BLOCK): every config runs on a fresh copy of it and passes, since it is
** never compared (it differs between configs); the caller's x reaches the
** real launch untouched by the tuning, so y is exactly 2x. */
static void consumed_input_is_tuned_on_copies(void) {
  static logbuf lb;
  kt_runtime *rt = open_with(fresh_cache(), &lb);
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/drain.json", &k), KT_OK);
  enum { N = 100003 };
  static float hx[N], hy[N];
  for (int i = 0; i < N; i++) hx[i] = (float)(i % 1000) * 0.25f - 9.0f;
  uint64_t x, y;
  ASSERT_STATUS(kt_device_alloc(rt, sizeof hx, &x), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, sizeof hy, &y), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, x, hx, sizeof hx), KT_OK);
  ASSERT_STATUS(kt_device_fill(rt, y, 0xFF, sizeof hy), KT_OK);
  kt_arg a[] = {kt_arg_ptr(y, KT_F32), kt_arg_ptr(x, KT_F32), kt_arg_ptr(0, KT_F32), kt_arg_i32(N)};
  kt_status st = kt_launch(k, NULL, a, 4);
  if (st) t_fail(__FILE__, __LINE__, "%s", kt_errmsg(rt));
  ASSERT_STATUS(st, KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt_device_download(rt, hy, y, sizeof hy), KT_OK);
  long bad = 0;
  for (int i = 0; i < N; i++) bad += hy[i] != 2.0f * hx[i];
  kt_device_free(rt, x);
  kt_device_free(rt, y);
  ASSERT_EQ(bad, 0);
  ASSERT_EQ(lb.tunings, 1);
  lister l = {rt, {0}};
  ASSERT_STATUS(kt_cache_list(rt, "drain", on_row, &l), KT_OK);
  ASSERT_EQ(l.c.rows, 1);
  ASSERT_EQ(l.c.ok, 3);
  ASSERT_EQ(l.c.mismatch, 0);
  kt_runtime_close(rt);
}

/* Configs that overlap writes between programs, leave rows undone, or write
** past the output are rejected with the reason; a correct one wins. 450
** rows: fewer rows per program than the largest tile. */
static void broken_configs_are_rejected(void) {
  static logbuf lb;
  kt_runtime *rt = open_with(fresh_cache(), &lb);
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/broken.json", &k), KT_OK);
  const int rows = 450, D = 256;
  size_t n = (size_t)rows * D;
  float *hy = malloc(n * 4), *hx = malloc(n * 4), *want = malloc(n * 4);
  ASSERT_TRUE(hy && hx && want);
  uint64_t seed = 3;
  for (size_t i = 0; i < n; i++) {
    hy[i] = (float)g_uniform(&seed, -1, 1);
    hx[i] = (float)g_uniform(&seed, -1, 1);
    want[i] = hy[i] + hx[i];
  }
  uint64_t y, x;
  ASSERT_STATUS(kt_device_alloc(rt, n * 4 + 64, &y), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, n * 4, &x), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, y, hy, n * 4), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, x, hx, n * 4), KT_OK);
  kt_arg a[] = {kt_arg_ptr(y, KT_F32), kt_arg_ptr(x, KT_F32), kt_arg_i32(rows), kt_arg_i32(D)};
  char cfg[128];
  ASSERT_STATUS(kt_kernel_config_for(k, a, 4, cfg, sizeof cfg), KT_OK);
  ASSERT_STATUS(kt_launch(k, NULL, a, 4), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt_device_download(rt, hy, y, n * 4), KT_OK);
  long bad = 0;
  for (size_t i = 0; i < n; i++) bad += hy[i] != want[i];
  free(hy);
  free(hx);
  free(want);
  kt_device_free(rt, x);
  kt_device_free(rt, y);
  printf("    chosen: %s\n", cfg);
  ASSERT_EQ(bad, 0);
  ASSERT_TRUE(strstr(cfg, "PAST=0") != NULL);
  ASSERT_TRUE(strstr(cfg, "BT=1") == NULL);
  ASSERT_TRUE(!strstr(cfg, "BT=4") || strstr(cfg, "MASKED=1"));
  lister l = {rt, {0}};
  ASSERT_STATUS(kt_cache_list(rt, "broken_rows", on_row, &l), KT_OK);
  printf("    trials: %d ok, %d mismatch, %d oob_write, %d other\n", l.c.ok, l.c.mismatch, l.c.oob, l.c.other);
  ASSERT_EQ(l.c.ok, 3);       /* BT=2 (masked or not), BT=4 masked; PAST=0 */
  ASSERT_EQ(l.c.mismatch, 3); /* BT=1 twice, BT=4 unmasked */
  ASSERT_EQ(l.c.oob, 6);      /* every PAST=1 */
  kt_runtime_close(rt);
}

/* refuse tuned for a key of n elements in a runtime on cache: the
** status, with the B=3 candidate's status, stored flag and detail in *c. */
static kt_status tune_refuse(const char *cache, int n, kt_candidate *c, char *detail, size_t dn) {
  static logbuf lb;
  kt_runtime *rt = open_with(cache, &lb);
  kt_kernel *k;
  uint64_t y = 0;
  kt_tune_report *r = NULL;
  memset(c, 0, sizeof *c);
  c->status = (kt_trial_status)-1;
  *detail = 0;
  if (!rt) return KT_ERR_NO_DEVICE;
  kt_status st = kt_kernel_load(rt, "tests/specs/refuse.json", &k);
  if (!st) st = kt_device_alloc(rt, (size_t)n * 4, &y);
  kt_arg a[] = {kt_arg_ptr(y, KT_F32), kt_arg_i32(n)};
  if (!st) st = kt_kernel_tune(k, a, 2, &r);
  if (st) printf("    %s\n", kt_errmsg(rt));
  for (int i = 0; r && i < r->ncandidates; i++)
    if (!strcmp(r->candidates[i].config, "{\"B\":3}")) {
      *c = r->candidates[i];
      snprintf(detail, dn, "%s", c->detail);
    }
  kt_tune_report_free(r);
  if (y) kt_device_free(rt, y);
  kt_runtime_close(rt);
  return st;
}

/* A compile_error trial settles its config for the key in every later
** tuning, so only NVRTC's own refusal of the source is stored: a compile
** helper that died on a config is reported and measured again later. */
static void only_source_refusals_are_stored(void) {
  const char *cache = fresh_cache();
  char detail[1024], out[1200], helper[900];
  kt_candidate c;
  kt_status st = tune_refuse(cache, 1000, &c, detail, sizeof detail);
  if (st == KT_ERR_NO_DEVICE) return;
  ASSERT_STATUS(st, KT_OK);
  ASSERT_EQ(c.status, KT_TRIAL_COMPILE_ERROR);
  ASSERT_EQ(c.stored, 1);
  ASSERT_CONTAINS(detail, "static assertion failed with \"B = 3 does not compile\"");
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE status = 'compile_error'"), 1);
  /* The verdict names the NVRTC that gave it (another one may take it). */
  char sql[200];
  int v = kt__nvrtc_version();
  snprintf(sql, sizeof sql, "SELECT count(*) FROM trials WHERE status = 'compile_error' AND detail LIKE 'NVRTC %d.%d: %%'",
           v / 1000, v % 1000 / 10);
  ASSERT_EQ(t_db_int(cache, sql), 1);
  ASSERT_EQ(strncmp(detail, "NVRTC ", 6), 0);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE status = 'ok'"), 2);
  /* Another key; B=1 and B=2 load from the cache's cubins, and B=3 goes to
  ** a helper that crashes. */
  snprintf(helper, sizeof helper, "%s/crash.sh", t_tmpdir());
  FILE *f = fopen(helper, "w");
  ASSERT_TRUE(f != NULL);
  if (!f) return;
  fprintf(f, "#!/bin/sh\nprintf 'KTH1\\000\\000\\000\\000\\000\\000\\000\\000' >&3\nhead -c 1 <&3 >/dev/null\n"
             "kill -SEGV $$\n");
  fclose(f);
  ASSERT_EQ(t_sh(out, sizeof out, "chmod 755 '%s'", helper), 0);
  setenv("KTUNE_NVRTC_HELPER", helper, 1);
  kt__rc_reset(0);
  st = tune_refuse(cache, 3000, &c, detail, sizeof detail);
  unsetenv("KTUNE_NVRTC_HELPER");
  kt__rc_reset(0);
  ASSERT_STATUS(st, KT_OK);
  ASSERT_EQ(c.status, KT_TRIAL_COMPILE_ERROR);
  ASSERT_EQ(c.measured, 1);
  ASSERT_EQ(c.stored, 0);
  ASSERT_CONTAINS(detail, "refuse B=3: NVRTC's helper process died: signal 11 (Segmentation fault)");
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE status = 'compile_error'"), 1);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE status = 'ok'"), 4);
}

/* Run as a child: tune fault_maybe once and print the outcome. */
int fault_child(const char *cache) {
  kt_options o;
  kt_options_init(&o);
  o.cache_path = cache;
  o.log_level = KT_LOG_ERROR;
  kt_runtime *rt;
  kt_kernel *k;
  uint64_t y;
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, "tests/specs/fault.json", &k) ||
      kt_device_alloc(rt, 4000, &y)) {
    printf("setup: %s\n", kt_errmsg(rt));
    return 1;
  }
  kt_arg a[] = {kt_arg_ptr(y, KT_F32), kt_arg_i32(1000)};
  kt_status st = kt_launch(k, NULL, a, 2);
  if (!st) st = kt_stream_sync(rt, NULL);
  float h[1000];
  int bad = 0;
  if (!st && !kt_device_download(rt, h, y, sizeof h))
    for (int i = 0; i < 1000; i++) bad += h[i] != 2.0f * i;
  printf("status=%s bad=%d msg=%s\n", kt_status_name(st), bad, st ? kt_errmsg(rt) : "");
  return 0;
}

/* layernorm_bwd (RMSNorm bf16, T = 16384, D = 1024, P = 264) on inputs
** made for it, in *in (the caller frees it): 0, or a status. */
static kt_status norm_inputs(kt_runtime *rt, kt_kernel **k, kt_inputs **in) {
  /* Made-up pointers, 64 MiB apart: kt_inputs_make reads only where they
  ** are (none overlaps, none is null but mean, db_part and dres). */
#define AT(i) ((uint64_t)(i) << 26)
  kt_arg a[] = {kt_arg_ptr(AT(1), KT_BF16), kt_arg_ptr(AT(2), KT_F32), kt_arg_ptr(0, KT_F32),
                kt_arg_ptr(AT(3), KT_BF16), kt_arg_ptr(AT(4), KT_BF16), kt_arg_ptr(AT(5), KT_BF16),
                kt_arg_ptr(0, KT_F32), kt_arg_ptr(AT(6), KT_F32), kt_arg_ptr(0, KT_BF16),
                kt_arg_i32(16384), kt_arg_i32(1024), kt_arg_i32(1), kt_arg_i32(264), kt_arg_i32(1)};
#undef AT
  kt_status st = kt_kernel_load(rt, "kernels_src/layernorm_bwd.json", k);
  return st ? st : kt_inputs_make(*k, a, 14, 7, in);
}

/* A runtime on cache for the key above: exhaustive tunings, quiet, in
** tune mode where asked (else the default mode); NULL when there is no GPU. */
static kt_runtime *open_norm(const char *cache, int tune_mode, int no_prune) {
  kt_options o;
  kt_options_init(&o);
  o.cache_path = cache;
  if (tune_mode) o.mode = KT_MODE_TUNE;
  o.no_prune = no_prune;
  o.strategy = KT_STRATEGY_EXHAUSTIVE;
  o.log_level = KT_LOG_ERROR;
  return g_open_with(&o);
}

/* One cold tuning of a layernorm_bwd key (RMSNorm bf16, D = 1024: 557
** candidates on an H100, all tried) in a fresh cache, pruned or not; the report, or
** NULL (*skipped when there is no GPU). */
static kt_tune_report *tune_norm(const char *cache, int no_prune, int *skipped) {
  kt_runtime *rt = open_norm(cache, 0, no_prune);
  kt_kernel *k;
  kt_inputs *in = NULL;
  kt_tune_report *r = NULL;
  if ((*skipped = !rt)) return NULL;
  if (norm_inputs(rt, &k, &in) || kt_kernel_tune(k, kt_inputs_args(in), 14, &r)) printf("    %s\n", kt_errmsg(rt));
  kt_inputs_free(in);
  kt_runtime_close(rt);
  return r;
}

/* tune_norm with pruning, one variant per NVRTC program, on four of the
** process's CPUs (the tuner compiles on as many threads and helpers as it
** may run on): the compiles keep close behind the trials, so results come
** in before most compiles on any host. With every CPU, a host of 64 started
** every compile before the first result, and one of 32 beside another GPU
** test did too. */
static kt_tune_report *tune_norm_pruned(const char *cache, int *skipped) {
  cpu_set_t was, four;
  CPU_ZERO(&four);
  int pinned = !sched_getaffinity(0, sizeof was, &was);
  for (int c = 0, n = 0; pinned && c < CPU_SETSIZE && n < 4; c++)
    if (CPU_ISSET(c, &was)) CPU_SET(c, &four), n++;
  pinned = pinned && !sched_setaffinity(0, sizeof four, &four);
  setenv("KTUNE_COMPILE_GROUP", "1", 1);
  kt_tune_report *r = tune_norm(cache, 0, skipped);
  unsetenv("KTUNE_COMPILE_GROUP");
  if (pinned) sched_setaffinity(0, sizeof was, &was);
  return r;
}

/* That key launched once by a new runtime in tune mode on cache: its
** stats, or -1 in tunings when the launch failed. */
static kt_stats launch_norm(const char *cache) {
  kt_stats n = {.size = sizeof n, .tunings = (uint64_t)-1};
  kt_runtime *rt = open_norm(cache, 1, 0);
  kt_kernel *k;
  kt_inputs *in = NULL;
  if (!rt) return n;
  if (norm_inputs(rt, &k, &in) || kt_launch(k, NULL, kt_inputs_args(in), 14) || kt_runtime_stats(rt, &n)) {
    printf("    %s\n", kt_errmsg(rt));
    n.tunings = (uint64_t)-1;
  }
  kt_inputs_free(in);
  kt_runtime_close(rt);
  return n;
}

/* Pruning before compile: a candidate is not compiled once a field value
** of it has lost by 10% in 6 measured candidates, and in 2 or more beside
** each of its other values (tune/evidence.h). It is reported as
** pruned (not measured, not stored, with the evidence), the trials table
** holds only what was measured, and no_prune measures everything. */
static void pruned_candidates_are_reported_never_stored(void) {
  const char *cache = fresh_cache();
  int skipped;
  kt_tune_report *r = tune_norm_pruned(cache, &skipped);
  if (skipped) return;
  ASSERT_TRUE(r);
  int pruned = 0, measured = 0;
  for (int i = 0; i < r->ncandidates; i++) {
    const kt_candidate *c = &r->candidates[i];
    measured += c->measured;
    if (c->status != KT_TRIAL_PRUNED) continue;
    pruned++;
    ASSERT_EQ(c->measured, 0);
    ASSERT_EQ(c->stored, 0);
    ASSERT_TRUE(c->median_us < 0);
    ASSERT_CONTAINS(c->detail, "not compiled: the ");
    ASSERT_CONTAINS(c->detail, " us at best, the best measured ");
  }
  printf("    %d of %d candidates pruned, %d measured\n", pruned, r->ncandidates, measured);
  ASSERT_TRUE(pruned > 0);
  ASSERT_EQ(pruned + measured, r->ncandidates);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials"), measured);
  kt_tune_report_free(r);
  const char *all = fresh_cache();
  ASSERT_TRUE((r = tune_norm(all, 1, &skipped)));
  for (int i = 0; i < r->ncandidates; i++) ASSERT_EQ(r->candidates[i].measured, 1);
  ASSERT_EQ(t_db_int(all, "SELECT count(*) FROM trials"), r->ncandidates);
  kt_tune_report_free(r);
}

/* A key with a stored winner is tuned again in a new process (tune mode)
** only while a candidate no tuning measured would not be pruned by the
** measurements stored: pruned candidates are never stored, and counting
** them tuned such a key in every process, measuring nothing. After a
** pruned tuning the key settles within a few processes (each measures
** what the evidence leaves open, which can free a candidate pruned on
** less of it); then a process takes the stored winner, tuning nothing. */
static void pruned_candidates_leave_a_stored_key_settled(void) {
  const char *cache = fresh_cache();
  int skipped;
  kt_tune_report *r = tune_norm_pruned(cache, &skipped);
  if (skipped) return;
  ASSERT_TRUE(r);
  int pruned = 0;
  for (int i = 0; i < r->ncandidates; i++) pruned += r->candidates[i].status == KT_TRIAL_PRUNED;
  kt_tune_report_free(r);
  if (!pruned) {
    t_skip("nothing was pruned (every compile started before a result)");
    return;
  }
  kt_stats n = {0};
  int rounds = 0;
  do {
    n = launch_norm(cache);
    ASSERT_TRUE(n.tunings != (uint64_t)-1);
  } while (n.tunings && ++rounds < 4);
  printf("    %d pruned; the key settled after %d process(es) that tuned again\n", pruned, rounds);
  ASSERT_EQ(n.tunings, 0);
  ASSERT_EQ(n.cache_loads, 1);
  const int stored = t_db_int(cache, "SELECT count(*) FROM trials");
  ASSERT_EQ(launch_norm(cache).tunings, 0);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials"), stored);
}

/* A config with an illegal address: the process that meets it reports
** KT_ERR_DEVICE_FAULT naming it; the next process skips it and tunes. */
static void faulting_config_is_quarantined(void) {
  static logbuf lb;
  kt_runtime *probe = open_with(fresh_cache(), &lb);
  if (!probe) return;
  kt_runtime_close(probe);
  const char *cache = fresh_cache();
  char out[8192];
  ASSERT_EQ(t_sh(out, sizeof out, "%s --fault-child %s", g_self, cache), 0);
  printf("    first process: %s", out);
  ASSERT_CONTAINS(out, "status=KT_ERR_DEVICE_FAULT");
  ASSERT_CONTAINS(out, "config {\"FAULT\":1} faulted");
  ASSERT_CONTAINS(out, "it is quarantined for this key");
  ASSERT_EQ(t_sh(out, sizeof out, "%s --fault-child %s", g_self, cache), 0);
  printf("    second process: %s", out);
  ASSERT_STR_EQ(out, "status=KT_OK bad=0 msg=\n");
  kt_runtime *rt = open_with(cache, &lb);
  ASSERT_TRUE(rt);
  long c[4];
  ASSERT_STATUS(kt_cache_counts(rt, c), KT_OK);
  ASSERT_EQ(c[0], 1); /* one configs row */
  ASSERT_EQ(c[3], 1); /* one quarantined config */
  kt_runtime_close(rt);
}

/* Inside a capture a miss never tunes (the graph would record the trials);
** the default config is captured and replays correctly. */
static void no_tuning_while_capturing(void) {
  static logbuf lb;
  kt_runtime *rt = open_with(fresh_cache(), &lb);
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/add_one.json", &k), KT_OK);
  const long long n = 5000;
  float h[5000];
  for (int i = 0; i < n; i++) h[i] = (float)i;
  uint64_t x;
  ASSERT_STATUS(kt_device_alloc(rt, sizeof h, &x), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, x, h, sizeof h), KT_OK);
  kt_stream s;
  char err[1024];
  ASSERT_STATUS(kt__dev_stream_create(&s, err, sizeof err), KT_OK);
  kt_arg a[] = {kt_arg_ptr(x, KT_F32), kt_arg_i64(n)};
  ASSERT_STATUS(kt__dev_capture_begin(s, 0, err, sizeof err), KT_OK);
  kt_status st = kt_launch(k, s, a, 2);
  kt_status rs = kt__dev_capture_end_and_run(s, 3, err, sizeof err);
  ASSERT_STATUS(st, KT_OK);
  if (rs) t_fail(__FILE__, __LINE__, "%s", err);
  ASSERT_STATUS(rs, KT_OK);
  ASSERT_STATUS(kt_device_download(rt, h, x, sizeof h), KT_OK);
  for (int i = 0; i < n; i++) ASSERT_TRUE(h[i] == (float)i + 3.0f);
  ASSERT_EQ(lb.tunings, 0);
  ASSERT_CONTAINS(lb.text, "stream is capturing; the default config used without tuning");
  long c[4];
  ASSERT_STATUS(kt_cache_counts(rt, c), KT_OK);
  ASSERT_EQ(c[0], 0);
  /* Outside the capture the same key tunes. */
  ASSERT_STATUS(kt_launch(k, s, a, 2), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, s), KT_OK);
  ASSERT_EQ(lb.tunings, 1);
  kt__dev_stream_destroy(s);
  kt_device_free(rt, x);
  kt_runtime_close(rt);
}

/* A spec with options.pdl is launched early on sm_90+: its blocks start
** while the kernel before it still runs (slow_fill lets them, then spins
** for about a millisecond), and it still reads what that kernel wrote,
** eagerly and replayed from a graph. With kt_options.no_pdl, or before
** sm_90, it starts only after. */
static void early_launch_waits_for_the_kernel_before(void) {
  for (int early = 1; early >= 0; early--) {
    kt_options o;
    kt_options_init(&o);
    o.mode = KT_MODE_OFF;
    o.no_pdl = !early;
    kt_runtime *rt = g_open_with(&o);
    if (!rt) return;
    const int sm = atoi(kt_runtime_arch(rt) + 3);
    kt_kernel *fill, *plus;
    ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/slow_fill.json", &fill), KT_OK);
    ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/plus_one_after.json", &plus), KT_OK);
    enum { N = 4096, B = N / 128 };
    static float h[N];
    static long long t_end[B], t_start[B];
    uint64_t x, y, te, ts;
    ASSERT_STATUS(kt_device_alloc(rt, sizeof h, &x), KT_OK);
    ASSERT_STATUS(kt_device_alloc(rt, sizeof h, &y), KT_OK);
    ASSERT_STATUS(kt_device_alloc(rt, sizeof t_end, &te), KT_OK);
    ASSERT_STATUS(kt_device_alloc(rt, sizeof t_start, &ts), KT_OK);
    kt_stream s;
    ASSERT_STATUS(kt_stream_create(rt, &s), KT_OK);
    /* Compiled first: a launch that compiles would start late anyway. */
    kt_arg wf[] = {kt_arg_ptr(x, KT_F32), kt_arg_ptr(te, KT_I64), kt_arg_i32(N), kt_arg_f32(0), kt_arg_i64(0)};
    kt_arg wp[] = {kt_arg_ptr(y, KT_F32), kt_arg_ptr(x, KT_F32), kt_arg_ptr(ts, KT_I64), kt_arg_i32(N)};
    ASSERT_STATUS(kt_launch(fill, s, wf, 5), KT_OK);
    ASSERT_STATUS(kt_launch(plus, s, wp, 4), KT_OK);
    ASSERT_STATUS(kt_stream_sync(rt, s), KT_OK);
    for (int round = 0; round < 2; round++) {
      const float v = 3.0f + (float)round;
      ASSERT_STATUS(kt_device_fill(rt, x, 0xFF, sizeof h), KT_OK);
      ASSERT_STATUS(kt_device_fill(rt, y, 0xFF, sizeof h), KT_OK);
      kt_arg fa[] = {kt_arg_ptr(x, KT_F32), kt_arg_ptr(te, KT_I64), kt_arg_i32(N), kt_arg_f32(v),
                     kt_arg_i64(2000000)};
      kt_arg pa[] = {kt_arg_ptr(y, KT_F32), kt_arg_ptr(x, KT_F32), kt_arg_ptr(ts, KT_I64), kt_arg_i32(N)};
      char err[1024];
      kt_status st = KT_OK, rs = KT_OK;
      if (round == 0) {
        ASSERT_STATUS(kt_launch(fill, s, fa, 5), KT_OK);
        ASSERT_STATUS(kt_launch(plus, s, pa, 4), KT_OK);
      } else {
        ASSERT_STATUS(kt__dev_capture_begin(s, 0, err, sizeof err), KT_OK);
        st = kt_launch(fill, s, fa, 5);
        if (!st) st = kt_launch(plus, s, pa, 4);
        rs = kt__dev_capture_end_and_run(s, 2, err, sizeof err);
        if (rs) t_fail(__FILE__, __LINE__, "graph: %s", err);
      }
      ASSERT_STATUS(st, KT_OK);
      ASSERT_STATUS(rs, KT_OK);
      ASSERT_STATUS(kt_stream_sync(rt, s), KT_OK);
      ASSERT_STATUS(kt_device_download(rt, h, y, sizeof h), KT_OK);
      int bad = 0;
      for (int i = 0; i < N; i++) bad += h[i] != v + (float)i + 1.0f;
      if (bad) t_fail(__FILE__, __LINE__, "early=%d round %d: %d of %d elements did not see x (y[0] = %g)", early,
                      round, bad, N, h[0]);
      ASSERT_STATUS(kt_device_download(rt, t_end, te, sizeof t_end), KT_OK);
      ASSERT_STATUS(kt_device_download(rt, t_start, ts, sizeof t_start), KT_OK);
      long long first_start = t_start[0], last_end = t_end[0];
      for (int b = 1; b < B; b++) {
        if (t_start[b] < first_start) first_start = t_start[b];
        if (t_end[b] > last_end) last_end = t_end[b];
      }
      if (early && sm >= 90) {
        if (!(first_start < last_end))
          t_fail(__FILE__, __LINE__, "round %d: launched early, yet started %lld ns after the kernel before ended",
                 round, first_start - last_end);
      } else if (!(first_start >= last_end)) {
        t_fail(__FILE__, __LINE__, "early=%d round %d: started %lld ns before the kernel before ended", early,
               round, last_end - first_start);
      }
    }
    kt_stream_destroy(rt, s);
    kt_device_free(rt, x);
    kt_device_free(rt, y);
    kt_device_free(rt, te);
    kt_device_free(rt, ts);
    kt_runtime_close(rt);
  }
}

/* A kernel that cannot run in place, called in place: refused by default;
** with stage_aliased, computed through a temporary as if out of place. */
static void aliased_call_is_refused_or_staged(void) {
  static logbuf lb;
  kt_options o;
  log_options(&o, fresh_cache(), &lb, KT_LOG_WARN);
  kt_runtime *rt = g_open_with(&o);
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/shift.json", &k), KT_OK);
  enum { N = 100000 };
  static float h[N + 1];
  for (int i = 0; i <= N; i++) h[i] = (float)(3 * i + 1);
  uint64_t x;
  ASSERT_STATUS(kt_device_alloc(rt, sizeof h, &x), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, x, h, sizeof h), KT_OK);
  kt_arg a[] = {kt_arg_ptr(x, KT_F32), kt_arg_ptr(x, KT_F32), kt_arg_i32(N)};
  ASSERT_STATUS(kt_launch(k, NULL, a, 3), KT_ERR_ALIAS);
  ASSERT_STR_EQ(kt_errmsg(rt), "shift_left: y (written) overlaps x in 400000 bytes (both start at the same byte); "
                               "this kernel cannot run in place");
  kt_device_free(rt, x);
  kt_runtime_close(rt);
  o.stage_aliased = 1;
  o.cache_path = fresh_cache();
  rt = g_open_with(&o);
  ASSERT_TRUE(rt);
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/shift.json", &k), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, sizeof h, &x), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, x, h, sizeof h), KT_OK);
  a[0] = a[1] = kt_arg_ptr(x, KT_F32);
  kt_status st = kt_launch(k, NULL, a, 3);
  if (st) t_fail(__FILE__, __LINE__, "%s", kt_errmsg(rt));
  ASSERT_STATUS(st, KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  static float got[N + 1];
  ASSERT_STATUS(kt_device_download(rt, got, x, sizeof got), KT_OK);
  long bad = 0;
  for (int i = 0; i < N; i++) bad += got[i] != (float)(3 * (i + 1) + 1);
  ASSERT_EQ(bad, 0);
  ASSERT_TRUE(got[N] == h[N]);
  kt_device_free(rt, x);
  kt_runtime_close(rt);
}

/* 16 threads launch a cached key on streams of their own while one more
** thread tunes a new key of the same kernel: the launches never wait for
** the tuner, and every result is right. */
typedef struct hammer {
  kt_runtime *rt;
  kt_kernel *k;
  uint64_t x;
  long long n;
  int reps;
  kt_status st;
  char err[512];
} hammer;

static void *hammer_run(void *arg) {
  hammer *h = arg;
  kt_stream s;
  if ((h->st = kt_stream_create(h->rt, &s))) {
    snprintf(h->err, sizeof h->err, "%s", kt_errmsg(h->rt));
    return NULL;
  }
  kt_arg a[] = {kt_arg_ptr(h->x, KT_F32), kt_arg_i64(h->n)};
  for (int i = 0; i < h->reps && !h->st; i++) h->st = kt_launch(h->k, s, a, 2);
  if (!h->st) h->st = kt_stream_sync(h->rt, s);
  if (h->st) snprintf(h->err, sizeof h->err, "%s", kt_errmsg(h->rt));
  kt_stream_destroy(h->rt, s);
  return NULL;
}

static void threads_launch_while_one_tunes(void) {
  static logbuf lb;
  kt_runtime *rt = open_with(fresh_cache(), &lb);
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/add_one.json", &k), KT_OK);
  enum { THREADS = 16, REPS = 500, N = 4096 };
  static float h[THREADS][N];
  hammer hs[THREADS + 1];
  for (int t = 0; t <= THREADS; t++) {
    long long n = t < THREADS ? N : (1 << 22);
    hs[t] = (hammer){rt, k, 0, n, t < THREADS ? REPS : 1, KT_OK, ""};
    ASSERT_STATUS(kt_device_alloc(rt, (size_t)n * 4, &hs[t].x), KT_OK);
    ASSERT_STATUS(kt_device_fill(rt, hs[t].x, 0x3f, (size_t)n * 4), KT_OK);
  }
  /* Tune the small key first, so that the hammering threads hit it. */
  kt_arg a[] = {kt_arg_ptr(hs[0].x, KT_F32), kt_arg_i64(N)};
  ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt_device_fill(rt, hs[0].x, 0x3f, (size_t)N * 4), KT_OK);
  pthread_t th[THREADS + 1];
  pthread_create(&th[THREADS], NULL, hammer_run, &hs[THREADS]); /* tunes n = 2^22 */
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, hammer_run, &hs[t]);
  for (int t = 0; t <= THREADS; t++) pthread_join(th[t], NULL);
  for (int t = 0; t <= THREADS; t++) {
    if (hs[t].st) t_fail(__FILE__, __LINE__, "thread %d: %s", t, hs[t].err);
    ASSERT_STATUS(hs[t].st, KT_OK);
  }
  /* The same float additions on the host, from the fill pattern. */
  uint32_t bits = 0x3f3f3f3fu;
  float want;
  memcpy(&want, &bits, 4);
  for (int i = 0; i < REPS; i++) want += 1.0f;
  long bad = 0;
  for (int t = 0; t < THREADS; t++) {
    ASSERT_STATUS(kt_device_download(rt, h[t], hs[t].x, sizeof h[t]), KT_OK);
    for (int i = 0; i < N; i++) bad += h[t][i] != want;
  }
  for (int t = 0; t <= THREADS; t++) kt_device_free(rt, hs[t].x);
  ASSERT_EQ(bad, 0);
  ASSERT_EQ(lb.tunings, 2);
  kt_runtime_close(rt);
}

/* 30 launches of k (add_one's params: the buffer, n) over three buffers in
** an order that revisits each (7r mod 3), count[b] adding buffer b's. 1
** when every launch was queued. */
static int launch_in_turn(kt_kernel *k, const uint64_t x[3], int64_t n, int count[3]) {
  for (int r = 0; r < 30; r++) {
    int b = (r * 7) % 3;
    kt_arg a[] = {kt_arg_ptr(x[b], KT_F32), kt_arg_i64(n)};
    kt_status st = kt_launch(k, NULL, a, 2);
    if (st) {
      t_fail(__FILE__, __LINE__, "launch %d on buffer %d: got %s, expected KT_OK", r, b, kt_status_name(st));
      return 0;
    }
    count[b]++;
  }
  return 1;
}

/* Calls of one shape on new tensors are launched from the thread's plan;
** a call whose n differs (same pow2 bucket, so the same key) is not: it gets
** its own grid, and leaves the element past its n alone. */
static void plans_follow_the_signature(void) {
  static logbuf lb;
  kt_runtime *rt = open_with(fresh_cache(), &lb);
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/add_one.json", &k), KT_OK);
  enum { N = 4096 };
  static float h[3][N], got[N];
  uint64_t x[3];
  for (int b = 0; b < 3; b++) {
    for (int i = 0; i < N; i++) h[b][i] = (float)(b * 1000 + i);
    ASSERT_STATUS(kt_device_alloc(rt, sizeof h[b], &x[b]), KT_OK);
    ASSERT_STATUS(kt_device_upload(rt, x[b], h[b], sizeof h[b]), KT_OK);
  }
  int count[3] = {0, 0, 0};
  ASSERT_TRUE(launch_in_turn(k, x, N, count));
  kt_arg shorter[] = {kt_arg_ptr(x[0], KT_F32), kt_arg_i64(N - 1)};
  ASSERT_STATUS(kt_launch(k, NULL, shorter, 2), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  for (int b = 0; b < 3; b++) {
    ASSERT_STATUS(kt_device_download(rt, got, x[b], sizeof got), KT_OK);
    long bad = 0;
    for (int i = 0; i < N; i++) {
      int extra = b == 0 && i < N - 1;
      bad += got[i] != h[b][i] + (float)(count[b] + extra);
    }
    if (bad) t_fail(__FILE__, __LINE__, "buffer %d: %ld wrong elements", b, bad);
    ASSERT_EQ(bad, 0);
    kt_device_free(rt, x[b]);
  }
  ASSERT_EQ(lb.tunings, 1);
  kt_runtime_close(rt);
}

/* With KTUNE_MODE=off a call whose default is refused gets the valid config
** nearest it, from a search of the space, then from the thread's plan for
** the calls after it: the same config (say kt_kernel_default_for), the
** same sums on each buffer, nothing past n touched, and no launch counted
** as a hit. */
static void off_mode_plans_keep_the_fallback(void) {
  kt_runtime *rt = g_open_mode(KT_MODE_OFF);
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/add_one_fit.json", &k), KT_OK);
  enum { N = 100, PAD = 8 };
  static float h[3][N + PAD], got[N + PAD];
  uint64_t x[3];
  for (int b = 0; b < 3; b++) {
    for (int i = 0; i < N + PAD; i++) h[b][i] = (float)(b * 1000 + i);
    ASSERT_STATUS(kt_device_alloc(rt, sizeof h[b], &x[b]), KT_OK);
    ASSERT_STATUS(kt_device_upload(rt, x[b], h[b], sizeof h[b]), KT_OK);
  }
  char cfg[64];
  kt_arg probe[] = {kt_arg_ptr(x[0], KT_F32), kt_arg_i64(N)};
  ASSERT_STATUS(kt_kernel_default_for(k, probe, 2, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(cfg, "BLOCK=64,ITEMS=1");
  int count[3] = {0, 0, 0};
  ASSERT_TRUE(launch_in_turn(k, x, N, count));
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  for (int b = 0; b < 3; b++) {
    ASSERT_STATUS(kt_device_download(rt, got, x[b], sizeof got), KT_OK);
    long bad = 0;
    for (int i = 0; i < N + PAD; i++) bad += got[i] != h[b][i] + (float)(i < N ? count[b] : 0);
    if (bad) t_fail(__FILE__, __LINE__, "buffer %d: %ld wrong elements", b, bad);
    ASSERT_EQ(bad, 0);
    kt_device_free(rt, x[b]);
  }
  kt_stats st = {.size = sizeof st};
  ASSERT_STATUS(kt_runtime_stats(rt, &st), KT_OK);
  ASSERT_EQ(st.launches, 30);
  ASSERT_EQ(st.hits, 0);
  kt_runtime_close(rt);
}

/* Outputs compared on the device and on the host agree, element for
** element: tolerances at their edge, NaN only against NaN, infinities
** equal, 64-bit integers exact past 2^53, for every storage type. */
static void device_comparison_agrees_with_the_host(void) {
  kt_runtime *rt = g_open();
  if (!rt) return;
  kt_runtime_info info = {.size = sizeof info};
  kt_runtime_get_info(rt, &info);
  kt__devcmp d;
  char err[KT_ERRMAX];
  kt__env *env = (kt__env *)rt; /* the runtime's first member */
  ASSERT_STATUS(kt__dev_use(env->ctx, err, sizeof err), KT_OK);
  kt_status st = kt__devcmp_open(&d, env, err, sizeof err);
  if (st) t_fail(__FILE__, __LINE__, "%s", err);
  ASSERT_STATUS(st, KT_OK);
  enum { N = 100003 };
  static double r[N], g[N];
  static unsigned char hr[N * 8], hg[N * 8];
  uint64_t seed = 11;
  for (int i = 0; i < N; i++) {
    r[i] = g_uniform(&seed, -3, 3);
    double tweak = g_uniform(&seed, 0, 1);
    g[i] = tweak < 0.97 ? r[i] : tweak < 0.98 ? r[i] * (1 + 3e-3) : tweak < 0.99 ? r[i] + 1 : r[i];
  }
  r[5] = NAN, g[5] = NAN;      /* agree */
  r[6] = 1, g[6] = NAN;        /* differ */
  r[7] = INFINITY, g[7] = INFINITY;
  r[8] = INFINITY, g[8] = -INFINITY;
  r[9] = 1e30, g[9] = INFINITY;
  static const kt_dtype types[] = {KT_F32, KT_F16, KT_BF16, KT_F64, KT_I32, KT_I64, KT_U8, KT_I8, KT_I16, KT_U32};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    kt_dtype dt = types[t];
    size_t esz = kt_dtype_size(dt);
    g_store(dt, hr, r, N);
    g_store(dt, hg, g, N);
    if (dt == KT_I64) { /* apart only past 2^53 */
      int64_t a = INT64_C(9007199254740993), b = INT64_C(9007199254740992);
      memcpy(hr + 8 * 42, &a, 8);
      memcpy(hg + 8 * 42, &b, 8);
    }
    uint64_t dr, dg, bad, first;
    ASSERT_STATUS(kt_device_alloc(rt, N * esz, &dr), KT_OK);
    ASSERT_STATUS(kt_device_alloc(rt, N * esz, &dg), KT_OK);
    kt_device_upload(rt, dr, hr, N * esz);
    kt_device_upload(rt, dg, hg, N * esz);
    double atol = 1e-3, rtol = 2e-3;
    ASSERT_STATUS(kt__devcmp_run(&d, env, dt, dr, dg, N, atol, rtol, NULL, &bad, &first, err, sizeof err), KT_OK);
    char why[300];
    size_t host = kt__compare(dt, hr, hg, N, atol, rtol, why, sizeof why);
    size_t at = 0;
    sscanf(why, "element %zu", &at);
    if (bad != host || (host && first != at))
      t_fail(__FILE__, __LINE__, "%s: device %llu bad (first %llu), host %zu (%s)", kt_dtype_name(dt),
             (unsigned long long)bad, (unsigned long long)first, host, why);
    ASSERT_TRUE(host > 0);
    kt_device_free(rt, dr);
    kt_device_free(rt, dg);
  }
  kt__devcmp_close(&d);
  kt_runtime_close(rt);
}

const kt_test gpu_tune_tests[] = {
    {"gpu tune: outputs compared on the device agree with the host", device_comparison_agrees_with_the_host},
    {"gpu tune: launch plans follow the call's signature", plans_follow_the_signature},
    {"gpu tune: with the mode off, plans keep the fallback", off_mode_plans_keep_the_fallback},
    {"gpu tune: 16 threads launch while another thread tunes", threads_launch_while_one_tunes},
    {"gpu tune: an aliased call to a kernel that cannot run in place", aliased_call_is_refused_or_staged},
    {"gpu tune: an in-place call applies the kernel once", in_place_call_applies_once},
    {"gpu tune: a stored config outside the space is replaced by the next tuning", a_stale_stored_config_is_replaced},
    {"gpu tune: after kt_runtime_stop_tuning a miss runs untuned", stopped_runtime_runs_misses_untuned},
    {"gpu tune: a key met at one row is timed at its tune_at", a_key_met_at_one_row_is_timed_at_tune_at},
    {"gpu tune: a permutation met at three rows is timed at its tune_at",
     a_permutation_met_at_few_rows_is_timed_at_tune_at},
    {"gpu tune: a consumed input is tuned on copies and never compared", consumed_input_is_tuned_on_copies},
    {"gpu tune: overlapping, partial and out-of-bounds configs are rejected", broken_configs_are_rejected},
    {"gpu tune: pruned candidates are reported, never compiled or stored", pruned_candidates_are_reported_never_stored},
    {"gpu tune: pruned candidates leave a stored key settled", pruned_candidates_leave_a_stored_key_settled},
    {"gpu tune: only NVRTC's refusal of a source is stored as a compile_error trial",
     only_source_refusals_are_stored},
    {"gpu tune: a faulting config is quarantined across processes", faulting_config_is_quarantined},
    {"gpu tune: no tuning while the stream is capturing", no_tuning_while_capturing},
    {"gpu tune: an early-launched kernel waits for the kernel before it", early_launch_waits_for_the_kernel_before},
    {NULL, NULL},
};
