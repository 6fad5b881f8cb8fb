#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char help[] =
    "usage: ktune demo [SPEC]\n"
    "\n"
    "Run the bundled RMSNorm (kernels_src/rmsnorm.json, or SPEC with the same\n"
    "params) on GPU 0 for 16384 rows of 2048 bf16 values: print the config\n"
    "used, the median time, the bandwidth, and the largest error against a\n"
    "host reference.\n";

static int fail(kt_runtime *rt, const char *what) { return cli_fail("demo", "%s: %s", what, cli_errmsg(rt)); }

enum { T = 16384, D = 2048 };

typedef struct demo {
  uint16_t *hx, *hy, *hw;
  uint64_t x, y, w;
} demo;

/* The largest error against a float64 host RMSNorm, over every 97th row. */
static double max_error(const demo *d) {
  double maxerr = 0;
  for (int r = 0; r < T; r += 97) {
    double ss = 0;
    for (int i = 0; i < D; i++) {
      double v = kt_dtype_load(KT_BF16, d->hx, (size_t)r * D + i);
      ss += v * v;
    }
    double rstd = 1.0 / sqrt(ss / D + 1e-6);
    for (int i = 0; i < D; i++) {
      double ref = kt_dtype_load(KT_BF16, d->hx, (size_t)r * D + i) * rstd * kt_dtype_load(KT_BF16, d->hw, (size_t)i);
      double e = fabs(kt_dtype_load(KT_BF16, d->hy, (size_t)r * D + i) - ref) / (1 + fabs(ref));
      if (!(e <= maxerr)) maxerr = e;
    }
  }
  return maxerr;
}

/* Inputs on the host and the device. */
static int setup(kt_runtime *rt, demo *d) {
  size_t n = (size_t)T * D;
  if (!(d->hx = malloc(n * 2)) || !(d->hy = malloc(n * 2)) || !(d->hw = malloc((size_t)D * 2)))
    return cli_fail("demo", "out of memory");
  srand(1);
  for (size_t i = 0; i < n; i++) kt_dtype_store(KT_BF16, d->hx, i, (float)rand() / RAND_MAX * 4.f - 2.f);
  for (int i = 0; i < D; i++) kt_dtype_store(KT_BF16, d->hw, (size_t)i, 0.5f + (float)rand() / RAND_MAX);
  if (kt_device_alloc(rt, n * 2, &d->x) || kt_device_alloc(rt, n * 2, &d->y) || kt_device_alloc(rt, (size_t)D * 2, &d->w) ||
      kt_device_upload(rt, d->x, d->hx, n * 2) || kt_device_upload(rt, d->w, d->hw, (size_t)D * 2) ||
      kt_device_fill(rt, d->y, 0xff, n * 2))
    return fail(rt, "device memory");
  return EXIT_OK;
}

/* Tune (or find) the config, time it, check the output. */
static int run(kt_runtime *rt, kt_kernel *k, demo *d) {
  kt_arg args[] = {kt_arg_ptr(d->y, KT_BF16), kt_arg_ptr(d->x, KT_BF16), kt_arg_ptr(0, KT_BF16),
                   kt_arg_ptr(d->w, KT_BF16), kt_arg_i32(T), kt_arg_i32(D), kt_arg_f32(1e-6f)};
  char cfg[KT_CONFIG_MAX];
  double med, spread;
  if (kt_kernel_config_for(k, args, 7, cfg, sizeof cfg)) return fail(rt, "config");
  if (kt_kernel_time(k, args, 7, NULL, &med, &spread) || kt_stream_sync(rt, NULL) ||
      kt_device_download(rt, d->hy, d->y, (size_t)T * D * 2))
    return fail(rt, "launch");
  double maxerr = max_error(d), bytes = 2.0 * T * D * 2 + D * 2.0;
  printf("device   %s (%s)\n", kt_runtime_device_name(rt), kt_runtime_arch(rt));
  printf("kernel   %s  T=%d D=%d bf16\n", kt_kernel_name(k), T, D);
  printf("config   %s\n", cfg);
  printf("time     %.1f us median (spread %.1f us)\n", med, spread);
  printf("rate     %.0f GB/s\n", bytes / (med * 1e-6) / 1e9);
  printf("error    %.2e max relative vs float64 host reference (bf16 output)\n", maxerr);
  return maxerr < 2e-2 ? EXIT_OK : EXIT_FAIL;
}

int cmd_demo(int argc, char **argv) {
  cli_list spec = {0};
  const cli_opt opts[] = {{0}};
  cli_cmd c = {"demo", help, opts, &spec, 0, 1, "spec"};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  kt_options o;
  cli_options(&o, NULL, 0);
  kt_runtime *rt;
  kt_kernel *k;
  if (kt_runtime_open(&rt, &o)) {
    rc = cli_fail("demo", "needs a GPU: %s", cli_errmsg(rt));
    kt_runtime_close(rt);
    return rc;
  }
  demo d = {0};
  if (kt_kernel_load(rt, spec.n ? spec.v[0] : "kernels_src/rmsnorm.json", &k)) rc = fail(rt, "load");
  else if (!(rc = setup(rt, &d))) rc = run(rt, k, &d);
  kt_device_free(rt, d.x);
  kt_device_free(rt, d.y);
  kt_device_free(rt, d.w);
  free(d.hx);
  free(d.hy);
  free(d.hw);
  kt_runtime_close(rt);
  return rc;
}
