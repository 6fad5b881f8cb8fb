/* ktune bench: time one config (or the one the cache gives) of a call on
** synthetic inputs, with the tuner's timer: CUDA events around repeated
** launches, the median and the spread. */
#include <stdio.h>

#include "cli.h"
#include "shape.h"

static const char help[] =
    "usage: ktune bench SPEC --shape SHAPE [--config CONFIG] [--json] [--cache PATH]\n"
    "\n"
    "Time a call on synthetic inputs (the spec's \"init\" generators): the given\n"
    "config, or else the cached one for the call's key (the default config\n"
    "when the key is not cached; nothing is tuned). Prints the config, the\n"
    "median time and the spread (max - min) in microseconds.\n"
    "\n"
    "  --shape SHAPE    the call, as for ktune key: 'N=4096,D=2048,T=bf16'\n"
    "  --config CONFIG  every tunable field: 'BLOCK=256,ROWS=1,VEC=8' or JSON\n"
    "  --json           one JSON object\n"
    "  --cache PATH     the cache file\n"
    "\n"
    "exit codes: 0 timed, 1 the call or the GPU failed, 2 usage\n";

typedef struct bench {
  cli_list spec;
  const char *shape, *config, *cache;
  int json;
} bench;

/* Where the timed config came from: its JSON name, and its words. */
enum source { GIVEN, CACHED, DEFAULT };
static const struct {
  const char *name, *words;
} sources[] = {{"given", ""}, {"cached", " (cached)"}, {"default", " (default: not in the cache)"}};

/* Time the call, and say where its config came from. */
static int run(const bench *b, kt_runtime *rt, kt_kernel *k, kt_inputs *in) {
  kt_tune_report *r = NULL;
  enum source from;
  double med, spread;
  int n = kt_kernel_nparams(k);
  char cfg[512];
  if (b->config) {
    snprintf(cfg, sizeof cfg, "%s", b->config);
    from = GIVEN;
  } else if (kt_kernel_lookup(k, kt_inputs_args(in), n, &r)) {
    return cli_fail("bench", "%s", cli_errmsg(rt));
  } else {
    snprintf(cfg, sizeof cfg, "%s", r->config);
    from = r->outcome == KT_TUNE_NOT_TUNED ? DEFAULT : CACHED;
    kt_tune_report_free(r);
  }
  if (kt_kernel_time(k, kt_inputs_args(in), n, cfg, &med, &spread)) return cli_fail("bench", "%s", cli_errmsg(rt));
  if (b->json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kernel", kt_kernel_name(k));
    cJSON_AddStringToObject(o, "shape", b->shape);
    cJSON_AddItemToObject(o, "config", cfg[0] == '{' ? cJSON_Parse(cfg) : cJSON_CreateString(cfg));
    cJSON_AddStringToObject(o, "source", sources[from].name);
    cJSON_AddNumberToObject(o, "median_us", med);
    cJSON_AddNumberToObject(o, "spread_us", spread);
    return cli_print_json(o);
  }
  printf("%s %s: %s%s: %.2f us (spread %.2f us)\n", kt_kernel_name(k), b->shape, cfg, sources[from].words, med,
         spread);
  return EXIT_OK;
}

int cmd_bench(int argc, char **argv) {
  bench b = {0};
  const cli_opt opts[] = {{"shape", 0, &b.shape, NULL, NULL},
                          {"config", 0, &b.config, NULL, NULL},
                          {"cache", 0, &b.cache, NULL, NULL},
                          {"json", 0, NULL, NULL, &b.json},
                          {0}};
  cli_cmd c = {"bench", help, opts, &b.spec, 1, 1, "spec"};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  if (!b.shape) return cli_usage("bench", "no --shape given");
  kt_options o;
  cli_options(&o, NULL, 0);
  o.cache_path = b.cache;
  o.mode = KT_MODE_CACHE_ONLY;
  kt_runtime *rt;
  kt_kernel *k;
  kt_arg args[64];
  char err[1024];
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, b.spec.v[0], &k)) {
    rc = cli_fail("bench", "%s", cli_errmsg(rt));
  } else if (shape_args(k, b.shape, args, err, sizeof err)) {
    rc = cli_usage("bench", "--shape %s: %s", b.shape, err);
  } else {
    kt_inputs *in = NULL;
    rc = kt_inputs_make(k, args, kt_kernel_nparams(k), 1, &in) ? cli_fail("bench", "%s", cli_errmsg(rt))
                                                                 : run(&b, rt, k, in);
    kt_inputs_free(in);
  }
  kt_runtime_close(rt);
  return rc;
}
