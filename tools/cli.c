/* What the ktune subcommands share (cli.h). */
#include "cli.h"

#include <ctype.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* getopt_long's tables for c: long options, and the short ones. */
static int tables(const cli_cmd *c, struct option *lo, char *shorts, size_t n) {
  size_t u = (size_t)snprintf(shorts, n, ":h");
  int k = 0;
  for (const cli_opt *o = c->opts; o && o->name; o++, k++) {
    int arg = o->value || o->list ? required_argument : no_argument;
    lo[k] = (struct option){o->name, arg, NULL, 256 + k};
    if (o->letter && u + 3 < n) {
      shorts[u++] = (char)o->letter;
      if (arg == required_argument) shorts[u++] = ':';
      shorts[u] = 0;
    }
  }
  lo[k++] = (struct option){"help", no_argument, NULL, 'h'};
  lo[k] = (struct option){NULL, 0, NULL, 0};
  return k;
}

/* The option getopt_long returned, by its code. */
static const cli_opt *option_of(const cli_cmd *c, int code) {
  int k = 0;
  for (const cli_opt *o = c->opts; o && o->name; o++, k++)
    if (code == 256 + k || (o->letter && code == o->letter)) return o;
  return NULL;
}

static int take(const cli_cmd *c, const cli_opt *o, const char *value) {
  /* No option means anything when empty: --cache "$UNSET" is a mistake,
  ** not the default cache. */
  if ((o->value || o->list) && !*value) return cli_usage(c->name, "option '--%s' needs a value; it is empty", o->name);
  if (o->flag) *o->flag = 1;
  if (o->value) *o->value = value;
  if (o->list) {
    if (o->list->n == (int)(sizeof o->list->v / sizeof o->list->v[0]))
      return cli_usage(c->name, "--%s is given too many times", o->name);
    o->list->v[o->list->n++] = value;
  }
  return 0;
}

/* What getopt_long could not take, in words. */
static int bad_option(const cli_cmd *c, int code, char **argv) {
  const char *given = argv[optind - 1];
  if (code == ':') return cli_usage(c->name, "option '%s' needs a value", given);
  if (optopt && optopt < 256 && !strncmp(given, "-", 1) && given[1] != '-')
    return cli_usage(c->name, "unknown option '-%c'", optopt);
  return cli_usage(c->name, "unknown option '%s'", given);
}

int cli_parse(const cli_cmd *c, int argc, char **argv) {
  struct option lo[64];
  char shorts[128];
  tables(c, lo, shorts, sizeof shorts);
  optind = 0; /* glibc: start afresh */
  opterr = 0;
  int code, rc = 0;
  while (!rc && (code = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
    const cli_opt *o = option_of(c, code);
    if (code == 'h') {
      fputs(c->help, stdout);
      return -1;
    }
    rc = o ? take(c, o, optarg) : bad_option(c, code, argv);
  }
  for (int i = optind; !rc && i < argc; i++) {
    if (!c->pos || c->pos->n == c->max_pos) return cli_usage(c->name, "unexpected argument '%s'", argv[i]);
    c->pos->v[c->pos->n++] = argv[i];
  }
  if (!rc && c->pos && c->pos->n < c->min_pos) return cli_usage(c->name, "no %s given", c->pos_what);
  return rc;
}

int cli_usage(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "ktune %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry 'ktune %s --help'.\n", cmd);
  return EXIT_USAGE;
}

int cli_fail(const char *cmd, const char *fmt, ...) {
  char msg[4096], vis[16384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "ktune %s: %s\n", cmd, cli_visible(msg, vis, sizeof vis));
  return EXIT_FAIL;
}

const char *cli_errmsg(const kt_runtime *rt) {
  const char *m = kt_errmsg(rt);
  if (strncmp(m, "kt_", 3)) return m;
  const char *p = m + 3;
  while (islower((unsigned char)*p) || *p == '_') p++;
  return p[0] == ':' && p[1] == ' ' ? p + 2 : m;
}

const char *cli_visible(const char *s, char *buf, size_t n) {
  if (n < 9 || !kt_text_visible(s, KT_TEXT_CONTROLS, NULL, 0)) return s;
  kt_text_visible(s, KT_TEXT_CONTROLS, buf, n);
  return buf;
}

/* The library's own log serves: "ktune: LEVEL: message" on stderr, its
** control characters escaped as cli_visible escapes them. */
void cli_options(kt_options *o, const char *arch, int no_device) {
  kt_options_init(o);
  o->arch = arch;
  o->no_device = no_device;
}

kt_runtime *cli_offline(const char *cmd, const char *arch, int quiet) {
  kt_options o;
  cli_options(&o, arch, 1);
  o.no_cache = 1;
  o.progress = cli_progress;
  if (quiet) o.log_level = KT_LOG_ERROR;
  kt_runtime *rt;
  if (kt_runtime_open(&rt, &o)) {
    if (!quiet) cli_fail(cmd, "%s", cli_errmsg(rt));
    kt_runtime_close(rt);
    return NULL;
  }
  return rt;
}

void cli_progress(void *user, const char *kernel, const char *key, int done, int total, double best_us) {
  (void)user;
  (void)best_us;
  if (!isatty(2)) return;
  if (done >= total) fprintf(stderr, "\r\033[K");
  else fprintf(stderr, "\r\033[K%s: %s %d/%d", kernel, key, done, total);
  fflush(stderr);
}

int cli_print_json(cJSON *v) {
  char *text = v ? cJSON_PrintUnformatted(v) : NULL;
  cJSON_Delete(v);
  if (!text) return cli_fail("json", "out of memory");
  /* JSON is UTF-8: a byte that is not (a path given in another encoding)
  ** can only stand in a string, where it becomes the text \xNN. */
  size_t n = kt_text_visible(text, KT_TEXT_JSON, NULL, 0) ? 5 * strlen(text) + 1 : 0;
  char *fixed = n ? malloc(n) : NULL;
  if (fixed) kt_text_visible(text, KT_TEXT_JSON, fixed, n);
  puts(fixed ? fixed : text);
  free(fixed);
  cJSON_free(text);
  return n && !fixed ? cli_fail("json", "out of memory") : EXIT_OK;
}

cJSON *cli_json_num(double v) { return v < 0 ? cJSON_CreateNull() : cJSON_CreateNumber(v); }

/* Every variable ktune or its Python package reads. docs/cli.md has the
** same table (a test holds them together). */
static const struct {
  const char *name, *what;
} env_vars[] = {
    {"KTUNE_CACHE", "the cache file (default $XDG_CACHE_HOME/ktune/ktune.db, else ~/.cache/ktune/ktune.db)"},
    {"KTUNE_SYSTEM_CACHE", "a read-only cache consulted after the user's"},
    {"KTUNE_MODE", "what a miss does: tune, async, cache-only or off (library default: tune)"},
    {"KTUNE_LOG", "log level: error, warn, info or debug (default warn)"},
    {"KTUNE_RECORD", "a file to append one --shapes line to per key the cache lacks (ktune tune --shapes)"},
    {"KTUNE_COMPILE_GROUP", "kernel instances per NVRTC program when tuning, 1 to 8 (default 4)"},
    {"KTUNE_NVRTC_HELPER", "the ktune-nvrtc helper NVRTC runs in (default: beside libktune), or off"},
    {"KTUNE_LIB", "Python package: the libktune.so to load"},
    {"KTUNE_JAX_LIB", "Python package: the libktune_jax.so (XLA FFI handler) to load"},
    {"KTUNE_JAX_GRAPHS", "Python package: 0 keeps ktune.jax's calls out of XLA's command buffers"},
    {"KTUNE_KERNELS", "Python package: the folder of the bundled kernels"},
    {"KTUNE_FASTCALL", "Python package: 0 packs launch arguments with ctypes, not ktune._fastcall"},
    {"KTUNE_WHEEL_LIB", "Python package build: a libktune.so to ship inside the wheel"},
    {"CUDA_HOME", "the CUDA toolkit, for NVRTC's headers (default /usr/local/cuda)"},
};

void cli_print_env(FILE *f) {
  for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++)
    fprintf(f, "  %-20s %s\n", env_vars[i].name, env_vars[i].what);
}
