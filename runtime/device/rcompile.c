/* NVRTC in helper processes: the wire format, the helpers this process
** started, and the helper's own loop (rcompile.h says why). */
#include "device/rcompile.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/pool.h"
#include "device/nvrtc.h"

extern char **environ;

/* Message tags ("KTH1", "KTR1", "KTS1" read as little-endian words). */
enum { HELLO = 0x3148544b, REQ = 0x3152544b, RSP = 0x3153544b };
enum { MAX_HELPERS = 64, MAX_LIST = 256, IDLE_MS = 5000, HELLO_S = 30 };
#define MAX_STR ((uint32_t)64 << 20)
#define MAX_CUBIN ((uint64_t)1 << 30)

/* A message is built in a buffer and sent at once. */
typedef struct buf {
  char *p;
  size_t n, cap;
  int nomem;
} buf;

static void put(buf *b, const void *d, size_t n) {
  if (b->nomem || !n) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n) cap *= 2;
    char *p = kt__realloc(b->p, cap);
    if (!p) {
      b->nomem = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}

static void put_u32(buf *b, uint32_t v) { put(b, &v, sizeof v); }

static void put_str(buf *b, const char *s) {
  size_t n = s ? strlen(s) : 0;
  put_u32(b, (uint32_t)n);
  put(b, s, n);
}

static int send_all(int fd, const void *p, size_t n) {
  for (const char *c = p; n;) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL); /* a closed peer is an error, never SIGPIPE */
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void *p, size_t n) {
  for (char *c = p; n;) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

static int read_u32(int fd, uint32_t *v) { return read_all(fd, v, sizeof *v); }

/* A string of at most MAX_STR bytes, NUL-terminated, in *out (kt__free);
** -2 when it cannot be allocated. */
static int read_str(int fd, char **out) {
  uint32_t n;
  *out = NULL;
  if (read_u32(fd, &n) || n > MAX_STR) return -1;
  if (!(*out = kt__malloc((size_t)n + 1))) return -2;
  (*out)[n] = 0;
  return read_all(fd, *out, n);
}

/* ---- the helpers of this process ---- */

typedef struct helper {
  pid_t pid;
  int fd; /* -1: a free slot */
  int busy;
} helper;

static struct {
  pthread_mutex_t mu;
  helper h[MAX_HELPERS];
  int state;   /* 0: not looked at yet, 1: helpers, -1: this process */
  int idle_ms;
  pid_t owner; /* a forked child starts helpers of its own */
  unsigned spawned;
  char path[PATH_MAX], why[PATH_MAX + 100];
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* A regular file this process may run (a directory passes access(X_OK)). */
static int executable(const char *path) {
  struct stat sb;
  return !stat(path, &sb) && S_ISREG(sb.st_mode) && !access(path, X_OK);
}

/* The helper: $KTUNE_NVRTC_HELPER ("off" for none), else ktune-nvrtc
** beside the file holding this code (libktune.so, or the program it is
** linked into), else in a ktune/ folder there (make install). 0 found; -1
** none; -2 the variable names one that cannot be run (a mistake to say). */
static int locate(void) {
  const char *e = getenv("KTUNE_NVRTC_HELPER");
  if (e && (!*e || !strcmp(e, "off") || !strcmp(e, "0")))
    return snprintf(pool.why, sizeof pool.why, "KTUNE_NVRTC_HELPER=%s", e), -1;
  if (e) {
    if (strlen(e) >= sizeof pool.path)
      return snprintf(pool.why, sizeof pool.why, "KTUNE_NVRTC_HELPER is longer than %zu bytes", sizeof pool.path - 1),
             -2;
    snprintf(pool.path, sizeof pool.path, "%s", e);
    if (executable(pool.path)) return 0;
    return snprintf(pool.why, sizeof pool.why, "KTUNE_NVRTC_HELPER=%s is not an executable file", e), -2;
  }
  char self[PATH_MAX];
  Dl_info info;
  if (dladdr(&pool, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
    snprintf(self, sizeof self, "%s", info.dli_fname);
  } else {
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) return snprintf(pool.why, sizeof pool.why, "cannot tell where libktune is"), -1;
    self[k] = 0;
  }
  *strrchr(self, '/') = 0;
  const char *tails[] = {"ktune-nvrtc", "ktune/ktune-nvrtc"};
  for (size_t i = 0; i < 2; i++) {
    int w = snprintf(pool.path, sizeof pool.path, "%s/%s", self, tails[i]);
    if (w > 0 && (size_t)w < sizeof pool.path && executable(pool.path)) return 0;
  }
  return snprintf(pool.why, sizeof pool.why, "no ktune-nvrtc in %s", self), -1;
}

/* Wait for a helper whose socket is closed (it exits on EOF); its wait
** status, or -1 when something else reaped it. */
static int reap(helper *h, int kill_it) {
  if (h->fd >= 0) close(h->fd);
  h->fd = -1;
  if (kill_it) kill(h->pid, SIGKILL);
  int status = 0;
  pid_t r;
  while ((r = waitpid(h->pid, &status, 0)) < 0 && errno == EINTR) {
  }
  return r == h->pid ? status : -1;
}

/* The helper's first words: NVRTC loaded, or why not. */
static int hello(helper *h, char *why, size_t wn) {
  struct timeval tv = {.tv_sec = HELLO_S}, none = {0};
  uint32_t tag = 0, st = 1;
  char *msg = NULL;
  setsockopt(h->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int bad = read_u32(h->fd, &tag) || tag != HELLO || read_u32(h->fd, &st) || read_str(h->fd, &msg);
  setsockopt(h->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  if (bad) snprintf(why, wn, "%s did not answer", pool.path);
  else if (st) snprintf(why, wn, "%s: %s", pool.path, msg);
  kt__free(msg);
  return bad || st ? -1 : 0;
}

/* Start a helper in slot h: its end of a socket as descriptor 3, nothing
** else of ours open, standard input and output on /dev/null. */
static int spawn(helper *h, char *why, size_t wn) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
    return snprintf(why, wn, "socketpair: %s", strerror(errno)), -1;
  if (sv[1] == 3) { /* dup2 onto itself would keep close-on-exec */
    int d = fcntl(sv[1], F_DUPFD_CLOEXEC, 4);
    close(sv[1]);
    sv[1] = d;
  }
  char idle[16], nvrtc[PATH_MAX] = "", argv0[PATH_MAX], serve[] = "--serve";
  snprintf(idle, sizeof idle, "%d", pool.idle_ms > 0 ? pool.idle_ms : IDLE_MS);
  snprintf(argv0, sizeof argv0, "%s", pool.path);
  if (kt__nvrtc_file(nvrtc, sizeof nvrtc)) nvrtc[0] = 0; /* the helper looks as we would */
  char *argv[] = {argv0, serve, idle, nvrtc, NULL};
  posix_spawn_file_actions_t fa;
  int rc = sv[1] < 0 ? EMFILE : posix_spawn_file_actions_init(&fa);
  if (!rc) {
    if (!(rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) &&
        !(rc = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0)) &&
        !(rc = posix_spawn_file_actions_adddup2(&fa, sv[1], 3)) &&
        !(rc = posix_spawn_file_actions_addclosefrom_np(&fa, 4)))
      rc = posix_spawn(&h->pid, pool.path, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
  }
  if (sv[1] >= 0) close(sv[1]);
  h->fd = sv[0];
  if (rc) {
    close(sv[0]);
    h->fd = -1;
    return snprintf(why, wn, "cannot start %s: %s", pool.path, strerror(rc)), -1;
  }
  if (hello(h, why, wn)) return reap(h, 1), -1;
  return 0;
}

/* Forget the helpers a forked parent started: their sockets are shared
** with it. */
static void adopt_process(void) {
  for (int i = 0; i < MAX_HELPERS; i++) {
    if (pool.h[i].fd >= 0 && pool.owner) close(pool.h[i].fd);
    pool.h[i] = (helper){.fd = -1};
  }
  pool.owner = getpid();
  pool.state = 0;
}

/* Whether an idle helper has closed its end (its idle time ran out): an
** idle one never writes, so anything to read means end of file. */
static int gone(const helper *h) {
  struct pollfd p = {.fd = h->fd, .events = POLLIN};
  return poll(&p, 1, 0) != 0;
}

/* Under the lock: this process's pool, and whether it has helpers (looked
** for once, and again after kt__rc_reset); log may be NULL. */
static void look(const kt__logger *log) {
  if (pool.owner != getpid()) adopt_process();
  if (pool.state) return;
  int found = locate();
  pool.state = found ? -1 : 1;
  if (pool.state < 0) kt__log(log, found == -2 ? KT_LOG_WARN : KT_LOG_DEBUG, "NVRTC runs in this process: %s", pool.why);
  else kt__log(log, KT_LOG_DEBUG, "NVRTC runs in helper processes (%s)", pool.path);
}

/* An idle helper, or a new one when fewer than one per CPU run; NULL when
** none can be had (all busy, or helpers are off). */
static helper *acquire(const kt__logger *log) {
  pthread_mutex_lock(&pool.mu);
  look(log);
  helper *h = NULL, *free_slot = NULL;
  int most = kt__ncpus() < MAX_HELPERS ? kt__ncpus() : MAX_HELPERS;
  for (int i = 0; i < most && pool.state > 0 && !h; i++) {
    if (!pool.h[i].busy && pool.h[i].fd >= 0) h = &pool.h[i];
    else if (!pool.h[i].busy && !free_slot) free_slot = &pool.h[i];
  }
  if (!h) h = pool.state > 0 ? free_slot : NULL;
  if (h) h->busy = 1;
  pthread_mutex_unlock(&pool.mu);
  if (h && h->fd >= 0 && gone(h)) reap(h, 0);
  if (!h || h->fd >= 0) return h;
  char why[sizeof pool.why];
  int failed = spawn(h, why, sizeof why);
  pthread_mutex_lock(&pool.mu);
  if (!failed) {
    pool.spawned++;
    pthread_mutex_unlock(&pool.mu);
    return h;
  }
  h->busy = 0;
  if (pool.state > 0) {
    pool.state = -1;
    snprintf(pool.why, sizeof pool.why, "%s", why);
    kt__log(log, KT_LOG_WARN, "NVRTC runs in this process from now on: %s", why);
  }
  pthread_mutex_unlock(&pool.mu);
  return NULL;
}

static void release(helper *h) {
  pthread_mutex_lock(&pool.mu);
  h->busy = 0;
  pthread_mutex_unlock(&pool.mu);
}

/* ---- one compile in a helper ---- */

static int send_request(int fd, const char *src, const char *prog, const char *const *exprs, int n,
                        const char *const *opts, int nopts) {
  buf b = {0};
  put_u32(&b, REQ);
  put_u32(&b, (uint32_t)nopts);
  put_u32(&b, (uint32_t)n);
  put_str(&b, prog);
  put_str(&b, src);
  for (int i = 0; i < nopts; i++) put_str(&b, opts[i]);
  for (int i = 0; i < n; i++) put_str(&b, exprs[i]);
  int rc = b.nomem ? -2 : send_all(fd, b.p, b.n);
  kt__free(b.p);
  return rc;
}

/* The answer: 0 with *st the compile's status, -1 when the helper broke
** off (or said something that is not an answer), -2 when this process ran
** out of memory reading it. */
static int read_answer(int fd, int n, kt_status *st, void **cubin, size_t *size, char **lowered, char *err,
                       size_t errlen) {
  uint32_t tag, s, nl;
  uint64_t sz;
  char *msg = NULL;
  int rc;
  if (read_u32(fd, &tag) || tag != RSP || read_u32(fd, &s)) return -1;
  if ((rc = read_str(fd, &msg)) || read_u32(fd, &nl)) return kt__free(msg), rc ? rc : -1;
  snprintf(err, errlen, "%s", msg);
  kt__free(msg);
  if ((s != KT_OK && s != KT_ERR_COMPILE && s != KT_ERR_NOMEM && s != KT_ERR_NO_NVRTC) ||
      nl != (s == KT_OK ? (uint32_t)n : 0))
    return -1;
  for (uint32_t i = 0; i < nl; i++)
    if ((rc = read_str(fd, &lowered[i]))) return rc;
  if (read_all(fd, &sz, sizeof sz) || sz > MAX_CUBIN || (s == KT_OK) != (sz > 0)) return -1;
  if (sz && !(*cubin = kt__malloc((size_t)sz))) return -2;
  if (sz && read_all(fd, *cubin, (size_t)sz)) return -1;
  *size = (size_t)sz;
  *st = (kt_status)s;
  return 0;
}

static void describe_death(int status, char *err, size_t errlen) {
  if (status < 0) snprintf(err, errlen, "NVRTC's helper process ended while compiling (its status was reaped elsewhere)");
  else if (WIFSIGNALED(status))
    snprintf(err, errlen, "NVRTC's helper process died: signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else snprintf(err, errlen, "NVRTC's helper process exited with status %d while compiling", WEXITSTATUS(status));
}

static void drop(void **cubin, char **lowered, int n) {
  kt__free(*cubin);
  *cubin = NULL;
  for (int i = 0; i < n; i++) {
    kt__free(lowered[i]);
    lowered[i] = NULL;
  }
}

/* opts without "--pch" into out (room for nopts): for NVRTC in a process
** that does not own where NVRTC writes its precompiled headers
** (device/pchdir.h). The headers change no output. The count kept. */
static int without_pch(const char *const *opts, int nopts, const char **out) {
  int m = 0;
  for (int i = 0; i < nopts; i++)
    if (strcmp(opts[i], "--pch")) out[m++] = opts[i];
  return m;
}

/* Whether a helper that ended so was ended from outside (a kill, the
** out-of-memory killer, a shutdown) rather than by what it compiled: its
** group is worth a fresh helper. Exit status 0 is a helper that ended on
** its idle time as the request came; -1, a status reaped elsewhere
** (SIGCHLD ignored), which may have been that too. */
static int worth_retry(int status) {
  return status <= 0 || (WIFSIGNALED(status) && (WTERMSIG(status) == SIGKILL || WTERMSIG(status) == SIGTERM));
}

kt_status kt__rc_compile_many(const kt__logger *log, const char *src, const char *prog_name,
                              const char *const *exprs, int n, const char *const *opts, int nopts, void **cubin,
                              size_t *size, char **lowered, int *refused, char *err, size_t errlen) {
  helper *h;
  *cubin = NULL;
  *refused = 0;
  for (int i = 0; i < n; i++) lowered[i] = NULL;
  /* Loaded here too: helpers load this very file, and where this process
  ** has no NVRTC, neither may they. */
  kt_status ld = kt__nvrtc_load(NULL, err, errlen);
  if (ld) return ld;
  for (int attempt = 0; n <= MAX_LIST && nopts <= MAX_LIST && (h = acquire(log)); attempt++) {
    kt_status st = KT_OK;
    int rc = send_request(h->fd, src, prog_name, exprs, n, opts, nopts);
    if (rc == -2) {
      release(h);
      return snprintf(err, errlen, "out of memory"), KT_ERR_NOMEM;
    }
    if (!rc && !(rc = read_answer(h->fd, n, &st, cubin, size, lowered, err, errlen))) {
      release(h);
      *refused = st == KT_ERR_COMPILE;
      return st;
    }
    drop(cubin, lowered, n);
    int status = reap(h, 1); /* half an answer read: it cannot serve again */
    release(h);
    if (rc == -2) return snprintf(err, errlen, "out of memory"), KT_ERR_NOMEM;
    if (worth_retry(status) && attempt < 2) continue;
    describe_death(status, err, errlen);
    return KT_ERR_COMPILE;
  }
  if (nopts > MAX_LIST) return snprintf(err, errlen, "more than %d NVRTC options", MAX_LIST), KT_ERR_INVALID;
  const char *mine[MAX_LIST];
  kt_status st = kt__nvrtc_compile_many(src, prog_name, exprs, n, mine, without_pch(opts, nopts, mine), cubin, size,
                                        lowered, err, errlen);
  *refused = st == KT_ERR_COMPILE;
  return st;
}

void kt__rc_describe(char *out, size_t n) {
  pthread_mutex_lock(&pool.mu);
  look(NULL);
  if (pool.state > 0) snprintf(out, n, "helper processes (%s)", pool.path);
  else snprintf(out, n, "this process (%s)", pool.why);
  pthread_mutex_unlock(&pool.mu);
}

void kt__rc_reset(int idle_ms) {
  pthread_mutex_lock(&pool.mu);
  if (pool.owner != getpid()) adopt_process();
  for (int i = 0; i < MAX_HELPERS; i++) /* a busy one is its thread's until released */
    if (pool.h[i].fd >= 0 && !pool.h[i].busy) reap(&pool.h[i], 0);
  pool.state = 0;
  pool.idle_ms = idle_ms;
  pthread_mutex_unlock(&pool.mu);
}

unsigned kt__rc_started(void) {
  pthread_mutex_lock(&pool.mu);
  unsigned n = pool.spawned;
  pthread_mutex_unlock(&pool.mu);
  return n;
}

/* ---- the helper's side ---- */

static void answer(int fd, kt_status st, const char *msg, char **lowered, int n, const void *cubin, uint64_t size) {
  buf b = {0};
  put_u32(&b, RSP);
  put_u32(&b, (uint32_t)st);
  put_str(&b, st ? msg : "");
  put_u32(&b, st ? 0 : (uint32_t)n);
  for (int i = 0; !st && i < n; i++) put_str(&b, lowered[i]);
  put(&b, &size, sizeof size);
  put(&b, cubin, (size_t)size);
  if (!b.nomem) send_all(fd, b.p, b.n);
  kt__free(b.p);
}

/* One request: its strings in one array (prog, src, options, names). */
static int serve_one(int fd, int pch) {
  uint32_t tag, nopts, n;
  if (read_u32(fd, &tag)) return 1; /* closed: done */
  if (tag != REQ || read_u32(fd, &nopts) || read_u32(fd, &n) || nopts > MAX_LIST || n > MAX_LIST || !n) return -1;
  uint32_t k = 2 + nopts + n;
  char **s = kt__calloc(k, sizeof *s), *lowered[MAX_LIST] = {0}, err[KT_ERRMAX] = "";
  int bad = !s;
  for (uint32_t i = 0; i < k && !bad; i++) bad = read_str(fd, &s[i]);
  if (!bad) {
    void *cubin = NULL;
    size_t size = 0;
    const char *opts[MAX_LIST];
    int m = pch ? (int)nopts : without_pch((const char *const *)s + 2, (int)nopts, opts);
    kt_status st = kt__nvrtc_compile_many(s[1], s[0], (const char *const *)s + 2 + nopts, (int)n,
                                          pch ? (const char *const *)s + 2 : opts, m, &cubin, &size, lowered, err,
                                          sizeof err);
    answer(fd, st, err, lowered, (int)n, cubin, st ? 0 : size);
    drop(&cubin, lowered, (int)n);
  }
  for (uint32_t i = 0; s && i < k; i++) kt__free(s[i]);
  kt__free(s);
  return bad ? -1 : 0;
}

int kt__rc_serve(int fd, const char *nvrtc_file, int idle_ms, int pch) {
  char err[KT_ERRMAX] = "";
  kt_status st = nvrtc_file && *nvrtc_file ? kt__nvrtc_load_file(nvrtc_file, err, sizeof err)
                                           : kt__nvrtc_load(getenv("CUDA_HOME"), err, sizeof err);
  buf b = {0};
  put_u32(&b, HELLO);
  put_u32(&b, (uint32_t)st);
  put_str(&b, st ? err : "");
  int rc = b.nomem || send_all(fd, b.p, b.n) ? 3 : 0;
  kt__free(b.p);
  for (int r = 0; !rc && !st;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int k = poll(&p, 1, idle_ms > 0 ? idle_ms : IDLE_MS);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break; /* idle: the next build starts another */
    if ((r = serve_one(fd, pch)) > 0) break;
    if (r < 0) rc = 3;
  }
  close(fd);
  return st ? 4 : rc;
}
