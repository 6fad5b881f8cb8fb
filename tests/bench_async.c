/* make bench, async against blocking: a toy model's first forward pass
** over 8 unseen norm keys, the first call of an unseen key, and whether the
** background winners are the blocking ones. Each mode has a cache of its
** own, made empty first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ktune.h"

#define NKEYS 8
static const int dims[NKEYS] = {1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120};
enum { ROWS = 4096 };

static double ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct layer {
  uint64_t x, y, w;
  kt_arg a[13];
} layer;

static int layer_make(kt_runtime *rt, layer *l, int D) {
  size_t bytes = (size_t)ROWS * D * 2;
  if (kt_device_alloc(rt, bytes, &l->x) || kt_device_alloc(rt, bytes, &l->y) || kt_device_alloc(rt, D * 2, &l->w) ||
      kt_device_fill(rt, l->x, 0x3c, bytes) || kt_device_fill(rt, l->w, 0x3c, D * 2))
    return -1;
  kt_arg a[] = {kt_arg_ptr(l->y, KT_BF16), kt_arg_ptr(l->x, KT_BF16), kt_arg_ptr(0, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(l->w, KT_BF16), kt_arg_ptr(0, KT_BF16), kt_arg_ptr(0, KT_F32), kt_arg_ptr(0, KT_F32),
                kt_arg_i32(ROWS), kt_arg_i32(D), kt_arg_i32(1), kt_arg_f32(1e-5f), kt_arg_i32(1)};
  memcpy(l->a, a, sizeof a);
  return 0;
}

static void layer_free(kt_runtime *rt, layer *l) {
  kt_device_free(rt, l->x);
  kt_device_free(rt, l->y);
  kt_device_free(rt, l->w);
}

static kt_runtime *open_mode(const char *cache, kt_mode mode, kt_kernel **k) {
  kt_options o;
  kt_options_init(&o);
  o.cache_path = cache;
  o.mode = mode;
  o.log_level = KT_LOG_ERROR;
  kt_runtime *rt;
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", k)) {
    printf("bench async: %s\n", kt_errmsg(rt));
    kt_runtime_close(rt);
    return NULL;
  }
  return rt;
}

/* The first forward pass (every layer once, then a sync) in a mode; the
** winners' configs into cfg. Returns the pass's ms, or -1. */
static double first_pass(const char *cache, kt_mode mode, char cfg[NKEYS][128], double *first_call_ms,
                         double *background_ms) {
  kt_kernel *k;
  kt_runtime *rt = open_mode(cache, mode, &k);
  if (!rt) return -1;
  layer l[NKEYS];
  for (int i = 0; i < NKEYS; i++)
    if (layer_make(rt, &l[i], dims[i])) return -1;
  double t0 = ms_now();
  for (int i = 0; i < NKEYS; i++) {
    double c0 = ms_now();
    if (kt_launch(k, NULL, l[i].a, 13)) printf("bench async: %s\n", kt_errmsg(rt));
    if (!i) *first_call_ms = ms_now() - c0;
  }
  kt_stream_sync(rt, NULL);
  double pass = ms_now() - t0;
  kt_runtime_wait_tuning(rt, -1);
  *background_ms = ms_now() - t0;
  for (int i = 0; i < NKEYS; i++) {
    kt_kernel_config_for(k, l[i].a, 13, cfg[i], 128);
    layer_free(rt, &l[i]);
  }
  kt_runtime_close(rt);
  return pass;
}

/* In a child process: the first call of an unseen key (D=6144), the time
** until kt_launch returns; printed for the parent. */
int bench_async_child(const char *cache) {
  kt_kernel *k;
  kt_runtime *rt = open_mode(cache, KT_MODE_ASYNC, &k);
  layer l;
  if (!rt || layer_make(rt, &l, 6144)) return 1;
  double t0 = ms_now();
  kt_launch(k, NULL, l.a, 13);
  printf("%.2f\n", ms_now() - t0);
  kt_stream_sync(rt, NULL);
  layer_free(rt, &l);
  kt_runtime_close(rt); /* cancels the background tuning */
  return 0;
}

static double unseen_first_call(const char *self, const char *cache) {
  char cmd[1024], out[64] = "";
  snprintf(cmd, sizeof cmd, "'%s' --first-call '%s'", self, cache);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  if (!fgets(out, sizeof out, f)) out[0] = 0;
  pclose(f);
  return out[0] ? atof(out) : -1;
}

/* Both configs timed on one call: how much slower b is than a, in %. */
static double slower_pct(int D, const char *a, const char *b) {
  kt_kernel *k;
  kt_runtime *rt = open_mode(NULL, KT_MODE_OFF, &k);
  layer l;
  double ta = 0, tb = 0, sp;
  if (!rt || layer_make(rt, &l, D)) return 0;
  kt_kernel_time(k, l.a, 13, a, &ta, &sp);
  kt_kernel_time(k, l.a, 13, b, &tb, &sp);
  layer_free(rt, &l);
  kt_runtime_close(rt);
  return ta > 0 ? 100 * (tb - ta) / ta : 0;
}

void bench_async(const char *self) {
  char dir[] = "/tmp/ktune-bench-async-XXXXXX";
  if (!mkdtemp(dir)) return;
  char tune_db[64], async_db[64], fresh_db[64];
  snprintf(tune_db, sizeof tune_db, "%s/tune.db", dir);
  snprintf(async_db, sizeof async_db, "%s/async.db", dir);
  snprintf(fresh_db, sizeof fresh_db, "%s/fresh.db", dir);
  static char blocking[NKEYS][128], background[NKEYS][128];
  double fc_tune, fc_async, bg_tune, bg_async;
  double pass_tune = first_pass(tune_db, KT_MODE_TUNE, blocking, &fc_tune, &bg_tune);
  double pass_async = first_pass(async_db, KT_MODE_ASYNC, background, &fc_async, &bg_async);
  double cached = unseen_first_call(self, async_db), compiled = unseen_first_call(self, fresh_db);
  printf("\nasync against blocking: a toy model's first forward pass, 8 unseen layernorm_fwd keys "
         "(rms, bf16, %d rows, D = 1024 ... 5120)\n", ROWS);
  printf("| figure | blocking (tune) | async | target |\n| --- | ---: | ---: | --- |\n");
  printf("| first pass, launch to sync | %.0f ms | %.0f ms | async < 2000 ms of added stall |\n", pass_tune, pass_async);
  printf("| first call of the pass returns | %.0f ms | %.1f ms | |\n", fc_tune, fc_async);
  printf("| until every key is tuned | %.0f ms | %.0f ms (background) | |\n", bg_tune, bg_async);
  printf("| new process, unseen key, stand-in cubin cached | | %.1f ms | < 50 ms |\n", cached);
  printf("| new process, unseen key, one variant compiled | | %.1f ms | < 1000 ms |\n", compiled);
  printf("\nwinners, blocking against background (same config, or the background one's time)\n");
  printf("| D | blocking | background | background slower by |\n| ---: | --- | --- | ---: |\n");
  for (int i = 0; i < NKEYS; i++) {
    int same = !strcmp(blocking[i], background[i]);
    double pct = same ? 0 : slower_pct(dims[i], blocking[i], background[i]);
    printf("| %d | %s | %s | %s%.1f%% |\n", dims[i], blocking[i], same ? "same" : background[i], same ? "" : "",
           pct);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) printf("bench async: could not remove %s\n", dir);
}
