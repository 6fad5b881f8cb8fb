/* make bench: timings on GPU 0, printed as tables. Not a test: it never
** fails on a number. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/driver.h"
#include "device/rcompile.h"
#include "gpu_util.h"
#include "harness.h"
#include "../tools/shape.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void rmsnorm_table(kt_runtime *rt, kt_kernel *k) {
  static const int shapes[][2] = {{450, 256}, {24000, 256}, {4096, 4096}, {16384, 2048}, {8192, 4096}, {32768, 8192}};
  printf("\nrmsnorm_fwd bf16, tuned config (bytes = read x + write y + w)\n");
  printf("%8s %6s  %-26s %10s %9s\n", "T", "D", "config", "median us", "GB/s");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    int T = shapes[i][0], D = shapes[i][1];
    size_t n = (size_t)T * D;
    uint64_t x = 0, y = 0, w = 0;
    uint16_t *h = malloc(n * 2);
    uint64_t seed = 7;
    for (size_t j = 0; h && j < n; j++) kt_dtype_store(KT_BF16, h, j, g_uniform(&seed, -2, 2));
    if (!h || kt_device_alloc(rt, n * 2, &x) || kt_device_alloc(rt, n * 2, &y) ||
        kt_device_alloc(rt, (size_t)D * 2, &w) || kt_device_upload(rt, x, h, n * 2) ||
        kt_device_upload(rt, w, h, (size_t)D * 2)) {
      printf("setup failed: %s\n", kt_errmsg(rt));
    } else {
      kt_arg a[] = {kt_arg_ptr(y, KT_BF16), kt_arg_ptr(x, KT_BF16), kt_arg_ptr(0, KT_BF16),
                    kt_arg_ptr(w, KT_BF16), kt_arg_i32(T), kt_arg_i32(D), kt_arg_f32(1e-6f)};
      char cfg[128] = "";
      double med, spread;
      kt_kernel_config_for(k, a, 7, cfg, sizeof cfg);
      if (kt_kernel_time(k, a, 7, NULL, &med, &spread))
        printf("%8d %6d  %s\n", T, D, kt_errmsg(rt));
      else
        printf("%8d %6d  %-26s %10.1f %9.0f\n", T, D, cfg, med, (2.0 * n * 2 + D * 2.0) / (med * 1e-6) / 1e9);
    }
    free(h);
    kt_device_free(rt, x);
    kt_device_free(rt, y);
    kt_device_free(rt, w);
  }
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* CPU cost per launch: kt_launch against cuLaunchKernel of the same
** function, back to back on one stream. The two paths alternate over
** several rounds and the medians are compared, because a run of either path
** alone drifts by several percent from one run to the next. */
static void launch_overhead(kt_runtime *rt, kt_kernel *k) {
  enum { ROUNDS = 10, PER = 100000 };
  uint64_t x = 0, y = 0, w = 0;
  if (kt_device_alloc(rt, 256 * 2, &x) || kt_device_alloc(rt, 256 * 2, &y) ||
      kt_device_alloc(rt, 256 * 2, &w) || kt_device_fill(rt, x, 0x3c, 512) || kt_device_fill(rt, w, 0x3c, 512)) {
    printf("setup failed: %s\n", kt_errmsg(rt));
    return;
  }
  kt_arg a[] = {kt_arg_ptr(y, KT_BF16), kt_arg_ptr(x, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(w, KT_BF16), kt_arg_i32(1), kt_arg_i32(256), kt_arg_f32(1e-6f)};
  kt_stream s;
  if (kt_stream_create(rt, &s)) {
    printf("stream: %s\n", kt_errmsg(rt));
    return;
  }
  for (int i = 0; i < 1000; i++) kt_launch(k, s, a, 7);
  kt_stream_sync(rt, s);
  extern kt_status kt__bench_raw_fn(kt_kernel *, const kt_arg *, int, void **, uint32_t *, uint32_t *);
  void *fn;
  uint32_t grid[3], block[3];
  if (kt__bench_raw_fn(k, a, 7, &fn, grid, block)) {
    printf("raw: %s\n", kt_errmsg(rt));
    return;
  }
  void *params[7];
  for (int i = 0; i < 7; i++) params[i] = (void *)&a[i].v;
  double raw[ROUNDS], kt[ROUNDS];
  for (int r = 0; r < ROUNDS; r++)
    for (int half = 0; half < 2; half++) {
      int ktfirst = r % 2, use_kt = half ? !ktfirst : ktfirst;
      double t0 = now_us();
      for (int i = 0; i < PER; i++) {
        if (use_kt) kt_launch(k, s, a, 7);
        else kt__dev_launch(fn, grid, block, 0, s, params, 0);
      }
      kt_stream_sync(rt, s);
      (use_kt ? kt : raw)[r] = (now_us() - t0) / PER;
    }
  kt__dev_launch_dry(1);
  double t0 = now_us();
  for (int i = 0; i < PER * 10; i++) kt_launch(k, s, a, 7);
  double own_us = (now_us() - t0) / (PER * 10);
  kt__dev_launch_dry(0);
  qsort(raw, ROUNDS, sizeof raw[0], cmp_d);
  qsort(kt, ROUNDS, sizeof kt[0], cmp_d);
  printf("\nlaunch cost, %d rounds of %d back-to-back launches each way, alternating (rmsnorm_fwd T=1 D=256, cache hit)\n",
         ROUNDS, PER);
  printf("%-34s %8s %8s %8s  us/launch\n", "path", "min", "median", "max");
  printf("%-34s %8.2f %8.2f %8.2f\n", "cuLaunchKernel", raw[0], raw[ROUNDS / 2], raw[ROUNDS - 1]);
  printf("%-34s %8.2f %8.2f %8.2f\n", "kt_launch", kt[0], kt[ROUNDS / 2], kt[ROUNDS - 1]);
  printf("%-34s %8.3f\n", "ratio of medians", kt[ROUNDS / 2] / raw[ROUNDS / 2]);
  printf("%-34s %8.3f  us/launch (no driver call)\n", "ktune's own CPU work in kt_launch", own_us);
  kt_stream_destroy(rt, s);
  kt_device_free(rt, x);
  kt_device_free(rt, y);
  kt_device_free(rt, w);
}

typedef struct nvlog {
  int compiled, from_cache;
} nvlog;

static void count_compiles(void *user, kt_log_level level, const char *msg) {
  nvlog *l = user;
  (void)level;
  if (strstr(msg, ": compiled in ")) l->compiled++;
  if (strstr(msg, ": cubin from the cache")) l->from_cache++;
}

/* One row of 3072 bf16 values (x, y, w), the args of an RMSNorm call on it. */
typedef struct row3072 {
  uint64_t x, y, w;
  kt_arg a[7];
} row3072;

static void row_make(kt_runtime *rt, row3072 *r) {
  kt_device_alloc(rt, 3072 * 2, &r->x);
  kt_device_alloc(rt, 3072 * 2, &r->y);
  kt_device_alloc(rt, 3072 * 2, &r->w);
  kt_device_fill(rt, r->x, 0x3c, 6144);
  kt_device_fill(rt, r->w, 0x3c, 6144);
  kt_arg a[] = {kt_arg_ptr(r->y, KT_BF16), kt_arg_ptr(r->x, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(r->w, KT_BF16), kt_arg_i32(1), kt_arg_i32(3072), kt_arg_f32(1e-6f)};
  memcpy(r->a, a, sizeof a);
}

static void row_free(kt_runtime *rt, row3072 *r) {
  kt_device_free(rt, r->x);
  kt_device_free(rt, r->y);
  kt_device_free(rt, r->w);
}

/* A second process that finds config and cubin in SQLite: time from
** kt_kernel_load to the first launch returning (driver start-up excluded). */
static int warm_child(void) {
  kt_options o;
  kt_options_init(&o);
  nvlog l = {0, 0};
  o.log = count_compiles;
  o.log_user = &l;
  o.log_level = KT_LOG_DEBUG;
  kt_runtime *rt;
  if (kt_runtime_open(&rt, &o)) return 1;
  row3072 r;
  row_make(rt, &r);
  double t0 = now_us();
  kt_kernel *k;
  kt_status st = kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k);
  if (!st) st = kt_launch(k, NULL, r.a, 7);
  double t1 = now_us();
  kt_stream_sync(rt, NULL);
  printf("%-44s %10.2f ms  (NVRTC runs: %d, cubins from the cache: %d)%s\n",
         "warm start, kt_kernel_load to first launch", (t1 - t0) / 1e3, l.compiled, l.from_cache,
         st ? kt_errmsg(rt) : "");
  row_free(rt, &r);
  kt_runtime_close(rt);
  return 0;
}

static void warm_start(kt_runtime *rt, kt_kernel *k, const char *self) {
  row3072 r;
  row_make(rt, &r);
  double t0 = now_us();
  kt_status st = kt_launch(k, NULL, r.a, 7);
  kt_stream_sync(rt, NULL);
  printf("\n%-44s %10.2f ms%s\n", "cold: first launch of a new key, D=3072 (tunes)", (now_us() - t0) / 1e3,
         st ? kt_errmsg(rt) : "");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s --warm", self);
  fflush(stdout);
  if (system(cmd)) printf("warm child failed\n");
  row_free(rt, &r);
}

/* Cold tuning of a 12-config space: compile in parallel, validate, time. */
static void cold_tuning(kt_runtime *rt) {
  kt_kernel *k;
  if (kt_kernel_load(rt, "tests/specs/add_one.json", &k)) return;
  const long long n = 1 << 24;
  uint64_t x;
  if (kt_device_alloc(rt, (size_t)n * 4, &x) || kt_device_fill(rt, x, 0x3f, (size_t)n * 4)) return;
  kt_arg a[] = {kt_arg_ptr(x, KT_F32), kt_arg_i64(n)};
  double t0 = now_us();
  kt_status st = kt_launch(k, NULL, a, 2);
  kt_stream_sync(rt, NULL);
  char cfg[128] = "";
  kt_kernel_config_for(k, a, 2, cfg, sizeof cfg);
  printf("%-44s %10.2f ms  (winner %s)%s\n", "cold tuning, 12 configs (add_one, n=2^24)", (now_us() - t0) / 1e3,
         cfg, st ? kt_errmsg(rt) : "");
  kt_device_free(rt, x);
}

static void keep_tuned_line(void *user, kt_log_level level, const char *msg) {
  (void)level;
  if (!strncmp(msg, "tuned ", 6) || strstr(msg, "before compiling")) snprintf(user, 2048, "%s", msg);
}

/* Cold tuning of a norm forward key (about 100 candidates), no cache: the
** wall time, and where it went as the tuner's log line says. */
static void cold_norm_once(const char *group, int helpers) {
  static char line[2048];
  line[0] = 0;
  setenv("KTUNE_COMPILE_GROUP", group, 1);
  if (helpers) unsetenv("KTUNE_NVRTC_HELPER");
  else setenv("KTUNE_NVRTC_HELPER", "off", 1);
  kt__rc_reset(0); /* look for the helper again, and start fresh ones */
  kt_options o;
  kt_options_init(&o);
  o.no_cache = 1;
  o.log = keep_tuned_line;
  o.log_user = line;
  o.log_level = KT_LOG_INFO;
  kt_runtime *rt;
  kt_kernel *k;
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", &k)) {
    kt_runtime_close(rt);
    return;
  }
  enum { N = 4096, D = 3072 };
  uint64_t x, y, w;
  kt_device_alloc(rt, (size_t)N * D * 2, &x);
  kt_device_alloc(rt, (size_t)N * D * 2, &y);
  kt_device_alloc(rt, D * 2, &w);
  kt_device_fill(rt, x, 0x3c, (size_t)N * D * 2);
  kt_device_fill(rt, w, 0x3c, D * 2);
  kt_arg a[] = {kt_arg_ptr(y, KT_BF16), kt_arg_ptr(x, KT_BF16), kt_arg_ptr(0, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(w, KT_BF16), kt_arg_ptr(0, KT_BF16), kt_arg_ptr(0, KT_F32), kt_arg_ptr(0, KT_F32),
                kt_arg_i32(N), kt_arg_i32(D), kt_arg_i32(1), kt_arg_f32(1e-5f), kt_arg_i32(1)};
  double t0 = now_us();
  kt_status st = kt_launch(k, NULL, a, 13);
  kt_stream_sync(rt, NULL);
  kt_stats s = {.size = sizeof s};
  kt_runtime_stats(rt, &s);
  printf("cold tuning, layernorm_fwd rms bf16 D=3072, up to %s per NVRTC program, %s: %.0f ms (%llu compiles, %.0f ms "
         "of NVRTC summed over threads)%s\n",
         group, helpers ? "in helper processes" : "in this process", (now_us() - t0) / 1e3,
         (unsigned long long)s.compiles, s.compile_ms, st ? kt_errmsg(rt) : "");
  printf("  %s\n", line);
  kt_device_free(rt, x);
  kt_device_free(rt, y);
  kt_device_free(rt, w);
  kt_runtime_close(rt);
  unsetenv("KTUNE_COMPILE_GROUP");
  unsetenv("KTUNE_NVRTC_HELPER");
  kt__rc_reset(0);
}

/* Each in helper processes and in this process, paired. */
static void cold_norm(void) {
  static const char *groups[] = {"4", "4", "1", "1", "4", "4"};
  printf("\n");
  for (int i = 0; i < 6; i++) cold_norm_once(groups[i], i % 2 == 0);
}

/* Budgeted search against exhaustive: each strategy tunes the key in a
** runtime of its own without a cache; its winner is then timed by one
** runtime, so the figures compare. */
static void strategies(void) {
  static const struct { const char *spec, *shape; } keys[] = {
      {"kernels_src/layernorm_fwd.json", "N=16384,D=4096,G=1,T=bf16,W=bf16,rms=0,mean=null,rstd=null,res=null,res_out=null"},
      {"kernels_src/layernorm_bwd.json", "N=16384,D=2048,G=1,P=264,T=bf16,W=bf16,rms=1,mean=null,db_part=null,dres=null"},
      {"kernels_src/masked_softmax.json", "N=16384,L=2048,T=bf16,bias=null"},
      {"kernels_src/permute_rows.json", "M=16384,N=16384,D=4096,T=bf16"},
  };
  static const struct { kt_strategy s; double budget; const char *name; } strat[] = {
      {KT_STRATEGY_EXHAUSTIVE, 0, "exhaustive"}, {KT_STRATEGY_LOCAL, 0, "local"}, {KT_STRATEGY_RANDOM, 3, "random, 3 s"}};
  printf("\nsearch strategies (no cache; each winner re-timed by kt_kernel_time)\n");
  printf("| kernel | strategy | trials | tuning s | winner | µs | vs exhaustive |\n| --- | --- | ---: | ---: | --- | ---: | ---: |\n");
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    double best = 0;
    char winners[3][256];
    unsigned long long trials[3];
    double secs[3];
    for (int s = 0; s < 3; s++) {
      kt_options o;
      kt_options_init(&o);
      o.no_cache = 1;
      o.strategy = strat[s].s;
      o.budget_s = strat[s].budget;
      o.log_level = KT_LOG_ERROR;
      kt_runtime *rt;
      kt_kernel *k;
      winners[s][0] = 0;
      trials[s] = 0;
      if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, keys[i].spec, &k)) {
        printf("bench: %s\n", kt_errmsg(rt));
        kt_runtime_close(rt);
        continue;
      }
      kt_arg a[64];
      char err[512];
      kt_inputs *in = NULL;
      double t0 = now_us();
      if (!shape_args(k, keys[i].shape, a, err, sizeof err) && !kt_inputs_make(k, a, kt_kernel_nparams(k), 7, &in))
        kt_kernel_config_for(k, kt_inputs_args(in), kt_kernel_nparams(k), winners[s], sizeof winners[s]);
      secs[s] = (now_us() - t0) / 1e6;
      kt_stats st = {.size = sizeof st};
      kt_runtime_stats(rt, &st);
      trials[s] = (unsigned long long)st.trials;
      double med = 0, spread;
      if (winners[s][0] && !kt_kernel_time(k, kt_inputs_args(in), kt_kernel_nparams(k), winners[s], &med, &spread)) {
        if (s == 0) best = med;
        const char *name = strrchr(keys[i].spec, '/') + 1;
        printf("| %.*s | %s | %llu | %.1f | %s | %.2f | %+.1f%% |\n", (int)(strlen(name) - 5), name, strat[s].name,
               trials[s], secs[s], winners[s], med, best > 0 ? 100 * (med - best) / best : 0.0);
      }
      kt_inputs_free(in);
      kt_runtime_close(rt);
    }
  }
}

/* One cold tuning of a key in a runtime of its own (no cache): the
** winner, how many candidates were pruned and measured, and the seconds. */
typedef struct coldpick {
  char config[256];
  int pruned, measured;
  double secs;
} coldpick;

/* A runtime without a cache, the spec loaded, and inputs for the shape
** (*in; NULL after printing why when any step fails). */
static kt_runtime *open_inputs(const char *spec, const char *shape, int no_prune, kt_kernel **k, kt_inputs **in) {
  kt_options o;
  kt_options_init(&o);
  o.no_cache = 1;
  o.no_prune = no_prune;
  o.log_level = KT_LOG_ERROR;
  kt_runtime *rt;
  kt_arg a[64];
  char err[512];
  *in = NULL;
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, spec, k) || shape_args(*k, shape, a, err, sizeof err) ||
      kt_inputs_make(*k, a, kt_kernel_nparams(*k), 7, in))
    printf("bench: %s\n", kt_errmsg(rt));
  return rt;
}

static void tune_cold(const char *spec, const char *shape, int no_prune, coldpick *r) {
  memset(r, 0, sizeof *r);
  kt_kernel *k;
  kt_inputs *in;
  kt_tune_report *rep = NULL;
  kt_runtime *rt = open_inputs(spec, shape, no_prune, &k, &in);
  double t0 = now_us();
  if (in && !kt_kernel_tune(k, kt_inputs_args(in), kt_kernel_nparams(k), &rep)) {
    r->secs = (now_us() - t0) / 1e6;
    snprintf(r->config, sizeof r->config, "%s", rep->config);
    for (int i = 0; i < rep->ncandidates; i++) {
      r->pruned += rep->candidates[i].status == KT_TRIAL_PRUNED;
      r->measured += rep->candidates[i].measured;
    }
  }
  kt_tune_report_free(rep);
  kt_inputs_free(in);
  kt_runtime_close(rt);
}

/* Pruning against exhaustive: each key tuned cold with and without
** pruning; both winners then timed by one runtime, so the figures compare. */
static void prune_compare(void) {
  static const struct { const char *spec, *shape; } keys[] = {
      {"kernels_src/layernorm_fwd.json", "N=4096,D=3072,G=1,T=bf16,W=bf16,rms=1,b=null,mean=null,rstd=null,res=null,res_out=null"},
      {"kernels_src/layernorm_fwd.json", "N=16384,D=4096,G=1,T=bf16,W=bf16,rms=0,mean=null,rstd=null,res=null,res_out=null"},
      {"kernels_src/layernorm_fwd.json", "N=8192,D=1000,G=1,T=f16,W=f32,rms=0,res_out=null"},
      {"kernels_src/layernorm_fwd.json", "N=2048,D=12288,G=1,T=bf16,W=bf16,rms=1,b=null,mean=null,res=null,res_out=null"},
      {"kernels_src/layernorm_fwd.json", "N=4096,D=1024,G=1,T=f32,W=f32,rms=0,res=null,res_out=null"},
      {"kernels_src/layernorm_bwd.json", "N=16384,D=1024,G=1,P=264,T=bf16,W=bf16,rms=1,mean=null,db_part=null,dres=null"},
      {"kernels_src/layernorm_bwd.json", "N=4096,D=4096,G=1,P=264,T=bf16,W=bf16,rms=0,dres=null"},
      {"kernels_src/layernorm_bwd.json", "N=1024,D=16384,G=1,P=132,T=bf16,W=bf16,rms=0,dres=null"},
      {"kernels_src/layernorm_fwd.json", "N=3277,D=5120,G=1,T=bf16,W=bf16,rms=0,mean=null,rstd=null,res=null,res_out=null"},
      {"kernels_src/masked_softmax.json", "N=8192,L=1000,T=bf16,bias=null"},
      {"kernels_src/masked_softmax.json", "N=4096,L=4096,T=f16"},
      {"kernels_src/rmsnorm.json", "N=4096,D=3072,T=bf16,res=null"},
      {"kernels_src/permute_rows.json", "M=16384,N=16384,D=4096,T=bf16"},
      {"kernels_src/chunk_state_fwd.json", "BH=32,N=16,C=64,DK=64,DV=64,T=bf16"},
  };
  printf("\npruning before compile against exhaustive (no cache; both winners re-timed by kt_kernel_time)\n");
  printf("| kernel | shape | measured (pruned) / all | tuning s: pruned / all | winner pruned | winner all | µs pruned "
         "| µs all | pruned vs all |\n| --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: |\n");
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    coldpick pr, all;
    tune_cold(keys[i].spec, keys[i].shape, 0, &pr);
    tune_cold(keys[i].spec, keys[i].shape, 1, &all);
    kt_kernel *k;
    kt_inputs *in;
    double m1 = 0, m2 = 0, sp;
    kt_runtime *rt = open_inputs(keys[i].spec, keys[i].shape, 0, &k, &in);
    if (in && (kt_kernel_time(k, kt_inputs_args(in), kt_kernel_nparams(k), pr.config, &m1, &sp) ||
               kt_kernel_time(k, kt_inputs_args(in), kt_kernel_nparams(k), all.config, &m2, &sp)))
      printf("bench: %s\n", kt_errmsg(rt));
    const char *name = strrchr(keys[i].spec, '/') + 1;
    printf("| %.*s | %s | %d (%d) / %d | %.2f / %.2f | %s | %s | %.2f | %.2f | %+.1f%% |\n", (int)(strlen(name) - 5),
           name, keys[i].shape, pr.measured, pr.pruned, all.measured, pr.secs, all.secs, pr.config, all.config, m1,
           m2, m2 > 0 ? 100 * (m1 - m2) / m2 : 0.0);
    kt_inputs_free(in);
    kt_runtime_close(rt);
  }
}

void bench_async(const char *self);
int bench_async_child(const char *cache);

int main(int argc, char **argv) {
  /* NVRTC keeps compiled programs in the driver's compute cache, across
  ** processes: a tuning that compiles what an earlier run compiled takes
  ** about half as long. Cold figures are measured without it. */
  setenv("CUDA_CACHE_DISABLE", "1", 1);
  if (argc > 1 && !strcmp(argv[1], "--warm")) return warm_child();
  /* One section by name: ktune-bench async | strategies | cold | prune. */
  if (argc > 2 && !strcmp(argv[1], "--first-call")) return bench_async_child(argv[2]);
  if (argc > 1 && !strcmp(argv[1], "async")) return bench_async(argv[0]), 0;
  if (argc > 1 && !strcmp(argv[1], "strategies")) return strategies(), 0;
  if (argc > 1 && !strcmp(argv[1], "cold")) return cold_norm(), 0;
  if (argc > 1 && !strcmp(argv[1], "prune")) return prune_compare(), 0;
  kt_options o;
  kt_options_init(&o);
  kt_runtime *rt;
  if (kt_runtime_open(&rt, &o)) {
    printf("bench: no GPU: %s\n", kt_errmsg(rt));
    kt_runtime_close(rt);
    return 0;
  }
  printf("device: %s (%s)\n", kt_runtime_device_name(rt), kt_runtime_arch(rt));
  kt_kernel *k;
  if (kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k)) {
    printf("bench: %s\n", kt_errmsg(rt));
    kt_runtime_close(rt);
    return 0;
  }
  rmsnorm_table(rt, k);
  launch_overhead(rt, k);
  warm_start(rt, k, argv[0]);
  cold_tuning(rt);
  cold_norm();
  kt_runtime_close(rt);
  bench_async(argv[0]);
  strategies();
  prune_compare();
  return 0;
}
