/* ktune list, show, export, import, gc: the cache as people and scripts see it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char list_help[] =
    "usage: ktune list [KERNEL] [--json] [--cache PATH]\n"
    "\n"
    "Print the cached configs (user cache, then system cache) as a table, or\n"
    "as a JSON array with --json. --cache overrides $KTUNE_CACHE.\n";
static const char show_help[] =
    "usage: ktune show KERNEL [--json] [--cache PATH]\n"
    "\n"
    "Print each cached config of KERNEL with every candidate measured for\n"
    "its key: status, median and spread, registers, shared memory, spills.\n";
static const char export_help[] =
    "usage: ktune export [-o FILE] [--binaries] [--cache PATH]\n"
    "\n"
    "Write the configs (and with --binaries the compiled cubins, base64) as\n"
    "JSON, to FILE or standard output (-o - or no -o).\n";
static const char import_help[] =
    "usage: ktune import FILE [--binaries] [--json] [--cache PATH]\n"
    "\n"
    "Merge an export into the cache (FILE - reads standard input), all or\n"
    "nothing: a config replaces the cached one only when it is faster.\n"
    "An export's cubins run on the GPU as they are: --binaries adds them,\n"
    "for an export from a source you trust like your own code; without it\n"
    "they are checked and left out (each is compiled again when needed).\n"
    "Where there is no cache, one is made only for a file that imports whole.\n"
    "Reports configs added, kept and replaced, binaries added and left out.\n";
static const char gc_help[] =
    "usage: ktune gc [SPEC...] [--json] [--cache PATH]\n"
    "\n"
    "Remove configs of each SPEC's kernel whose spec hash is not the spec's\n"
    "current one (with their trials and quarantine entries), then compiled\n"
    "binaries that neither a config nor a named spec's current hash uses.\n"
    "Where there is no cache, says so and makes none.\n";

typedef struct args {
  cli_list pos;
  const char *cache, *out;
  int json, binaries;
} args;

/* A runtime on the cache at path (NULL: the default); NULL where it
** cannot be opened as asked, after cmd says why. quiet: the runtime logs
** only errors, and a failure is not said (as cli_offline's). */
static kt_runtime *open_at(const char *cmd, const char *path, int readonly, int required, int quiet) {
  kt_options o;
  cli_options(&o, NULL, 1);
  o.cache_path = path;
  o.cache_readonly = readonly;
  o.cache_required = required;
  if (quiet) o.log_level = KT_LOG_ERROR;
  kt_runtime *rt = NULL;
  if (!kt_runtime_open(&rt, &o)) return rt;
  if (!quiet) cli_fail(cmd, "%s", cli_errmsg(rt));
  kt_runtime_close(rt);
  return NULL;
}

/* The cache of a command, which these commands cannot do without (so the
** open fails with its reason, not a warning beside it): read-only for
** those that only read, so that they never create, change or convert a
** file. */
static kt_runtime *open_cache(const char *cmd, const args *a, int readonly) {
  return open_at(cmd, a->cache, readonly, 1, 0);
}

/* A canonical JSON text as a value; a string when it is not JSON, or not
** JSON alone (text after it would be lost). */
static cJSON *json_value(const char *text) {
  cJSON *v = cJSON_ParseWithOpts(text, NULL, 1);
  return v ? v : cJSON_CreateString(text);
}

static cJSON *trial_json(const kt_trial_row *t) {
  cJSON *o = cJSON_CreateObject();
  kt_trial_status ts;
  int compiled = kt_trial_status_parse(t->status, &ts) || ts != KT_TRIAL_COMPILE_ERROR;
  if (!o) return NULL;
  cJSON_AddItemToObject(o, "config", json_value(t->config));
  cJSON_AddStringToObject(o, "status", t->status);
  cJSON_AddItemToObject(o, "median_us", cli_json_num(t->median_us));
  cJSON_AddItemToObject(o, "spread_us", cli_json_num(t->spread_us));
  cJSON_AddItemToObject(o, "registers", cli_json_num(compiled ? t->registers : -1));
  cJSON_AddItemToObject(o, "smem_bytes", cli_json_num(compiled ? t->smem_bytes : -1));
  cJSON_AddItemToObject(o, "spill_bytes", cli_json_num(compiled ? t->spill_bytes : -1));
  cJSON_AddStringToObject(o, "detail", t->detail ? t->detail : "");
  return o;
}

static int add_trial(void *user, const kt_trial_row *t) {
  cJSON_AddItemToArray(user, trial_json(t));
  return 0;
}

typedef struct listing {
  kt_runtime *rt;
  int trials;
  cJSON *rows;   /* --json */
  char **lines;  /* the table: its cells, 6 per row */
  int n, cap;
} listing;

/* A configs row's time for people: "-" where the row holds none. */
static void time_text(char *t, size_t n, double us) {
  if (us < 0) snprintf(t, n, "-");
  else snprintf(t, n, "%.2f", us);
}

static cJSON *row_json(listing *l, const kt_cache_row *r) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "kernel", r->kernel);
  cJSON_AddStringToObject(o, "spec_hash", r->spec_hash);
  cJSON_AddStringToObject(o, "device", r->device);
  cJSON_AddItemToObject(o, "key", json_value(r->key));
  cJSON_AddItemToObject(o, "config", json_value(r->config));
  cJSON_AddItemToObject(o, "time_us", cli_json_num(r->time_us));
  cJSON_AddNumberToObject(o, "candidates", r->candidates);
  cJSON_AddNumberToObject(o, "rejected", r->rejected);
  cJSON_AddNumberToObject(o, "updated_at", (double)r->updated_at);
  cJSON_AddStringToObject(o, "source", r->from_system ? "system" : "user");
  if (l->trials) {
    cJSON *t = cJSON_AddArrayToObject(o, "trials");
    if (t) kt_cache_trials(l->rt, r, add_trial, t);
  }
  return o;
}

/* How long ago t was. A row from the future (a writer whose clock is
** ahead, or SQLite's 'now' rounded up to the next second) is 0s old. */
static void age(char *buf, size_t n, int64_t t) {
  long long s = (long long)(time(NULL) - t);
  if (s < 0) s = 0;
  if (s < 120) snprintf(buf, n, "%llds", s);
  else if (s < 7200) snprintf(buf, n, "%lldm", s / 60);
  else if (s < 172800) snprintf(buf, n, "%lldh", s / 3600);
  else snprintf(buf, n, "%lldd", s / 86400);
}

enum { NCOLS = 7 };
static const char *const list_head[NCOLS] = {"kernel", "device", "key", "config", "time_us", "age", "source"};

/* Keep one table row's cells (copies). */
static int keep_cells(listing *l, const char *const *cells) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    char **q = realloc(l->lines, (size_t)cap * NCOLS * sizeof *q);
    if (!q) return -1;
    l->lines = q;
    l->cap = cap;
  }
  char vis[16384];
  for (int c = 0; c < NCOLS; c++) l->lines[l->n * NCOLS + c] = strdup(cli_visible(cells[c], vis, sizeof vis));
  l->n++;
  return 0;
}

/* The columns s takes on a terminal: its characters (bytes that do not
** continue a UTF-8 sequence; the library hands out UTF-8). */
static size_t columns(const char *s) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += (*p & 0xc0) != 0x80;
  return n;
}

/* The table, each column as wide as its widest cell. */
static void print_table(const listing *l) {
  size_t w[NCOLS];
  for (int c = 0; c < NCOLS; c++) w[c] = strlen(list_head[c]);
  for (int i = 0; i < l->n; i++)
    for (int c = 0; c < NCOLS; c++) {
      const char *s = l->lines[i * NCOLS + c];
      if (s && columns(s) > w[c]) w[c] = columns(s);
    }
  for (int i = -1; i < l->n; i++) {
    for (int c = 0; c < NCOLS; c++) {
      const char *s = i < 0 ? list_head[c] : l->lines[i * NCOLS + c];
      if (!s) s = "?";
      int pad = (int)(w[c] - columns(s));
      if (c + 1 == NCOLS) printf("%s\n", s);
      else if (c == 4) printf("%*s%s  ", pad, "", s);
      else printf("%s%*s  ", s, pad, "");
    }
  }
}

static int print_trial(void *user, const kt_trial_row *t) {
  char med[32] = "-", spr[32] = "-", v[3][4096];
  (void)user;
  if (t->median_us >= 0) snprintf(med, sizeof med, "%.2f", t->median_us);
  if (t->spread_us >= 0) snprintf(spr, sizeof spr, "%.2f", t->spread_us);
  printf("    %-40s %-13s %9s %8s %5d %7d %6d  %s\n", cli_visible(t->config, v[0], sizeof v[0]),
         cli_visible(t->status, v[1], sizeof v[1]), med, spr, t->registers, t->smem_bytes, t->spill_bytes,
         cli_visible(t->detail ? t->detail : "", v[2], sizeof v[2]));
  return 0;
}

static int on_row(void *user, const kt_cache_row *r) {
  listing *l = user;
  if (l->rows) {
    cJSON_AddItemToArray(l->rows, row_json(l, r));
    return 0;
  }
  if (l->trials) {
    char v[4][4096], t[32];
    time_text(t, sizeof t, r->time_us);
    printf("%s  %s  %s\n  config %s: %s us\n", cli_visible(r->kernel, v[0], sizeof v[0]),
           cli_visible(r->device, v[1], sizeof v[1]), cli_visible(r->key, v[2], sizeof v[2]),
           cli_visible(r->config, v[3], sizeof v[3]), t);
    printf("    %-40s %-13s %9s %8s %5s %7s %6s  %s\n", "candidate", "status", "median_us", "spread", "regs", "smem",
           "spill", "detail");
    kt_cache_trials(l->rt, r, print_trial, l);
    printf("    %d candidates, %d rejected\n\n", r->candidates, r->rejected);
    l->n++;
    return 0;
  }
  char t[32], a[16];
  time_text(t, sizeof t, r->time_us);
  age(a, sizeof a, r->updated_at);
  const char *cells[NCOLS] = {r->kernel, r->device, r->key, r->config, t, a, r->from_system ? "system" : "user"};
  return keep_cells(l, cells);
}

static int listing_cmd(int argc, char **argv, const char *cmd, const char *help, int trials) {
  args a = {0};
  const cli_opt opts[] = {{"json", 0, NULL, NULL, &a.json}, {"cache", 0, &a.cache, NULL, NULL}, {0}};
  cli_cmd c = {cmd, help, opts, &a.pos, trials, 1, "kernel"};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  kt_runtime *rt = open_cache(cmd, &a, 1);
  if (!rt) return EXIT_FAIL;
  listing l = {rt, trials, a.json ? cJSON_CreateArray() : NULL, NULL, 0, 0};
  kt_status st = kt_cache_list(rt, a.pos.n ? a.pos.v[0] : NULL, on_row, &l);
  if (st) cli_fail(cmd, "%s", cli_errmsg(rt));
  else if (a.json) rc = cli_print_json(l.rows), l.rows = NULL;
  else if (!l.n) printf("no configs cached%s%s in %s\n", a.pos.n ? " for " : "", a.pos.n ? a.pos.v[0] : "", kt_cache_path(rt));
  else if (!trials) print_table(&l);
  cJSON_Delete(l.rows);
  for (int i = 0; !trials && i < l.n * NCOLS; i++) free(l.lines[i]);
  free(l.lines);
  kt_runtime_close(rt);
  return st || rc ? EXIT_FAIL : EXIT_OK;
}

int cmd_list(int argc, char **argv) { return listing_cmd(argc, argv, "list", list_help, 0); }
int cmd_show(int argc, char **argv) { return listing_cmd(argc, argv, "show", show_help, 1); }

int cmd_export(int argc, char **argv) {
  args a = {0};
  const cli_opt opts[] = {{"output", 'o', &a.out, NULL, NULL},
                          {"binaries", 0, NULL, NULL, &a.binaries},
                          {"cache", 0, &a.cache, NULL, NULL},
                          {0}};
  cli_cmd c = {"export", export_help, opts, &a.pos, 0, 0, ""};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  kt_runtime *rt = open_cache("export", &a, 1);
  if (!rt) return EXIT_FAIL;
  kt_status st = kt_cache_export(rt, a.out ? a.out : "-", a.binaries);
  if (st) cli_fail("export", "%s", cli_errmsg(rt));
  else if (a.out && strcmp(a.out, "-")) fprintf(stderr, "ktune export: wrote %s\n", a.out);
  kt_runtime_close(rt);
  return st ? EXIT_FAIL : EXIT_OK;
}

/* 0 when FILE can be read as a regular file (or is - for standard
** input); otherwise says why, as the library would, so that an import
** that cannot start creates no cache file where none was. */
static int import_readable(const char *path) {
  if (!strcmp(path, "-")) return 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  const char *why = fd < 0 || fstat(fd, &st) ? strerror(errno) : S_ISREG(st.st_mode) ? NULL : "not a regular file";
  if (fd >= 0) close(fd);
  if (why) cli_fail("import", "%s: cannot read: %s", path, why);
  return why != NULL;
}

/* 1 where the cache the command would write is not there yet (no file at
** its path), else 0: there, or not to be told here (the open that follows
** says why). Asked through a read-only open, which makes nothing. */
static int cache_missing(const args *a) {
  kt_runtime *rt = open_at("import", a->cache, 1, 0, 1);
  kt_runtime_info in = {.size = sizeof in};
  struct stat st;
  int missing = rt && !kt_runtime_get_info(rt, &in) && !in.cache_path[0] && in.cache_file[0] &&
                lstat(in.cache_file, &st) && errno == ENOENT;
  kt_runtime_close(rt);
  return missing;
}

/* path merged into rt's cache: 0, or EXIT_FAIL after saying why. */
static int merge(kt_runtime *rt, const char *path, int binaries, long n[5]) {
  return !rt ? EXIT_FAIL : kt_cache_import(rt, path, binaries, n) ? cli_fail("import", "%s", cli_errmsg(rt)) : 0;
}

/* A scratch folder's files, then the folder, removed. */
static void remove_scratch(const char *dir) {
  DIR *d = opendir(dir);
  char p[PATH_MAX];
  for (struct dirent *e; d && (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < PATH_MAX)
      unlink(p);
  if (d) closedir(d);
  rmdir(dir);
}

/* A cache in a new scratch folder (dir), opened; NULL, with nothing left
** behind, where none can be made there ($TMPDIR full, say). */
static kt_runtime *open_scratch(char *dir, size_t n) {
  const char *tmp = getenv("TMPDIR");
  char db[PATH_MAX + 16];
  snprintf(dir, n, "%s/ktune-import-XXXXXX", tmp && *tmp == '/' ? tmp : "/tmp");
  if (!mkdtemp(dir)) return NULL;
  snprintf(db, sizeof db, "%s/scratch.db", dir);
  kt_runtime *rt = open_at("import", db, 0, 1, 1);
  if (!rt) remove_scratch(dir);
  return rt;
}

/* path merged into the cache a names: 0, or EXIT_FAIL after saying why. */
static int import_into(const args *a, const char *path, int binaries, long n[5]) {
  kt_runtime *rt = open_cache("import", a, 0);
  int rc = merge(rt, path, binaries, n);
  kt_runtime_close(rt);
  return rc;
}

/* An import where there is no cache yet: into a scratch cache first, so
** that a file that is not a whole export makes none; then the scratch
** cache's export into the new one (straight into it where no scratch
** cache can be made). Binaries left out are the first import's count
** (the export holds only what it added). */
static int import_new(const args *a, long n[5]) {
  char dir[PATH_MAX], out[PATH_MAX + 16];
  kt_runtime *rt = open_scratch(dir, sizeof dir);
  if (!rt) return import_into(a, a->pos.v[0], a->binaries, n);
  snprintf(out, sizeof out, "%s/export.json", dir);
  long first[5];
  int rc = merge(rt, a->pos.v[0], a->binaries, first);
  if (!rc && kt_cache_export(rt, out, a->binaries)) rc = cli_fail("import", "%s", cli_errmsg(rt));
  kt_runtime_close(rt);
  if (!rc) {
    rc = import_into(a, out, a->binaries, n);
    n[4] = first[4];
  }
  remove_scratch(dir);
  return rc;
}

int cmd_import(int argc, char **argv) {
  args a = {0};
  const cli_opt opts[] = {{"json", 0, NULL, NULL, &a.json},
                          {"binaries", 0, NULL, NULL, &a.binaries},
                          {"cache", 0, &a.cache, NULL, NULL},
                          {0}};
  cli_cmd c = {"import", import_help, opts, &a.pos, 1, 1, "file to import (- for standard input)"};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  if (import_readable(a.pos.v[0])) return EXIT_FAIL;
  long n[5];
  if (cache_missing(&a) ? import_new(&a, n) : import_into(&a, a.pos.v[0], a.binaries, n)) return EXIT_FAIL;
  if (a.json) {
    cJSON *o = cJSON_CreateObject();
    static const char *names[5] = {"added", "kept", "replaced", "binaries_added", "binaries_left_out"};
    for (int i = 0; o && i < 5; i++) cJSON_AddNumberToObject(o, names[i], n[i]);
    rc = cli_print_json(o);
  } else {
    printf("%ld added, %ld kept, %ld replaced, %ld binaries added", n[0], n[1], n[2], n[3]);
    if (n[4]) printf(", %ld left out (--binaries adds an export's cubins)", n[4]);
    putchar('\n');
  }
  return rc ? EXIT_FAIL : EXIT_OK;
}

int cmd_gc(int argc, char **argv) {
  args a = {0};
  const cli_opt opts[] = {{"json", 0, NULL, NULL, &a.json}, {"cache", 0, &a.cache, NULL, NULL}, {0}};
  cli_cmd c = {"gc", gc_help, opts, &a.pos, 0, 256, "spec"};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  /* Nothing to collect where there is no cache: as list says, and none is
  ** made. */
  kt_runtime *rt = open_cache("gc", &a, 1);
  kt_runtime_close(rt);
  if (rt) rt = open_cache("gc", &a, 0);
  if (!rt) return EXIT_FAIL;
  kt_kernel *ks[256];
  for (int i = 0; i < a.pos.n; i++)
    if (kt_kernel_load(rt, a.pos.v[i], &ks[i])) {
      cli_fail("gc", "%s", cli_errmsg(rt));
      kt_runtime_close(rt);
      return EXIT_FAIL;
    }
  long cfgs, bins;
  kt_status st = kt_cache_gc(rt, ks, a.pos.n, &cfgs, &bins);
  if (st) {
    cli_fail("gc", "%s", cli_errmsg(rt));
  } else if (a.json) {
    cJSON *o = cJSON_CreateObject();
    if (o) cJSON_AddNumberToObject(o, "configs_removed", cfgs);
    if (o) cJSON_AddNumberToObject(o, "binaries_removed", bins);
    rc = cli_print_json(o);
  } else {
    printf("%ld stale configs removed, %ld unreferenced binaries removed\n", cfgs, bins);
  }
  kt_runtime_close(rt);
  return st || rc ? EXIT_FAIL : EXIT_OK;
}
