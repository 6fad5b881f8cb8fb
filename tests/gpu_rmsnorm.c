/* RMSNorm forward on the GPU against a float64 host reference. Outputs are
** poisoned (0xFF bytes: NaN) before each launch, so an unwritten element
** fails the comparison. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "device/nvrtc.h"
#include "gpu_util.h"
#include "harness.h"

typedef struct shape {
  int T, D;
  kt_dtype dt;
  int res;
  int offset;   /* elements added to x's address (breaks alignment) */
  int inplace;  /* y is x */
} shape;

typedef struct bufs {
  kt_runtime *rt;
  shape s;
  uint64_t y, x, res, w;   /* allocations */
  uint64_t px, py;         /* pointers passed */
  double *hx, *hres, *hw, *ref;
  void *stage;
  size_t esz, n;
} bufs;

static void bufs_free(bufs *b) {
  kt_device_free(b->rt, b->y);
  kt_device_free(b->rt, b->x);
  kt_device_free(b->rt, b->res);
  kt_device_free(b->rt, b->w);
  free(b->hx);
  free(b->hres);
  free(b->hw);
  free(b->ref);
  free(b->stage);
}

/* Fresh random inputs and the float64 reference computed from the values
** as stored (after rounding to the dtype). */
static int bufs_make(bufs *b, kt_runtime *rt, shape s, uint64_t seed) {
  memset(b, 0, sizeof *b);
  b->rt = rt;
  b->s = s;
  b->esz = kt_dtype_size(s.dt);
  b->n = (size_t)s.T * s.D;
  size_t bytes = (b->n + 16) * b->esz;
  b->hx = malloc(b->n * sizeof(double));
  b->hres = malloc(b->n * sizeof(double));
  b->hw = malloc((size_t)s.D * sizeof(double));
  b->ref = malloc(b->n * sizeof(double));
  b->stage = malloc(bytes);
  if (!b->hx || !b->hres || !b->hw || !b->ref || !b->stage) return -1;
  for (size_t i = 0; i < b->n; i++) {
    b->hx[i] = g_uniform(&seed, -2, 2);
    b->hres[i] = g_uniform(&seed, -1, 1);
  }
  for (int i = 0; i < s.D; i++) b->hw[i] = g_uniform(&seed, 0.5, 1.5);
  /* Round inputs to the dtype so the reference sees what the GPU sees. */
  g_round(s.dt, b->stage, b->hx, b->n);
  g_round(s.dt, b->stage, b->hres, b->n);
  g_round(s.dt, b->stage, b->hw, (size_t)s.D);
  /* h = x + res rounded to the dtype, as the kernel normalises it (ref
  ** holds h until the row's reference replaces it). */
  for (size_t i = 0; i < b->n; i++) b->ref[i] = b->hx[i] + (s.res ? b->hres[i] : 0);
  g_round(s.dt, b->stage, b->ref, b->n);
  for (int r = 0; r < s.T; r++) {
    double *h = b->ref + (size_t)r * s.D, ss = 0;
    for (int i = 0; i < s.D; i++) ss += h[i] * h[i];
    double rstd = 1.0 / sqrt(ss / s.D + 1e-6);
    for (int i = 0; i < s.D; i++) h[i] = h[i] * rstd * b->hw[i];
  }
  if (kt_device_alloc(rt, bytes, &b->x) || kt_device_alloc(rt, bytes, &b->y) ||
      kt_device_alloc(rt, bytes, &b->res) || kt_device_alloc(rt, bytes, &b->w))
    return -1;
  b->px = b->x + (uint64_t)s.offset * b->esz;
  b->py = s.inplace ? b->px : b->y;
  return 0;
}

/* Upload inputs, poison the output. */
static int bufs_reset(bufs *b) {
  const shape *s = &b->s;
  g_store(s->dt, b->stage, b->hx, b->n);
  if (kt_device_upload(b->rt, b->px, b->stage, b->n * b->esz)) return -1;
  g_store(s->dt, b->stage, b->hres, b->n);
  if (kt_device_upload(b->rt, b->res, b->stage, b->n * b->esz)) return -1;
  g_store(s->dt, b->stage, b->hw, (size_t)s->D);
  if (kt_device_upload(b->rt, b->w, b->stage, (size_t)s->D * b->esz)) return -1;
  if (!s->inplace && kt_device_fill(b->rt, b->y, 0xff, (b->n + 16) * b->esz)) return -1;
  return 0;
}

static void bufs_args(const bufs *b, kt_arg *a) {
  const shape *s = &b->s;
  a[0] = kt_arg_ptr(b->py, s->dt);
  a[1] = kt_arg_ptr(b->px, s->dt);
  a[2] = kt_arg_ptr(s->res ? b->res : 0, s->dt);
  a[3] = kt_arg_ptr(b->w, s->dt);
  a[4] = kt_arg_i32(s->T);
  a[5] = kt_arg_i32(s->D);
  a[6] = kt_arg_f32(1e-6f);
}

/* Compare y with the reference; returns the number of bad elements and
** describes the first in msg. Also checks that y's poison past the end of
** the output is intact (no write outside the buffer). */
static long bufs_check(bufs *b, char *msg, size_t n) {
  const shape *s = &b->s;
  double tol = s->dt == KT_F32 ? 1e-5 : 1.6e-2;
  if (kt_device_download(b->rt, b->stage, b->py, (b->n + (s->inplace ? 0 : 16)) * b->esz)) {
    snprintf(msg, n, "download: %s", kt_errmsg(b->rt));
    return -1;
  }
  long bad = 0;
  for (size_t i = 0; i < b->n; i++) {
    double y = g_load(s->dt, b->stage, i), r = b->ref[i];
    if (!(fabs(y - r) <= tol * (1 + fabs(r)))) {
      if (!bad++)
        snprintf(msg, n, "T=%d D=%d %s res=%d offset=%d: y[%zu] (row %zu) = %g, reference %g", s->T, s->D,
                 kt_dtype_name(s->dt), s->res, s->offset, i, i / (size_t)s->D, y, r);
    }
  }
  if (!s->inplace) {
    const unsigned char *tail = (const unsigned char *)b->stage + b->n * b->esz;
    for (size_t i = 0; i < 16 * b->esz; i++)
      if (tail[i] != 0xff) {
        if (!bad++) snprintf(msg, n, "T=%d D=%d: byte %zu past the output was written", s->T, s->D, i);
        break;
      }
  }
  return bad;
}

static const shape shapes[] = {
    {1, 256, KT_BF16, 0, 0, 0},     {1, 4096, KT_F32, 1, 0, 0},    {7, 100, KT_BF16, 1, 0, 0},
    {32, 1000, KT_F32, 0, 0, 0},    {450, 256, KT_BF16, 1, 0, 0},  {500, 8192, KT_BF16, 0, 0, 0},
    {100, 8192, KT_F32, 1, 0, 0},   {5000, 2048, KT_BF16, 1, 0, 0}, {2, 8, KT_BF16, 0, 0, 0},
    {3, 24, KT_F32, 1, 0, 0},       {64, 4096, KT_BF16, 0, 1, 0},  {64, 1000, KT_F32, 1, 1, 0},
    {128, 2048, KT_BF16, 1, 0, 1},  {20000, 256, KT_BF16, 0, 0, 0}, {33, 65, KT_BF16, 1, 0, 0},
};

/* Every shape through kt_launch, so each new key is tuned and its winner
** checked against the float64 reference. */
static void tuned_config_every_shape(void) {
  kt_runtime *rt = g_open();
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    bufs b;
    kt_arg a[7];
    char msg[512] = "";
    if (bufs_make(&b, rt, shapes[i], 1000 + i) || bufs_reset(&b)) {
      t_fail(__FILE__, __LINE__, "setup: %s", kt_errmsg(rt));
      bufs_free(&b);
      break;
    }
    bufs_args(&b, a);
    kt_status st = kt_launch(k, NULL, a, 7);
    if (st) t_fail(__FILE__, __LINE__, "kt_launch: %s", kt_errmsg(rt));
    long bad = st ? 0 : bufs_check(&b, msg, sizeof msg);
    if (bad) t_fail(__FILE__, __LINE__, "%ld bad elements; first: %s", bad, msg);
    bufs_free(&b);
    if (st || bad) break;
  }
  kt_runtime_close(rt);
}

/* Every config the constraints allow for a shape gives the right answer;
** those they refuse are refused, never launched. */
static void every_config_is_correct(void) {
  kt_runtime *rt = g_open();
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  static const shape sweep[] = {{450, 1000, KT_BF16, 1, 0, 0},
                                {7, 8192, KT_F32, 0, 0, 0},
                                {100, 256, KT_BF16, 0, 1, 0},
                                {300, 2048, KT_BF16, 1, 0, 1}};
  static const int blocks[] = {128, 256, 512, 1024}, rows[] = {1, 2, 4, 8}, vecs[] = {1, 2, 4, 8};
  int ran = 0, refused = 0;
  for (size_t i = 0; i < sizeof sweep / sizeof sweep[0]; i++) {
    bufs b;
    if (bufs_make(&b, rt, sweep[i], 77 + i)) {
      t_fail(__FILE__, __LINE__, "setup: %s", kt_errmsg(rt));
      bufs_free(&b);
      return;
    }
    for (int bi = 0; bi < 4; bi++)
      for (int ri = 0; ri < 4; ri++)
        for (int vi = 0; vi < 4; vi++) {
          char cfg[64], msg[512] = "";
          snprintf(cfg, sizeof cfg, "BLOCK=%d,ROWS=%d,VEC=%d", blocks[bi], rows[ri], vecs[vi]);
          kt_arg a[7];
          if (bufs_reset(&b)) {
            t_fail(__FILE__, __LINE__, "reset: %s", kt_errmsg(rt));
            bufs_free(&b);
            return;
          }
          bufs_args(&b, a);
          kt_status st = kt_launch_config(k, NULL, a, 7, cfg);
          if (st == KT_ERR_CONSTRAINT) {
            refused++;
            continue;
          }
          if (st) {
            t_fail(__FILE__, __LINE__, "%s: %s", cfg, kt_errmsg(rt));
            bufs_free(&b);
            return;
          }
          ran++;
          long bad = bufs_check(&b, msg, sizeof msg);
          if (bad) {
            t_fail(__FILE__, __LINE__, "%s: %ld bad elements; first: %s", cfg, bad, msg);
            bufs_free(&b);
            return;
          }
        }
    bufs_free(&b);
  }
  printf("    %d configs checked, %d refused by constraints\n", ran, refused);
  ASSERT_TRUE(ran > 60);
  ASSERT_TRUE(refused > 20);
}

/* The variant table keys on every compile-time constant: the same kernel
** called with and without a residual, and in two dtypes, in one process,
** each gets its own module and the right answer. */
static void variants_coexist(void) {
  kt_runtime *rt = g_open();
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  static const shape seq[] = {{64, 512, KT_BF16, 1, 0, 0}, {64, 512, KT_BF16, 0, 0, 0},
                              {64, 512, KT_F32, 1, 0, 0},  {64, 512, KT_BF16, 1, 0, 0},
                              {64, 512, KT_F32, 0, 0, 0}};
  for (int rep = 0; rep < 2; rep++)
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
      bufs b;
      kt_arg a[7];
      char msg[512] = "";
      ASSERT_TRUE(!bufs_make(&b, rt, seq[i], 5 + i + rep) && !bufs_reset(&b));
      bufs_args(&b, a);
      kt_status st = kt_launch_config(k, NULL, a, 7, "BLOCK=128,ROWS=1,VEC=4");
      long bad = st ? 0 : bufs_check(&b, msg, sizeof msg);
      bufs_free(&b);
      ASSERT_STATUS(st, KT_OK);
      if (bad) t_fail(__FILE__, __LINE__, "%ld bad: %s", bad, msg);
      ASSERT_EQ(bad, 0);
    }
  kt_runtime_close(rt);
}

static int tunings;
static void count_tunings(void *user, kt_log_level level, const char *msg) {
  (void)user;
  if (!strncmp(msg, "tuned rmsnorm_fwd", 17)) tunings++;
  else if (level <= KT_LOG_WARN) fprintf(stderr, "    log: %s\n", msg);
}

/* A runtime on a fresh cache (name, in a test directory) whose log counts
** rmsnorm's tunings in `tunings`, set to 0; NULL (the test skipped)
** without a GPU. */
static kt_runtime *open_counting(const char *name) {
  static char cache[700];
  kt_options o;
  kt_options_init(&o);
  snprintf(cache, sizeof cache, "%s/%s", t_tmpdir(), name);
  o.cache_path = cache;
  o.log = count_tunings;
  o.log_level = KT_LOG_INFO;
  tunings = 0;
  return g_open_with(&o);
}

/* T from 1 to 24000 at D=256: exactly one tuning and one configs row, and
** every launch correct. (The upstream bug: NB = cdiv(T, 2048) in the key
** tuned again for each new T, and crashed mid-benchmark.) */
static void one_tuning_for_every_T(void) {
  kt_runtime *rt = open_counting("ktune.db");
  if (!rt) return;
  kt_status st;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  static const int Ts[] = {1, 7, 32, 100, 450, 500, 5000, 10000, 20000, 24000};
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
    bufs b;
    kt_arg a[7];
    char msg[512] = "";
    shape s = {Ts[i], 256, KT_BF16, 0, 0, 0};
    ASSERT_TRUE(!bufs_make(&b, rt, s, 40 + i) && !bufs_reset(&b));
    bufs_args(&b, a);
    st = kt_launch(k, NULL, a, 7);
    long bad = st ? 0 : bufs_check(&b, msg, sizeof msg);
    bufs_free(&b);
    if (st) t_fail(__FILE__, __LINE__, "T=%d: %s", Ts[i], kt_errmsg(rt));
    ASSERT_STATUS(st, KT_OK);
    if (bad) t_fail(__FILE__, __LINE__, "%ld bad: %s", bad, msg);
    ASSERT_EQ(bad, 0);
  }
  ASSERT_EQ(tunings, 1);
  long c[4];
  ASSERT_STATUS(kt_cache_counts(rt, c), KT_OK);
  ASSERT_EQ(c[0], 1);
  kt_runtime_close(rt);
}

/* A batch of no rows (torch and XLA give its tensors null addresses):
** kt_launch and kt_launch_config return KT_OK, nothing is tuned or
** stored (with or without addresses for the rows), and the weight's bytes
** are as they were. */
static void empty_calls_launch_and_tune_nothing(void) {
  kt_runtime *rt = open_counting("empty.db");
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  uint64_t w, y;
  unsigned char hw[512], back[512];
  for (int i = 0; i < 512; i++) hw[i] = (unsigned char)(i * 7);
  ASSERT_STATUS(kt_device_alloc(rt, sizeof hw, &w), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, 4096, &y), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, w, hw, sizeof hw), KT_OK);
  kt_arg a[] = {kt_arg_ptr(0, KT_BF16), kt_arg_ptr(0, KT_BF16), kt_arg_ptr(0, KT_BF16), kt_arg_ptr(w, KT_BF16),
                kt_arg_i32(0), kt_arg_i32(256), kt_arg_f32(1e-6f)};
  for (int i = 0; i < 3; i++) {
    a[0].v.ptr = a[1].v.ptr = i == 2 ? y : 0; /* addresses of rows, or none */
    kt_status st = i == 1 ? kt_launch_config(k, NULL, a, 7, "BLOCK=128,ROWS=4,VEC=8") : kt_launch(k, NULL, a, 7);
    if (st) t_fail(__FILE__, __LINE__, "call %d: %s", i, kt_errmsg(rt));
  }
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt_device_download(rt, back, w, sizeof back), KT_OK);
  ASSERT_TRUE(memcmp(hw, back, sizeof hw) == 0);
  ASSERT_EQ(tunings, 0);
  long c[4];
  ASSERT_STATUS(kt_cache_counts(rt, c), KT_OK);
  ASSERT_EQ(c[0], 0);
  kt_device_free(rt, w);
  kt_device_free(rt, y);
  kt_runtime_close(rt);
}

/* A call that launches no program but has bytes to write (the norm
** backward of no rows with its 66 partial rows) launches nothing and
** tunes nothing, forced config or not: the partial rows keep their bytes,
** and no launch is counted. The reduce of no rows
** is timed at N = P (its tune_at) and gives dw of zeros. rmsnorm_small
** (rows left out of the key, no tune_at) of no rows has nothing to time,
** for kt_kernel_tune and kt_kernel_time: a winner timed there would serve
** every N. */
static void calls_of_no_program_settle_nothing(void) {
  kt_runtime *rt = open_counting("noprog.db");
  if (!rt) return;
  kt_kernel *bwd, *red, *small;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/layernorm_bwd.json", &bwd), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/layernorm_bwd_reduce.json", &red), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &small), KT_OK);
  enum { D = 1024, P = 66 };
  static unsigned char poison[P * D * 4], back[P * D * 4];
  memset(poison, 0x7f, sizeof poison);
  uint64_t part, w, dw, rows;
  ASSERT_STATUS(kt_device_alloc(rt, sizeof poison, &part), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, D * 2, &w), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, D * 2, &dw), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, 4096, &rows), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, part, poison, sizeof poison), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, dw, poison, D * 2), KT_OK);
  kt_arg b[] = {kt_arg_ptr(0, KT_BF16), kt_arg_ptr(part, KT_F32), kt_arg_ptr(0, KT_F32), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(0, KT_BF16), kt_arg_ptr(w, KT_BF16),   kt_arg_ptr(0, KT_F32), kt_arg_ptr(0, KT_F32),
                kt_arg_ptr(0, KT_BF16), kt_arg_i32(0),            kt_arg_i32(D),         kt_arg_i32(1),
                kt_arg_i32(P),          kt_arg_i32(1)};
  char cfg[KT_CONFIG_MAX];
  ASSERT_STATUS(kt_launch(bwd, NULL, b, 14), KT_OK);
  ASSERT_STATUS(kt_kernel_default_for(bwd, b, 14, cfg, sizeof cfg), KT_OK);
  ASSERT_STATUS(kt_launch_config(bwd, NULL, b, 14, cfg), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt_device_download(rt, back, part, sizeof back), KT_OK);
  ASSERT_TRUE(memcmp(poison, back, sizeof back) == 0);
  kt_stats n = {.size = sizeof n};
  ASSERT_STATUS(kt_runtime_stats(rt, &n), KT_OK);
  ASSERT_EQ((long)n.tunings, 0);
  ASSERT_EQ((long)n.launches, 0); /* a grid of 0 launches no kernel */
  kt_arg r[] = {kt_arg_ptr(dw, KT_BF16), kt_arg_ptr(0, KT_BF16), kt_arg_ptr(part, KT_F32), kt_arg_ptr(0, KT_F32),
                kt_arg_i32(0),           kt_arg_i32(D),          kt_arg_i32(P)};
  ASSERT_STATUS(kt_launch(red, NULL, r, 7), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt_device_download(rt, back, dw, D * 2), KT_OK);
  for (int i = 0; i < D * 2; i++)
    if (back[i]) t_fail(__FILE__, __LINE__, "dw byte %d is %d, not 0", i, back[i]);
  ASSERT_STATUS(kt_runtime_stats(rt, &n), KT_OK);
  ASSERT_EQ((long)n.tunings, 1);
  ASSERT_EQ((long)n.launches, 1);
  kt_arg a[] = {kt_arg_ptr(rows, KT_BF16), kt_arg_ptr(rows + 2048, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(w, KT_BF16),    kt_arg_i32(0),                    kt_arg_i32(256),
                kt_arg_f32(1e-6f)};
  kt_tune_report *rep = NULL;
  double us, spread;
  ASSERT_STATUS(kt_kernel_tune(small, a, 7, &rep), KT_ERR_INVALID);
  ASSERT_CONTAINS(kt_errmsg(rt), "}: nothing to time: the call launches no program (grid[0], cdiv(N, ROWS), is 0");
  ASSERT_STATUS(kt_kernel_time(small, a, 7, NULL, &us, &spread), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_small: nothing to time: the call launches no program (grid[0], cdiv(N, "
                               "ROWS), is 0)");
  ASSERT_STATUS(kt_runtime_stats(rt, &n), KT_OK);
  ASSERT_EQ((long)n.tunings, 1);
  long c[4];
  ASSERT_STATUS(kt_cache_counts(rt, c), KT_OK);
  ASSERT_EQ(c[0], 1); /* the reduce's row alone */
  kt_device_free(rt, part);
  kt_device_free(rt, w);
  kt_device_free(rt, dw);
  kt_device_free(rt, rows);
  kt_runtime_close(rt);
}

static char ptx_log[4096];

static void keep_warnings(void *user, kt_log_level level, const char *msg) {
  (void)user;
  size_t n = strlen(ptx_log);
  if (level <= KT_LOG_WARN) snprintf(ptx_log + n, sizeof ptx_log - n, "%s\n", msg);
}

/* A GPU newer than the toolkit's NVRTC (made so here: NVRTC lists no arch
** from the device's on) gets PTX of the newest arch NVRTC has, which the
** driver compiles as the module loads: every config runs and is right. */
static void a_gpu_newer_than_nvrtc_runs_ptx(void) {
  kt_options o;
  kt_options_init(&o);
  o.no_cache = 1;
  o.log = keep_warnings;
  o.log_level = KT_LOG_WARN;
  kt_runtime *rt = g_open_with(&o);
  if (!rt) return;
  kt__nvrtc_cap_archs(atoi(kt_runtime_arch(rt) + 3) - 1);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  static const char *cfgs[] = {"BLOCK=128,ROWS=1,VEC=8", "BLOCK=128,ROWS=4,VEC=4", "BLOCK=1024,ROWS=2,VEC=1"};
  bufs b;
  shape s = {450, 1000, KT_BF16, 1, 0, 0};
  int ok = !bufs_make(&b, rt, s, 91);
  for (size_t i = 0; ok && i < sizeof cfgs / sizeof cfgs[0]; i++) {
    kt_arg a[7];
    char msg[512] = "";
    ok = !bufs_reset(&b);
    bufs_args(&b, a);
    kt_status st = ok ? kt_launch_config(k, NULL, a, 7, cfgs[i]) : KT_ERR_INVALID;
    long bad = st ? 0 : bufs_check(&b, msg, sizeof msg);
    if (st || bad) t_fail(__FILE__, __LINE__, "%s: %s%s", cfgs[i], st ? kt_errmsg(rt) : "bad elements: ", msg);
    ok = !st && !bad;
  }
  kt__nvrtc_cap_archs(0);
  bufs_free(&b);
  kt_stats n = {.size = sizeof n};
  ASSERT_STATUS(kt_runtime_stats(rt, &n), KT_OK);
  ASSERT_EQ((long)n.compiles, 3);
  kt_runtime_close(rt);
  ASSERT_CONTAINS(ptx_log, " does not compile for sm_");
  ASSERT_CONTAINS(ptx_log, ": kernels are compiled to PTX (compute_");
}

const kt_test gpu_rmsnorm_tests[] = {
    {"gpu rmsnorm: one tuning for T from 1 to 24000", one_tuning_for_every_T},
    {"gpu rmsnorm: a batch of no rows launches and tunes nothing", empty_calls_launch_and_tune_nothing},
    {"gpu rmsnorm: a call that launches no program settles nothing", calls_of_no_program_settle_nothing},
    {"gpu rmsnorm: tuned config, every shape", tuned_config_every_shape},
    {"gpu rmsnorm: every allowed config is correct", every_config_is_correct},
    {"gpu rmsnorm: variants with other constants coexist", variants_coexist},
    {"gpu rmsnorm: a GPU newer than NVRTC runs PTX the driver compiles", a_gpu_newer_than_nvrtc_runs_ptx},
    {NULL, NULL},
};
