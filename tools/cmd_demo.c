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

static int fail(kt_runtime *rt, const char *what) {
  fprintf(stderr, "ktune demo: %s: %s\n", what, kt_errmsg(rt));
  return EXIT_FAIL;
}

int cmd_demo(int argc, char **argv) {
  const char *spec = "kernels_src/rmsnorm.json";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(help, stdout);
      return EXIT_OK;
    }
    if (argv[i][0] == '-') return cli_usage("demo", "unknown option '%s'", argv[i]);
    spec = argv[i];
  }
  kt_options o;
  cli_options(&o, NULL, 0);
  kt_runtime *rt;
  if (kt_runtime_open(&rt, &o)) {
    fprintf(stderr, "ktune demo: needs a GPU: %s\n", kt_errmsg(rt));
    kt_runtime_close(rt);
    return EXIT_FAIL;
  }
  const int T = 16384, D = 2048;
  size_t n = (size_t)T * D;
  uint16_t *hx = malloc(n * 2), *hy = malloc(n * 2), *hw = malloc((size_t)D * 2);
  uint64_t x = 0, y = 0, w = 0;
  int rc = EXIT_FAIL;
  kt_kernel *k;
  if (!hx || !hy || !hw) {
    fprintf(stderr, "ktune demo: out of memory\n");
    goto out;
  }
  srand(1);
  for (size_t i = 0; i < n; i++) kt_dtype_store(KT_BF16, hx, i, (float)rand() / RAND_MAX * 4.f - 2.f);
  for (int i = 0; i < D; i++) kt_dtype_store(KT_BF16, hw, (size_t)i, 0.5f + (float)rand() / RAND_MAX);
  if (kt_kernel_load(rt, spec, &k)) {
    rc = fail(rt, "load");
    goto out;
  }
  if (kt_device_alloc(rt, n * 2, &x) || kt_device_alloc(rt, n * 2, &y) ||
      kt_device_alloc(rt, (size_t)D * 2, &w) || kt_device_upload(rt, x, hx, n * 2) ||
      kt_device_upload(rt, w, hw, (size_t)D * 2) || kt_device_fill(rt, y, 0xff, n * 2)) {
    rc = fail(rt, "device memory");
    goto out;
  }
  kt_arg args[] = {kt_arg_ptr(y, KT_BF16), kt_arg_ptr(x, KT_BF16), kt_arg_ptr(0, KT_BF16),
                   kt_arg_ptr(w, KT_BF16), kt_arg_i32(T), kt_arg_i32(D), kt_arg_f32(1e-6f)};
  char cfg[256];
  double med, spread;
  if (kt_kernel_config_for(k, args, 7, cfg, sizeof cfg)) {
    rc = fail(rt, "config");
    goto out;
  }
  if (kt_kernel_time(k, args, 7, NULL, &med, &spread) || kt_stream_sync(rt, NULL) ||
      kt_device_download(rt, hy, y, n * 2)) {
    rc = fail(rt, "launch");
    goto out;
  }
  double maxerr = 0;
  for (int r = 0; r < T; r += 97) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += kt_dtype_load(KT_BF16, hx, (size_t)r * D + i) * kt_dtype_load(KT_BF16, hx, (size_t)r * D + i);
    double rstd = 1.0 / sqrt(ss / D + 1e-6);
    for (int i = 0; i < D; i++) {
      double ref = kt_dtype_load(KT_BF16, hx, (size_t)r * D + i) * rstd * kt_dtype_load(KT_BF16, hw, (size_t)i);
      double e = fabs(kt_dtype_load(KT_BF16, hy, (size_t)r * D + i) - ref) / (1 + fabs(ref));
      if (!(e <= maxerr)) maxerr = e;
    }
  }
  double bytes = 2.0 * n * 2 + D * 2.0;
  printf("device   %s (%s)\n", kt_runtime_device_name(rt), kt_runtime_arch(rt));
  printf("kernel   %s  T=%d D=%d bf16\n", kt_kernel_name(k), T, D);
  printf("config   %s\n", cfg);
  printf("time     %.1f us median (spread %.1f us)\n", med, spread);
  printf("rate     %.0f GB/s\n", bytes / (med * 1e-6) / 1e9);
  printf("error    %.2e max relative vs float64 host reference (bf16 output)\n", maxerr);
  rc = maxerr < 2e-2 ? EXIT_OK : EXIT_FAIL;
out:
  kt_device_free(rt, x);
  kt_device_free(rt, y);
  kt_device_free(rt, w);
  free(hx);
  free(hy);
  free(hw);
  kt_runtime_close(rt);
  return rc;
}
