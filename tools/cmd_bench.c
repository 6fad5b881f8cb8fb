/* ktune bench: time one config (or the one the cache gives) of a call on
** synthetic inputs, with the tuner's timer: CUDA events around repeated
** launches, the median and the spread. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "shape.h"

static const char help[] =
    "usage: ktune bench SPEC --shape SHAPE [--config CONFIG] [--cache PATH]\n"
    "\n"
    "Time a call on synthetic inputs (the spec's \"init\" generators): the given\n"
    "config, or else the cached one for the call's key (the default config\n"
    "when the key is not cached; nothing is tuned). Prints the config, the\n"
    "median time and the spread (max - min) in microseconds.\n"
    "\n"
    "  --shape SHAPE    the call, as for ktune key: 'N=4096,D=2048,T=bf16'\n"
    "  --config CONFIG  every tunable field: 'BLOCK=256,ROWS=1,VEC=8'\n"
    "  --cache PATH     the cache file\n"
    "\n"
    "exit codes: 0 timed, 1 the call or the GPU failed, 2 usage\n";

int cmd_bench(int argc, char **argv) {
  const char *spec = NULL, *shape = NULL, *config = NULL, *cache = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(help, stdout);
      return EXIT_OK;
    } else if (!strcmp(a, "--shape") || !strcmp(a, "--config") || !strcmp(a, "--cache")) {
      if (i + 1 == argc) return cli_usage("bench", "%s needs a value", a);
      const char **dst = a[2] == 's' ? &shape : a[3] == 'o' ? &config : &cache;
      *dst = argv[++i];
    } else if (a[0] == '-') {
      return cli_usage("bench", "unknown option '%s'", a);
    } else if (spec) {
      return cli_usage("bench", "one spec at a time");
    } else {
      spec = a;
    }
  }
  if (!spec) return cli_usage("bench", "no spec given");
  if (!shape) return cli_usage("bench", "no --shape given");
  kt_options o;
  cli_options(&o, NULL, 0);
  o.cache_path = cache;
  o.mode = KT_MODE_CACHE_ONLY;
  kt_runtime *rt;
  kt_kernel *k;
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, spec, &k)) {
    fprintf(stderr, "ktune bench: %s\n", kt_errmsg(rt));
    kt_runtime_close(rt);
    return EXIT_FAIL;
  }
  kt_arg args[64];
  char err[1024], used[512];
  kt_inputs *in = NULL;
  int rc = EXIT_FAIL;
  int n = kt_kernel_nparams(k);
  if (shape_args(k, shape, args, err, sizeof err)) {
    kt_runtime_close(rt);
    return cli_usage("bench", "%s", err);
  }
  double med, spread;
  kt_stats s = {.size = sizeof s};
  if (kt_inputs_make(k, args, n, 1, &in)) {
    fprintf(stderr, "ktune bench: %s\n", kt_errmsg(rt));
  } else if (!config && kt_kernel_config_for(k, kt_inputs_args(in), n, used, sizeof used)) {
    fprintf(stderr, "ktune bench: %s\n", kt_errmsg(rt));
  } else if (kt_kernel_time(k, kt_inputs_args(in), n, config ? config : used, &med, &spread)) {
    fprintf(stderr, "ktune bench: %s\n", kt_errmsg(rt));
  } else {
    kt_runtime_stats(rt, &s);
    printf("%s %s: %s%s: %.2f us (spread %.2f us)\n", kt_kernel_name(k), shape, config ? config : used,
           config ? "" : s.cache_loads ? " (cached)" : " (default: not in the cache)", med, spread);
    rc = EXIT_OK;
  }
  kt_inputs_free(in);
  kt_runtime_close(rt);
  return rc;
}
