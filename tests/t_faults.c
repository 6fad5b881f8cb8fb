/* Every failure point of the cache and the runtime's offline paths, made to
** fail in turn: each file operation (read, write, sync, lock) and each
** allocation (the library's, SQLite's, cJSON's). Each must end with the
** documented status (I/O: KT_ERR_CACHE; memory: KT_ERR_NOMEM), no crash,
** no leak (the ASan run), the file passing PRAGMA integrity_check, and
** what was written either all there or not at all. */
#include <stdlib.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "cache/store.h"
#include "faults.h"
#include "harness.h"
#include "ktune.h"

static char err[KT_ERRMAX];
static char seeded[700], work[700];

static int open_store(kt_store **s, const char *path) {
  kt__store_opts o = {.path = path};
  return kt__store_open(s, &o, err, sizeof err);
}

static kt__cfgrow config_row(const char *key, double t) {
  return (kt__cfgrow){.kernel = "k", .spec_hash = "h", .device = "d", .key = key, .config = "{\"B\":1}", .time_us = t};
}

/* A cache with configs, trials, a binary and a quarantine row, closed. */
static int seed(const char *path) {
  kt_store *s;
  if (open_store(&s, path)) return -1;
  unsigned char blob[64] = {0x7f, 'E', 'L', 'F'};
  kt__binrow b = {.hash = "00ff", .kernel = "k", .spec_hash = "h", .arch = "sm_90", .nvrtc_version = "13000",
                  .constants = "{\"lowered\":\"f\"}", .size = sizeof blob, .cubin = blob};
  kt__trialrow tr = {.kernel = "k", .spec_hash = "h", .device = "d", .key = "{\"D\":1}", .config = "{\"B\":1}",
                     .status = "ok", .median_us = 1, .spread_us = 0.1};
  int st = kt__store_put_binary(s, &b, err, sizeof err) || kt__store_put_trial(s, &tr, err, sizeof err) ||
           kt__store_quarantine(s, "k", "old", "d", "{}", "{}", "fault", err, sizeof err);
  for (int i = 0; i < 20 && !st; i++) {
    char key[32];
    snprintf(key, sizeof key, "{\"D\":%d}", i);
    kt__cfgrow r = config_row(key, 10 + i);
    if (i == 19) r.spec_hash = "old";
    st = kt__store_put_config(s, &r, NULL, err, sizeof err);
  }
  kt__store_close(s);
  return st;
}

/* Remove a cache and its side files. */
static void remove_cache(const char *path) {
  char side[800];
  unlink(path);
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
}

static void copy_seeded(void) {
  remove_cache(work);
  FILE *in = fopen(seeded, "rb"), *out = fopen(work, "wb");
  char buf[65536];
  size_t n;
  while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
  if (in) fclose(in);
  if (out) fclose(out);
}

static const char export_text[] =
    "{\"format\": \"ktune-cache\", \"version\": 1, \"configs\": ["
    "{\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 1}, \"config\": {\"B\": 2},"
    " \"time_us\": 0.5}, {\"kernel\": \"k\", \"spec_hash\": \"h\", \"device\": \"d\", \"key\": {\"D\": 100},"
    " \"config\": {\"B\": 2}, \"time_us\": 5}], \"binaries\": [{\"hash\": \"aa\", \"kernel\": \"k\", \"arch\":"
    " \"sm_90\", \"nvrtc_version\": \"13000\", \"constants\": {\"lowered\": \"g\"}, \"size\": 4, \"cubin\": \"f0VMRg==\"}]}";

enum { OPEN, PUT, IMPORT, EXPORT, GC, NACTIONS };
static const char *const action_names[] = {"open", "put", "import", "export", "gc"};

/* One action on the work copy; its status. */
static int act(int which) {
  kt_store *s;
  if (which == OPEN) remove_cache(work);
  int st = open_store(&s, work);
  if (st) return st;
  long c[5], cr, br;
  kt__cfgrow r = config_row("{\"D\":3}", 1.5);
  const char *k[] = {"k"}, *h[] = {"h"};
  FILE *f;
  switch (which) {
    case PUT: st = kt__store_put_config(s, &r, NULL, err, sizeof err); break;
    case IMPORT: st = kt__store_import(s, "x.json", export_text, 1, c, err, sizeof err); break;
    case EXPORT:
      f = tmpfile();
      st = f ? kt__store_export(s, f, 1, err, sizeof err) : KT__C_IO;
      if (f) fclose(f);
      break;
    case GC: st = kt__store_gc(s, k, h, 1, &cr, &br, err, sizeof err); break;
    default: break;
  }
  kt__store_close(s);
  return st;
}

/* What an action left: the rows it writes, all or none. */
static const char *left(int which) {
  long long d3 = t_db_int(work, "SELECT count(*) FROM configs WHERE key = '{\"D\":3}' AND time_us = 1.5");
  long long imp = t_db_int(work, "SELECT count(*) FROM configs WHERE key IN ('{\"D\":1}', '{\"D\":100}') AND"
                                 " config = '{\"B\":2}'") + t_db_int(work, "SELECT count(*) FROM binaries WHERE hash = 'aa'");
  long long old = t_db_int(work, "SELECT count(*) FROM configs WHERE spec_hash = 'old'") +
                  t_db_int(work, "SELECT count(*) FROM quarantine WHERE spec_hash = 'old'");
  if (which == PUT && d3 != 0 && d3 != 1) return "part of the put";
  if (which == IMPORT && imp != 0 && imp != 3) return "part of the import";
  if (which == GC && old != 0 && old != 2) return "part of the gc";
  return NULL;
}

/* The file is whole, and what was written is all there or not at all. */
static int sound(int which, int st, int allowed_a, int allowed_b, long n, const char *what) {
  char ok[64] = "ok\n";
  if (which != OPEN || !st) t_db_text(work, "PRAGMA integrity_check", ok, sizeof ok);
  const char *part = left(which);
  if ((st == allowed_a || st == allowed_b) && !strcmp(ok, "ok\n") && !part) return 1;
  t_fail(__FILE__, __LINE__, "%s: %s %ld: status %s (%s), integrity %s%s%s", action_names[which], what, n,
         kt_status_name((kt_status)st), err, ok, part ? ", left " : "", part ? part : "");
  return 0;
}

/* Each injection point of each action fails in turn: fail_at(n) makes the
** n-th one fail (0 turns it off and returns how many were reached); a
** failure may end in KT__C_OK or in allowed, never in damage. */
static void inject(long (*fail_at)(long), int allowed, const char *what) {
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  snprintf(seeded, sizeof seeded, "%s/seeded.db", dir);
  snprintf(work, sizeof work, "%s/work.db", dir);
  ASSERT_EQ(seed(seeded), 0);
  long total = 0;
  for (int which = 0; which < NACTIONS; which++) {
    for (long n = 1;; n++) {
      copy_seeded();
      fail_at(n);
      int st = act(which);
      long used = fail_at(0);
      if (!sound(which, st, KT__C_OK, allowed, n, what)) return;
      total++;
      if (used < n) break;
    }
  }
  printf("    %ld failures injected\n", total);
}

/* Each file operation of each action fails in turn. */
static void io_faults(void) { inject(t_io_fail_at, KT__C_CACHE, "I/O failure"); }

/* Each allocation of each action fails in turn: SQLite's and cJSON's too. */
static void alloc_faults(void) { inject(kt__alloc_fail_after, KT__C_NOMEM, "allocation failure"); }

/* The runtime's offline paths through the public API: open with a cache,
** load a spec, a key, a config (the miss path), a listing, close. */
static kt_status runtime_round(const char *cache) {
  kt_options o;
  t_offline_options(&o);
  o.cache_path = cache;
  o.log_level = -1;
  o.log = NULL;
  kt_runtime *rt = NULL;
  kt_kernel *k;
  kt_status st = kt_runtime_open(&rt, &o);
  if (!st) st = kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k);
  kt_arg a[] = {kt_arg_ptr(0x100000, KT_BF16), kt_arg_ptr(0x200000, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(0x300000, KT_BF16), kt_arg_i32(100), kt_arg_i32(1024), kt_arg_f32(1e-6f)};
  char buf[512];
  if (!st) st = kt_kernel_key(k, a, 7, buf, sizeof buf);
  if (!st) st = kt_kernel_config_for(k, a, 7, buf, sizeof buf);
  long c[4];
  if (!st) st = kt_cache_counts(rt, c);
  kt_runtime_close(rt);
  return st;
}

static void runtime_alloc_faults(void) {
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  char cache[700];
  snprintf(cache, sizeof cache, "%s/rt.db", dir);
  setenv("KTUNE_LOG", "error", 1);
  ASSERT_STATUS(runtime_round(cache), KT_OK);
  long total = 0;
  for (long n = 1;; n++) {
    remove_cache(cache);
    kt__alloc_fail_after(n);
    kt_status st = runtime_round(cache);
    long used = kt__alloc_fail_after(0);
    if (st != KT_OK && st != KT_ERR_NOMEM) {
      t_fail(__FILE__, __LINE__, "allocation %ld: %s: %s", n, kt_status_name(st), kt_errmsg(NULL));
      unsetenv("KTUNE_LOG");
      return;
    }
    total++;
    if (used < n) break;
  }
  unsetenv("KTUNE_LOG");
  printf("    %ld failures injected\n", total);
}

const kt_test t_fault_tests[] = {
    {"faults: every file operation of open, put, import, export, gc fails in turn", io_faults},
    {"faults: every allocation of open, put, import, export, gc fails in turn", alloc_faults},
    {"faults: every allocation of the runtime's offline paths fails in turn", runtime_alloc_faults},
    {NULL, NULL},
};
