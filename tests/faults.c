#include "faults.h"

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* SQLite's allocator over malloc, with a header holding the size (xSize). */
#define HDR 16

static void *s_malloc(int n) {
  if (kt__alloc_should_fail()) return NULL;
  size_t *p = malloc((size_t)n + HDR);
  if (!p) return NULL;
  *p = (size_t)n;
  return (char *)p + HDR;
}

static void s_free(void *p) {
  if (p) free((char *)p - HDR);
}

static void *s_realloc(void *p, int n) {
  if (kt__alloc_should_fail()) return NULL;
  size_t *q = realloc(p ? (char *)p - HDR : NULL, (size_t)n + HDR);
  if (!q) return NULL;
  *q = (size_t)n;
  return (char *)q + HDR;
}

static int s_size(void *p) { return p ? (int)*(size_t *)((char *)p - HDR) : 0; }
static int s_roundup(int n) { return (n + 7) & ~7; }
static int s_init(void *u) { return (void)u, SQLITE_OK; }
static void s_shutdown(void *u) { (void)u; }

static void *j_malloc(size_t n) { return kt__alloc_should_fail() ? NULL : malloc(n); }

/* The fault VFS: each file wraps the default VFS's file. */
typedef struct ffile {
  sqlite3_file base;
  sqlite3_file *real;
} ffile;

static sqlite3_vfs *real_vfs;
static atomic_long ops, fail_at;

/* Counts one operation; nonzero when it is the one that must fail. */
static int failing(void) {
  long n = atomic_fetch_add(&ops, 1) + 1;
  return atomic_load(&fail_at) == n;
}

long t_io_fail_at(long n) {
  long c = atomic_exchange(&ops, 0);
  atomic_store(&fail_at, n);
  return c;
}

#define REAL(f) (((ffile *)(f))->real)

static int f_close(sqlite3_file *f) {
  int rc = REAL(f)->pMethods->xClose(REAL(f));
  sqlite3_free(REAL(f));
  return rc;
}
static int f_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o) {
  return failing() ? SQLITE_IOERR_READ : REAL(f)->pMethods->xRead(REAL(f), b, n, o);
}
static int f_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) {
  return failing() ? SQLITE_IOERR_WRITE : REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 s) { return REAL(f)->pMethods->xTruncate(REAL(f), s); }
/* The real sync is skipped: a killed process loses nothing the kernel
** holds already (only power loss would), and the sweeps sync thousands of
** times. */
static int f_sync(sqlite3_file *f, int fl) {
  (void)f, (void)fl;
  return failing() ? SQLITE_IOERR_FSYNC : SQLITE_OK;
}
static int f_size(sqlite3_file *f, sqlite3_int64 *s) { return REAL(f)->pMethods->xFileSize(REAL(f), s); }
static int f_lock(sqlite3_file *f, int l) { return failing() ? SQLITE_IOERR_LOCK : REAL(f)->pMethods->xLock(REAL(f), l); }
static int f_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int f_check(sqlite3_file *f, int *r) { return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r); }
static int f_fcntl(sqlite3_file *f, int op, void *a) { return REAL(f)->pMethods->xFileControl(REAL(f), op, a); }
static int f_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int f_dev(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int f_shmmap(sqlite3_file *f, int pg, int sz, int ext, void volatile **p) {
  return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, p);
}
static int f_shmlock(sqlite3_file *f, int off, int n, int fl) {
  return failing() ? SQLITE_IOERR_SHMLOCK : REAL(f)->pMethods->xShmLock(REAL(f), off, n, fl);
}
static void f_barrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int f_shmunmap(sqlite3_file *f, int del) { return REAL(f)->pMethods->xShmUnmap(REAL(f), del); }
static int f_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **p) {
  return REAL(f)->pMethods->xFetch(REAL(f), o, n, p);
}
static int f_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p) { return REAL(f)->pMethods->xUnfetch(REAL(f), o, p); }

static const sqlite3_io_methods methods = {3,        f_close,  f_read,   f_write,  f_truncate, f_sync,
                                           f_size,   f_lock,   f_unlock, f_check,  f_fcntl,    f_sector,
                                           f_dev,    f_shmmap, f_shmlock, f_barrier, f_shmunmap, f_fetch,
                                           f_unfetch};

static int v_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags, int *out) {
  (void)v;
  ffile *ff = (ffile *)f;
  ff->base.pMethods = NULL;
  ff->real = sqlite3_malloc(real_vfs->szOsFile);
  if (!ff->real) return SQLITE_NOMEM;
  memset(ff->real, 0, (size_t)real_vfs->szOsFile);
  int rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out);
  if (rc != SQLITE_OK || !ff->real->pMethods) {
    if (ff->real->pMethods) ff->real->pMethods->xClose(ff->real);
    sqlite3_free(ff->real);
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  ff->base.pMethods = &methods;
  return SQLITE_OK;
}

static int v_delete(sqlite3_vfs *v, const char *n, int s) { return (void)v, real_vfs->xDelete(real_vfs, n, s); }
static int v_access(sqlite3_vfs *v, const char *n, int f, int *r) { return (void)v, real_vfs->xAccess(real_vfs, n, f, r); }
static int v_full(sqlite3_vfs *v, const char *n, int k, char *o) {
  return (void)v, real_vfs->xFullPathname(real_vfs, n, k, o);
}
static void *v_dlopen(sqlite3_vfs *v, const char *f) { return (void)v, real_vfs->xDlOpen(real_vfs, f); }
static void v_dlerror(sqlite3_vfs *v, int n, char *m) { (void)v, real_vfs->xDlError(real_vfs, n, m); }
static void (*v_dlsym(sqlite3_vfs *v, void *h, const char *s))(void) { return (void)v, real_vfs->xDlSym(real_vfs, h, s); }
static void v_dlclose(sqlite3_vfs *v, void *h) { (void)v, real_vfs->xDlClose(real_vfs, h); }
static int v_random(sqlite3_vfs *v, int n, char *o) { return (void)v, real_vfs->xRandomness(real_vfs, n, o); }
static int v_sleep(sqlite3_vfs *v, int us) { return (void)v, real_vfs->xSleep(real_vfs, us); }
static int v_time(sqlite3_vfs *v, double *t) { return (void)v, real_vfs->xCurrentTime(real_vfs, t); }
static int v_lasterr(sqlite3_vfs *v, int n, char *o) { return (void)v, real_vfs->xGetLastError(real_vfs, n, o); }
static int v_time64(sqlite3_vfs *v, sqlite3_int64 *t) { return (void)v, real_vfs->xCurrentTimeInt64(real_vfs, t); }

static sqlite3_vfs fault_vfs = {2,         0,        0,         NULL,      "ktune-faults", NULL,     v_open,
                                v_delete,  v_access, v_full,    v_dlopen,  v_dlerror,      v_dlsym,  v_dlclose,
                                v_random,  v_sleep,  v_time,    v_lasterr, v_time64,       NULL,     NULL,
                                NULL};

void t_faults_install(void) {
  static const sqlite3_mem_methods mem = {s_malloc, s_free, s_realloc, s_size, s_roundup, s_init, s_shutdown, NULL};
  sqlite3_config(SQLITE_CONFIG_MALLOC, &mem);
  cJSON_Hooks hooks = {j_malloc, free};
  cJSON_InitHooks(&hooks);
  real_vfs = sqlite3_vfs_find(NULL);
  if (!real_vfs) return;
  fault_vfs.szOsFile = (int)sizeof(ffile);
  fault_vfs.mxPathname = real_vfs->mxPathname;
  sqlite3_vfs_register(&fault_vfs, 1);
}
