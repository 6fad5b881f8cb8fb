/* The SQLite config cache: round trips, migration, concurrency, crash
** safety, damaged files, export/import and gc. Rows are checked in SQLite. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "harness.h"
#include "spec/spec.h"
#include "cache/store.h"

static char err[KT_ERRMAX];

static void capture(void *user, kt_log_level level, const char *msg) {
  (void)level;
  char *buf = user;
  size_t n = strlen(buf);
  snprintf(buf + n, 4096 - n, "%s\n", msg);
}

static void ccapture(void *user, int level, const char *msg) { capture(user, (kt_log_level)level, msg); }

static char *tmpfile_in(const char *name) {
  static char path[8][700];
  static int next;
  const char *d = t_tmpdir();
  char *p = path[next++ % 8];
  snprintf(p, sizeof path[0], "%s/%s", d ? d : "/tmp", name);
  return p;
}

static kt__cfgrow row(const char *key, const char *config, double t) {
  kt__cfgrow r = {.kernel = "rmsnorm_fwd", .spec_hash = "00000000deadbeef", .device = "GPU/sm_90/132", .key = key,
                  .config = config, .time_us = t, .candidates = 12, .rejected = 3, .nvrtc_version = "13000",
                  .driver_version = "13000"};
  return r;
}

/* kt__store_open of path (and a system cache), logging to lg when given. */
static int open_store(kt_store **s, const char *path, const char *sys, const kt__clog *lg, char *e, size_t el) {
  kt__store_opts o = {.path = path, .system_path = sys};
  if (lg) o.log = *lg;
  return kt__store_open(s, &o, e, el);
}

typedef struct blob_copy {
  void *p;
  size_t n;
} blob_copy;

static void copy_blob(void *user, const kt__binrow *r) {
  blob_copy *c = user;
  if ((c->p = malloc((size_t)r->size))) memcpy(c->p, r->cubin, (size_t)r->size);
  c->n = (size_t)r->size;
}

/* A cubin by hash, copied (caller frees with free()). */
static int fetch(kt_store *s, const char *hash, void **got, size_t *n) {
  blob_copy c = {NULL, 0};
  int st = kt__store_get_binary(s, hash, copy_blob, &c, err, sizeof err);
  *got = c.p;
  *n = c.n;
  return st;
}

static int exec_file(const char *db_path, const char *sql_path) {
  char *text;
  if (kt__read_file(sql_path, KT__SPEC_MAX, &text, NULL)) return -1;
  sqlite3 *db;
  int rc = sqlite3_open(db_path, &db);
  if (!rc) rc = sqlite3_exec(db, text, NULL, NULL, NULL);
  sqlite3_close(db);
  kt__free(text);
  return rc;
}

/* The config of rmsnorm_fwd's key on the test device (GPU/sm_90/132), into
** cfg (n bytes), its time into *t where t is not NULL. */
static kt_status get_config(kt_store *s, const char *key, char *cfg, size_t n, double *t) {
  return kt__store_get_config(s, "rmsnorm_fwd", "00000000deadbeef", "GPU/sm_90/132", key, cfg, n, t, err, sizeof err);
}

static void configs_fastest_wins(void) {
  const char *p = tmpfile_in("c.db");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  int oc;
  kt__cfgrow r = row("{\"D\":256}", "{\"BLOCK\":128}", 10.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, &oc, err, sizeof err), KT_OK);
  ASSERT_EQ(oc, KT__ADDED);
  r = row("{\"D\":256}", "{\"BLOCK\":256}", 10.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, &oc, err, sizeof err), KT_OK);
  ASSERT_EQ(oc, KT__KEPT);
  r = row("{\"D\":256}", "{\"BLOCK\":512}", 12.5);
  ASSERT_STATUS(kt__store_put_config(s, &r, &oc, err, sizeof err), KT_OK);
  ASSERT_EQ(oc, KT__KEPT);
  r = row("{\"D\":256}", "{\"BLOCK\":1024}", 7.25);
  ASSERT_STATUS(kt__store_put_config(s, &r, &oc, err, sizeof err), KT_OK);
  ASSERT_EQ(oc, KT__REPLACED);
  char cfg[256];
  double t;
  ASSERT_STATUS(get_config(s, "{\"D\":256}", cfg, sizeof cfg, &t), KT_OK);
  ASSERT_STR_EQ(cfg, "{\"BLOCK\":1024}");
  ASSERT_TRUE(t == 7.25);
  ASSERT_STATUS(get_config(s, "{\"D\":512}", cfg, sizeof cfg, &t), KT_ERR_NOT_FOUND);
  kt__store_close(s);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM configs"), 1);
  ASSERT_EQ(t_db_int(p, "SELECT json_extract(config, '$.BLOCK') FROM configs"), 1024);
  ASSERT_EQ(t_db_int(p, "SELECT json_extract(key, '$.D') FROM configs"), 256);
  ASSERT_EQ(t_db_int(p, "SELECT candidates * 100 + rejected FROM configs"), 1203);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM v_configs WHERE age_s BETWEEN 0 AND 60"), 1);
}

/* The stored row of {"D":256} changed by "UPDATE configs SET set" from
** outside the store, closed meanwhile and opened again into *s. */
static int change_stored_row(kt_store **s, const char *p, const char *set) {
  char q[256];
  snprintf(q, sizeof q, "UPDATE configs SET %s", set);
  kt__store_close(*s);
  if (t_db_exec(p, q)) return -1;
  return open_store(s, p, NULL, NULL, err, sizeof err);
}

/* A stored row that no result would ever beat gives way: one whose time is
** damaged (text, negative, infinite), and one whose config the caller
** found stale, while it is still that config. */
static void damaged_or_stale_rows_give_way(void) {
  const char *p = tmpfile_in("give.db");
  static const char *const damaged[] = {"time_us = 'fast'", "time_us = -1", "time_us = -9e999", "time_us = 9e999",
                                        "time_us = X'00'"};
  kt_store *s;
  int oc;
  char cfg[256];
  double t;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  kt__cfgrow r = row("{\"D\":256}", "{\"BLOCK\":128}", 10.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, &oc, err, sizeof err), KT_OK);
  for (size_t i = 0; i < sizeof damaged / sizeof damaged[0]; i++) {
    ASSERT_STATUS((kt_status)change_stored_row(&s, p, damaged[i]), KT_OK);
    r = row("{\"D\":256}", i % 2 ? "{\"BLOCK\":128}" : "{\"BLOCK\":64}", 1e6 + (double)i);
    ASSERT_STATUS(kt__store_put_config(s, &r, &oc, err, sizeof err), KT_OK);
    ASSERT_EQ(oc, KT__REPLACED);
    ASSERT_STATUS(get_config(s, "{\"D\":256}", cfg, sizeof cfg, &t), KT_OK);
    ASSERT_TRUE(t == 1e6 + (double)i);
  }
  /* A config that is no config: garbage, longer than any config, or
  ** longer than a reader takes (a name, or spaces, past KT_CONFIG_MAX). */
  static const char *const no_config[] = {"config = 'garbage', time_us = 0", "config = '{\"B\":1.5}', time_us = 0",
                                          "config = printf('{\"B%0*d\":1}', 20000, 0), time_us = 0",
                                          "config = printf('{\"B%0*d\":1}', 3000, 0), time_us = 0",
                                          "config = printf('{\"B\":1%*s}', 3000, ''), time_us = 0"};
  for (size_t i = 0; i < sizeof no_config / sizeof no_config[0]; i++) {
    ASSERT_STATUS((kt_status)change_stored_row(&s, p, no_config[i]), KT_OK);
    r = row("{\"D\":256}", "{\"BLOCK\":64}", 50.0);
    ASSERT_STATUS(kt__store_put_config(s, &r, &oc, err, sizeof err), KT_OK);
    ASSERT_EQ(oc, KT__REPLACED);
  }
  /* A sound row: a slower result is kept out, unless it names the stored
  ** config stale; a stale name another config has replaced is no reason. */
  ASSERT_STATUS((kt_status)change_stored_row(&s, p, "time_us = 0"), KT_OK);
  r = row("{\"D\":256}", "{\"BLOCK\":512}", 3.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, &oc, err, sizeof err), KT_OK);
  ASSERT_EQ(oc, KT__KEPT);
  ASSERT_STATUS(kt__store_replace_config(s, &r, "{\"BLOCK\":512}", &oc, err, sizeof err), KT_OK);
  ASSERT_EQ(oc, KT__KEPT);
  ASSERT_STATUS(kt__store_replace_config(s, &r, "{\"BLOCK\":64}", &oc, err, sizeof err), KT_OK);
  ASSERT_EQ(oc, KT__REPLACED);
  ASSERT_STATUS(get_config(s, "{\"D\":256}", cfg, sizeof cfg, &t), KT_OK);
  ASSERT_STR_EQ(cfg, "{\"BLOCK\":512}");
  ASSERT_TRUE(t == 3.0);
  r = row("{\"D\":256}", "{\"BLOCK\":1024}", 5.0);
  ASSERT_STATUS(kt__store_replace_config(s, &r, "{\"BLOCK\":64}", &oc, err, sizeof err), KT_OK);
  ASSERT_EQ(oc, KT__KEPT);
  r = row("{\"D\":300}", "{\"BLOCK\":1024}", 5.0);
  ASSERT_STATUS(kt__store_replace_config(s, &r, "{\"BLOCK\":64}", &oc, err, sizeof err), KT_OK);
  ASSERT_EQ(oc, KT__ADDED);
  kt__store_close(s);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM configs"), 2);
}

/* A stored text longer than the room for it is no config ktune wrote:
** none is read, where its first 255 bytes would have made a valid one. */
static void long_config_text_is_not_cut(void) {
  const char *p = tmpfile_in("long.db");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  static char odd[400];
  snprintf(odd, sizeof odd, "{\"BLOCK\":64%*s}%s", 243, "", "X, whatever follows the first 255 bytes");
  kt__cfgrow r = row("{\"D\":512}", odd, 1.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  char cfg[256];
  double t;
  ASSERT_STATUS(get_config(s, "{\"D\":512}", cfg, sizeof cfg, &t), KT_OK);
  ASSERT_STR_EQ(cfg, "");
  kt__store_close(s);
}

static void add_winner(void *user, const char *config) {
  char *out = user;
  size_t n = strlen(out);
  snprintf(out + n, 512 - n, "%s%s", n ? " " : "", config);
}

/* The configs other keys chose, as seeds for a tuning: the most chosen
** first, ties in the configs' order, never the key's own, only the same
** kernel, spec hash and device, at most the limit. */
static void winners_of_other_keys(void) {
  const char *p = tmpfile_in("w.db");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  /* key, config, and where not NULL another device or spec hash. */
  static const char *const rows[][4] = {
      {"{\"D\":1}", "{\"BLOCK\":256}", NULL, NULL}, {"{\"D\":2}", "{\"BLOCK\":512}", NULL, NULL},
      {"{\"D\":3}", "{\"BLOCK\":512}", NULL, NULL}, {"{\"D\":4}", "{\"BLOCK\":128}", NULL, NULL},
      {"{\"D\":5}", "{\"BLOCK\":64}", NULL, NULL},  {"{\"D\":6}", "{\"BLOCK\":64}", NULL, NULL},
      {"{\"D\":7}", "{\"BLOCK\":64}", NULL, NULL},  {"{\"D\":8}", "{\"BLOCK\":32}", "GPU/sm_80/108", NULL},
      {"{\"D\":9}", "{\"BLOCK\":32}", NULL, "00000000feedface"}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    kt__cfgrow r = row(rows[i][0], rows[i][1], 10.0);
    if (rows[i][2]) r.device = rows[i][2];
    if (rows[i][3]) r.spec_hash = rows[i][3];
    ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  }
  char got[512] = "";
  ASSERT_STATUS(kt__store_winners(s, "rmsnorm_fwd", "00000000deadbeef", "GPU/sm_90/132", "{\"D\":9}", 8, add_winner,
                                  got, err, sizeof err),
                KT_OK);
  ASSERT_STR_EQ(got, "{\"BLOCK\":64} {\"BLOCK\":512} {\"BLOCK\":128} {\"BLOCK\":256}");
  /* The key's own config is not a seed: D=2 leaves BLOCK=512 one key. */
  got[0] = 0;
  ASSERT_STATUS(kt__store_winners(s, "rmsnorm_fwd", "00000000deadbeef", "GPU/sm_90/132", "{\"D\":2}", 3, add_winner,
                                  got, err, sizeof err),
                KT_OK);
  ASSERT_STR_EQ(got, "{\"BLOCK\":64} {\"BLOCK\":128} {\"BLOCK\":256}");
  got[0] = 0;
  ASSERT_STATUS(kt__store_winners(s, "softmax", "00000000deadbeef", "GPU/sm_90/132", "{\"D\":2}", 8, add_winner, got,
                                  err, sizeof err),
                KT_OK);
  ASSERT_STR_EQ(got, "");
  kt__store_close(s);
}

static int count_trial(void *user, const kt__trialrow *r) {
  int *n = user;
  if (*n == 0 && strcmp(r->config, "{\"BLOCK\":256}")) return 1;
  (*n)++;
  return 0;
}

static void trials_binaries_quarantine(void) {
  const char *p = tmpfile_in("t.db");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  kt__trialrow t1 = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{}", .config = "{\"BLOCK\":128}", .status = "ok", .median_us = 5.5, .spread_us = 0.25, .registers = 32, .smem_bytes = 0, .spill_bytes = 0, .detail = ""};
  kt__trialrow t2 = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{}", .config = "{\"BLOCK\":256}", .status = "ok", .median_us = 4.5, .spread_us = 0.5, .registers = 40, .smem_bytes = 1024, .spill_bytes = 0, .detail = ""};
  kt__trialrow t3 = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{}", .config = "{\"BLOCK\":512}", .status = "mismatch", .median_us = -1, .spread_us = -1, .registers = 0, .smem_bytes = 0, .spill_bytes = 0, .detail = "y[3]: 1.5 vs 2.0"};
  ASSERT_STATUS(kt__store_put_trial(s, &t1, err, sizeof err), KT_OK);
  ASSERT_STATUS(kt__store_put_trial(s, &t2, err, sizeof err), KT_OK);
  ASSERT_STATUS(kt__store_put_trial(s, &t3, err, sizeof err), KT_OK);
  kt__trialrow bad = t1;
  bad.status = "great";
  ASSERT_STATUS(kt__store_put_trial(s, &bad, err, sizeof err), KT_ERR_CACHE);
  ASSERT_CONTAINS(err, "CHECK constraint failed");
  int n = 0;
  ASSERT_STATUS(kt__store_trials(s, "k", "h", "d", "{}", count_trial, &n, err, sizeof err), KT_OK);
  ASSERT_EQ(n, 3);
  unsigned char blob[300];
  for (int i = 0; i < 300; i++) blob[i] = (unsigned char)(i * 7);
  kt__binrow b = {.hash = "abcdef0123456789", .kernel = "k", .spec_hash = "h", .arch = "sm_90", .nvrtc_version = "13000", .constants = "{\"VEC\":8}", .registers = 32, .smem_bytes = 0, .spill_bytes = 0, .size = sizeof blob, .cubin = blob};
  ASSERT_STATUS(kt__store_put_binary(s, &b, err, sizeof err), KT_OK);
  void *got;
  size_t sz;
  ASSERT_STATUS(fetch(s, "abcdef0123456789", &got, &sz), KT_OK);
  ASSERT_EQ(sz, 300);
  ASSERT_EQ(memcmp(got, blob, 300), 0);
  free(got);
  ASSERT_STATUS(fetch(s, "ffff", &got, &sz), KT_ERR_NOT_FOUND);
  int yes;
  char why[128];
  ASSERT_STATUS(kt__store_quarantine(s, "k", "h", "d", "{}", "{\"BLOCK\":1024}", "fault: CUDA_ERROR_ILLEGAL_ADDRESS",
                                     err, sizeof err),
                KT_OK);
  ASSERT_STATUS(kt__store_is_quarantined(s, "k", "h", "d", "{}", "{\"BLOCK\":1024}", &yes, why, sizeof why, err,
                                         sizeof err),
                KT_OK);
  ASSERT_EQ(yes, 1);
  ASSERT_STR_EQ(why, "fault: CUDA_ERROR_ILLEGAL_ADDRESS");
  ASSERT_EQ(t_db_int(p, "SELECT pid FROM quarantine"), getpid());
  ASSERT_STATUS(kt__store_quarantine(s, "k", "h", "d", "{}", "{\"BLOCK\":1024}", NULL, err, sizeof err), KT_OK);
  ASSERT_STATUS(kt__store_is_quarantined(s, "k", "h", "d", "{}", "{\"BLOCK\":1024}", &yes, why, sizeof why, err,
                                         sizeof err),
                KT_OK);
  ASSERT_EQ(yes, 0);
  long c[4];
  ASSERT_STATUS(kt__store_counts(s, c, err, sizeof err), KT_OK);
  ASSERT_EQ(c[0] * 1000 + c[1] * 100 + c[2] * 10 + c[3], 310);
  kt__store_close(s);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM v_trials WHERE status = 'mismatch' AND detail LIKE 'y[3]%'"), 1);
  ASSERT_EQ(t_db_int(p, "SELECT size FROM binaries"), 300);
}

static void migrates_schema_1(void) {
  const char *p = tmpfile_in("v1.db");
  ASSERT_EQ(exec_file(p, "tests/fixtures/cache-v1.sql"), 0);
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  ASSERT_EQ(kt__store_readonly(s), 0);
  char cfg[256];
  double t;
  ASSERT_STATUS(kt__store_get_config(s, "rmsnorm_fwd", "00000000deadbeef", "NVIDIA H100 80GB HBM3/sm_90/132",
                                     "{\"D\":256,\"T\":\"bf16\"}", cfg, sizeof cfg, &t, err, sizeof err),
                KT_OK);
  ASSERT_STR_EQ(cfg, "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":8}");
  ASSERT_STATUS(kt__store_quarantine(s, "k", "h", "d", "{}", "{}", "fault", err, sizeof err), KT_OK);
  kt__store_close(s);
  ASSERT_EQ(t_db_int(p, "SELECT value FROM meta WHERE name = 'schema_version'"), 4);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM leases"), 0);
  ASSERT_EQ(t_db_int(p, "SELECT candidates FROM configs"), 0);
  ASSERT_EQ(t_db_int(p, "SELECT created_at FROM configs"), 1700000000);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM trials WHERE spill_bytes IS NULL"), 1);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM binaries WHERE spec_hash = ''"), 1);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM v_configs"), 1);
  char mode[64];
  t_db_text(p, "PRAGMA journal_mode", mode, sizeof mode);
  ASSERT_STR_EQ(mode, "wal\n");
}

static void stat_sig(const char *p, char *out, size_t n) {
  struct stat sb;
  if (stat(p, &sb)) snprintf(out, n, "missing");
  else snprintf(out, n, "%lld/%lld.%09ld", (long long)sb.st_size, (long long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec);
}

static void newer_schema_is_read_only(void) {
  const char *p = tmpfile_in("v99.db");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  kt__cfgrow r = row("{\"D\":64}", "{\"BLOCK\":128}", 3.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
  sqlite3 *db;
  ASSERT_EQ(sqlite3_open(p, &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = '99' WHERE name = 'schema_version'; PRAGMA journal_mode=DELETE",
                         NULL, NULL, NULL),
            SQLITE_OK);
  sqlite3_close(db);
  char before[128], after[128];
  stat_sig(p, before, sizeof before);
  static char logged[4096];
  logged[0] = 0;
  kt__clog lg = {ccapture, logged, KT_LOG_DEBUG};
  ASSERT_STATUS(open_store(&s, p, NULL, &lg, err, sizeof err), KT_OK);
  ASSERT_EQ(kt__store_readonly(s), 1);
  ASSERT_CONTAINS(logged, "written by a newer ktune (schema 99, this one knows 4): opened read-only");
  char cfg[128];
  ASSERT_STATUS(get_config(s, "{\"D\":64}", cfg, sizeof cfg, NULL), KT_OK);
  r = row("{\"D\":64}", "{\"BLOCK\":256}", 1.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_ERR_READONLY);
  ASSERT_CONTAINS(err, "the cache is read-only");
  kt__store_close(s);
  /* A caller that is to write it is refused, with why, nothing logged. */
  logged[0] = 0;
  kt__store_opts w = {.path = p, .must_write = 1, .log = lg};
  ASSERT_STATUS(kt__store_open(&s, &w, err, sizeof err), KT_ERR_CACHE);
  ASSERT_TRUE(s == NULL);
  char want[900];
  snprintf(want, sizeof want,
           "%s: written by a newer ktune (schema 99, this one knows 4): the cache would be read-only, and it is to be "
           "written", p);
  ASSERT_STR_EQ(err, want);
  ASSERT_STR_EQ(logged, "");
  stat_sig(p, after, sizeof after);
  ASSERT_STR_EQ(after, before);
  ASSERT_EQ(t_db_int(p, "SELECT value FROM meta WHERE name = 'schema_version'"), 99);
}



/* A cache file removed (rm, mv elsewhere) or replaced (another file moved
** over its name) while a store has it open is written no more, said once:
** nothing goes where no one reads it again, or through the -wal that keeps
** its name into the file now there; what it holds is still read. (SQLite
** leaves the -wal of a moved file where it was, so the next reader of the
** name sees what that -wal already held: replace a cache only while no
** process has it open.) */
static void a_file_removed_or_replaced_is_written_no_more(void) {
  const char *p = tmpfile_in("moved.db"), *q = tmpfile_in("moved-away.db");
  static char logged[4096];
  logged[0] = 0;
  kt__clog lg = {ccapture, logged, KT_LOG_DEBUG};
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, &lg, err, sizeof err), KT_OK);
  kt__cfgrow r = row("{\"D\":64}", "{\"BLOCK\":128}", 3.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  ASSERT_EQ(rename(p, q), 0);
  r = row("{\"D\":128}", "{\"BLOCK\":128}", 3.0);
  char want[900];
  snprintf(want, sizeof want, "%s: removed or replaced since this process opened it; nothing more is written to it", p);
  for (int i = 0; i < 2; i++) {
    ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_ERR_READONLY);
    ASSERT_STR_EQ(err, want);
  }
  kt__trialrow tr = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{}", .config = "{}", .status = "ok",
                     .median_us = 1, .spread_us = 0.1, .detail = ""};
  ASSERT_STATUS(kt__store_put_trial(s, &tr, err, sizeof err), KT_ERR_READONLY);
  ASSERT_EQ(kt__store_readonly(s), 1);
  int taken;
  long holder;
  ASSERT_STATUS(kt__store_lease(s, "k", "h", "d", "{}", "host", 1, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 1);
  char cfg[64];
  ASSERT_STATUS(get_config(s, "{\"D\":64}", cfg, sizeof cfg, NULL), KT_OK);
  ASSERT_STR_EQ(cfg, "{\"BLOCK\":128}");
  kt__store_close(s);
  snprintf(want, sizeof want, "%s: removed or replaced since this process opened it: nothing more is written to it, "
           "tunings stay in memory (a runtime opened anew uses the file there now)\n", p);
  ASSERT_STR_EQ(logged, want);
  /* Replaced: the cache moved over the name is left as it was. */
  const char *other = tmpfile_in("other.db"), *live = tmpfile_in("live.db");
  ASSERT_STATUS(open_store(&s, other, NULL, NULL, err, sizeof err), KT_OK);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
  ASSERT_STATUS(open_store(&s, live, NULL, NULL, err, sizeof err), KT_OK);
  char before[128], after[128];
  stat_sig(other, before, sizeof before);
  ASSERT_EQ(rename(other, live), 0);
  r = row("{\"D\":256}", "{\"BLOCK\":128}", 3.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_ERR_READONLY);
  kt__store_close(s);
  stat_sig(live, after, sizeof after);
  ASSERT_STR_EQ(after, before);
}

/* Many processes with several threads each, tuning and reading the same keys:
** the file stays valid, there is one row per key holding the fastest time
** any writer reported, and no call fails with "database is locked". */
enum { PROCS = 8, THREADS = 4, ITERS = 400, KEYS = 16 };

static double time_for(int proc, int thread, int iter, int key) {
  return 100.0 + (double)((proc * 131 + thread * 71 + iter * 37 + key * 13) % 1009) / 4.0;
}

typedef struct worker {
  kt_store *s;
  int proc, thread, failures;
  char first_err[KT_ERRMAX];
} worker;

static void *work(void *arg) {
  worker *w = arg;
  char e[KT_ERRMAX], key[32], cfg[64], got[128];
  for (int i = 0; i < ITERS; i++)
    for (int k = 0; k < KEYS; k++) {
      if ((k + i + w->thread) % 4) continue;
      snprintf(key, sizeof key, "{\"D\":%d}", k);
      snprintf(cfg, sizeof cfg, "{\"P\":%d,\"T\":%d,\"I\":%d}", w->proc, w->thread, i);
      kt__cfgrow r = row(key, cfg, time_for(w->proc, w->thread, i, k));
      kt__trialrow t = {.kernel = "rmsnorm_fwd", .spec_hash = "00000000deadbeef", .device = "GPU/sm_90/132", .key = key, .config = cfg, .status = "ok", .median_us = r.time_us, .spread_us = 0.1, .registers = 32, .smem_bytes = 0, .spill_bytes = 0, .detail = ""};
      kt_status st = kt__store_put_config(w->s, &r, NULL, e, sizeof e);
      if (!st) st = kt__store_put_trial(w->s, &t, e, sizeof e);
      if (!st) {
        st = kt__store_get_config(w->s, "rmsnorm_fwd", "00000000deadbeef", "GPU/sm_90/132", key, got, sizeof got,
                                  NULL, e, sizeof e);
        if (st == KT_ERR_NOT_FOUND) snprintf(e, sizeof e, "a row just written was not found");
      }
      if (st && !w->failures++) snprintf(w->first_err, sizeof w->first_err, "%s", e);
    }
  return NULL;
}

static int child(const char *p, int proc) {
  kt_store *s;
  char e[KT_ERRMAX];
  if (open_store(&s, p, NULL, NULL, e, sizeof e)) {
    fprintf(stderr, "    child %d: %s\n", proc, e);
    return 1;
  }
  worker w[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){s, proc, i, 0, ""};
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  int failed = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    if (w[i].failures) {
      fprintf(stderr, "    child %d thread %d: %d failures, first: %s\n", proc, i, w[i].failures, w[i].first_err);
      failed = 1;
    }
  }
  kt__store_close(s);
  return failed;
}

static void many_processes_and_threads(void) {
  const char *p = tmpfile_in("conc.db");
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    pids[i] = fork();
    ASSERT_TRUE(pids[i] >= 0);
    if (pids[i] == 0) _exit(child(p, i));
  }
  int bad = 0;
  for (int i = 0; i < PROCS; i++) {
    int st;
    waitpid(pids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) bad++;
  }
  ASSERT_EQ(bad, 0);
  char ok[64];
  t_db_text(p, "PRAGMA integrity_check", ok, sizeof ok);
  ASSERT_STR_EQ(ok, "ok\n");
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM configs"), KEYS);
  ASSERT_EQ(t_db_int(p, "SELECT count(DISTINCT key) FROM configs"), KEYS);
  for (int k = 0; k < KEYS; k++) {
    double best = 1e30;
    for (int pr = 0; pr < PROCS; pr++)
      for (int th = 0; th < THREADS; th++)
        for (int i = 0; i < ITERS; i++)
          if (!((k + i + th) % 4) && time_for(pr, th, i, k) < best) best = time_for(pr, th, i, k);
    char q[160];
    snprintf(q, sizeof q, "SELECT CAST(time_us * 4 AS INTEGER) FROM configs WHERE key = '{\"D\":%d}'", k);
    ASSERT_EQ(t_db_int(p, q), (long long)(best * 4));
  }
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM trials"), PROCS * THREADS * ITERS * KEYS / 4);
}

/* A writer killed with SIGKILL between and inside its transactions loses
** nothing it had committed. */
static void killed_writer_loses_nothing_committed(void) {
  const char *p = tmpfile_in("crash.db");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_TRUE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    kt_store *s;
    char e[KT_ERRMAX];
    if (open_store(&s, p, NULL, NULL, e, sizeof e)) _exit(1);
    for (int i = 0;; i++) {
      char key[32];
      snprintf(key, sizeof key, "{\"D\":%d}", i);
      kt__cfgrow r = row(key, "{\"BLOCK\":128}", 1.0 + i);
      if (kt__store_put_config(s, &r, NULL, e, sizeof e)) _exit(2);
      if (write(fds[1], &i, sizeof i) != sizeof i) _exit(3);
    }
  }
  close(fds[1]);
  int last = -1, v;
  while (last < 300 && read(fds[0], &v, sizeof v) == sizeof v) last = v;
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(st));
  ASSERT_TRUE(last >= 300);
  char ok[64];
  t_db_text(p, "PRAGMA integrity_check", ok, sizeof ok);
  ASSERT_STR_EQ(ok, "ok\n");
  ASSERT_TRUE(t_db_int(p, "SELECT count(*) FROM configs") >= last + 1);
  char q[128];
  snprintf(q, sizeof q, "SELECT count(*) FROM configs WHERE json_extract(key, '$.D') <= %d", last);
  ASSERT_EQ(t_db_int(p, q), last + 1);
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
}

static void write_bytes(const char *p, const void *b, size_t n) {
  FILE *f = fopen(p, "wb");
  if (f) {
    fwrite(b, 1, n, f);
    fclose(f);
  }
}

static void damaged_files_are_reported_and_kept(void) {
  const char *p = tmpfile_in("garbage.db");
  char junk[4096];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 31 + 7);
  write_bytes(p, junk, sizeof junk);
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_ERR_CACHE);
  ASSERT_CONTAINS(err, "garbage.db: file is not a database; the file is left as it is");
  struct stat sb;
  ASSERT_EQ(stat(p, &sb), 0);
  ASSERT_EQ(sb.st_size, 4096);
  char *back;
  size_t n;
  ASSERT_EQ(kt__read_file(p, KT__SPEC_MAX, &back, &n), 0);
  int same = n == sizeof junk && !memcmp(back, junk, n);
  kt__free(back);
  ASSERT_TRUE(same);

  /* A real database cut in half. */
  const char *t = tmpfile_in("trunc.db");
  ASSERT_STATUS(open_store(&s, t, NULL, NULL, err, sizeof err), KT_OK);
  for (int i = 0; i < 400; i++) {
    char key[32];
    snprintf(key, sizeof key, "{\"D\":%d,\"pad\":\"%0200d\"}", i, i);
    kt__cfgrow r = row(key, "{\"BLOCK\":128}", 1.0);
    ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  }
  kt__store_close(s);
  ASSERT_EQ(stat(t, &sb), 0);
  ASSERT_TRUE(sb.st_size > 40000);
  ASSERT_EQ(truncate(t, sb.st_size / 2), 0);
  ASSERT_STATUS(open_store(&s, t, NULL, NULL, err, sizeof err), KT_ERR_CACHE);
  ASSERT_CONTAINS(err, "trunc.db: ");
  ASSERT_CONTAINS(err, "the file is left as it is");
  ASSERT_EQ(stat(t, &sb), 0);
  ASSERT_TRUE(sb.st_size > 20000);

  /* The runtime goes on without a cache and says why, once. */
  static char logged[4096];
  logged[0] = 0;
  kt_options o;
  kt_options_init(&o);
  o.no_device = 1;
  o.cache_path = p;
  o.log = capture;
  o.log_user = logged;
  o.log_level = KT_LOG_DEBUG;
  kt_runtime *rt;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_CONTAINS(logged, "running without a config cache: ");
  ASSERT_CONTAINS(logged, "file is not a database");
  ASSERT_STR_EQ(kt_cache_path(rt), "");
  long c[4];
  ASSERT_STATUS(kt_cache_counts(rt, c), KT_ERR_CACHE);
  ASSERT_CONTAINS(kt_errmsg(rt), "no cache: ");
  kt_runtime_close(rt);
}

static void paths(void) {
  const char *base = t_tmpdir();
  ASSERT_TRUE(base);
  char p[800];
  snprintf(p, sizeof p, "%s/a/b/c/ktune.db", base);
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
  struct stat sb;
  ASSERT_EQ(stat(p, &sb), 0);
  ASSERT_STATUS(open_store(&s, base, NULL, NULL, err, sizeof err), KT_ERR_CACHE);
  char want[900];
  snprintf(want, sizeof want, "%s: is a directory, not a cache file", base);
  ASSERT_STR_EQ(err, want);
  /* A parent that is a file cannot become a directory. */
  snprintf(p, sizeof p, "%s/a/b/c/ktune.db/x.db", base);
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_ERR_CACHE);
  ASSERT_CONTAINS(err, "cannot create directory");
  ASSERT_CONTAINS(err, "Not a directory");
  /* Default location. */
  char def[700], why[200];
  setenv("KTUNE_CACHE", "/x/y.db", 1);
  ASSERT_EQ(kt__store_default_path(def, sizeof def, why, sizeof why), 0);
  ASSERT_STR_EQ(def, "/x/y.db");
  unsetenv("KTUNE_CACHE");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  ASSERT_EQ(kt__store_default_path(def, sizeof def, why, sizeof why), 0);
  ASSERT_STR_EQ(def, "/xdg/ktune/ktune.db");
  /* A relative XDG_CACHE_HOME, an empty or relative HOME: never a cache
  ** under whatever directory the process runs in. */
  char saved_home[700];
  snprintf(saved_home, sizeof saved_home, "%s", getenv("HOME") ? getenv("HOME") : "");
  setenv("XDG_CACHE_HOME", "rel", 1);
  setenv("HOME", "/home/u", 1);
  ASSERT_EQ(kt__store_default_path(def, sizeof def, why, sizeof why), 0);
  ASSERT_STR_EQ(def, "/home/u/.cache/ktune/ktune.db");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "", 1);
  int found = kt__store_default_path(def, sizeof def, why, sizeof why);
  if (found) ASSERT_STR_EQ(why, "no cache path: KTUNE_CACHE and XDG_CACHE_HOME are unset and there is no home directory");
  else ASSERT_TRUE(def[0] == '/' && strstr(def, "/.cache/ktune/ktune.db")); /* the password database's home */
  setenv("HOME", saved_home, 1);
  /* A path that does not fit is refused, never opened cut. */
  static char longer[800];
  snprintf(longer, sizeof longer, "/%0750d", 0);
  setenv("KTUNE_CACHE", longer, 1);
  ASSERT_EQ(kt__store_default_path(def, sizeof def, why, sizeof why), -1);
  ASSERT_STR_EQ(why, "/000000000000000000000000000000000000000...: the cache's path is longer than 699 bytes");
  static char huge[5000];
  snprintf(huge, sizeof huge, "/%04990d", 0);
  ASSERT_STATUS(open_store(&s, huge, NULL, NULL, err, sizeof err), KT_ERR_CACHE);
  ASSERT_STR_EQ(err, "/000000000000000000000000000000000000000...: the cache's path is longer than 4095 bytes");
  setenv("KTUNE_CACHE", tmpfile_in("default.db"), 1);
}

/* kt_runtime_info names the user cache's file as asked for also where
** none opened, so that a command that may make one can ask whether one
** is there; a caller of the first version gets the fields it knows. */
static void info_names_the_cache_file_where_none_is(void) {
  const char *base = t_tmpdir();
  ASSERT_TRUE(base);
  char dir[800], p[820];
  snprintf(dir, sizeof dir, "%s/none", base);
  snprintf(p, sizeof p, "%s/ktune.db", dir);
  kt_options o;
  kt_options_init(&o);
  o.no_device = 1;
  o.cache_path = p;
  o.cache_readonly = 1;
  o.log_level = KT_LOG_ERROR;
  kt_runtime *rt;
  kt_runtime_info in = {.size = sizeof in};
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STATUS(kt_runtime_get_info(rt, &in), KT_OK);
  ASSERT_STR_EQ(in.cache_path, "");
  ASSERT_STR_EQ(in.cache_file, p);
  ASSERT_CONTAINS(in.cache_error, "no cache there (nothing was created)");
  kt_runtime_info old;
  memset(&old, 0xA5, sizeof old);
  old.size = offsetof(kt_runtime_info, cache_file);
  ASSERT_STATUS(kt_runtime_get_info(rt, &old), KT_OK);
  ASSERT_EQ(old.size, offsetof(kt_runtime_info, cache_file));
  ASSERT_CONTAINS(old.cache_error, "no cache there");
  unsigned char poison[sizeof old.cache_file];
  memset(poison, 0xA5, sizeof poison);
  ASSERT_EQ(memcmp(&old.cache_file, poison, sizeof poison), 0);
  kt_runtime_close(rt);
  struct stat sb;
  ASSERT_TRUE(stat(dir, &sb) != 0);
  /* From $KTUNE_CACHE where cache_path is NULL or empty; "" with no cache
  ** asked for. */
  char saved[4096];
  snprintf(saved, sizeof saved, "%s", getenv("KTUNE_CACHE") ? getenv("KTUNE_CACHE") : "");
  setenv("KTUNE_CACHE", p, 1);
  for (int i = 0; i < 2; i++) { /* NULL, and "": both the default, as the store takes them */
    o.cache_path = i ? "" : NULL;
    ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
    ASSERT_STATUS(kt_runtime_get_info(rt, &in), KT_OK);
    ASSERT_STR_EQ(in.cache_file, p);
    kt_runtime_close(rt);
  }
  o.cache_readonly = 0;
  o.no_cache = 1;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STATUS(kt_runtime_get_info(rt, &in), KT_OK);
  ASSERT_STR_EQ(in.cache_file, "");
  kt_runtime_close(rt);
  if (saved[0]) setenv("KTUNE_CACHE", saved, 1);
  else unsetenv("KTUNE_CACHE");
}

static void untrusted_file_gives_no_binaries(void) {
  const char *p = tmpfile_in("ww.db");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  unsigned char blob[16] = {0x7f, 'E', 'L', 'F'};
  kt__binrow b = {.hash = "00ff", .kernel = "k", .spec_hash = "h", .arch = "sm_90", .nvrtc_version = "13000", .constants = "{}", .registers = 0, .smem_bytes = 0, .spill_bytes = 0, .size = sizeof blob, .cubin = blob};
  ASSERT_STATUS(kt__store_put_binary(s, &b, err, sizeof err), KT_OK);
  kt__cfgrow r = row("{}", "{\"BLOCK\":128}", 1.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
  ASSERT_EQ(chmod(p, 0666), 0);
  static char logged[4096];
  logged[0] = 0;
  kt__clog lg = {ccapture, logged, KT_LOG_DEBUG};
  ASSERT_STATUS(open_store(&s, p, NULL, &lg, err, sizeof err), KT_OK);
  ASSERT_EQ(kt__store_binaries_trusted(s), 0);
  ASSERT_CONTAINS(logged, "ww.db: world-writable: compiled kernels will not be loaded from it");
  void *got;
  size_t n;
  ASSERT_STATUS(fetch(s, "00ff", &got, &n), KT_ERR_NOT_FOUND);
  char cfg[64];
  ASSERT_STATUS(get_config(s, "{}", cfg, sizeof cfg, NULL), KT_OK);
  kt__store_close(s);
}

static int count_row(void *user, const kt__cfgrow *r, int from_system) {
  (void)r;
  (void)from_system;
  ++*(int *)user;
  return 0;
}

static void system_cache_is_read_after_and_never_written(void) {
  const char *sys = tmpfile_in("system.db"), *user = tmpfile_in("user.db");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, sys, NULL, NULL, err, sizeof err), KT_OK);
  kt__cfgrow r = row("{\"D\":4096}", "{\"BLOCK\":512}", 30.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  r = row("{\"D\":256}", "{\"BLOCK\":128}", 3.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  kt__store_close(s);
  char before[128], after[128];
  stat_sig(sys, before, sizeof before);
  ASSERT_STATUS(open_store(&s, user, sys, NULL, err, sizeof err), KT_OK);
  r = row("{\"D\":256}", "{\"BLOCK\":256}", 5.0);
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  char cfg[64];
  ASSERT_STATUS(get_config(s, "{\"D\":4096}", cfg, sizeof cfg, NULL), KT_OK);
  ASSERT_STR_EQ(cfg, "{\"BLOCK\":512}");
  /* The user's own result comes first, even when the system's is faster. */
  ASSERT_STATUS(get_config(s, "{\"D\":256}", cfg, sizeof cfg, NULL), KT_OK);
  ASSERT_STR_EQ(cfg, "{\"BLOCK\":256}");
  kt__store_close(s);
  stat_sig(sys, after, sizeof after);
  ASSERT_STR_EQ(after, before);
  ASSERT_EQ(t_db_int(user, "SELECT count(*) FROM configs"), 1);
  /* The user cache named as the system cache too (through a link) is read
  ** once: a second reading would list each row twice. */
  static char logged[2048];
  char link[1024], want[2200];
  snprintf(link, sizeof link, "%s.link", user);
  ASSERT_EQ(symlink(user, link), 0);
  kt__clog lg = {ccapture, logged, KT_LOG_DEBUG};
  ASSERT_STATUS(open_store(&s, user, link, &lg, err, sizeof err), KT_OK);
  snprintf(want, sizeof want, "system cache not used: %s: it is the user cache", link);
  ASSERT_CONTAINS(logged, want);
  int rows = 0;
  ASSERT_STATUS(kt__store_list(s, NULL, count_row, &rows, err, sizeof err), KT_OK);
  ASSERT_EQ(rows, 1);
  kt__store_close(s);
}

static void export_import_round_trip(void) {
  const char *a = tmpfile_in("a.db"), *b = tmpfile_in("b.db"), *j = tmpfile_in("export.json");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, a, NULL, NULL, err, sizeof err), KT_OK);
  for (int i = 0; i < 20; i++) {
    char key[64], cfg[64];
    snprintf(key, sizeof key, "{\"D\":%d,\"T\":\"bf16\",\"align\":16}", 64 << (i % 8));
    snprintf(cfg, sizeof cfg, "{\"BLOCK\":%d,\"VEC\":%d}", 128 << (i % 4), 1 << (i % 4));
    kt__cfgrow r = row(key, cfg, 1.5 + i);
    r.device = i < 10 ? "NVIDIA H100 80GB HBM3/sm_90/132" : "Quote \"GPU\"/sm_80/108";
    ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  }
  unsigned char blob[1001];
  for (int i = 0; i < 1001; i++) blob[i] = (unsigned char)(i * 13 + 5);
  kt__binrow bin = {.hash = "1234", .kernel = "rmsnorm_fwd", .spec_hash = "00000000deadbeef", .arch = "sm_90", .nvrtc_version = "13000", .constants = "{\"entry\":\"rmsnorm_fwd<8>\",\"lowered\":\"_Z11rmsnorm_fwdILi8EEvv\"}", .registers = 40, .smem_bytes = 0, .spill_bytes = 0, .size = sizeof blob, .cubin = blob};
  ASSERT_STATUS(kt__store_put_binary(s, &bin, err, sizeof err), KT_OK);
  FILE *f = fopen(j, "w");
  ASSERT_TRUE(f);
  ASSERT_STATUS(kt__store_export(s, f, 1, err, sizeof err), KT_OK);
  fclose(f);
  kt__store_close(s);
  char *json;
  ASSERT_EQ(kt__read_file(j, KT__SPEC_MAX, &json, NULL), 0);
  ASSERT_STATUS(open_store(&s, b, NULL, NULL, err, sizeof err), KT_OK);
  long c[5];
  /* An export's cubins run on the GPU: checked, and added only when asked. */
  kt_status st = kt__store_import(s, j, json, 0, c, err, sizeof err);
  if (st) t_fail(__FILE__, __LINE__, "%s", err);
  ASSERT_STATUS(st, KT_OK);
  ASSERT_EQ(c[0], 16); /* 20 rows, 16 distinct keys */
  ASSERT_EQ(c[3], 0);
  ASSERT_EQ(c[4], 1);
  ASSERT_EQ(t_db_int(b, "SELECT count(*) FROM binaries"), 0);
  ASSERT_STATUS(kt__store_import(s, j, json, 1, c, err, sizeof err), KT_OK);
  ASSERT_EQ(c[0] + c[2], 0);
  ASSERT_EQ(c[1], 16);
  ASSERT_EQ(c[3] * 10 + c[4], 10);
  ASSERT_STATUS(kt__store_import(s, j, json, 1, c, err, sizeof err), KT_OK);
  ASSERT_EQ(c[1], 16);
  ASSERT_EQ(c[3] + c[4], 0);
  kt__free(json);
  void *got;
  size_t n;
  ASSERT_STATUS(fetch(s, "1234", &got, &n), KT_OK);
  int same = n == sizeof blob && !memcmp(got, blob, n);
  free(got);
  ASSERT_TRUE(same);
  /* A faster result for one key replaces it. */
  const char *fast =
      "{\"format\": \"ktune-cache\", \"version\": 1, \"configs\": [{\"kernel\": \"rmsnorm_fwd\", \"spec_hash\": "
      "\"00000000deadbeef\", \"device\": \"NVIDIA H100 80GB HBM3/sm_90/132\", \"key\": "
      "{\"D\":64,\"T\":\"bf16\",\"align\":16}, \"config\": {\"BLOCK\":1024,\"VEC\":8}, \"time_us\": 0.5}]}";
  ASSERT_STATUS(kt__store_import(s, "fast.json", fast, 1, c, err, sizeof err), KT_OK);
  ASSERT_EQ(c[2], 1);
  ASSERT_STATUS(kt__store_import(s, "x.json", "{\"configs\": []}", 1, c, err, sizeof err), KT_ERR_INVALID);
  ASSERT_STR_EQ(err, "x.json: not a ktune cache export (expected \"format\": \"ktune-cache\", \"version\": 1)");
  ASSERT_STATUS(kt__store_import(s, "y.json", "{\"format\": \"ktune-cache\", ", 1, c, err, sizeof err), KT_ERR_INVALID);
  ASSERT_CONTAINS(err, "y.json: not JSON: malformed JSON");
  ASSERT_STATUS(kt__store_import(s, "z.json",
                                 "{\"format\": \"ktune-cache\", \"version\": 1, \"configs\": [{\"kernel\": \"k\"}]}",
                                 1, c, err, sizeof err),
                KT_ERR_INVALID);
  ASSERT_STR_EQ(err, "z.json: configs[0]: missing \"spec_hash\"");
  kt__store_close(s);
  char da[16384], db[16384];
  static const char dump[] =
      "SELECT kernel || '|' || spec_hash || '|' || device || '|' || key || '|' || config || '|' || time_us || '|' ||"
      " candidates || '|' || rejected || '|' || nvrtc_version || '|' || driver_version || '|' || created_at || '|' ||"
      " updated_at FROM configs WHERE json_extract(key, '$.D') != 64 ORDER BY 1";
  t_db_text(a, dump, da, sizeof da);
  t_db_text(b, dump, db, sizeof db);
  ASSERT_TRUE(strlen(da) > 500);
  ASSERT_STR_EQ(db, da);
}

static void gc_removes_stale_rows(void) {
  const char *p = tmpfile_in("gc.db");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  kt__cfgrow r = row("{\"D\":1}", "{}", 1.0);
  r.spec_hash = "0000000000000001";
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  r = row("{\"D\":2}", "{}", 1.0);
  r.spec_hash = "0000000000000002";
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  r = row("{\"D\":3}", "{}", 1.0);
  r.kernel = "other";
  ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  unsigned char blob[4] = {1, 2, 3, 4};
  kt__binrow b1 = {.hash = "b1", .kernel = "rmsnorm_fwd", .spec_hash = "0000000000000002", .arch = "sm_90", .nvrtc_version = "13000", .constants = "{}", .registers = 0, .smem_bytes = 0, .spill_bytes = 0, .size = 4, .cubin = blob};
  kt__binrow b2 = {.hash = "b2", .kernel = "rmsnorm_fwd", .spec_hash = "0000000000000001", .arch = "sm_90", .nvrtc_version = "13000", .constants = "{}", .registers = 0, .smem_bytes = 0, .spill_bytes = 0, .size = 4, .cubin = blob};
  ASSERT_STATUS(kt__store_put_binary(s, &b1, err, sizeof err), KT_OK);
  ASSERT_STATUS(kt__store_put_binary(s, &b2, err, sizeof err), KT_OK);
  const char *kernels[] = {"rmsnorm_fwd"}, *hashes[] = {"0000000000000002"};
  long rc_, rb;
  ASSERT_STATUS(kt__store_gc(s, kernels, hashes, 1, &rc_, &rb, err, sizeof err), KT_OK);
  ASSERT_EQ(rc_, 1);
  ASSERT_EQ(rb, 1);
  kt__store_close(s);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM configs"), 2);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM configs WHERE spec_hash = '0000000000000001'"), 0);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM binaries WHERE hash = 'b1'"), 1);
  /* One name given with two specs (two copies of a spec file): the rows
  ** of both stay, those of neither go. */
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  static const char *const three[] = {"0000000000000003", "0000000000000004", "0000000000000005"};
  for (int i = 0; i < 3; i++) {
    r = row(i == 0 ? "{\"D\":4}" : i == 1 ? "{\"D\":5}" : "{\"D\":6}", "{}", 1.0);
    r.spec_hash = three[i];
    ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
  }
  const char *twice[] = {"rmsnorm_fwd", "rmsnorm_fwd"}, *both[] = {"0000000000000002", "0000000000000004"};
  ASSERT_STATUS(kt__store_gc(s, twice, both, 2, &rc_, &rb, err, sizeof err), KT_OK);
  ASSERT_EQ(rc_, 2);
  kt__store_close(s);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM configs WHERE kernel = 'rmsnorm_fwd'"), 2);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM configs WHERE spec_hash IN ('0000000000000002', '0000000000000004')"), 2);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM configs WHERE kernel = 'other'"), 1);
}

/* The row that stops two processes tuning one key at the same moment. */
static void tuning_leases(void) {
  const char *p = tmpfile_in("lease.db");
  kt_store *s;
  ASSERT_STATUS(open_store(&s, p, NULL, NULL, err, sizeof err), KT_OK);
  int taken;
  long holder;
  long me = (long)getpid();
  ASSERT_STATUS(kt__store_lease(s, "k", "h", "d", "{}", "hostA", me, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 1);
  /* Another live holder on another host: refused, and named. */
  ASSERT_STATUS(kt__store_lease(s, "k", "h", "d", "{}", "hostB", 4242, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 0);
  ASSERT_EQ(holder, me);
  /* A different key is free. */
  ASSERT_STATUS(kt__store_lease(s, "k", "h", "d", "{\"D\":1}", "hostB", 4242, 60, &taken, &holder, err, sizeof err),
                KT_OK);
  ASSERT_EQ(taken, 1);
  /* Released: free again. */
  ASSERT_STATUS(kt__store_lease_release(s, "k", "h", "d", "{}", "hostA", me, err, sizeof err), KT_OK);
  ASSERT_STATUS(kt__store_lease(s, "k", "h", "d", "{}", "hostB", 4242, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 1);
  /* Expired: taken over. */
  ASSERT_STATUS(kt__store_lease(s, "k", "h", "d", "{\"D\":2}", "hostB", 4242, -5, &taken, &holder, err, sizeof err),
                KT_OK);
  ASSERT_STATUS(kt__store_lease(s, "k", "h", "d", "{\"D\":2}", "hostC", 77, 60, &taken, &holder, err, sizeof err),
                KT_OK);
  ASSERT_EQ(taken, 1);
  /* Held on this host by a process that is gone: taken over. */
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  ASSERT_STATUS(kt__store_lease(s, "k", "h", "d", "{\"D\":3}", "hostA", (long)dead, 60, &taken, &holder, err,
                                sizeof err),
                KT_OK);
  ASSERT_STATUS(kt__store_lease(s, "k", "h", "d", "{\"D\":3}", "hostA", me, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 1);
  kt__store_close(s);
  ASSERT_EQ(t_db_int(p, "SELECT count(*) FROM leases"), 4);
}

/* Two stores of one process on one file (two runtimes, a GPU each, here
** one naming the file through a link): a lease one of them holds is
** refused to the other, named by this process's pid, until the holder
** lets go or closes; the holder takes it again at will. */
static void leases_of_one_process_are_the_stores(void) {
  const char *p = tmpfile_in("lease2.db");
  char q[1024];
  snprintf(q, sizeof q, "%s.link", p);
  kt_store *a, *b;
  ASSERT_STATUS(open_store(&a, p, NULL, NULL, err, sizeof err), KT_OK);
  ASSERT_EQ(symlink(p, q), 0);
  ASSERT_STATUS(open_store(&b, q, NULL, NULL, err, sizeof err), KT_OK);
  int taken;
  long holder, me = (long)getpid();
  ASSERT_STATUS(kt__store_lease(a, "k", "h", "d", "{}", "hostA", me, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 1);
  ASSERT_STATUS(kt__store_lease(b, "k", "h", "d", "{}", "hostA", me, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 0);
  ASSERT_EQ(holder, me);
  ASSERT_STATUS(kt__store_lease(a, "k", "h", "d", "{}", "hostA", me, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 1);
  /* Another key is b's to take; a's release of a key it does not hold
  ** leaves b's. */
  ASSERT_STATUS(kt__store_lease(b, "k", "h", "d", "{\"D\":1}", "hostA", me, 60, &taken, &holder, err, sizeof err),
                KT_OK);
  ASSERT_EQ(taken, 1);
  ASSERT_STATUS(kt__store_lease(a, "k", "h", "d", "{\"D\":1}", "hostA", me, 60, &taken, &holder, err, sizeof err),
                KT_OK);
  ASSERT_EQ(taken, 0);
  /* Released by its holder: b's to take. */
  ASSERT_STATUS(kt__store_lease_release(a, "k", "h", "d", "{}", "hostA", me, err, sizeof err), KT_OK);
  ASSERT_STATUS(kt__store_lease(b, "k", "h", "d", "{}", "hostA", me, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 1);
  ASSERT_STATUS(kt__store_lease(a, "k", "h", "d", "{}", "hostA", me, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 0);
  /* Its holder closed (its row left, as a crash would leave it): a takes it. */
  kt__store_close(b);
  ASSERT_STATUS(kt__store_lease(a, "k", "h", "d", "{}", "hostA", me, 60, &taken, &holder, err, sizeof err), KT_OK);
  ASSERT_EQ(taken, 1);
  ASSERT_STATUS(kt__store_lease(a, "k", "h", "d", "{\"D\":1}", "hostA", me, 60, &taken, &holder, err, sizeof err),
                KT_OK);
  ASSERT_EQ(taken, 1);
  kt__store_close(a);
}

static void network_filesystems_are_recognised(void) {
  ASSERT_EQ(kt__store_fs_is_network(0x6969), 1);
  ASSERT_EQ(kt__store_fs_is_network(0xFF534D42L), 1);
  ASSERT_EQ(kt__store_fs_is_network(0x65735546), 1);
  ASSERT_EQ(kt__store_fs_is_network(0x0BD00BD0), 1);
  ASSERT_EQ(kt__store_fs_is_network(0xEF53), 0);    /* ext4 */
  ASSERT_EQ(kt__store_fs_is_network(0x01021994), 0); /* tmpfs */
  ASSERT_EQ(kt__store_fs_is_network(0x58465342), 0); /* xfs */
}

/* A FIFO or a device where a cache should be is refused, never opened:
** SQLite would wait for a FIFO's writer for ever, or read a device's
** endless bytes. As the user cache the open fails; as the system cache
** it is left out with a log line, and the user cache serves. */
static void a_fifo_or_device_is_no_cache(void) {
  char *fifo = tmpfile_in("c.fifo"), *good = tmpfile_in("good.db"), want[1024];
  static char logged[4096];
  ASSERT_EQ(mkfifo(fifo, 0600), 0);
  const char *bad[] = {fifo, "/dev/zero"};
  for (int i = 0; i < 2; i++) {
    kt_store *s = NULL;
    ASSERT_EQ(open_store(&s, bad[i], NULL, NULL, err, sizeof err), KT__C_CACHE);
    snprintf(want, sizeof want, "%s: not a regular file, not a cache file", bad[i]);
    ASSERT_STR_EQ(err, want);
    logged[0] = 0;
    kt__clog lg = {ccapture, logged, KT_LOG_DEBUG};
    ASSERT_EQ(open_store(&s, good, bad[i], &lg, err, sizeof err), KT__C_OK);
    snprintf(want, sizeof want, "system cache not used: %s: not a regular file, not a cache file", bad[i]);
    ASSERT_CONTAINS(logged, want);
    kt__cfgrow r = row("{\"D\":64}", "{\"BLOCK\":256}", 1.0);
    ASSERT_STATUS(kt__store_put_config(s, &r, NULL, err, sizeof err), KT_OK);
    kt__store_close(s);
  }
}

const kt_test t_store_tests[] = {
    {"cache: configs round trip, fastest wins", configs_fastest_wins},
    {"cache: a stored row with a damaged time, or a stale config, gives way", damaged_or_stale_rows_give_way},
    {"cache: a FIFO or a device is no cache, never waited on", a_fifo_or_device_is_no_cache},
    {"cache: a stored config longer than the room for it is not read cut", long_config_text_is_not_cut},
    {"cache: trials, binaries and quarantine round trip", trials_binaries_quarantine},
    {"cache: the configs other keys chose, most chosen first", winners_of_other_keys},
    {"cache: schema 1 is migrated in place", migrates_schema_1},
    {"cache: a newer schema is opened read-only, never rewritten", newer_schema_is_read_only},
    {"cache: a file removed or replaced while open is written no more", a_file_removed_or_replaced_is_written_no_more},
    {"cache: 8 processes x 4 threads on overlapping keys", many_processes_and_threads},
    {"cache: a killed writer loses nothing committed", killed_writer_loses_nothing_committed},
    {"cache: corrupt and truncated files are reported and kept", damaged_files_are_reported_and_kept},
    {"cache: paths: created, a directory, a file as parent, defaults", paths},
    {"cache: kt_runtime_info names the cache's file where none is", info_names_the_cache_file_where_none_is},
    {"cache: a world-writable file gives no binaries", untrusted_file_gives_no_binaries},
    {"cache: the system cache is read after the user's, never written", system_cache_is_read_after_and_never_written},
    {"cache: export then import gives identical rows", export_import_round_trip},
    {"cache: gc removes stale configs and unreferenced binaries", gc_removes_stale_rows},
    {"cache: tuning leases: taken, refused, released, taken over", tuning_leases},
    {"cache: a lease of this process is the store's that took it", leases_of_one_process_are_the_stores},
    {"cache: network filesystems are recognised", network_filesystems_are_recognised},
    {NULL, NULL},
};
