/* A key's trial and quarantine rows as any writer may have left them (a
** status the schema's CHECK refuses, written with the CHECK turned off; a
** time that is NULL, text, zero, negative, infinite or huge; a config no
** candidate has), read by the tuner of tests/specs/small.json's key (four
** candidates) on a runtime without a device. What the tuner makes of them
** must match this model exactly:
**   - a config quarantined for the key is never run (a fault, decided);
**   - a sound row decides its config: a status ktune stores, for "ok" a
**     time > 0 and finite, for a verdict on compiled code
**     ("compile_error", "resources", "mismatch", "oob_write") a detail
**     that begins with this NVRTC's name;
**   - every other candidate is measured;
**   - and a key is never a dead end: when nothing is left to measure and
**     no sound "ok" row exists, every rejection is measured again.
** Nothing may crash or leak. */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "device/nvrtc.h"
#include "dispatch/handles.h"
#include "fuzz.h"
#include "tune/tuner.h"

enum { NCAND = 4, NROWS = 8 };

static const char *const configs[NCAND + 1] = {
    "{\"BLOCK\":128,\"ROWS\":1,\"VEC\":1}", "{\"BLOCK\":128,\"ROWS\":1,\"VEC\":8}",
    "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":1}", "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":8}",
    "{\"BLOCK\":128, \"ROWS\":1,\"VEC\":1}" /* no candidate's canonical text */};
static const char *const statuses[] = {"ok",        "mismatch", "oob_write", "fault",   "compile_error",
                                       "resources", "timeout",  "pruned",    "weird",   ""};
enum { NSTATUS = sizeof statuses / sizeof statuses[0], KNOWN = 7 /* stored by ktune: the first 7 */ };

static char path[160];
static kt_runtime *rt;
static kt_kernel *k;
static sqlite3 *db;
static char key[256];
static kt_arg args[7];
static kt__call call;
static char tag[32]; /* "NVRTC 13.0: ", as the tuner names its NVRTC */

static void remove_files(void) {
  static const char *const side[] = {"", "-wal", "-shm", "-journal"};
  char p[200];
  sqlite3_close(db);
  db = NULL;
  kt_runtime_close(rt);
  rt = NULL;
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s%s", path, side[i]);
    unlink(p);
  }
}

/* The runtime, its kernel, the call and a second connection to its cache,
** made once a process. Aborts where they cannot be made. */
static void setup(void) {
  if (rt) return;
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/ktune-fuzz-trials-%d.db", tmp && *tmp ? tmp : "/tmp", (int)getpid());
  unlink(path);
  kt_options o;
  kt_options_init(&o);
  o.no_device = 1;
  o.arch = "sm_90";
  o.cache_path = path;
  o.log_level = KT_LOG_ERROR;
  const kt_arg a[7] = {kt_arg_ptr(0x100000, KT_BF16), kt_arg_ptr(0x200000, KT_BF16), kt_arg_ptr(0, KT_BF16),
                       kt_arg_ptr(0x300000, KT_BF16), kt_arg_i32(64), kt_arg_i32(256), kt_arg_f32(1e-6f)};
  memcpy(args, a, sizeof a);
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, "tests/specs/small.json", &k) ||
      kt__call_bind(&k->p, args, 7, &call) || kt_kernel_key(k, args, 7, key, sizeof key) ||
      sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) ||
      sqlite3_exec(db, "PRAGMA ignore_check_constraints = ON", NULL, NULL, NULL))
    abort();
  sqlite3_busy_timeout(db, 10000);
  char err[KT_ERRMAX];
  char name[32];
  if (!kt__nvrtc_load(rt->env.cuda_home, err, sizeof err) && !kt__nvrtc_name(name, sizeof name))
    snprintf(tag, sizeof tag, "%s: ", name);
  atexit(remove_files);
}


/* A time as a row may hold it, bound at i; *sound when it is one a sound
** "ok" row has (> 0 and finite, stored as a number). */
static void bind_time(sqlite3_stmt *st, int i, kt_fuzz_bytes *b, int *sound) {
  static const double edges[] = {0.0, -1.0, -0.0, 1e-300, 5.0, 1e300, INFINITY, -INFINITY, NAN};
  uint8_t c = kt_fuzz_take(b);
  double v;
  *sound = 0;
  switch (c % 4) {
    case 0: sqlite3_bind_null(st, i); return;
    case 1: /* REAL affinity makes "7.5" a number; "fast" stays text */
      sqlite3_bind_text(st, i, c & 4 ? "fast" : "7.5", -1, SQLITE_STATIC);
      *sound = !(c & 4);
      return;
    case 2: v = edges[(c >> 2) % (sizeof edges / sizeof edges[0])]; break;
    default: {
      uint64_t u = kt_fuzz_take64(b);
      memcpy(&v, &u, sizeof v);
    }
  }
  sqlite3_bind_double(st, i, v);
  *sound = v > 0 && isfinite(v); /* NaN is stored as NULL */
}

/* A detail as a row may hold it, bound at i; *named when it begins with
** this NVRTC's name. */
static void bind_detail(sqlite3_stmt *st, int i, kt_fuzz_bytes *b, int *named) {
  static char text[3][64];
  int c = kt_fuzz_take(b) % 4;
  snprintf(text[0], sizeof text[0], "%se.cu(3): error", tag);
  snprintf(text[1], sizeof text[1], "NVRTC 1.0: e.cu(3): error");
  snprintf(text[2], sizeof text[2], "%.*s", (int)(strlen(tag) ? strlen(tag) - 1 : 0), tag); /* cut short */
  if (c == 3) sqlite3_bind_text(st, i, "", -1, SQLITE_STATIC);
  else sqlite3_bind_text(st, i, text[c], -1, SQLITE_TRANSIENT);
  *named = c == 0 && tag[0];
}

/* Whether a status is a verdict on the code one NVRTC made. */
static int by_compiler(int s) {
  return s == KT_TRIAL_COMPILE_ERROR || s == KT_TRIAL_RESOURCES || s == KT_TRIAL_MISMATCH || s == KT_TRIAL_OOB_WRITE;
}

/* The rows the bytes say, written; the model of each candidate's fate. */
typedef struct model {
  int quarantined[NCAND], sound[NCAND], status[NCAND];
} model;

static void put_rows(kt_fuzz_bytes *b, model *m) {
  sqlite3_stmt *ins, *q;
  if (sqlite3_exec(db, "DELETE FROM trials; DELETE FROM quarantine", NULL, NULL, NULL) ||
      sqlite3_prepare_v2(db,
                         "INSERT OR REPLACE INTO trials (kernel, spec_hash, device, key, config, status, median_us, "
                         "spread_us, detail, measured_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0)",
                         -1, &ins, NULL) ||
      sqlite3_prepare_v2(db,
                         "INSERT OR REPLACE INTO quarantine (kernel, spec_hash, device, key, config, reason, since, "
                         "pid) VALUES (?1, ?2, ?3, ?4, ?5, 'fault: fuzz', 0, 1)",
                         -1, &q, NULL))
    abort();
  memset(m, 0, sizeof *m);
  int rows = kt_fuzz_take(b) % (NROWS + 1);
  for (int r = 0; r < rows; r++) {
    int c = kt_fuzz_take(b) % (NCAND + 1), s = kt_fuzz_take(b) % NSTATUS, quarantine = kt_fuzz_take(b) % 4 == 0,
        sound = 0, spread_sound = 0, named = 0;
    sqlite3_stmt *st = quarantine ? q : ins;
    sqlite3_bind_text(st, 1, k->p.spec->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, k->p.spec_hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, rt->env.fingerprint, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, configs[c], -1, SQLITE_STATIC);
    if (!quarantine) {
      sqlite3_bind_text(st, 6, statuses[s], -1, SQLITE_STATIC);
      bind_time(st, 7, b, &sound);
      bind_time(st, 8, b, &spread_sound);
      bind_detail(st, 9, b, &named);
    }
    if (sqlite3_step(st) != SQLITE_DONE) abort();
    sqlite3_reset(st);
    if (c == NCAND) continue;
    if (quarantine) m->quarantined[c] = 1;
    else /* a later row replaces the earlier */
      m->sound[c] = s < KNOWN && (s == KT_TRIAL_OK ? sound : !by_compiler(s) || named), m->status[c] = s;
  }
  sqlite3_finalize(ins);
  sqlite3_finalize(q);
}

/* What the tuner decided, against the model. */
static void check(const kt__tuner *t, const model *m) {
  int n, ok = 0, open = 0;
  const kt__cand *cd = kt__tuner_candidates(t, &n);
  if (n != NCAND) abort();
  for (int c = 0; c < NCAND; c++) {
    ok |= !m->quarantined[c] && m->sound[c] && m->status[c] == KT_TRIAL_OK;
    open |= !m->quarantined[c] && !m->sound[c];
  }
  int retry = !ok && !open;
  for (int i = 0; i < n; i++) {
    int c = 0;
    while (c < NCAND && strcmp(cd[i].json, configs[c])) c++;
    if (c == NCAND) abort();
    int want = m->quarantined[c] ? KT_TRIAL_FAULT : m->sound[c] && !retry ? m->status[c] : KT__PENDING;
    if (cd[i].status != want || cd[i].quarantined != m->quarantined[c] || cd[i].prior != (want != KT__PENDING))
      abort();
    if (want == KT_TRIAL_OK && !(cd[i].median > 0 && isfinite(cd[i].median))) abort();
  }
}

int kt_fuzz_trials(const uint8_t *data, size_t size) {
  setup();
  kt_fuzz_bytes b = {data, size};
  model m;
  put_rows(&b, &m);
  kt__tuner *t;
  if (kt__tuner_new(&k->p, &rt->tune, &call, args, key, &t)) abort();
  check(t, &m);
  kt__tuner_free(t);
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_trials)
