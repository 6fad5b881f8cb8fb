/* ktune info: what this machine offers ktune, and what is missing. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char help[] =
    "usage: ktune info [--json] [--cache PATH]\n"
    "\n"
    "Print the library version, the driver and NVRTC versions, each GPU with\n"
    "its fingerprint (the cache's device column), and the cache: path, size,\n"
    "row counts. Without a driver or a GPU it prints what it can and says what\n"
    "is missing (null in --json).\n"
    "exit codes: 0 everything present, 1 something missing, 2 usage\n";

/* What info finds, for the text or the JSON. */
typedef struct found {
  int nvrtc, driver, ngpus;
  char gpu_err[1024];
  cJSON *gpus;
  const char *cache_path, *cache_error;
  long long cache_bytes;
  long counts[4];
} found;

static void find_gpus(found *f) {
  int n = 0;
  if (kt_device_count(&n)) snprintf(f->gpu_err, sizeof f->gpu_err, "%s", cli_errmsg(NULL));
  f->ngpus = n;
  for (int d = 0; d < n; d++) {
    kt_options od;
    cli_options(&od, NULL, 0);
    od.device = d;
    od.no_cache = 1;
    od.log_level = KT_LOG_ERROR;
    kt_runtime *g;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", d);
    kt_runtime_info gi = {.size = sizeof gi};
    if (kt_runtime_open(&g, &od) || kt_runtime_get_info(g, &gi)) {
      cJSON_AddStringToObject(o, "error", cli_errmsg(g));
    } else {
      f->driver = gi.driver_version;
      cJSON_AddStringToObject(o, "fingerprint", gi.fingerprint);
      cJSON_AddNumberToObject(o, "sms", gi.num_sms);
      cJSON_AddNumberToObject(o, "l2_bytes", gi.l2_bytes);
      cJSON_AddNumberToObject(o, "smem_per_block", gi.smem_per_block_optin);
    }
    cJSON_AddItemToArray(f->gpus, o);
    kt_runtime_close(g);
  }
}

static cJSON *version(int v) {
  char s[32];
  if (!v) return cJSON_CreateNull();
  snprintf(s, sizeof s, "%d.%d", v / 1000, v % 1000 / 10);
  return cJSON_CreateString(s);
}

static int print_json(const found *f) {
  cJSON *o = cJSON_CreateObject(), *c = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "ktune", kt_libversion());
  cJSON_AddItemToObject(o, "nvrtc", version(f->nvrtc));
  cJSON_AddItemToObject(o, "driver", version(f->driver));
  cJSON_AddItemToObject(o, "gpus", cJSON_Duplicate(f->gpus, 1));
  cJSON_AddItemToObject(o, "gpu_error", f->gpu_err[0] ? cJSON_CreateString(f->gpu_err) : cJSON_CreateNull());
  cJSON_AddItemToObject(c, "path", f->cache_path ? cJSON_CreateString(f->cache_path) : cJSON_CreateNull());
  cJSON_AddItemToObject(c, "error", f->cache_path ? cJSON_CreateNull() : cJSON_CreateString(f->cache_error));
  cJSON_AddItemToObject(c, "bytes", f->cache_path ? cJSON_CreateNumber((double)f->cache_bytes) : cJSON_CreateNull());
  static const char *names[4] = {"configs", "trials", "binaries", "quarantined"};
  for (int i = 0; i < 4; i++)
    cJSON_AddItemToObject(c, names[i], f->cache_path ? cJSON_CreateNumber(f->counts[i]) : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "cache", c);
  return cli_print_json(o);
}

static void print_text(const found *f) {
  char v[32];
  printf("ktune      %s\n", kt_libversion());
  if (f->nvrtc) printf("nvrtc      %d.%d\n", f->nvrtc / 1000, f->nvrtc % 1000 / 10);
  else printf("nvrtc      missing: kernels cannot be compiled here (cached cubins can still be used)\n");
  if (f->gpu_err[0]) printf("driver     missing: %s\n", f->gpu_err);
  else if (!f->ngpus) printf("gpus       none\n");
  if (f->driver) snprintf(v, sizeof v, "%d.%d", f->driver / 1000, f->driver % 1000 / 10), printf("driver     %s\n", v);
  for (const cJSON *g = f->gpus ? f->gpus->child : NULL; g; g = g->next) {
    const cJSON *e = cJSON_GetObjectItem(g, "error");
    int d = cJSON_GetObjectItem(g, "index")->valueint;
    if (e) printf("gpu %d      %s\n", d, e->valuestring);
    else
      printf("gpu %d      %s  (%d SMs, %d MiB L2, %d KiB shared memory per block)\n", d,
             cJSON_GetObjectItem(g, "fingerprint")->valuestring, cJSON_GetObjectItem(g, "sms")->valueint,
             cJSON_GetObjectItem(g, "l2_bytes")->valueint >> 20,
             cJSON_GetObjectItem(g, "smem_per_block")->valueint >> 10);
  }
  char vis[16384];
  if (f->cache_path)
    printf("cache      %s  (%lld KiB: %ld configs, %ld trials, %ld binaries, %ld quarantined)\n",
           cli_visible(f->cache_path, vis, sizeof vis), f->cache_bytes / 1024, f->counts[0], f->counts[1],
           f->counts[2], f->counts[3]);
  else
    printf("cache      %s\n", cli_visible(f->cache_error, vis, sizeof vis));
}

int cmd_info(int argc, char **argv) {
  const char *cache = NULL;
  int json = 0;
  const cli_opt opts[] = {{"json", 0, NULL, NULL, &json}, {"cache", 0, &cache, NULL, NULL}, {0}};
  cli_cmd c = {"info", help, opts, NULL, 0, 0, ""};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  kt_options o;
  cli_options(&o, NULL, 1);
  o.cache_path = cache;
  o.cache_readonly = 1;
  o.log_level = KT_LOG_ERROR;
  kt_runtime *rt;
  kt_runtime_info in = {.size = sizeof in};
  if (kt_runtime_open(&rt, &o) || kt_runtime_get_info(rt, &in)) {
    rc = cli_fail("info", "%s", cli_errmsg(rt));
    kt_runtime_close(rt);
    return rc;
  }
  found f = {.nvrtc = in.nvrtc_version, .gpus = cJSON_CreateArray(), .cache_error = in.cache_error};
  find_gpus(&f);
  struct stat sb;
  if (in.cache_path[0] && !kt_cache_counts(rt, f.counts)) {
    f.cache_path = in.cache_path;
    f.cache_bytes = stat(in.cache_path, &sb) ? 0 : (long long)sb.st_size;
  }
  int missing = !f.nvrtc || !f.ngpus || !f.driver || !f.cache_path;
  if (json) rc = print_json(&f);
  else print_text(&f);
  cJSON_Delete(f.gpus);
  kt_runtime_close(rt);
  return rc || missing ? EXIT_FAIL : EXIT_OK;
}
