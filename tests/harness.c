#include "harness.h"

#include "ktune.h"
#include "base/clock.h"

#include <ctype.h>
#include <stdarg.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>

static int cur_failed, cur_skipped;

void t_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "    %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  cur_failed = 1;
}

void t_skip(const char *why) {
  printf("    skipped: %s\n", why);
  cur_skipped = 1;
}

int t_failed(void) { return cur_failed; }

/* Every directory t_tmpdir makes is in one made for the run, removed at
** its end unless a test failed (its files are then worth a look). */
static char run_dir[512];

static const char *tmp_base(void) {
  const char *base = getenv("TMPDIR");
  return base && *base ? base : "/tmp";
}

static void run_dir_end(int failed) {
  char out[256];
  if (!run_dir[0]) return;
  if (failed) printf("the tests' files are kept in %s\n", run_dir);
  else t_sh(out, sizeof out, "rm -rf '%s'", run_dir);
  run_dir[0] = 0;
}

int t_run(const kt_test *const *suites, const char *filter, int part, int parts) {
  int passed = 0, failed = 0, skipped = 0, chosen = 0;
  snprintf(run_dir, sizeof run_dir, "%s/ktune-test-XXXXXX", tmp_base());
  if (!mkdtemp(run_dir) || chmod(run_dir, 0755)) run_dir[0] = 0; /* a test runs a child as nobody */
  /* Tests never touch the user's own cache. */
  const char *tmp = t_tmpdir();
  char cache[600];
  if (tmp) {
    snprintf(cache, sizeof cache, "%s/ktune.db", tmp);
    setenv("KTUNE_CACHE", cache, 1);
    unsetenv("KTUNE_SYSTEM_CACHE");
  }
  /* "!text": the tests whose name does not hold text. */
  const int negated = filter && *filter == '!';
  const char *text = filter ? filter + negated : NULL;
  for (int s = 0; suites[s]; s++)
    for (const kt_test *t = suites[s]; t->name; t++) {
      if (text && (strstr(t->name, text) != NULL) == negated) continue;
      if (chosen++ % parts != part - 1) continue;
      cur_failed = cur_skipped = 0;
      printf("  %s\n", t->name);
      fflush(stdout);
      const double t0 = kt__now_ms();
      t->fn();
      /* The long ones say so: where a run cut short spent its time. */
      const double secs = (kt__now_ms() - t0) / 1e3;
      if (secs >= 1) printf("    %.1f s\n", secs);
      if (cur_failed) {
        failed++;
        printf("  FAILED %s\n", t->name);
      } else if (cur_skipped) {
        skipped++;
      } else {
        passed++;
      }
      fflush(stdout);
    }
  run_dir_end(failed);
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}

/* K and N of "K/N" with 1 <= K <= N; 0, or -1 when text is not that. */
static int part_of(const char *text, int *k, int *n) {
  char *end;
  if (!isdigit((unsigned char)*text)) return -1;
  long a = strtol(text, &end, 10), b = 0;
  if (*end != '/' || a < 1 || !isdigit((unsigned char)end[1])) return -1;
  b = strtol(end + 1, &end, 10);
  if (*end || b < a || b > INT_MAX) return -1;
  *k = (int)a, *n = (int)b;
  return 0;
}

int t_main(const kt_test *const *suites, int argc, char **argv) {
  const char *filter = NULL;
  int k = 1, n = 1;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--part=", 7)) {
      if (part_of(argv[i] + 7, &k, &n)) {
        fprintf(stderr, "%s: %s: give --part=K/N with 1 <= K <= N\n", argv[0], argv[i]);
        return 2;
      }
    } else if (!filter) {
      filter = argv[i];
    } else {
      fprintf(stderr, "%s: %s: one filter only (%s is the first)\n", argv[0], argv[i], filter);
      return 2;
    }
  }
  return t_run(suites, filter ? filter : getenv("KT_TEST_FILTER"), k, n);
}

int t_sh(char *out, size_t n, const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t used = 0;
  if (n) out[0] = 0;
  char buf[4096];
  size_t r;
  while ((r = fread(buf, 1, sizeof buf, p)) > 0)
    if (n && used < n - 1) {
      size_t k = r < n - 1 - used ? r : n - 1 - used;
      memcpy(out + used, buf, k);
      used += k;
      out[used] = 0;
    }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *t_last_line(const char *out) {
  size_t n = strlen(out);
  size_t i = n && out[n - 1] == '\n' ? n - 1 : n;
  while (i && out[i - 1] != '\n') i--;
  return out + i;
}

const char *t_tmpdir(void) {
  static char path[512];
  if (run_dir[0]) snprintf(path, sizeof path, "%s/t-XXXXXX", run_dir);
  else snprintf(path, sizeof path, "%s/ktune-test-XXXXXX", tmp_base());
  return mkdtemp(path) ? path : NULL;
}

const char *t_ints(char *buf, size_t n, int first, int count) {
  size_t used = 0;
  buf[0] = 0;
  for (int v = first; v < first + count && used < n; v++)
    used += (size_t)snprintf(buf + used, n - used, "%s%d", v > first ? ", " : "", v);
  return buf;
}

const char *t_bin(void) {
  const char *b = getenv("KTUNE_BIN");
  return b && *b ? b : "build/ktune";
}

int t_empty_cache(const char *db, char *out, size_t n) {
  return t_sh(out, n, "echo '{\"format\": \"ktune-cache\", \"version\": 1, \"configs\": []}' | %s import - --cache %s",
              t_bin(), db) ? -1 : 0;
}

int t_write_file(const char *dir, const char *name, const char *text, char *path, size_t n) {
  snprintf(path, n, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const int bad = fputs(text, f) < 0;
  return fclose(f) || bad ? -1 : 0;
}

int t_have_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != NULL;
}

void t_offline_options(kt_options *o) {
  kt_options_init(o);
  o->no_device = 1;
  o->arch = "sm_90";
  o->log_level = KT_LOG_ERROR;
}

kt_runtime *t_open(const kt_options *o) {
  kt_runtime *rt = NULL;
  if (kt_runtime_open(&rt, o)) {
    kt_runtime_close(rt);
    return NULL;
  }
  return rt;
}

kt_runtime *t_offline(int no_cache) {
  kt_options o;
  t_offline_options(&o);
  o.no_cache = no_cache;
  return t_open(&o);
}

kt_kernel *t_offline_kernel(const char *spec, kt_runtime **rt) {
  kt_kernel *k = NULL;
  *rt = t_offline(1);
  if (*rt && !kt_kernel_load(*rt, spec, &k)) return k;
  t_fail(__FILE__, __LINE__, "%s: %s", spec, *rt ? kt_errmsg(*rt) : kt_errmsg(NULL));
  kt_runtime_close(*rt);
  *rt = NULL;
  return NULL;
}

/* One value from SQLite, for assertions on rows. */
long long t_db_int(const char *path, const char *sql) {
  sqlite3 *db;
  sqlite3_stmt *st;
  long long v = -999;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

int t_db_exec(const char *path, const char *sql) {
  sqlite3 *db;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
  sqlite3_close(db);
  return rc;
}

void t_db_text(const char *path, const char *sql, char *out, size_t n) {
  sqlite3 *db;
  sqlite3_stmt *st;
  snprintf(out, n, "(none)");
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
    size_t used = 0;
    out[0] = 0;
    while (sqlite3_step(st) == SQLITE_ROW && used < n)
      used += (size_t)snprintf(out + used, n - used, "%s\n", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
}

const char *t_long_name(char *buf, char prefix, int i) {
  snprintf(buf, 65, "%c%02d________________________________________________________________", prefix, i);
  return buf;
}

int t_bounds_spec(const char *dir, char *path, size_t n) {
  static char spec[32768];
  char name[72], *p = spec, *end = spec + sizeof spec;
  p += snprintf(p, (size_t)(end - p), "{\"name\": \"%s\", \"source\": \"e.cu\", \"entry\": \"e\", \"template\": [",
                t_long_name(name, 'k', 0));
  for (int i = 0; i < 24; i++)
    p += snprintf(p, (size_t)(end - p), "%s\"%s\"", i ? ", " : "", t_long_name(name, 'C', i));
  p += snprintf(p, (size_t)(end - p), "], \"params\": [");
  for (int i = 0; i < 32; i++)
    p += snprintf(p, (size_t)(end - p), "%s{\"name\": \"%s\", \"type\": \"i64\"}", i ? ", " : "",
                  t_long_name(name, 'P', i));
  for (int d = 0; d < 2; d++) {
    p += snprintf(p, (size_t)(end - p), d ? "}, \"default\": {" : "], \"config\": {");
    for (int i = 0; i < 24; i++)
      p += snprintf(p, (size_t)(end - p), d ? "%s\"%s\": -9007199254740991" : "%s\"%s\": [-9007199254740991]",
                    i ? ", " : "", t_long_name(name, 'C', i));
  }
  p += snprintf(p, (size_t)(end - p), "}, \"grid\": \"1\", \"block\": \"32\"}");
  if (!dir || t_write_file(dir, "e.cu", "template <long long...> __global__ void e() {}\n", path, n)) return -1;
  return t_write_file(dir, "e.json", spec, path, n);
}
