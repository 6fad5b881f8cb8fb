/* Opening the cache: where it is, whether it can be trusted, written or
** only read, and the helpers every cache file uses. */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "cache/db.h"

/* The user's home: $HOME, else the password database's, when absolute
** (never a directory relative to wherever the process runs). */
static const char *home(char *buf, size_t n) {
  const char *e = getenv("HOME");
  if (e && *e == '/') return e;
  struct passwd pw, *found = NULL;
  if (getpwuid_r(getuid(), &pw, buf, n, &found) || !found || !pw.pw_dir || pw.pw_dir[0] != '/') return NULL;
  return pw.pw_dir;
}

int kt__store_default_path(char *out, size_t n, char *err, size_t errlen) {
  char buf[4096];
  const char *e = getenv("KTUNE_CACHE"), *tail = "";
  if (!e || !*e) {
    /* The XDG rule: a relative XDG_CACHE_HOME is ignored. */
    e = getenv("XDG_CACHE_HOME");
    tail = "/ktune/ktune.db";
    if (!e || *e != '/') e = home(buf, sizeof buf), tail = "/.cache/ktune/ktune.db";
  }
  if (!e) {
    snprintf(err, errlen, "no cache path: KTUNE_CACHE and XDG_CACHE_HOME are unset and there is no home directory");
    return -1;
  }
  int w = snprintf(out, n, "%s%s", e, tail);
  if (w >= 0 && (size_t)w < n) return 0;
  snprintf(err, errlen, "%.40s...%s: the cache's path is longer than %zu bytes", e, tail, n - 1);
  return -1;
}

int kt__store_fs_is_network(long t) {
  switch ((unsigned long)t & 0xffffffffUL) {
    case 0x6969UL:      /* NFS */
    case 0x517bUL:      /* SMB */
    case 0xff534d42UL:  /* CIFS */
    case 0xfe534d42UL:  /* SMB2 */
    case 0x0bd00bd0UL:  /* Lustre */
    case 0x65735546UL:  /* FUSE */
    case 0x47504653UL:  /* GPFS */
    case 0x00c36400UL:  /* Ceph */
    case 0x6b414653UL:  /* AFS */
    case 0x013111a8UL:  /* IBRIX */
    case 0x19830326UL:  /* fhgfs / BeeGFS */
      return 1;
  }
  return 0;
}

static void dir_of(const char *path, char *dir, size_t n) {
  snprintf(dir, n, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, n, ".");
  else if (slash == dir) dir[1] = 0;
  else *slash = 0;
}

/* mkdir -p of path's directory; an existing non-directory is an error. */
static int make_parent(const char *path, char *err, size_t errlen) {
  char dir[PATH_MAX];
  dir_of(path, dir, sizeof dir);
  for (char *p = dir + 1;; p++) {
    if (*p && *p != '/') continue;
    char c = *p;
    *p = 0;
    struct stat sb;
    if (mkdir(dir, 0755) && errno != EEXIST) {
      snprintf(err, errlen, "%s: cannot create directory %s: %s", path, dir, strerror(errno));
      return -1;
    }
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) {
      snprintf(err, errlen, "%s: cannot create directory %s: %s", path, dir, strerror(ENOTDIR));
      return -1;
    }
    if (!(*p = c)) return 0;
  }
}

/* Why a file others may write could feed this process (owned by another
** user, or world-writable), or NULL when it cannot. Cubins from such a file
** would run their code on the GPU. */
static const char *distrust(const char *file) {
  struct stat sb;
  if (stat(file, &sb) || (!(sb.st_mode & S_IWOTH) && sb.st_uid == geteuid())) return NULL;
  return (sb.st_mode & S_IWOTH) ? "world-writable" : "owned by another user";
}

/* The -wal or -shm beside the cache that others could have written, into
** side (why: the cause), or 0. SQLite replays a -wal into what it reads and
** checkpoints it into the file, so a foreign one makes the cache theirs. */
static int foreign_side_file(const char *path, char *side, size_t n, const char **why) {
  static const char *const ext[] = {"-wal", "-shm"};
  struct stat sb;
  for (int i = 0; i < 2; i++) {
    snprintf(side, n, "%s%s", path, ext[i]);
    /* SQLite would write through a link another user left there into the
    ** file it leads to, which may be any file of this user. */
    if (!lstat(side, &sb) && S_ISLNK(sb.st_mode)) return *why = "a link", 1;
    if ((*why = distrust(side))) return 1;
  }
  return 0;
}

/* A damaged file is reported, never deleted or rewritten. */
static int check_integrity(sqlite3 *db, const char *path, char *err, size_t errlen) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL);
  if (rc == SQLITE_OK) {
    rc = kt__db_step(st);
    int oom = 0;
    const char *r = rc == SQLITE_ROW ? kt__db_text(st, 0, &oom) : NULL;
    if (oom) rc = SQLITE_NOMEM;
    else if (r && strcmp(r, "ok")) {
      snprintf(err, errlen, "%s: the database is corrupt (%s); it is left as it is", path, r);
      sqlite3_finalize(st);
      return KT__C_CACHE;
    }
    if (rc == SQLITE_ROW) rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  if (rc == SQLITE_NOMEM) return snprintf(err, errlen, "%s: checking the database: out of memory", path), KT__C_NOMEM;
  if (rc && rc != SQLITE_DONE) {
    snprintf(err, errlen, "%s: %s; the file is left as it is", path, sqlite3_errmsg(db));
    return KT__C_CACHE;
  }
  return KT__C_OK;
}

/* "file:PATH?immutable=1", PATH percent-encoded: SQLite then neither locks
** nor creates anything beside the file, which a read-only directory needs. */
static void immutable_uri(const char *path, char *uri, size_t n) {
  size_t u = (size_t)snprintf(uri, n, "file:");
  for (const unsigned char *p = (const unsigned char *)path; *p && u + 4 < n; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("/._-~", *p))
      uri[u++] = (char)*p;
    else
      u += (size_t)snprintf(uri + u, n - u, "%%%02X", *p);
  }
  snprintf(uri + u, n - u, "?immutable=1");
}

/* A connection just opened (rc, open_v2's result) made ready and tried:
** the busy timeout set before the probe, so that its first read waits out
** a writer (an import into the same file) like every later one, instead of
** failing at once; hardened before anything of the file is read. */
static int settle(sqlite3 *db, int rc) {
  sqlite3_busy_timeout(db, KT__BUSY_TIMEOUT_MS);
  if (rc == SQLITE_OK) rc = kt__db_harden(db);
  return rc == SQLITE_OK ? sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) : rc;
}

/* An existing file for reading only; in a directory where SQLite can
** create nothing (a WAL file needs its -shm), as immutable. */
static int open_ro(sqlite3 **db, const char *path, char *err, size_t errlen) {
  int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
  /* Without memory for the connection itself, SQLite leaves no handle. */
  if (!*db) return snprintf(err, errlen, "%s: out of memory", path), KT__C_NOMEM;
  rc = settle(*db, rc);
  if (rc == SQLITE_CANTOPEN || rc == SQLITE_READONLY) {
    char uri[PATH_MAX * 3 + 32];
    immutable_uri(path, uri, sizeof uri);
    sqlite3_close(*db);
    *db = NULL;
    rc = sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
    if (!*db) return snprintf(err, errlen, "%s: out of memory", path), KT__C_NOMEM;
    rc = settle(*db, rc);
  }
  if (rc == SQLITE_NOMEM) return kt__db_err_at(path, *db, "opening", err, errlen);
  if (rc != SQLITE_OK) {
    snprintf(err, errlen, "%s: cannot open read-only: %s", path, sqlite3_errmsg(*db));
    return KT__C_CACHE;
  }
  return KT__C_OK;
}

static int open_rw(kt_store *s, const char *path, char *err, size_t errlen) {
  int rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (!s->db) return snprintf(err, errlen, "%s: out of memory", path), KT__C_NOMEM;
  if (rc == SQLITE_NOMEM) return kt__db_err(s, s->db, "opening", err, errlen);
  if (rc) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot open: %s%s%s", path, sqlite3_errmsg(s->db), e ? ": " : "", e ? strerror(e) : "");
    return KT__C_CACHE;
  }
  sqlite3_extended_result_codes(s->db, 0);
  sqlite3_busy_timeout(s->db, KT__BUSY_TIMEOUT_MS);
  if (kt__db_harden(s->db)) return kt__db_err(s, s->db, "opening", err, errlen);
  return KT__C_OK;
}

/* Whether this process may write the file and create files beside it. */
static int writable(const char *path) {
  char dir[PATH_MAX];
  dir_of(path, dir, sizeof dir);
  return access(dir, W_OK) == 0 && (access(path, F_OK) != 0 || access(path, W_OK) == 0);
}

/* Why the file just opened is not a ktune cache, into why ("" when it is
** one, or holds nothing yet): another application's tables, or tables of
** ktune's names made otherwise than ktune makes them. Its schema version
** in *version. Returns a SQLite error code. */
static int why_not_ours(sqlite3 *db, int *version, char *why, size_t n) {
  int foreign = 0, rc = kt__schema_read(db, version, &foreign);
  why[0] = 0;
  if (rc) return rc;
  if (*version < 0) snprintf(why, n, "its schema_version is not a version number");
  else if (foreign) snprintf(why, n, "it holds tables of another application");
  else if (*version > 0) rc = kt__schema_check(db, *version, why, n);
  return rc;
}

/* Such a file is refused, untouched. */
static int check_schema(kt_store *s, char *err, size_t errlen) {
  char why[512];
  int rc = why_not_ours(s->db, &s->version, why, sizeof why);
  if (rc == SQLITE_NOMEM) return kt__db_err(s, s->db, "reading the schema", err, errlen);
  if (rc) {
    snprintf(err, errlen, "%s: %s; the file is left as it is", s->path, sqlite3_errmsg(s->db));
    return KT__C_CACHE;
  }
  if (*why) {
    snprintf(err, errlen, "%s: not a ktune cache (%s); it is left as it is", s->path, why);
    return KT__C_CACHE;
  }
  return KT__C_OK;
}

/* Read-write from here on: WAL, and the current schema. */
static int prepare_writes(kt_store *s, char *err, size_t errlen) {
  if (kt__db_exec(s->db, "PRAGMA journal_mode=WAL") || kt__db_exec(s->db, "PRAGMA synchronous=NORMAL"))
    return kt__db_err(s, s->db, "enabling WAL", err, errlen);
  return s->version < KT__SCHEMA_VERSION ? kt__schema_ensure(s, err, errlen) : KT__C_OK;
}

/* Cubins are loaded only from a file of this user that no one else can
** write, whose side files are its own too, and whose rows carry digests. */
static void set_trust(kt_store *s, int side_ok) {
  const char *why = distrust(s->path);
  s->trusted = side_ok && !why && s->version >= 4;
  if (why)
    kt__db_log(s, 1, "%s: %s: compiled kernels will not be loaded from it (configs still are, after validation)",
               s->path, why);
}

static void warn_network_fs(const kt_store *s) {
  struct statfs fs;
  char dir[PATH_MAX];
  dir_of(s->path, dir, sizeof dir);
  if (!statfs(dir, &fs) && kt__store_fs_is_network((long)fs.f_type))
    kt__db_log(s, 1,
               "%s: on a network filesystem, where SQLite's locking is unreliable: use one cache per host and move "
               "results with `ktune export`/`ktune import`, or a read-only KTUNE_SYSTEM_CACHE",
               s->path);
}

/* What a cache path that is not a regular file is, for its message. A
** FIFO or a device is never handed to SQLite: its open would wait for a
** writer, or read what never ends. */
static const char *not_a_file(const struct stat *sb) {
  return S_ISDIR(sb->st_mode) ? "is a directory" : "not a regular file";
}

/* The file at path just opened, as later calls must find it whatever the
** working directory then or the name they are given. */
static int note_file(const char *path, kt__fileid *f, char *err, size_t errlen) {
  char real[PATH_MAX];
  struct stat sb;
  if (!realpath(path, real) || stat(real, &sb))
    return snprintf(err, errlen, "%s: cannot resolve the opened file: %s", path, strerror(errno)), KT__C_CACHE;
  if (!(f->real = sqlite3_mprintf("%s", real))) return snprintf(err, errlen, "%s: out of memory", path), KT__C_NOMEM;
  f->dev = sb.st_dev;
  f->ino = sb.st_ino;
  return KT__C_OK;
}

/* Why a file that must be written would be opened read-only, into err. */
static int cannot_write(const char *file, const char *why, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %s: the cache would be read-only, and it is to be written", file, why);
  return KT__C_CACHE;
}

static int open_user(kt_store *s, int want_ro, int must_write, char *err, size_t errlen) {
  const char *path = s->path, *why = NULL;
  char side[PATH_MAX + 8];
  struct stat sb;
  int exists = !stat(path, &sb), st;
  if (exists && !S_ISREG(sb.st_mode))
    return snprintf(err, errlen, "%s: %s, not a cache file", path, not_a_file(&sb)), KT__C_CACHE;
  if (!exists && want_ro) return snprintf(err, errlen, "%s: no cache there (nothing was created)", path), KT__C_CACHE;
  /* SQLite keeps its side files beside the file a link leads to. */
  char real[PATH_MAX];
  const char *at = exists && realpath(path, real) ? real : path;
  int foreign_side = exists && foreign_side_file(at, side, sizeof side, &why);
  s->readonly = want_ro || foreign_side || (exists && !writable(at));
  if (must_write && !want_ro && s->readonly)
    return foreign_side ? cannot_write(side, why, err, errlen) : cannot_write(path, "not writable", err, errlen);
  if (!s->readonly && !exists && make_parent(path, err, errlen)) return KT__C_CACHE;
  if ((st = s->readonly ? open_ro(&s->db, path, err, errlen) : open_rw(s, path, err, errlen)) ||
      (st = note_file(path, &s->file, err, errlen)))
    return st;
  if (foreign_side)
    kt__db_log(s, 1, "%s: %s: opened read-only for configs; compiled kernels are not loaded from it, and nothing is "
                     "written to it or checkpointed", side, why);
  else if (s->readonly && !want_ro)
    kt__db_log(s, 1, "%s: not writable: opened read-only, tunings stay in memory", path);
  if ((st = check_integrity(s->db, path, err, errlen)) || (st = check_schema(s, err, errlen))) return st;
  if (s->version > KT__SCHEMA_VERSION && !s->readonly) {
    /* Written by a newer ktune: read what we understand, change nothing. */
    if (must_write) {
      char newer[96];
      snprintf(newer, sizeof newer, "written by a newer ktune (schema %d, this one knows %d)", s->version,
               KT__SCHEMA_VERSION);
      return cannot_write(path, newer, err, errlen);
    }
    sqlite3_close(s->db);
    s->db = NULL;
    s->readonly = 1;
    if ((st = open_ro(&s->db, path, err, errlen))) return st;
    kt__db_log(s, 1, "%s: written by a newer ktune (schema %d, this one knows %d): opened read-only, nothing will be "
                     "written to it", path, s->version, KT__SCHEMA_VERSION);
  }
  if (s->readonly && !s->version)
    return snprintf(err, errlen, "%s: read-only and without the ktune schema", path), KT__C_CACHE;
  if (!s->readonly && (st = prepare_writes(s, err, errlen))) return st;
  set_trust(s, !foreign_side);
  warn_network_fs(s);
  return KT__C_OK;
}

static void open_system(kt_store *s) {
  char err[2048];
  struct stat sb;
  int v = 0, st = KT__C_CACHE;
  if (stat(s->sys_path, &sb)) snprintf(err, sizeof err, "%s: %s", s->sys_path, strerror(errno));
  else if (!S_ISREG(sb.st_mode)) snprintf(err, sizeof err, "%s: %s, not a cache file", s->sys_path, not_a_file(&sb));
  /* Read a second time it would list every row twice. */
  else if (s->file.real && s->file.dev == sb.st_dev && s->file.ino == sb.st_ino)
    snprintf(err, sizeof err, "%s: it is the user cache", s->sys_path);
  else st = open_ro(&s->sys, s->sys_path, err, sizeof err);
  if (!st) st = note_file(s->sys_path, &s->sys_file, err, sizeof err);
  if (!st) st = check_integrity(s->sys, s->sys_path, err, sizeof err);
  char why[512] = "";
  if (!st && why_not_ours(s->sys, &v, why, sizeof why)) st = kt__db_err_at(s->sys_path, s->sys, "reading the schema", err, sizeof err);
  else if (!st && (*why || v < 1))
    st = KT__C_CACHE,
    snprintf(err, sizeof err, "%s: not a ktune cache (%s)", s->sys_path, *why ? why : "no ktune schema");
  s->sys_version = v;
  if (!st && sqlite3_prepare_v2(s->sys, "SELECT config, time_us FROM configs" KT__WHERE_KEY, -1, &s->sys_get, NULL))
    st = kt__db_err_at(s->sys_path, s->sys, "preparing a statement", err, sizeof err);
  if (!st) return;
  kt__db_log(s, 1, "%s: system cache not used: %s", s->sys_path, err);
  sqlite3_finalize(s->sys_get);
  s->sys_get = NULL;
  sqlite3_close(s->sys);
  s->sys = NULL;
  sqlite3_free(s->sys_file.real);
  s->sys_file.real = NULL;
}

static char *copy(const char *s) { return sqlite3_mprintf("%s", s); }

int kt__store_open(kt_store **out, const kt__store_opts *o, char *err, size_t errlen) {
  *out = NULL;
  char def[PATH_MAX];
  const char *path = o->path;
  if (!path || !*path) {
    if (kt__store_default_path(def, sizeof def, err, errlen)) return KT__C_CACHE;
    path = def;
  }
  /* Its directory is made and checked in PATH_MAX bytes: never a cut one. */
  if (strlen(path) >= PATH_MAX)
    return snprintf(err, errlen, "%.40s...: the cache's path is longer than %d bytes", path, PATH_MAX - 1), KT__C_CACHE;
  kt_store *s = sqlite3_malloc(sizeof *s);
  if (!s) return snprintf(err, errlen, "%s: out of memory", path), KT__C_NOMEM;
  memset(s, 0, sizeof *s);
  atomic_init(&s->gone, 0);
  s->log = o->log;
  /* Recursive: a listing's callback may query the store (ktune show reads
  ** each config's trials while the configs are being listed). */
  pthread_mutexattr_t ma;
  int merr = pthread_mutexattr_init(&ma) || pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE) ||
             pthread_mutex_init(&s->lock, &ma);
  pthread_mutexattr_destroy(&ma);
  if (merr || !(s->path = copy(path)) || (o->system_path && *o->system_path && !(s->sys_path = copy(o->system_path)))) {
    if (!merr) pthread_mutex_destroy(&s->lock);
    sqlite3_free(s->path);
    sqlite3_free(s);
    return snprintf(err, errlen, "%s: out of memory", path), KT__C_NOMEM;
  }
  int st = open_user(s, o->readonly, o->must_write, err, errlen);
  if (st) {
    kt__store_close(s);
    return st;
  }
  if (s->sys_path) open_system(s);
  *out = s;
  return KT__C_OK;
}

void kt__store_close(kt_store *s) {
  if (!s) return;
  kt__store_forget_leases(s);
  for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->st[i]);
  sqlite3_finalize(s->sys_get);
  sqlite3_close(s->db);
  sqlite3_close(s->sys);
  pthread_mutex_destroy(&s->lock);
  sqlite3_free(s->path);
  sqlite3_free(s->file.real);
  sqlite3_free(s->sys_file.real);
  sqlite3_free(s->sys_path);
  sqlite3_free(s);
}

const char *kt__store_path(const kt_store *s) { return s ? s->path : ""; }

/* Whether path names f or a file SQLite keeps beside it. */
static int names_file(const kt__fileid *f, const char *path) {
  static const char *const tails[] = {"", "-wal", "-shm", "-journal"};
  struct stat p, c;
  char dir[PATH_MAX], real[PATH_MAX], name[2 * PATH_MAX], side[PATH_MAX + 16];
  if (!f->real) return 0;
  int exists = !stat(path, &p);
  if (exists && p.st_dev == f->dev && p.st_ino == f->ino) return 1;
  /* A side file by its name too: one SQLite has not made yet is still
  ** SQLite's to make, and to read back as its own. */
  dir_of(path, dir, sizeof dir);
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  int named = realpath(dir, real) != NULL;
  if (named) snprintf(name, sizeof name, "%s/%s", strcmp(real, "/") ? real : "", base);
  for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
    snprintf(side, sizeof side, "%s%s", f->real, tails[i]);
    if ((named && !strcmp(name, side)) || (exists && !stat(side, &c) && c.st_dev == p.st_dev && c.st_ino == p.st_ino))
      return 1;
  }
  return 0;
}

int kt__store_is_own_file(const kt_store *s, const char *path) {
  return s && (names_file(&s->file, path) || names_file(&s->sys_file, path));
}

int kt__store_readonly(const kt_store *s) { return s ? s->readonly || atomic_load(&s->gone) : 1; }
int kt__store_binaries_trusted(const kt_store *s) { return s && s->trusted; }
