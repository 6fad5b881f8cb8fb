/* What the cache serves can be trusted: cubins are checked before they are
** loaded, side files written by others make the cache read-only, imports
** are all or nothing and canonical, exports are valid JSON, and a kill in
** the middle of an import leaves nothing half done. Rows are checked in
** SQLite, files byte for byte. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/outfile.h"
#include "cache/text.h"
#include "cache/store.h"
#include "device/nvrtc.h"
#include "harness.h"
#include "ktune.h"

static char err[KT_ERRMAX];

static const char *fresh(const char *name) {
  static char path[8][700];
  static int next;
  char *p = path[next++ % 8];
  snprintf(p, sizeof path[0], "%s/%s", t_tmpdir(), name);
  return p;
}

static void capture(void *user, int level, const char *msg) {
  (void)level;
  char *buf = user;
  size_t n = strlen(buf);
  snprintf(buf + n, 8192 - n, "%s\n", msg);
}

static int open_store(kt_store **s, const char *path, char *logged) {
  kt__store_opts o = {.path = path, .log = {capture, logged, 3}};
  if (logged) logged[0] = 0;
  else o.log.fn = NULL;
  return kt__store_open(s, &o, err, sizeof err);
}

/* An offline runtime on cache path, logging to logged. */
static kt_runtime *offline_on(const char *path, char *logged) {
  kt_options o;
  t_offline_options(&o);
  o.cache_path = path;
  if (logged) {
    logged[0] = 0;
    o.log = (kt_log_fn)capture;
    o.log_user = logged;
    o.log_level = KT_LOG_DEBUG;
  }
  kt_runtime *rt = NULL;
  if (kt_runtime_open(&rt, &o)) {
    kt_runtime_close(rt);
    return NULL;
  }
  return rt;
}

/* Compile every variant of the small spec through a runtime on path;
** *compiles and *loads from its counters. */
static kt_status compile_small(const char *path, char *logged, uint64_t *compiles, uint64_t *loads) {
  kt_runtime *rt = offline_on(path, logged);
  kt_kernel *k;
  if (!rt) return KT_ERR_CACHE;
  kt_status st = kt_kernel_load(rt, "tests/specs/small.json", &k);
  if (!st) st = kt_kernel_compile_all(k, NULL, NULL, NULL);
  kt_stats s = {.size = sizeof s};
  kt_runtime_stats(rt, &s);
  *compiles = s.compiles;
  *loads = s.binary_loads;
  kt_runtime_close(rt);
  return st;
}

static int sql(const char *path, const char *q) {
  char e[2048];
  return t_sh(e, sizeof e, "sqlite3 '%s' \"%s\"", path, q);
}

/* A cubin whose bytes, size or digest were changed in the cache is never
** loaded: it is compiled again, and the fresh cubin replaces the row. */
static void damaged_binaries_are_compiled_again(void) {
  const char *p = fresh("bin.db");
  static char logged[8192];
  uint64_t compiles, loads;
  ASSERT_STATUS(compile_small(p, NULL, &compiles, &loads), KT_OK);
  ASSERT_EQ(compiles, 8);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM binaries WHERE length(digest) = 32 AND size = length(cubin)"), 8);
  ASSERT_STATUS(compile_small(p, NULL, &compiles, &loads), KT_OK);
  ASSERT_EQ(compiles * 100 + loads, 8);
  /* Another byte in one blob, a wrong size on another, no digest on a third. */
  ASSERT_EQ(sql(p, "UPDATE binaries SET cubin = zeroblob(length(cubin)) WHERE hash = (SELECT min(hash) FROM binaries);"
                   " UPDATE binaries SET size = size + 1 WHERE hash = (SELECT max(hash) FROM binaries);"
                   " UPDATE binaries SET digest = '' WHERE hash = (SELECT hash FROM binaries ORDER BY hash LIMIT 1 OFFSET 3)"),
            0);
  char first[64];
  t_db_text(p, "SELECT min(hash) FROM binaries", first, sizeof first);
  first[strlen(first) - 1] = 0;
  ASSERT_STATUS(compile_small(p, logged, &compiles, &loads), KT_OK);
  ASSERT_EQ(compiles * 100 + loads, 305);
  char want[200];
  snprintf(want, sizeof want, "binaries row %s (rmsnorm_small): the cubin does not match its size and digest; it is "
                              "compiled again", first);
  ASSERT_CONTAINS(logged, want);
  /* The rows were replaced by the fresh cubins. */
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM binaries WHERE length(digest) = 32 AND size = length(cubin)"), 8);
  ASSERT_STATUS(compile_small(p, NULL, &compiles, &loads), KT_OK);
  ASSERT_EQ(compiles * 100 + loads, 8);
}

/* Where no NVRTC can compile a damaged cubin again, the cached config that
** needs it is skipped with a warning naming the row, and the call gets the
** default config; the damaged blob is never loaded. */
static void unbuildable_cached_config_is_skipped(void) {
  const char *p = fresh("skip.db");
  static char logged[8192];
  uint64_t compiles, loads;
  ASSERT_STATUS(compile_small(p, NULL, &compiles, &loads), KT_OK);
  kt_runtime *rt = offline_on(p, logged);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &k), KT_OK);
  kt_arg a[] = {kt_arg_ptr(0x100000, KT_BF16), kt_arg_ptr(0x200000, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(0x300000, KT_BF16), kt_arg_i32(64), kt_arg_i32(256), kt_arg_f32(1e-5f)};
  char key[256], cfg[128];
  kt_runtime_info info = {.size = sizeof info};
  ASSERT_STATUS(kt_kernel_key(k, a, 7, key, sizeof key), KT_OK);
  ASSERT_STATUS(kt_runtime_get_info(rt, &info), KT_OK);
  kt_store *s;
  kt__cfgrow row = {.kernel = "rmsnorm_small", .spec_hash = kt_kernel_spec_hash(k), .device = info.fingerprint,
                    .key = key, .config = "{\"BLOCK\":128,\"ROWS\":1,\"VEC\":8}", .time_us = 3};
  ASSERT_STATUS(open_store(&s, p, NULL), KT_OK);
  ASSERT_STATUS(kt__store_put_config(s, &row, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
  kt_runtime_close(rt);
  ASSERT_EQ(sql(p, "UPDATE binaries SET cubin = zeroblob(length(cubin))"), 0);
  kt__nvrtc_absent(1);
  rt = offline_on(p, logged);
  ASSERT_TRUE(rt);
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &k), KT_OK);
  ASSERT_STATUS(kt_kernel_config_for(k, a, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(cfg, "BLOCK=128,ROWS=4,VEC=1");
  char want[512];
  snprintf(want, sizeof want, "rmsnorm_small %s: cached config {\"BLOCK\":128,\"ROWS\":1,\"VEC\":8} is skipped: ",
           key);
  ASSERT_CONTAINS(logged, want);
  ASSERT_CONTAINS(logged, "cannot load NVRTC");
  ASSERT_CONTAINS(logged, "the cubin does not match its size and digest");
  kt_runtime_close(rt);
  kt__nvrtc_absent(0);
  /* With NVRTC the same cache serves the row (compiled again). */
  rt = offline_on(p, logged);
  ASSERT_TRUE(rt);
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &k), KT_OK);
  ASSERT_STATUS(kt_kernel_config_for(k, a, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(cfg, "BLOCK=128,ROWS=1,VEC=8");
  kt_runtime_close(rt);
}

/* Bytes of a file, or "" when it is missing. */
static char *slurp(const char *path, size_t *n) {
  char *text = NULL;
  *n = 0;
  if (kt__read_file(path, (size_t)1 << 26, &text, n)) return NULL;
  return text;
}

static int same_bytes(const char *path, const char *before, size_t n) {
  size_t m;
  char *now = slurp(path, &m);
  int same = now && m == n && !memcmp(now, before, n);
  kt__free(now);
  return same;
}

/* Leave a -wal beside path: a process that committed a row and died
** before it could checkpoint. */
static int leave_wal(const char *path) {
  pid_t pid = fork();
  if (pid == 0) {
    kt_store *s;
    kt__cfgrow r = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{\"D\":2}", .config = "{\"B\":2}",
                    .time_us = 2};
    _exit(open_store(&s, path, NULL) || kt__store_put_config(s, &r, NULL, err, sizeof err) ? 1 : 0);
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* A -wal (or -shm) another user could have written would be replayed into
** what the cache serves and checkpointed into the file: the cache is then
** opened read-only, for configs only, and nothing is checkpointed. */
static void foreign_side_files_make_the_cache_read_only(void) {
  const char *p = fresh("side.db");
  kt_store *s;
  static char logged[8192];
  kt__cfgrow r = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{\"D\":1}", .config = "{\"B\":1}", .time_us = 1};
  unsigned char blob[16] = {0x7f, 'E', 'L', 'F'};
  kt__binrow b = {.hash = "00ff", .kernel = "k", .spec_hash = "h", .arch = "sm_90", .nvrtc_version = "13000",
                  .constants = "{\"lowered\":\"f\"}", .size = sizeof blob, .cubin = blob};
  ASSERT_STATUS(open_store(&s, p, NULL), KT_OK);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  ASSERT_STATUS(kt__store_put_binary(s, &b, err, sizeof err), KT_OK);
  ASSERT_EQ(kt__store_binaries_trusted(s), 1);
  kt__store_close(s);
  ASSERT_EQ(leave_wal(p), 0);
  char wal[800];
  snprintf(wal, sizeof wal, "%s-wal", p);
  /* As root, a file of another user; otherwise one anyone may write. */
  ASSERT_EQ(geteuid() == 0 ? chown(wal, 65534, 65534) : chmod(wal, 0666), 0);
  size_t nmain, nwal;
  char *main_before = slurp(p, &nmain), *wal_before = slurp(wal, &nwal);
  ASSERT_TRUE(main_before && wal_before && nwal > 0);
  int st = open_store(&s, p, logged);
  int ro = st ? -1 : kt__store_readonly(s), trusted = st ? -1 : kt__store_binaries_trusted(s);
  char cfg[64] = "";
  int got = st ? st : kt__store_get_config(s, "k", "h", "d", "{\"D\":1}", cfg, sizeof cfg, NULL, err, sizeof err);
  int put = st ? st : kt__store_put_config(s, &r, NULL, err, sizeof err);
  if (!st) kt__store_close(s);
  int main_same = same_bytes(p, main_before, nmain), wal_same = same_bytes(wal, wal_before, nwal);
  kt__free(main_before);
  kt__free(wal_before);
  ASSERT_STATUS((kt_status)st, KT_OK);
  ASSERT_EQ(ro * 10 + trusted, 10);
  ASSERT_STATUS((kt_status)got, KT_OK);
  ASSERT_STR_EQ(cfg, "{\"B\":1}");
  ASSERT_STATUS((kt_status)put, KT_ERR_READONLY);
  ASSERT_TRUE(main_same && wal_same);
  char want[900];
  snprintf(want, sizeof want, "%s: %s: opened read-only for configs; compiled kernels are not loaded from it, and nothing "
                              "is written to it or checkpointed",
           wal, geteuid() == 0 ? "owned by another user" : "world-writable");
  ASSERT_CONTAINS(logged, want);
  /* The same file named through a link in another directory: SQLite keeps
  ** the -wal beside the file the link leads to, and so does this check. */
  char link[800];
  const char *elsewhere = t_tmpdir();
  ASSERT_TRUE(elsewhere);
  snprintf(link, sizeof link, "%s/c.db", elsewhere);
  ASSERT_EQ(symlink(p, link), 0);
  /* SQLite run as root gives the files it opens beside a database the
  ** database's owner: the -wal is another user's again. */
  ASSERT_EQ(geteuid() == 0 ? chown(wal, 65534, 65534) : chmod(wal, 0666), 0);
  ASSERT_STATUS(open_store(&s, link, logged), KT_OK);
  ro = kt__store_readonly(s), trusted = kt__store_binaries_trusted(s);
  kt__store_close(s);
  ASSERT_EQ(ro * 10 + trusted, 10);
  ASSERT_CONTAINS(logged, want);
}

/* A cache at path holding one row, of key and config, for kernel k. */
static kt_status cache_with_row(const char *path, const char *key, const char *config) {
  kt_store *s;
  kt__cfgrow r = {.kernel = "k", .spec_hash = "h", .device = "d", .key = key, .config = config, .time_us = 1};
  kt_status st = (kt_status)open_store(&s, path, NULL);
  if (st) return st;
  st = (kt_status)kt__store_put_config(s, &r, NULL, err, sizeof err);
  kt__store_close(s);
  return st;
}

/* A -wal that is a link (left in a shared directory, say): SQLite would
** write through it into whatever file it leads to. The cache is read for
** configs only, and the file the link leads to is untouched. */
static void a_linked_wal_is_never_written_through(void) {
  const char *dir = t_tmpdir();
  char db[700], wal[720], victim[720], want[1600];
  static char logged[8192];
  ASSERT_TRUE(dir);
  snprintf(db, sizeof db, "%s/c.db", dir);
  snprintf(wal, sizeof wal, "%s-wal", db);
  snprintf(victim, sizeof victim, "%s/victim", dir);
  ASSERT_STATUS(cache_with_row(db, "{\"D\":1}", "{\"B\":1}"), KT_OK);
  FILE *f = fopen(victim, "w");
  ASSERT_TRUE(f);
  fputs("precious\n", f);
  fclose(f);
  ASSERT_EQ(symlink("victim", wal), 0);
  kt_store *s;
  kt__cfgrow r = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{\"D\":1}", .config = "{\"B\":1}", .time_us = 1};
  ASSERT_STATUS(open_store(&s, db, logged), KT_OK);
  int ro = kt__store_readonly(s), trusted = kt__store_binaries_trusted(s);
  char cfg[64] = "";
  int got = kt__store_get_config(s, "k", "h", "d", "{\"D\":1}", cfg, sizeof cfg, NULL, err, sizeof err);
  int put = kt__store_put_config(s, &r, NULL, err, sizeof err);
  kt__store_close(s);
  ASSERT_EQ(ro * 10 + trusted, 10);
  ASSERT_STATUS((kt_status)got, KT_OK);
  ASSERT_STR_EQ(cfg, "{\"B\":1}");
  ASSERT_STATUS((kt_status)put, KT_ERR_READONLY);
  ASSERT_TRUE(same_bytes(victim, "precious\n", 9));
  snprintf(want, sizeof want, "%s: a link: opened read-only for configs", wal);
  ASSERT_CONTAINS(logged, want);
  /* To be written, it is refused, naming the link. */
  kt__store_opts w = {.path = db, .must_write = 1};
  ASSERT_STATUS(kt__store_open(&s, &w, err, sizeof err), KT_ERR_CACHE);
  snprintf(want, sizeof want, "%s: a link: the cache would be read-only, and it is to be written", wal);
  ASSERT_STR_EQ(err, want);
  ASSERT_TRUE(same_bytes(victim, "precious\n", 9));
}

/* An export never replaces the cache: not under another name of its file
** (a relative path the runtime was opened with, used from another working
** directory; a link), nor a file SQLite keeps beside it, made yet or not. */
static void an_export_never_replaces_the_cache(void) {
  char cwd[PATH_MAX], dir[700], name[800], want[900], link[800];
  snprintf(dir, sizeof dir, "%s/export-home", t_tmpdir());
  ASSERT_EQ(mkdir(dir, 0700), 0);
  ASSERT_TRUE(getcwd(cwd, sizeof cwd));
  /* Opened by a relative path, then back in the suite's directory. */
  ASSERT_EQ(chdir(dir), 0);
  kt_runtime *rt = offline_on("c.db", NULL);
  ASSERT_EQ(chdir(cwd), 0);
  ASSERT_TRUE(rt);
  ASSERT_STR_EQ(kt_cache_path(rt), "c.db");
  snprintf(link, sizeof link, "%s/link.db", dir);
  ASSERT_EQ(symlink("c.db", link), 0);
  static const char *const names[] = {"c.db", "c.db-wal", "c.db-shm", "c.db-journal", "../export-home/c.db-journal",
                                      "link.db"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(name, sizeof name, "%s/%s", dir, names[i]);
    ASSERT_STATUS(kt_cache_export(rt, name, 0), KT_ERR_INVALID);
    snprintf(want, sizeof want, "%s: cannot export into the cache itself", name);
    ASSERT_STR_EQ(kt_errmsg(rt), want);
  }
  snprintf(name, sizeof name, "%s/c.db-journal", dir);
  ASSERT_EQ(access(name, F_OK), -1);
  /* A name beside the link is not one SQLite uses: written. */
  snprintf(name, sizeof name, "%s/link.db-journal", dir);
  ASSERT_STATUS(kt_cache_export(rt, name, 0), KT_OK);
  long counts[4];
  ASSERT_STATUS(kt_cache_counts(rt, counts), KT_OK);
  kt_runtime_close(rt);
  snprintf(name, sizeof name, "%s/c.db", dir);
  ASSERT_EQ(t_db_int(name, "SELECT count(*) FROM sqlite_master WHERE name = 'configs'"), 1);
}

/* Nor does it replace the system cache the runtime reads, under any name:
** the system cache is never written. */
static void an_export_never_replaces_the_system_cache(void) {
  const char *dir = t_tmpdir();
  char sys[700], user[700], name[760];
  ASSERT_TRUE(dir);
  snprintf(sys, sizeof sys, "%s/sys.db", dir);
  snprintf(user, sizeof user, "%s/user.db", dir);
  kt_runtime *rt = offline_on(sys, NULL); /* makes a cache there */
  ASSERT_TRUE(rt);
  kt_runtime_close(rt);
  kt_options o;
  t_offline_options(&o);
  o.cache_path = user;
  o.system_cache_path = sys;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  static const char *const tails[] = {"", "-wal", "-journal"};
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "%s/../%s/sys.db%s", dir, strrchr(dir, '/') + 1, tails[i]);
    ASSERT_STATUS(kt_cache_export(rt, name, 0), KT_ERR_INVALID);
  }
  kt_runtime_close(rt);
  ASSERT_EQ(t_db_int(sys, "SELECT count(*) FROM sqlite_master WHERE name = 'configs'"), 1);
}

/* The rows of a cache as one text, to compare before and after. */
static void dump(const char *path, char *out, size_t n) {
  t_db_text(path,
            "SELECT group_concat(r, char(10)) FROM (SELECT kernel || '|' || spec_hash || '|' || device || '|' || key ||"
            " '|' || config || '|' || time_us AS r FROM configs UNION ALL SELECT hash || '|' || size || '|' || digest"
            " FROM binaries ORDER BY 1)",
            out, n);
}

static const char head[] = "{\"format\": \"ktune-cache\", \"version\": 1, \"configs\": [";

/* A configs row of an export, with key k (text) and time t (text). */
static size_t config_line(char *out, size_t n, int i, const char *key, const char *time) {
  return (size_t)snprintf(out, n,
                          "%s{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": %s,"
                          " \"config\": {\"B\": %d}, \"time_us\": %s}",
                          i ? ", " : "", key, i, time);
}

/* Import text into path; the status and message. */
static kt_status import_text(const char *path, const char *text, long c[5]) {
  kt_store *s;
  kt_status st = open_store(&s, path, NULL);
  if (st) return st;
  st = kt__store_import(s, "x.json", text, 1, c, err, sizeof err);
  kt__store_close(s);
  return st;
}

/* 50 good configs rows, then last: the import refused as a whole. */
static kt_status import_after_50(const char *path, const char *last, int binaries) {
  static char text[65536];
  size_t u = (size_t)snprintf(text, sizeof text, "%s", head);
  for (int i = 0; i < 50; i++) {
    char key[32];
    snprintf(key, sizeof key, "{\"D\": %d}", 1000 + i);
    u += config_line(text + u, sizeof text - u, i, key, "3.5");
  }
  u += (size_t)snprintf(text + u, sizeof text - u, "%s%s%s]}", binaries ? "], \"binaries\": [" : ", ", last,
                        binaries ? "" : "");
  long c[5];
  return import_text(path, text, c);
}

static void imports_are_all_or_nothing(void) {
  const char *p = fresh("imp.db");
  kt_store *s;
  kt__cfgrow r = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{\"D\":1}", .config = "{\"B\":1}", .time_us = 1};
  ASSERT_STATUS(open_store(&s, p, NULL), KT_OK);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
  char before[8192], after[8192];
  dump(p, before, sizeof before);
  static const struct {
    const char *row;
    int binaries;
    const char *msg;
  } bad[] = {
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 1}, \"config\": {\"B\": 1},"
       " \"time_us\": \"fast\"}", 0, "x.json: configs[50]: \"time_us\" must be a finite number >= 0"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 1}, \"config\": {\"B\": 1},"
       " \"time_us\": -0.5}", 0, "x.json: configs[50]: \"time_us\" must be a finite number >= 0"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 1}, \"config\": {\"B\": 1},"
       " \"time_us\": 1e999}", 0, "x.json: configs[50]: \"time_us\" must be a finite number >= 0"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 1}, \"config\": {\"B\": 1},"
       " \"time_us\": 1, \"candidates\": -3}", 0, "x.json: configs[50]: \"candidates\" must be an integer >= 0"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": [1], \"config\": {\"B\": 1},"
       " \"time_us\": 1}", 0, "x.json: configs[50]: \"key\" must be an object"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 1}, \"config\": {\"B\": 1.5},"
       " \"time_us\": 1}", 0, "x.json: configs[50]: config: \"B\" is not an integer"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": {\"E\": 1}}, \"config\": {\"B\": 1},"
       " \"time_us\": 1}", 0, "x.json: configs[50]: key: a key holds numbers and strings only"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 1, \"D\": 2}, \"config\": {\"B\": 1},"
       " \"time_us\": 1}", 0, "x.json: configs[50]: key: \"D\" given twice"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"GPU\\u001b[2J\", \"key\": {\"D\": 1},"
       " \"config\": {\"B\": 1}, \"time_us\": 1}", 0, "x.json: configs[50]: \"device\" holds a control character"},
      {"{\"kernel\": \"k\\nl\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 1}, \"config\": {\"B\": 1},"
       " \"time_us\": 1}", 0, "x.json: configs[50]: \"kernel\" holds a control character"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"GPU\\u009b2J\", \"key\": {\"D\": 1},"
       " \"config\": {\"B\": 1}, \"time_us\": 1}", 0, "x.json: configs[50]: \"device\" holds a control character"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"GPU \\u202e001H\", \"key\": {\"D\": 1},"
       " \"config\": {\"B\": 1}, \"time_us\": 1}", 0, "x.json: configs[50]: \"device\" holds a control character"},
      {"{\"kernel\": \"k\xff\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 1}, \"config\": {\"B\": 1},"
       " \"time_us\": 1}", 0, "x.json: configs[50]: \"kernel\" is not UTF-8"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"GPU \xed\xa0\x80\", \"key\": {\"D\": 1},"
       " \"config\": {\"B\": 1}, \"time_us\": 1}", 0, "x.json: configs[50]: \"device\" is not UTF-8"},
      {"{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"GPU \\ud800\", \"key\": {\"D\": 1},"
       " \"config\": {\"B\": 1}, \"time_us\": 1}", 0, "x.json: configs[50]: \"device\" is not UTF-8"},
      {"{\"hash\": \"ab\", \"kernel\": \"k\", \"arch\": \"sm_90\xc0\xb0\", \"nvrtc_version\": \"13000\", \"constants\":"
       " {\"lowered\": \"f\"}, \"size\": 4, \"cubin\": \"f0VMRg==\"}", 1, "x.json: binaries[0]: \"arch\" is not UTF-8"},
      {"7", 0, "x.json: configs[50]: expected an object"},
      {"{\"hash\": \"ab\", \"kernel\": \"k\", \"arch\": \"sm_90\", \"nvrtc_version\": \"13000\", \"constants\":"
       " {\"lowered\": \"f\"}, \"size\": 5, \"cubin\": \"f0VMRg==\"}", 1,
       "x.json: binaries[0]: the cubin has 4 bytes, \"size\" says 5"},
      {"{\"hash\": \"ab\", \"kernel\": \"k\", \"arch\": \"sm_90\", \"nvrtc_version\": \"13000\", \"constants\":"
       " {\"lowered\": \"f\"}, \"size\": 4, \"cubin\": \"f0VMRg==\", \"digest\": \"00000000000000000000000000000000\"}", 1,
       "x.json: binaries[0]: the cubin does not match its digest"},
      {"{\"hash\": \"ab\", \"kernel\": \"k\", \"arch\": \"sm_90\", \"nvrtc_version\": \"13000\", \"constants\": {},"
       " \"size\": 4, \"cubin\": \"f0VMRg==\"}", 1, "x.json: binaries[0]: \"constants\" must hold the entry's \"lowered\" name"},
      {"{\"kernel\": \"k\", \"arch\": \"sm_90\", \"nvrtc_version\": \"13000\", \"constants\": {\"lowered\": \"f\"},"
       " \"size\": 4, \"cubin\": \"f0VMRg==\"}", 1, "x.json: binaries[0]: missing \"hash\""},
      {"{\"hash\": \"ab\", \"kernel\": \"k\", \"arch\": \"sm_90\", \"nvrtc_version\": \"13000\", \"constants\":"
       " {\"lowered\": \"f\"}, \"size\": 4, \"cubin\": \"f0V*Rg==\"}", 1, "x.json: binaries[0]: \"cubin\" is not base64"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kt_status st = import_after_50(p, bad[i].row, bad[i].binaries);
    dump(p, after, sizeof after);
    if (st != KT_ERR_INVALID || strcmp(err, bad[i].msg) || strcmp(after, before)) {
      t_fail(__FILE__, __LINE__, "case %zu: %s: %s%s", i, kt_status_name(st), err,
             strcmp(after, before) ? " (and the cache changed)" : "");
      return;
    }
  }
  /* A config longer than any reader takes (KT_CONFIG_MAX) is none. */
  char longer[4096];
  snprintf(longer, sizeof longer,
           "{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 1},"
           " \"config\": {\"B%0*d\": 1}, \"time_us\": 1}", KT_CONFIG_MAX, 0);
  ASSERT_STATUS(import_after_50(p, longer, 0), KT_ERR_INVALID);
  ASSERT_STR_EQ(err, "x.json: configs[50]: config: too long");
  dump(p, after, sizeof after);
  ASSERT_STR_EQ(after, before);
  ASSERT_STATUS(import_after_50(p, "", 1), KT_OK);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM configs"), 51);
}

/* Keys and configs are stored canonical: unsorted fields, integers written
** as floats, spaces, escapes all become the one form a lookup matches. */
static void imports_are_canonical(void) {
  const char *p = fresh("canon.db");
  char text[2048];
  long c[5];
  snprintf(text, sizeof text,
           "%s{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"T\": \"bf\\u0031\\u0036\","
           " \"D\": 256.0, \"eps\": 0.1}, \"config\": {\"VEC\": 8, \"BLOCK\": 128}, \"time_us\": 5}]}",
           head);
  ASSERT_STATUS(import_text(p, text, c), KT_OK);
  ASSERT_EQ(c[0], 1);
  char rows[512];
  t_db_text(p, "SELECT key || ' ' || config FROM configs", rows, sizeof rows);
  ASSERT_STR_EQ(rows, "{\"D\":256,\"T\":\"bf16\",\"eps\":0.100000001} {\"BLOCK\":128,\"VEC\":8}\n");
  /* The canonical form of the same key, faster: it replaces that row. */
  snprintf(text, sizeof text,
           "%s{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\":256,\"T\":\"bf16\","
           "\"eps\":0.100000001}, \"config\": {\"BLOCK\": 256, \"VEC\": 4}, \"time_us\": 4}]}",
           head);
  ASSERT_STATUS(import_text(p, text, c), KT_OK);
  ASSERT_EQ(c[2], 1);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM configs"), 1);
  ASSERT_EQ(t_db_int(p, "SELECT json_extract(config, '$.BLOCK') FROM configs"), 256);
  /* 64-bit key values stay exact. */
  snprintf(text, sizeof text,
           "%s{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"N\": 9007199254740993},"
           " \"config\": {\"B\": 1}, \"time_us\": 4}]}",
           head);
  ASSERT_STATUS(import_text(p, text, c), KT_OK);
  t_db_text(p, "SELECT key FROM configs WHERE key LIKE '%N%'", rows, sizeof rows);
  ASSERT_STR_EQ(rows, "{\"N\":9007199254740993}\n");
}

/* A writer killed at any point of an import leaves the cache as it was, or
** with every row of the file: never some of them. */
static void a_killed_import_leaves_nothing_partial(void) {
  static char text[4 << 20];
  size_t u = (size_t)snprintf(text, sizeof text, "%s", head);
  for (int i = 0; i < 4000; i++) {
    char key[160];
    snprintf(key, sizeof key, "{\"D\": %d, \"pad\": \"%0100d\"}", i, i);
    u += config_line(text + u, sizeof text - u, i, key, "2.5");
  }
  snprintf(text + u, sizeof text - u, "]}");
  const char *p = fresh("kill.db");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL), KT_OK);
  kt__store_close(s);
  int outcomes[2] = {0, 0};
  for (int round = 0; round < 12; round++) {
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
      long c[5];
      _exit(import_text(p, text, c) ? 1 : 0);
    }
    usleep((useconds_t)(round * 12000));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    long long n = t_db_int(p, "SELECT count(*) FROM configs");
    char ok[64];
    t_db_text(p, "PRAGMA integrity_check", ok, sizeof ok);
    ASSERT_STR_EQ(ok, "ok\n");
    if (n != 0 && n != 4000) {
      t_fail(__FILE__, __LINE__, "round %d: %lld rows after the kill", round, n);
      return;
    }
    outcomes[n == 4000]++;
    if (n) ASSERT_EQ(sql(p, "DELETE FROM configs"), 0);
  }
  printf("    %d kills before the commit, %d after\n", outcomes[0], outcomes[1]);
  ASSERT_TRUE(outcomes[0] > 0);
}

/* A process killed while it writes a file (an export, cubins) leaves the
** file that was there and nothing beside it: the bytes go to a file with
** no name (O_TMPFILE), named and renamed over the path once complete. */
static void a_killed_writer_leaves_nothing_beside(void) {
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  int probe = open(dir, O_TMPFILE | O_WRONLY, 0600);
  if (probe < 0) SKIP("no O_TMPFILE file here: a killed writer leaves its new file, named, beside the path");
  close(probe);
  char p[1024], out[4096];
  snprintf(p, sizeof p, "%s/out.json", dir);
  FILE *f = fopen(p, "w");
  ASSERT_TRUE(f);
  fputs("old\n", f);
  fclose(f);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  ASSERT_TRUE(pid >= 0);
  if (pid == 0) {
    kt__outfile o;
    if (kt__out_open(&o, p, 0)) _exit(1);
    for (int i = 0; i < 100000; i++) fputs("0123456789", o.f);
    fflush(o.f);
    if (write(ready[1], "w", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(ready[0]);
  close(ready[1]);
  ASSERT_EQ(t_sh(out, sizeof out, "cd '%s' && ls -A && cat out.json", dir), 0);
  ASSERT_STR_EQ(out, "out.json\nold\n");
  /* The same write, committed, replaces it and leaves nothing beside. */
  kt__outfile o;
  ASSERT_EQ(kt__out_open(&o, p, 0), 0);
  fputs("new\n", o.f);
  ASSERT_EQ(kt__out_commit(&o), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "cd '%s' && ls -A && cat out.json && rm -rf '%s'", dir, dir), 0);
  ASSERT_STR_EQ(out, "out.json\nnew\n");
}

/* Exports are valid JSON whatever the rows hold, and import back to the
** same rows; a row another program left non-canonical is left out. */
static void exports_are_valid_json(void) {
  const char *a = fresh("ea.db"), *b = fresh("eb.db"), *j = fresh("e.json");
  kt_store *s;
  static char logged[8192];
  ASSERT_STATUS(open_store(&s, a, logged), KT_OK);
  kt__cfgrow r = {.kernel = "k\"1", .spec_hash = "h\\", .device = "GPU \"x\" /z", .key = "{\"D\":1}",
                  .config = "{\"B\":1}", .time_us = 1e-300, .nvrtc_version = "13\u00e9"};
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  r.key = "{\"D\":2}";
  r.time_us = 123456789.125;
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  /* A control byte in a name: no import would take it. */
  r.key = "{\"D\":3}";
  r.device = "GPU\n\tz";
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  /* Bytes that are not UTF-8: no JSON holds them. */
  r.key = "{\"D\":4}";
  r.device = "GPU \xc3";
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
  ASSERT_EQ(sql(a, "INSERT INTO configs VALUES ('k', 'h', 'd', '{\\\"D\\\":', '{}', 1, 0, 0, '', '', 0, 0)"), 0);
  /* A time that is text (it reads as 0, faster than any tuning). */
  ASSERT_EQ(sql(a, "INSERT INTO configs VALUES ('k', 'h', 'd', '{\\\"D\\\":5}', '{\\\"B\\\":1}', 'fast', 0, 0, '', '', 0, "
                   "0)"),
            0);
  ASSERT_STATUS(open_store(&s, a, logged), KT_OK);
  FILE *f = fopen(j, "w");
  ASSERT_TRUE(f);
  ASSERT_STATUS(kt__store_export(s, f, 1, err, sizeof err), KT_OK);
  fclose(f);
  kt__store_close(s);
  ASSERT_CONTAINS(logged, "4 configs rows are not canonical or hold no time, and are not exported");
  char *json;
  ASSERT_EQ(kt__read_file(j, KT__SPEC_MAX, &json, NULL), 0);
  ASSERT_TRUE(kt__text_utf8(json));
  cJSON *parsed = cJSON_Parse(json);
  int valid = parsed != NULL, rows = cJSON_GetArraySize(cJSON_GetObjectItem(parsed, "configs"));
  cJSON_Delete(parsed);
  long c[5];
  kt_status st = import_text(b, json, c);
  kt__free(json);
  ASSERT_TRUE(valid);
  ASSERT_EQ(rows, 2);
  ASSERT_STATUS(st, KT_OK);
  char da[4096], db[4096];
  t_db_text(a, "SELECT kernel || spec_hash || device || key || config || time_us || nvrtc_version FROM configs WHERE"
               " key IN ('{\"D\":1}', '{\"D\":2}') ORDER BY key", da, sizeof da);
  t_db_text(b, "SELECT kernel || spec_hash || device || key || config || time_us || nvrtc_version FROM configs"
               " ORDER BY key", db, sizeof db);
  ASSERT_STR_EQ(db, da);
}

/* Commands that only read never create or change a file: a missing cache
** is an error naming it, and another application's SQLite file is refused
** and left as it was (no ktune tables, no switch to WAL). */
static void reading_commands_change_nothing(void) {
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  char out[8192], path[700];
  static const char *const reading[] = {"list", "show k", "export", "info"};
  for (size_t i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/none.db", dir);
    int rc = t_sh(out, sizeof out, "%s %s --cache %s", t_bin(), reading[i], path);
    struct stat sb;
    if (!stat(path, &sb)) t_fail(__FILE__, __LINE__, "ktune %s created %s", reading[i], path);
    ASSERT_EQ(rc, 1);
    ASSERT_CONTAINS(out, path);
    ASSERT_CONTAINS(out, "no cache there (nothing was created)");
  }
  snprintf(path, sizeof path, "%s/app.db", dir);
  ASSERT_EQ(sql(path, "CREATE TABLE people (name TEXT); INSERT INTO people VALUES ('ada')"), 0);
  size_t n;
  char *before = slurp(path, &n);
  ASSERT_TRUE(before);
  static const char *const all[] = {"list", "show k", "export", "info", "import tests/fixtures/shapes.jsonl", "gc"};
  for (size_t i = 0; i < 6; i++) {
    int rc = t_sh(out, sizeof out, "%s %s --cache %s", t_bin(), all[i], path);
    if (rc != 1 || !strstr(out, "not a ktune cache (it holds tables of another application); it is left as it is")) {
      kt__free(before);
      t_fail(__FILE__, __LINE__, "ktune %s: exit %d: %s", all[i], rc, out);
      return;
    }
  }
  int same = same_bytes(path, before, n);
  kt__free(before);
  ASSERT_TRUE(same);
  char mode[32];
  t_db_text(path, "PRAGMA journal_mode", mode, sizeof mode);
  ASSERT_STR_EQ(mode, "delete\n");
  ASSERT_EQ(t_db_int(path, "SELECT count(*) FROM sqlite_master"), 1);
}

/* ktune compile writes the cache; ktune gc then keeps the cubins of the
** specs it is given, and -o writes a manifest of sizes and digests. */
static void compile_then_gc_keeps_cubins(void) {
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  char out[16384], db[700];
  snprintf(db, sizeof db, "%s/c.db", dir);
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_90 --cache %s -o %s/out tests/specs/small.json", t_bin(), db, dir), 0);
  ASSERT_EQ(t_db_int(db, "SELECT count(*) FROM binaries"), 8);
  ASSERT_EQ(t_sh(out, sizeof out, "%s gc tests/specs/small.json --cache %s", t_bin(), db), 0);
  ASSERT_STR_EQ(out, "0 stale configs removed, 0 unreferenced binaries removed\n");
  ASSERT_EQ(t_db_int(db, "SELECT count(*) FROM binaries"), 8);
  /* Without the spec named, nothing refers to them. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s gc --cache %s", t_bin(), db), 0);
  ASSERT_STR_EQ(out, "0 stale configs removed, 8 unreferenced binaries removed\n");
  char manifest[800];
  snprintf(manifest, sizeof manifest, "%s/out/rmsnorm_small.manifest.json", dir);
  char *text;
  ASSERT_EQ(kt__read_file(manifest, KT__SPEC_MAX, &text, NULL), 0);
  cJSON *m = cJSON_Parse(text);
  kt__free(text);
  ASSERT_TRUE(m);
  cJSON *list = cJSON_GetObjectItem(m, "cubins");
  int n = cJSON_GetArraySize(list), good = 0;
  for (int i = 0; i < n; i++) {
    cJSON *e = cJSON_GetArrayItem(list, i);
    char path[1200], digest[33];
    snprintf(path, sizeof path, "%s/out/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItem(e, "file")));
    size_t len;
    char *bytes = slurp(path, &len);
    if (bytes) kt__store_digest(bytes, len, digest);
    good += bytes && (double)len == cJSON_GetNumberValue(cJSON_GetObjectItem(e, "size")) &&
            !strcmp(digest, cJSON_GetStringValue(cJSON_GetObjectItem(e, "digest")));
    kt__free(bytes);
  }
  cJSON_Delete(m);
  ASSERT_EQ(n, 8);
  ASSERT_EQ(good, 8);
}

/* Run fn in a child that cannot write where root could: as root, the child
** becomes nobody first. Returns its exit status (0 when fn returned 0). */
static int as_unprivileged(int (*fn)(const char *), const char *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) || setuid(65534))) _exit(99);
    _exit(fn(arg));
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 98;
}

/* In the child: a cache in a read-only directory opens read-only and
** serves its configs; a system cache there too. */
static int read_only_child(const char *dir) {
  char user[700], sys[700], cfg[64];
  snprintf(user, sizeof user, "%s/ro/user.db", dir);
  snprintf(sys, sizeof sys, "%s/ro/system.db", dir);
  kt_store *s;
  kt__store_opts o = {.path = user, .system_path = sys};
  if (kt__store_open(&s, &o, err, sizeof err)) return fprintf(stderr, "    child: %s\n", err), 1;
  int ok = kt__store_readonly(s) &&
           !kt__store_get_config(s, "k", "h", "d", "{\"D\":1}", cfg, sizeof cfg, NULL, err, sizeof err) &&
           !strcmp(cfg, "{\"B\":1}") &&
           !kt__store_get_config(s, "k", "h", "d", "{\"D\":9}", cfg, sizeof cfg, NULL, err, sizeof err) &&
           !strcmp(cfg, "{\"B\":9}");
  kt__cfgrow r = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{\"D\":2}", .config = "{}", .time_us = 1};
  ok = ok && kt__store_put_config(s, &r, NULL, err, sizeof err) == KT__C_READONLY;
  kt__store_close(s);
  /* A new cache cannot be made there. */
  char fresh_path[700];
  snprintf(fresh_path, sizeof fresh_path, "%s/ro/new.db", dir);
  o.path = fresh_path;
  o.system_path = NULL;
  int refused = kt__store_open(&s, &o, err, sizeof err) == KT__C_CACHE && strstr(err, "cannot open");
  return !ok ? 2 : !refused ? 3 : 0;
}

static void read_only_directories_are_read(void) {
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  char ro[700], user[800], sys[800], out[256];
  snprintf(ro, sizeof ro, "%s/ro", dir);
  ASSERT_EQ(mkdir(ro, 0755), 0);
  snprintf(user, sizeof user, "%s/user.db", ro);
  snprintf(sys, sizeof sys, "%s/system.db", ro);
  ASSERT_STATUS(cache_with_row(user, "{\"D\":1}", "{\"B\":1}"), KT_OK);
  ASSERT_STATUS(cache_with_row(sys, "{\"D\":9}", "{\"B\":9}"), KT_OK);
  ASSERT_EQ(chmod(dir, 0755) | chmod(user, 0444) | chmod(sys, 0444) | chmod(ro, 0555), 0);
  int rc = as_unprivileged(read_only_child, dir);
  chmod(ro, 0755);
  ASSERT_EQ(rc, 0);
  /* Nothing was created beside them. */
  ASSERT_EQ(t_sh(out, sizeof out, "ls %s", ro), 0);
  ASSERT_STR_EQ(out, "system.db\nuser.db\n");
}

/* configs made as ktune makes it but for what each case passes: a
** collation on key, time_us's type, the primary key. */
static const char configs_as[] =
    "DROP TABLE configs; CREATE TABLE configs (kernel TEXT NOT NULL, spec_hash TEXT NOT NULL, device TEXT NOT NULL,"
    " key TEXT NOT NULL%s, config TEXT NOT NULL, time_us %s NOT NULL, candidates INTEGER NOT NULL DEFAULT 0,"
    " rejected INTEGER NOT NULL DEFAULT 0, nvrtc_version TEXT NOT NULL DEFAULT '', driver_version TEXT NOT NULL"
    " DEFAULT '', created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY (%s)) WITHOUT ROWID";

/* The config of key {"D":1}, "" when there is none. */
static void get_config_of(kt_store *s, char *cfg, size_t n) {
  char e[KT_ERRMAX];
  if (kt__store_get_config(s, "k", "h", "d", "{\"D\":1}", cfg, n, NULL, e, sizeof e)) cfg[0] = 0;
}

/* A copy of the cache base at path, changed by q (sqlite3's shell). */
static int hostile_copy(const char *base, const char *path, const char *q) {
  char e[2048];
  return t_sh(e, sizeof e, "cp '%s' '%s'", base, path) || sql(path, q);
}

/* A file whose tables bear ktune's names but not its rules is refused as
** a whole and left as it is, as the user's cache and as the system cache:
** a view in a table's place (one that never ends would hold every read), a
** key compared without case (two keys' rows one), a time stored as text
** (compared as text: "10" < "9"), a second unique key (one REPLACE deletes
** another key's row). A trigger of the file never runs. */
static void tables_ktune_did_not_make_are_refused(void) {
  static const char pk[] = "kernel, spec_hash, device, key";
  static char q[4][1024];
  static const struct {
    const char *sql, *why;
  } bad[] = {
      {"ALTER TABLE configs RENAME TO c0; CREATE VIEW configs AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL"
       " SELECT x + 1 FROM n) SELECT c0.* FROM c0, n", "configs is a view, not a table"},
      {q[0], "column configs.key compares as NOCASE, not BINARY"},
      {q[1], "column configs.time_us is TEXT, not REAL"},
      {q[2], "the primary key of configs compares key as NOCASE, not BINARY"},
      {q[3], "column configs.spec_hash is not in the primary key"},
      {"CREATE UNIQUE INDEX one_a_kernel ON configs (kernel)",
       "table configs has a unique key besides its primary key (one_a_kernel)"},
      {"DROP TABLE configs; CREATE VIRTUAL TABLE configs USING fts5(kernel, spec_hash, device, key, config)",
       "configs is a virtual table"},
      {"ALTER TABLE binaries DROP COLUMN digest", "table binaries has no column digest"},
      {"DROP TABLE leases", "it has no table leases"},
      {"DROP TABLE leases; CREATE VIEW leases AS SELECT 1", "leases is a view, not a table"},
      {"UPDATE meta SET value = '2'", "it holds a table leases, which schema 2 does not have"},
      {"UPDATE meta SET value = '99999999999'", "its schema_version is not a version number"},
      {"UPDATE meta SET value = '4x'", "its schema_version is not a version number"},
  };
  snprintf(q[0], sizeof q[0], configs_as, " COLLATE NOCASE", "REAL", pk);
  snprintf(q[1], sizeof q[1], configs_as, "", "TEXT", pk);
  snprintf(q[2], sizeof q[2], configs_as, "", "REAL", "kernel, spec_hash, device, key COLLATE NOCASE");
  snprintf(q[3], sizeof q[3], configs_as, "", "REAL", "kernel, key");
  const char *base = fresh("made.db"), *user = fresh("user.db");
  kt_store *s;
  kt__cfgrow r = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{\"D\":1}", .config = "{\"B\":1}",
                  .time_us = 9};
  ASSERT_STATUS(open_store(&s, base, NULL), KT_OK);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char path[800], want[1200];
    snprintf(path, sizeof path, "%s/hostile-%zu.db", t_tmpdir(), i);
    ASSERT_EQ(hostile_copy(base, path, bad[i].sql), 0);
    size_t n;
    char *before = slurp(path, &n);
    ASSERT_TRUE(before);
    int st = open_store(&s, path, NULL);
    if (!st) kt__store_close(s);
    static char logged[8192];
    kt__store_opts o = {.path = user, .system_path = path, .log = {capture, logged, 3}};
    logged[0] = 0;
    int sys = kt__store_open(&s, &o, want, sizeof want);
    char cfg[64] = "";
    if (!sys) get_config_of(s, cfg, sizeof cfg), kt__store_close(s);
    int same = same_bytes(path, before, n);
    kt__free(before);
    ASSERT_STATUS((kt_status)st, KT_ERR_CACHE);
    snprintf(want, sizeof want, "%s: not a ktune cache (%s); it is left as it is", path, bad[i].why);
    ASSERT_STR_EQ(err, want);
    ASSERT_STATUS((kt_status)sys, KT_OK);
    ASSERT_STR_EQ(cfg, "");
    snprintf(want, sizeof want, "%s: system cache not used: %s: not a ktune cache (%s)\n", path, path, bad[i].why);
    ASSERT_STR_EQ(logged, want);
    ASSERT_TRUE(same);
  }
  /* A trigger that would rewrite every config is left in the file, and
  ** never fires. */
  const char *trig = fresh("trigger.db");
  ASSERT_EQ(hostile_copy(base, trig, "CREATE TRIGGER rewrite AFTER INSERT ON configs BEGIN"
                                     " UPDATE configs SET config = 'x', time_us = 0; END"), 0);
  ASSERT_STATUS(open_store(&s, trig, NULL), KT_OK);
  r.key = "{\"D\":2}";
  r.config = "{\"B\":2}";
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
  char rows[256];
  t_db_text(trig, "SELECT group_concat(config || ' ' || time_us, ',') FROM configs", rows, sizeof rows);
  ASSERT_STR_EQ(rows, "{\"B\":1} 9.0,{\"B\":2} 9.0\n");
  ASSERT_EQ(t_db_int(trig, "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"), 1);
}

/* The runtime's own log (no callback given) writes a message's control
** bytes as \xNN: a path or cached text it quotes stays on its line. */
static void the_runtime_log_escapes_control_bytes(void) {
  const char *p = fresh("stderr.txt");
  fflush(stderr);
  int saved = dup(2), fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_TRUE(saved >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);
  kt__log_stderr(NULL, KT_LOG_WARN, "a\nb\x1b[2Jc\x7f\td\xc2\x9b" "2J\xc2\xa0\xc3\xa9");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  size_t n;
  char *text = slurp(p, &n);
  ASSERT_TRUE(text);
  int same = !strcmp(text, "ktune: warn: a\\x0ab\\x1b[2Jc\\x7f\\x09d\\xc2\\x9b2J\xc2\xa0\xc3\xa9\n");
  if (!same) printf("    got %s", text);
  kt__free(text);
  ASSERT_TRUE(same);
}

static int row_text(void *user, const kt_cache_row *r) {
  char *out = user;
  size_t n = strlen(out);
  snprintf(out + n, 512 - n, "%s %s\n", r->kernel, r->device);
  return 0;
}

static int trial_text(void *user, const kt_trial_row *t) {
  char *out = user;
  size_t n = strlen(out);
  snprintf(out + n, 512 - n, "%s %s\n", t->status, t->detail);
  return 0;
}

typedef struct with_trials {
  kt_runtime *rt;
  char out[512];
} with_trials;

static int row_and_trials(void *user, const kt_cache_row *r) {
  with_trials *w = user;
  row_text(w->out, r);
  kt_cache_row copy = *r; /* a copy is looked up by the text shown */
  if (kt_cache_trials(w->rt, r, trial_text, w->out) || kt_cache_trials(w->rt, &copy, trial_text, w->out)) return 1;
  return 0;
}

/* A row whose texts were shown with \xNN finds its trials when its
** listing's callback asks with the row it was given (ktune show does). */
static void rows_shown_escaped_find_their_trials(void) {
  const char *db = fresh("shown.db");
  kt_runtime *rt = offline_on(db, NULL);
  ASSERT_TRUE(rt);
  kt_runtime_close(rt);
  ASSERT_EQ(sql(db, "INSERT INTO configs (kernel, spec_hash, device, key, config, time_us, created_at, updated_at)"
                    " VALUES (CAST(X'6bff' AS TEXT), 'h', CAST(X'4750550a' AS TEXT), '{}', '{}', 1, 0, 0)"), 0);
  ASSERT_EQ(sql(db, "INSERT INTO trials (kernel, spec_hash, device, key, config, status, detail, measured_at)"
                    " VALUES (CAST(X'6bff' AS TEXT), 'h', CAST(X'4750550a' AS TEXT), '{}', '{}', 'mismatch', 'y', 0)"),
            0);
  with_trials w = {.out = ""};
  ASSERT_TRUE((w.rt = rt = offline_on(db, NULL)));
  ASSERT_STATUS(kt_cache_list(rt, NULL, row_and_trials, &w), KT_OK);
  kt_runtime_close(rt);
  ASSERT_STR_EQ(w.out, "k\\xff GPU\n\nmismatch y\n");
  char out[1024];
  ASSERT_EQ(t_sh(out, sizeof out, "%s show \"$(printf 'k\\377')\" --cache %s", t_bin(), db), 0);
  ASSERT_CONTAINS(out, "mismatch");
}

/* Which bytes read as UTF-8: lengths of the character at each sample (0:
** malformed), and whether it is a control character. */
static void utf8_is_read_as_the_standard_says(void) {
  static const struct {
    const char *s;
    int len, control;
  } at[] = {
      {"a", 1, 0},          {"\t", 1, 1},         {"\x7f", 1, 1},       {"\xc2\xa0", 2, 0},
      {"\xc2\x9b", 2, 1},   {"\xc2\x80", 2, 1},   {"\xdf\xbf", 2, 0},   {"\xc0\xaf", 0, 0},
      {"\xc1\xbf", 0, 0},   {"\xe0\x80\xaf", 0, 0}, {"\xe0\xa0\x80", 3, 0}, {"\xed\x9f\xbf", 3, 0},
      {"\xed\xa0\x80", 0, 0}, {"\xef\xbf\xbf", 3, 0}, {"\xf0\x8f\xbf\xbf", 0, 0}, {"\xf0\x90\x80\x80", 4, 0},
      {"\xf4\x8f\xbf\xbf", 4, 0}, {"\xf4\x90\x80\x80", 0, 0}, {"\xf5\x80\x80\x80", 0, 0}, {"\xff", 0, 0},
      {"\x80", 0, 0},       {"\xe2\x82", 0, 0},   {"\xf0\x9f\x98", 0, 0}, {"\xe2\x28\xa1", 0, 0},
      /* What moves text on a terminal: U+061C, U+200E/F, U+2028 to
      ** U+202E, U+2066 to U+2069; not their neighbours. */
      {"\xd8\x9c", 2, 1},   {"\xd8\x9b", 2, 0},   {"\xe2\x80\x8e", 3, 1}, {"\xe2\x80\x8f", 3, 1},
      {"\xe2\x80\x8d", 3, 0}, {"\xe2\x80\xa7", 3, 0}, {"\xe2\x80\xa8", 3, 1}, {"\xe2\x80\xae", 3, 1},
      {"\xe2\x80\xaf", 3, 0}, {"\xe2\x81\xa5", 3, 0}, {"\xe2\x81\xa6", 3, 1}, {"\xe2\x81\xa9", 3, 1},
      {"\xe2\x81\xaa", 3, 0},
  };
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    int control = -1, len = kt__text_char((const unsigned char *)at[i].s, &control);
    if (len != at[i].len || (len && control != at[i].control)) printf("    sample %zu: %d %d\n", i, len, control);
    ASSERT_EQ(len, at[i].len);
    if (len) ASSERT_EQ(control, at[i].control);
  }
  char buf[64];
  /* Through the public call, as the CLI and the Python package use it. */
  ASSERT_EQ(kt_text_visible("a\xff\xc3\xa9\n\xe2\x82", 0, buf, sizeof buf), 3);
  ASSERT_STR_EQ(buf, "a\\xff\xc3\xa9\n\\xe2\\x82");
  ASSERT_EQ(kt_text_visible("a\xff\xc3\xa9\n\xc2\x9b", KT_TEXT_CONTROLS, buf, sizeof buf), 4);
  ASSERT_STR_EQ(buf, "a\\xff\xc3\xa9\\x0a\\xc2\\x9b");
  ASSERT_EQ(kt_text_visible("\xe2\x80\xae" "ab", KT_TEXT_CONTROLS | KT_TEXT_JSON, buf, sizeof buf), 3);
  ASSERT_STR_EQ(buf, "\\\\xe2\\\\x80\\\\xaeab");
  memset(buf, '#', sizeof buf);
  ASSERT_EQ(kt_text_visible("ab\xff", 0, buf, 6), 1); /* cut at a whole escape, counted whole */
  ASSERT_STR_EQ(buf, "ab");
  ASSERT_EQ(kt_text_visible("x\xc3\xa9", 0, buf, 3), 0); /* cut before a whole character */
  ASSERT_STR_EQ(buf, "x");
  ASSERT_EQ(kt_text_visible("\x01\x02", KT_TEXT_CONTROLS, NULL, 0), 2);
  ASSERT_EQ(kt_text_visible("plain \xc3\xa9", KT_TEXT_CONTROLS, NULL, 0), 0);
  buf[0] = '#';
  ASSERT_EQ(kt_text_visible(NULL, KT_TEXT_CONTROLS, buf, sizeof buf), 0);
  ASSERT_STR_EQ(buf, "");
  /* The bound said in ktune.h: 4 bytes an input byte, 5 for JSON. */
  char big[5 * 4 + 1];
  ASSERT_EQ(kt_text_visible("\x01\xff\x7f\x1b", KT_TEXT_CONTROLS, big, 4 * 4 + 1), 4);
  ASSERT_STR_EQ(big, "\\x01\\xff\\x7f\\x1b");
  ASSERT_EQ(kt_text_visible("\x01\xff\x7f\x1b", KT_TEXT_CONTROLS | KT_TEXT_JSON, big, sizeof big), 4);
  ASSERT_STR_EQ(big, "\\\\x01\\\\xff\\\\x7f\\\\x1b");
  ASSERT_TRUE(kt__text_clean("GPU \xc3\xa9") && !kt__text_clean("a\tb") && kt__text_utf8("a\tb"));
}

/* What the library hands out is UTF-8, whatever a file held: a message
** quoting bytes that are not, one cut in the middle of a character, a row
** of a cache another program wrote. */
static void what_the_library_hands_out_is_utf8(void) {
  static char logged[8192];
  const char *db = fresh("utf8.db");
  char bad[256], msg[4 * KT_ERRMAX];
  const char *dir = t_tmpdir();
  snprintf(bad, sizeof bad, "%s/sp\xff\xfe" "c\xc3\xa9.json", dir);
  kt_runtime *rt = offline_on(db, logged);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, bad, &k), KT_ERR_IO);
  snprintf(msg, sizeof msg, "%s/sp\\xff\\xfec\xc3\xa9.json: cannot read", dir);
  ASSERT_CONTAINS(kt_errmsg(rt), msg);
  ASSERT_TRUE(kt__text_utf8(kt_errmsg(rt)));
  kt_runtime_close(rt);
  /* A message cut inside a character ends before it. */
  char *long_text = kt__malloc(3000);
  ASSERT_TRUE(long_text);
  for (int i = 0; i < 1499; i++) memcpy(long_text + 2 * i, "\xc3\xa9", 2);
  long_text[2998] = 0;
  kt__err(0, KT_ERR_INVALID, "%s", long_text);
  kt__free(long_text);
  ASSERT_EQ(strlen(kt_errmsg(NULL)), (size_t)(KT_ERRMAX - 2));
  ASSERT_TRUE(kt__text_utf8(kt_errmsg(NULL)));
  kt__err_clear(0);
  /* Rows of a cache another program wrote. */
  ASSERT_EQ(sql(db, "INSERT INTO configs (kernel, spec_hash, device, key, config, time_us, created_at, updated_at)"
                    " VALUES (CAST(X'6bff' AS TEXT), 'h', 'GPU \xc3\xa9', '{}', '{}', 1, 0, 0)"), 0);
  ASSERT_EQ(sql(db, "INSERT INTO trials (kernel, spec_hash, device, key, config, status, detail, measured_at)"
                    " VALUES ('k', 'h', 'd', '{}', '{}', 'fault', CAST(X'6c6f67ff0a' AS TEXT), 0)"), 0);
  ASSERT_TRUE((rt = offline_on(db, logged)));
  char rows[512] = "";
  ASSERT_STATUS(kt_cache_list(rt, NULL, row_text, rows), KT_OK);
  kt_cache_row of = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{}"};
  ASSERT_STATUS(kt_cache_trials(rt, &of, trial_text, rows), KT_OK);
  kt_runtime_close(rt);
  ASSERT_STR_EQ(rows, "k\\xff GPU \xc3\xa9\nfault log\\xff\n\n");
  /* Why there is no cache, quoting a path that is not UTF-8. */
  kt_options o;
  t_offline_options(&o);
  snprintf(bad, sizeof bad, "%s/n\xffo/c.db", dir);
  o.cache_path = bad;
  o.cache_readonly = 1;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  kt_runtime_info in = {.size = sizeof in};
  ASSERT_STATUS(kt_runtime_get_info(rt, &in), KT_OK);
  snprintf(msg, sizeof msg, "%s/n\\xffo/c.db: no cache there", dir);
  ASSERT_CONTAINS(in.cache_error, msg);
  kt_runtime_close(rt);
}

const kt_test t_trust_tests[] = {
    {"trust: a damaged cubin is compiled again, never loaded", damaged_binaries_are_compiled_again},
    {"trust: without NVRTC a config whose cubin is damaged is skipped", unbuildable_cached_config_is_skipped},
    {"trust: a foreign -wal makes the cache read-only, nothing checkpointed", foreign_side_files_make_the_cache_read_only},
    {"trust: a -wal that is a link is never written through", a_linked_wal_is_never_written_through},
    {"trust: an export never replaces the cache, whatever it is called", an_export_never_replaces_the_cache},
    {"trust: an export never replaces the system cache either", an_export_never_replaces_the_system_cache},
    {"trust: an import is all or nothing; every row validated", imports_are_all_or_nothing},
    {"trust: imported keys and configs are canonical", imports_are_canonical},
    {"trust: a killed import leaves nothing partial", a_killed_import_leaves_nothing_partial},
    {"trust: a killed writer leaves the file as it was and nothing beside it", a_killed_writer_leaves_nothing_beside},
    {"trust: exports are valid JSON and import back identical", exports_are_valid_json},
    {"trust: commands that only read change no file, refuse foreign ones", reading_commands_change_nothing},
    {"trust: compile then gc keeps the cubins; -o writes a checked manifest", compile_then_gc_keeps_cubins},
    {"trust: a cache and a system cache in a read-only directory are read", read_only_directories_are_read},
    {"trust: the runtime's own log writes control bytes as \\xNN", the_runtime_log_escapes_control_bytes},
    {"trust: UTF-8 is read as the standard says", utf8_is_read_as_the_standard_says},
    {"trust: messages and listed rows are UTF-8, whatever a file held", what_the_library_hands_out_is_utf8},
    {"trust: a row shown with \\xNN finds its trials from its listing", rows_shown_escaped_find_their_trials},
    {"trust: tables ktune did not make are refused; the file's triggers never run",
     tables_ktune_did_not_make_are_refused},
    {NULL, NULL},
};
