/* Aliasing on the GPU. A call whose written buffer shares part of another
** argument's bytes (one element, one row, one range nested in another) is
** refused before any work and leaves every byte as it was, nothing in the
** cache; a normal call of the same key then works in this process and in
** the next. With stage_aliased such a call is computed as if out of place.
** A rejection that only the caller's data causes is never stored, and a
** reference that does not reproduce stores nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "harness.h"

extern const char *g_self;

enum { N = 64, D = 1024, SN = 100000 };

typedef struct logbuf {
  char text[65536];
} logbuf;

static void capture_log(void *user, kt_log_level level, const char *msg) {
  logbuf *l = user;
  (void)level;
  size_t n = strlen(l->text);
  snprintf(l->text + n, sizeof l->text - n, "%s\n", msg);
}

static kt_runtime *open_on(const char *cache, logbuf *l, int stage) {
  memset(l, 0, sizeof *l);
  kt_options o;
  kt_options_init(&o);
  o.cache_path = cache;
  o.log = capture_log;
  o.log_user = l;
  o.log_level = KT_LOG_INFO;
  o.stage_aliased = stage;
  return g_open_with(&o);
}

static const char *cache_named(const char *name) {
  static char path[4][700];
  static int next;
  char *p = path[next++ % 4];
  snprintf(p, sizeof path[0], "%s/%s", t_tmpdir(), name);
  return p;
}

static long long rows(const char *cache, const char *table) {
  char q[128];
  snprintf(q, sizeof q, "SELECT count(*) FROM %s", table);
  return t_db_int(cache, q);
}

/* RMSNorm of n rows of x by w, in doubles. */
static void rms_ref(const float *x, const float *w, int n, double *out) {
  for (int r = 0; r < n; r++) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += (double)x[r * D + i] * x[r * D + i];
    double rstd = 1.0 / sqrt(ss / D + 1e-5);
    for (int i = 0; i < D; i++) out[r * D + i] = x[r * D + i] * rstd * w[i];
  }
}

static long rms_bad(const float *y, const double *ref, int n) {
  long bad = 0;
  for (int i = 0; i < n * D; i++) bad += !(fabs(y[i] - ref[i]) <= 1e-4 + 1e-4 * fabs(ref[i]));
  return bad;
}

/* A refused call: KT_ERR_ALIAS naming both params from kt_launch, from
** kt_launch_config at the call's default config and from kt_kernel_time,
** and the allocation at base (bytes long, before holding what it held)
** bit-identical after all three. */
static void refused(kt_runtime *rt, kt_kernel *k, const kt_arg *a, int n, uint64_t base, const void *before,
                    size_t bytes, const char *pair) {
  char cfg[KT_CONFIG_MAX];
  ASSERT_STATUS(kt_kernel_default_for(k, a, n, cfg, sizeof cfg), KT_OK);
  double med = -1, spread = -1;
  for (int how = 0; how < 3; how++) {
    kt_status st = how == 0   ? kt_launch(k, NULL, a, n)
                   : how == 1 ? kt_launch_config(k, NULL, a, n, cfg)
                              : kt_kernel_time(k, a, n, NULL, &med, &spread);
    ASSERT_STATUS(st, KT_ERR_ALIAS);
    ASSERT_CONTAINS(kt_errmsg(rt), pair);
    ASSERT_CONTAINS(kt_errmsg(rt), " bytes");
  }
  ASSERT_TRUE(med == -1 && spread == -1);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  void *after = malloc(bytes);
  ASSERT_TRUE(after != NULL);
  if (!after) return;
  ASSERT_STATUS(kt_device_download(rt, after, base, bytes), KT_OK);
  ASSERT_TRUE(memcmp(before, after, bytes) == 0);
  free(after);
}

static void fill(float *h, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) h[i] = (float)g_uniform(&seed, -2, 2);
}

/* Normal calls of the keys the refused calls had: rmsnorm N x D f32 and
** shift_left of SN. Returns the bad element counts. */
static void normal_calls(kt_runtime *rt, kt_kernel *rms, kt_kernel *sh, long *bad_rms, long *bad_sh) {
  static float x[N * D], w[D], y[N * D], sx[SN + 1], sy[SN];
  static double ref[N * D];
  fill(x, N * D, 1);
  fill(w, D, 2);
  fill(sx, SN + 1, 3);
  uint64_t dx, dw, dy, ds, dt;
  *bad_rms = *bad_sh = -1;
  if (kt_device_alloc(rt, sizeof x, &dx) || kt_device_alloc(rt, sizeof w, &dw) || kt_device_alloc(rt, sizeof y, &dy) ||
      kt_device_alloc(rt, sizeof sx, &ds) || kt_device_alloc(rt, sizeof sy, &dt))
    return;
  kt_device_upload(rt, dx, x, sizeof x);
  kt_device_upload(rt, dw, w, sizeof w);
  kt_device_upload(rt, ds, sx, sizeof sx);
  kt_device_fill(rt, dy, 0xFF, sizeof y);
  kt_device_fill(rt, dt, 0xFF, sizeof sy);
  kt_arg a[] = {kt_arg_ptr(dy, KT_F32), kt_arg_ptr(dx, KT_F32), kt_arg_ptr(0, KT_F32), kt_arg_ptr(dw, KT_F32),
                kt_arg_i32(N), kt_arg_i32(D), kt_arg_f32(1e-5f)};
  kt_arg b[] = {kt_arg_ptr(dt, KT_F32), kt_arg_ptr(ds, KT_F32), kt_arg_i32(SN)};
  if (!kt_launch(rms, NULL, a, 7) && !kt_stream_sync(rt, NULL) && !kt_device_download(rt, y, dy, sizeof y)) {
    rms_ref(x, w, N, ref);
    *bad_rms = rms_bad(y, ref, N);
  }
  if (!kt_launch(sh, NULL, b, 3) && !kt_stream_sync(rt, NULL) && !kt_device_download(rt, sy, dt, sizeof sy)) {
    *bad_sh = 0;
    for (int i = 0; i < SN; i++) *bad_sh += sy[i] != sx[i + 1];
  }
  kt_device_free(rt, dx);
  kt_device_free(rt, dw);
  kt_device_free(rt, dy);
  kt_device_free(rt, ds);
  kt_device_free(rt, dt);
}

/* Run as a child on the parent's cache: the normal calls, and whether they
** had to tune. */
int alias_child(const char *cache) {
  kt_options o;
  kt_options_init(&o);
  o.cache_path = cache;
  o.log_level = KT_LOG_ERROR;
  kt_runtime *rt;
  kt_kernel *rms, *sh;
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, "kernels_src/rmsnorm.json", &rms) ||
      kt_kernel_load(rt, "tests/specs/shift.json", &sh)) {
    printf("setup: %s\n", kt_errmsg(rt));
    return 1;
  }
  long br, bs;
  normal_calls(rt, rms, sh, &br, &bs);
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(rt, &st);
  printf("rmsnorm bad=%ld shift bad=%ld tunings=%llu\n", br, bs, (unsigned long long)st.tunings);
  kt_runtime_close(rt);
  return 0;
}

/* rmsnorm_fwd (in place allowed) with y one element, one row off x, and w
** nested inside y; shift_left (never in place) with x one element and 256
** elements past y, and y nested in x. */
static void refusals(kt_runtime *rt, kt_kernel *rms, kt_kernel *sh) {
  size_t elems = (size_t)(N + 4) * D, bytes = elems * 4;
  float *h = malloc(bytes);
  uint64_t buf, w;
  ASSERT_TRUE(h != NULL);
  if (!h || kt_device_alloc(rt, bytes, &buf) || kt_device_alloc(rt, D * 4, &w)) return;
  fill(h, elems, 9);
  ASSERT_STATUS(kt_device_upload(rt, buf, h, bytes), KT_OK);
  uint64_t x = buf + 2 * D * 4;
  static const long yoff[] = {1, -1, D, -D};
  for (size_t i = 0; i < sizeof yoff / sizeof yoff[0]; i++) {
    kt_arg a[] = {kt_arg_ptr(x + (uint64_t)(yoff[i] * 4), KT_F32), kt_arg_ptr(x, KT_F32), kt_arg_ptr(0, KT_F32),
                  kt_arg_ptr(w, KT_F32), kt_arg_i32(N), kt_arg_i32(D), kt_arg_f32(1e-5f)};
    refused(rt, rms, a, 7, buf, h, bytes, "rmsnorm_fwd: y (written) overlaps x in ");
  }
  kt_arg n[] = {kt_arg_ptr(x, KT_F32), kt_arg_ptr(x, KT_F32), kt_arg_ptr(0, KT_F32), kt_arg_ptr(x + 4 * D * 4, KT_F32),
                kt_arg_i32(N), kt_arg_i32(D), kt_arg_f32(1e-5f)};
  refused(rt, rms, n, 7, buf, h, bytes, "rmsnorm_fwd: y (written) overlaps w in 4096 bytes");
  static const long xoff[] = {1, 256, -1};
  for (size_t i = 0; i < sizeof xoff / sizeof xoff[0]; i++) {
    kt_arg b[] = {kt_arg_ptr(buf + 8, KT_F32), kt_arg_ptr(buf + 8 + (uint64_t)(xoff[i] * 4), KT_F32), kt_arg_i32(SN / 4)};
    refused(rt, sh, b, 3, buf, h, bytes, "shift_left: y (written) overlaps x in ");
  }
  kt_device_free(rt, buf);
  kt_device_free(rt, w);
  free(h);
}

static void partial_overlaps_are_refused(void) {
  static logbuf lb;
  const char *cache = cache_named("alias.db");
  kt_runtime *rt = open_on(cache, &lb, 0);
  if (!rt) return;
  kt_kernel *rms, *sh;
  if (g_load_kernels(rt, "kernels_src/rmsnorm.json", &rms, "tests/specs/shift.json", &sh, NULL)) return;
  refusals(rt, rms, sh);
  ASSERT_EQ(rows(cache, "configs") + rows(cache, "trials") + rows(cache, "quarantine"), 0);
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(rt, &st);
  ASSERT_EQ(st.tunings, 0);
  long br, bs;
  normal_calls(rt, rms, sh, &br, &bs);
  ASSERT_EQ(br, 0);
  ASSERT_EQ(bs, 0);
  ASSERT_EQ(rows(cache, "configs"), 2);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE status != 'ok'"), 0);
  kt_runtime_close(rt);
  char out[4096];
  ASSERT_EQ(t_sh(out, sizeof out, "%s --alias-child %s", g_self, cache), 0);
  ASSERT_STR_EQ(out, "rmsnorm bad=0 shift bad=0 tunings=0\n");
}

/* rmsnorm_fwd with y one row ahead of x in buf (N + 1 rows holding h),
** launched by kt_launch (cfg NULL) or kt_launch_config. Returns the bad
** elements of y against the norm of x as it was, plus one for a first row
** (the bytes before y) that changed; -1 where a call failed. */
static long staged_rms(kt_runtime *rt, kt_kernel *rms, uint64_t buf, uint64_t dw, const float *h, const float *w,
                       const char *cfg) {
  enum { E = (N + 1) * D };
  static float got[E];
  static double ref[N * D];
  kt_arg a[] = {kt_arg_ptr(buf + D * 4, KT_F32), kt_arg_ptr(buf, KT_F32), kt_arg_ptr(0, KT_F32), kt_arg_ptr(dw, KT_F32),
                kt_arg_i32(N), kt_arg_i32(D), kt_arg_f32(1e-5f)};
  if (kt_device_upload(rt, buf, h, sizeof got)) return -1;
  kt_status st = cfg ? kt_launch_config(rms, NULL, a, 7, cfg) : kt_launch(rms, NULL, a, 7);
  if (st || kt_stream_sync(rt, NULL) || kt_device_download(rt, got, buf, sizeof got)) {
    t_fail(__FILE__, __LINE__, "%s: %s", cfg ? cfg : "kt_launch", kt_errmsg(rt));
    return -1;
  }
  rms_ref(h, w, N, ref);
  return rms_bad(got + D, ref, N) + (memcmp(got, h, D * 4) != 0);
}

/* With stage_aliased the same calls run as if out of place: y one row
** ahead of x gets the norm of x as it was, from kt_launch and from
** kt_launch_config at two configs, and shift_left with x one element past
** y (a left shift in place) gets y[i] = x[i + 1]. The bytes outside y are
** untouched. kt_kernel_time never stages: it refuses the call. */
static void partial_overlaps_are_staged(void) {
  static logbuf lb;
  kt_runtime *rt = open_on(cache_named("stage.db"), &lb, 1);
  if (!rt) return;
  kt_kernel *rms, *sh;
  if (g_load_kernels(rt, "kernels_src/rmsnorm.json", &rms, "tests/specs/shift.json", &sh, NULL)) return;
  size_t elems = (size_t)(N + 1) * D;
  static float h[(N + 1) * D], got[(N + 1) * D], w[D];
  fill(h, elems, 5);
  fill(w, D, 6);
  uint64_t buf, dw;
  ASSERT_STATUS(kt_device_alloc(rt, sizeof h, &buf), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, sizeof w, &dw), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, dw, w, sizeof w), KT_OK);
  ASSERT_EQ(staged_rms(rt, rms, buf, dw, h, w, NULL), 0);
  ASSERT_EQ(staged_rms(rt, rms, buf, dw, h, w, "BLOCK=128,ROWS=4,VEC=1"), 0);
  ASSERT_EQ(staged_rms(rt, rms, buf, dw, h, w, "BLOCK=256,ROWS=1,VEC=4"), 0);
  /* shift_left in place, one element apart. */
  ASSERT_STATUS(kt_device_upload(rt, buf, h, sizeof h), KT_OK);
  int n = (int)elems - 1;
  kt_arg b[] = {kt_arg_ptr(buf, KT_F32), kt_arg_ptr(buf + 4, KT_F32), kt_arg_i32(n - 1)};
  double med = -1, spread = -1;
  ASSERT_STATUS(kt_kernel_time(sh, b, 3, "BLOCK=256", &med, &spread), KT_ERR_ALIAS);
  ASSERT_CONTAINS(kt_errmsg(rt), "shift_left: y (written) overlaps x in ");
  kt_status st = kt_launch_config(sh, NULL, b, 3, "BLOCK=256");
  if (st) t_fail(__FILE__, __LINE__, "%s", kt_errmsg(rt));
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt_device_download(rt, got, buf, sizeof got), KT_OK);
  long bad = 0;
  for (int i = 0; i < n - 1; i++) bad += got[i] != h[i + 2];
  ASSERT_EQ(bad, 0);
  ASSERT_TRUE(memcmp(got + n - 1, h + n - 1, 2 * 4) == 0);
  kt_device_free(rt, buf);
  kt_device_free(rt, dw);
  kt_runtime_close(rt);
}

/* magic: MODE 1 fails only on data holding 12345, MODE 2 on any data. On
** such data the MODE 1 rejections are this call's own: not stored, and no
** winner stored either; MODE 2's are stored. The next process, on plain
** data, measures MODE 1 and stores a winner. */
static void magic_call(kt_runtime *rt, kt_kernel *k, int with_magic, long *bad) {
  enum { M = 4096 };
  static float x[M], y[M];
  fill(x, M, 11);
  if (with_magic)
    for (int i = 0; i < M; i += 97) x[i] = 12345.0f;
  uint64_t dx, dy;
  *bad = -1;
  if (kt_device_alloc(rt, sizeof x, &dx) || kt_device_alloc(rt, sizeof y, &dy)) return;
  kt_device_upload(rt, dx, x, sizeof x);
  kt_device_fill(rt, dy, 0xFF, sizeof y);
  kt_arg a[] = {kt_arg_ptr(dy, KT_F32), kt_arg_ptr(dx, KT_F32), kt_arg_i32(M)};
  kt_status st = kt_launch(k, NULL, a, 3);
  if (st) t_fail(__FILE__, __LINE__, "%s", kt_errmsg(rt));
  if (!st && !kt_stream_sync(rt, NULL) && !kt_device_download(rt, y, dy, sizeof y)) {
    *bad = 0;
    for (int i = 0; i < M; i++) *bad += y[i] != 2.0f * x[i];
  }
  kt_device_free(rt, dx);
  kt_device_free(rt, dy);
}

static void data_sensitive_rejections_are_not_stored(void) {
  static logbuf lb;
  const char *cache = cache_named("magic.db");
  kt_runtime *rt = open_on(cache, &lb, 0);
  if (!rt) return;
  kt_kernel *k;
  if (g_load_kernels(rt, "tests/specs/magic.json", &k, NULL)) return;
  long bad;
  magic_call(rt, k, 1, &bad);
  ASSERT_EQ(bad, 0);
  ASSERT_CONTAINS(lb.text, "2 configs were rejected on this call's data but not on synthetic inputs");
  ASSERT_EQ(rows(cache, "configs"), 0);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE config LIKE '%\"MODE\":1%'"), 0);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE config LIKE '%\"MODE\":2%' AND status = 'mismatch'"),
            2);
  /* A verdict on compiled code names its compiler (tune/tuner.c). */
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE status = 'mismatch' AND detail LIKE 'NVRTC %: %'"), 2);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE status = 'ok'"), 2);
  kt_runtime_close(rt);
  rt = open_on(cache, &lb, 0);
  ASSERT_TRUE(rt);
  if (!rt || g_load_kernels(rt, "tests/specs/magic.json", &k, NULL)) return;
  magic_call(rt, k, 0, &bad);
  ASSERT_EQ(bad, 0);
  ASSERT_TRUE(!strstr(lb.text, "rejected on this call's data"));
  ASSERT_EQ(rows(cache, "configs"), 1);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE status = 'ok'"), 4);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM trials WHERE status = 'mismatch'"), 2);
  kt_runtime_close(rt);
}

/* stamp writes the clock: two runs of the default disagree, so the tuning
** says so, stores nothing, and the process keeps the default for the key
** (no second tuning). */
static void unreproducible_reference_stores_nothing(void) {
  static logbuf lb;
  const char *cache = cache_named("stamp.db");
  kt_runtime *rt = open_on(cache, &lb, 0);
  if (!rt) return;
  kt_kernel *k;
  if (g_load_kernels(rt, "tests/specs/stamp.json", &k, NULL)) return;
  uint64_t y;
  ASSERT_STATUS(kt_device_alloc(rt, 4096 * 4, &y), KT_OK);
  kt_arg a[] = {kt_arg_ptr(y, KT_F32), kt_arg_i32(4096)};
  for (int i = 0; i < 3; i++) ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_CONTAINS(lb.text, "stamp {\"n\":4096,\"y\":16}: the default config gave different results in two runs on "
                           "the same inputs (y: ");
  ASSERT_CONTAINS(lb.text, "nothing is tuned or stored; the default config is used");
  ASSERT_EQ(rows(cache, "configs") + rows(cache, "trials"), 0);
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(rt, &st);
  ASSERT_EQ(st.tunings, 1);
  char cfg[64];
  ASSERT_STATUS(kt_kernel_config_for(k, a, 2, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(cfg, "BLOCK=128");
  kt_device_free(rt, y);
  kt_runtime_close(rt);
}

/* kt_kernel_tune says what happened as data: a fresh key is tuned with
** every candidate measured, the same key again is cached; on data that
** trips MODE 1 the winner is local and MODE 1's rejections are not stored;
** stamp's reference does not reproduce. */
static void tune_reports(void) {
  static logbuf lb;
  kt_runtime *rt = open_on(cache_named("report.db"), &lb, 0);
  if (!rt) return;
  kt_kernel *add, *mg, *st;
  if (g_load_kernels(rt, "tests/specs/add_one.json", &add, "tests/specs/magic.json", &mg, "tests/specs/stamp.json",
                     &st, NULL))
    return;
  enum { M = 4096 };
  static float x[M];
  fill(x, M, 21);
  for (int i = 0; i < M; i += 101) x[i] = 12345.0f;
  uint64_t dx, dy;
  ASSERT_STATUS(kt_device_alloc(rt, sizeof x, &dx), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, sizeof x, &dy), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, dx, x, sizeof x), KT_OK);
  kt_arg a[] = {kt_arg_ptr(dx, KT_F32), kt_arg_i64(M)};
  kt_tune_report *r = NULL;
  ASSERT_STATUS(kt_kernel_tune(add, a, 2, &r), KT_OK);
  ASSERT_TRUE(r && r->outcome == KT_TUNE_TUNED);
  if (r) {
    int ok = 0;
    for (int i = 0; i < r->ncandidates; i++) ok += r->candidates[i].status == KT_TRIAL_OK && r->candidates[i].measured;
    ASSERT_EQ(ok, 12);
    ASSERT_TRUE(r->time_us > 0 && r->default_us > 0 && r->time_us <= r->default_us);
  }
  kt_tune_report_free(r);
  ASSERT_STATUS(kt_kernel_tune(add, a, 2, &r), KT_OK);
  ASSERT_TRUE(r && r->outcome == KT_TUNE_CACHED && r->ncandidates == 12);
  kt_tune_report_free(r);
  kt_arg b[] = {kt_arg_ptr(dy, KT_F32), kt_arg_ptr(dx, KT_F32), kt_arg_i32(M)};
  ASSERT_STATUS(kt_kernel_tune(mg, b, 3, &r), KT_OK);
  ASSERT_TRUE(r && r->outcome == KT_TUNE_TUNED_LOCAL);
  for (int i = 0; r && i < r->ncandidates; i++) {
    const kt_candidate *c = &r->candidates[i];
    int mode = strstr(c->config, "\"MODE\":1") ? 1 : strstr(c->config, "\"MODE\":2") ? 2 : 0;
    ASSERT_EQ(c->status, mode ? KT_TRIAL_MISMATCH : KT_TRIAL_OK);
    ASSERT_EQ(c->stored, mode != 1);
  }
  kt_tune_report_free(r);
  kt_arg c[] = {kt_arg_ptr(dy, KT_F32), kt_arg_i32(M)};
  ASSERT_STATUS(kt_kernel_tune(st, c, 2, &r), KT_OK);
  ASSERT_TRUE(r && r->outcome == KT_TUNE_UNSTABLE && r->ncandidates == 0);
  if (r) ASSERT_STR_EQ(r->config, "{\"BLOCK\":128}");
  kt_tune_report_free(r);
  kt_device_free(rt, dx);
  kt_device_free(rt, dy);
  kt_runtime_close(rt);
}

const kt_test gpu_alias_tests[] = {
    {"gpu alias: partial overlaps refused, bytes untouched, then normal calls here and in a new process",
     partial_overlaps_are_refused},
    {"gpu alias: partial overlaps staged as if out of place, forced configs too", partial_overlaps_are_staged},
    {"gpu alias: a rejection only the caller's data causes is not stored", data_sensitive_rejections_are_not_stored},
    {"gpu alias: a reference that does not reproduce stores nothing", unreproducible_reference_stores_nothing},
    {"gpu alias: kt_kernel_tune reports tuned, cached, local and unstable keys", tune_reports},
    {NULL, NULL},
};
