/* ktune info: what this machine offers ktune, and what is missing. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char help[] =
    "usage: ktune info [--cache PATH]\n"
    "\n"
    "Print the library version, the driver and NVRTC versions, each GPU with\n"
    "its fingerprint (the cache's device column), and the cache: path, size,\n"
    "row counts. Without a driver or a GPU it prints what it can and says what\n"
    "is missing.\n"
    "exit codes: 0 everything present, 1 something missing, 2 usage\n";

int cmd_info(int argc, char **argv) {
  const char *cache = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(help, stdout);
      return EXIT_OK;
    } else if (!strcmp(argv[i], "--cache")) {
      if (++i == argc) return cli_usage("info", "--cache needs a path");
      cache = argv[i];
    } else {
      return cli_usage("info", "unknown argument '%s'", argv[i]);
    }
  }
  int missing = 0;
  printf("ktune      %s\n", kt_libversion());
  kt_options o;
  cli_options(&o, NULL, 1);
  o.cache_path = cache;
  o.cache_readonly = 1;
  o.log_level = KT_LOG_ERROR;
  kt_runtime *rt;
  if (kt_runtime_open(&rt, &o)) {
    printf("runtime    cannot open: %s\n", kt_errmsg(rt));
    kt_runtime_close(rt);
    return EXIT_FAIL;
  }
  kt_runtime_info in;
  kt_runtime_get_info(rt, &in);
  if (in.nvrtc_version)
    printf("nvrtc      %d.%d\n", in.nvrtc_version / 1000, in.nvrtc_version % 1000 / 10);
  else
    printf("nvrtc      missing: kernels cannot be compiled here (cached cubins can still be used)\n"), missing = 1;
  int n = 0;
  if (kt_device_count(&n)) {
    printf("driver     missing: %s\n", kt_errmsg(NULL));
    missing = 1;
  } else if (n == 0) {
    printf("gpus       none\n");
    missing = 1;
  }
  for (int d = 0; d < n; d++) {
    kt_options od;
    cli_options(&od, NULL, 0);
    od.device = d;
    od.no_cache = 1;
    od.log_level = KT_LOG_ERROR;
    kt_runtime *g;
    if (kt_runtime_open(&g, &od)) {
      printf("gpu %d      %s\n", d, kt_errmsg(g));
      missing = 1;
    } else {
      kt_runtime_info gi;
      kt_runtime_get_info(g, &gi);
      if (d == 0) printf("driver     %d.%d\n", gi.driver_version / 1000, gi.driver_version % 1000 / 10);
      printf("gpu %d      %s  (%d SMs, %d MiB L2, %d KiB shared memory per block)\n", d, gi.fingerprint, gi.num_sms,
             gi.l2_bytes >> 20, gi.smem_per_block_optin >> 10);
    }
    kt_runtime_close(g);
  }
  if (in.cache_path[0]) {
    struct stat sb;
    long c[4] = {0};
    kt_cache_counts(rt, c);
    printf("cache      %s  (%lld KiB: %ld configs, %ld trials, %ld binaries, %ld quarantined)\n", in.cache_path,
           stat(in.cache_path, &sb) ? 0LL : (long long)sb.st_size / 1024, c[0], c[1], c[2], c[3]);
  } else {
    printf("cache      %s\n", in.cache_error);
    missing = 1;
  }
  kt_runtime_close(rt);
  return missing ? EXIT_FAIL : EXIT_OK;
}
