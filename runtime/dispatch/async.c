/* Async mode's background tuner: one thread per runtime, started on the
** first miss, with a bounded queue of keys. A job holds copies of the
** missing call's inputs, made on the caller's stream at miss time (so the
** caller may reuse its buffers at once), or, past kt_options.
** async_copy_limit or where the key is timed at its tune_at sizes, only
** their placement: the tuner then makes the inputs it times from the
** spec's "init" (at the tune_at sizes, or the call's where it times those). The
** thread tunes on a stream of its own, takes the key's lease so that
** another process does not tune it too, and replaces the stand-in with the
** winner under the kernel's tune lock. Closing the runtime (or the process
** exiting) cancels what is queued and stops the running tuning before its
** next trial; nothing of it is stored. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "cache/store.h"
#include "device/nvrtc.h"
#include "dispatch/handles.h"
#include "tune/tuneat.h"

#define QUEUE_MAX 256
#define LEASE_S 600
#define LEASE_RETRY_MS 250.0
#define FOLLOW_POLL_MS 50

typedef struct job {
  kt_kernel *k;
  const kt__tuned *entry;       /* the stand-in's table entry */
  kt__call c;
  char json[KT_KEY_JSON_MAX];
  kt_arg args[KT_MAX_PARAMS];   /* the call on the copies (or as placed) */
  kt__dptr copy[KT_MAX_PARAMS]; /* what to free */
  kt__job_role role;
  int synthetic;                /* no copies: the tuner makes its inputs */
  void *ready;                  /* after the copies, on the caller's stream */
  double since, not_before;     /* ms: queued; another process's lease */
  struct job *next;
} job;

typedef struct kt__async {
  kt_runtime *rt;
  pthread_mutex_t lock;
  pthread_cond_t work, idle;
  pthread_t thread;
  int started, stop, pending;   /* pending: queued or running */
  int ended;                    /* its thread joined (stop_thread) */
  pid_t pid;                    /* the process its thread runs in */
  job *head, *tail;
} kt__async;

/* A child forked after the tuner started has the tuner's memory but not its
** thread, and its locks as the fork found them: nothing in the child may
** wait for that thread or take those locks. */
static int here(const kt__async *a) { return a->pid == getpid(); }

static void job_free(job *j) {
  if (!j) return;
  for (int i = 0; i < KT_MAX_PARAMS; i++) kt__dev_free(j->copy[i]);
  kt__dev_event_destroy(j->ready);
  kt__free(j);
}

/* Copies of the call's byte ranges on the caller's stream: identical
** ranges share one (an in-place call stays in place), outputs that read
** nothing are allocated but not copied. -1 past the limit or on failure
** (then nothing is kept). */
static int copy_inputs(job *j, kt_stream stream, const kt_arg *args, size_t limit) {
  kt__range r[KT_MAX_PARAMS];
  int n;
  char err[KT_ERRMAX];
  size_t total = 0;
  if (kt__call_ranges(&j->k->p, &j->c, args, r, &n)) return -1;
  for (int i = 0; i < n; i++) total += r[i].end - r[i].start + 256;
  if (total > limit) return -1;
  int st = 0;
  for (int i = 0; i < n && !st; i++) {
    int same = -1;
    for (int q = 0; q < i && same < 0; q++)
      if (r[q].start == r[i].start && r[q].end == r[i].end) same = r[q].param;
    kt_arg *a = &j->args[r[i].param];
    if (same >= 0) {
      a->v.ptr = j->args[same].v.ptr;
      continue;
    }
    size_t bytes = r[i].end - r[i].start, off = r[i].start % 256;
    st = kt__dev_malloc(&j->copy[r[i].param], bytes + off + 1, err, sizeof err);
    a->v.ptr = j->copy[r[i].param] + off;
    if (!st && KT__READS(j->k->p.spec->params[r[i].param].access) && bytes)
      st = kt__dev_dtod_async(a->v.ptr, r[i].start, bytes, stream, err, sizeof err);
  }
  if (!st) st = kt__dev_event_create(&j->ready, err, sizeof err);
  if (!st) st = kt__dev_event_record(j->ready, stream, err, sizeof err);
  return st ? -1 : 0;
}

/* The job for a missed key: its call, and its inputs copied or placed. */
static job *job_new(kt_kernel *k, const kt__call *c, const char *json, const kt__tuned *entry, kt_stream stream,
                    const kt_arg *args, kt__job_role role) {
  job *j = kt__calloc(1, sizeof *j);
  if (!j) return NULL;
  j->k = k;
  j->entry = entry;
  j->c = *c;
  j->role = role;
  snprintf(j->json, sizeof j->json, "%s", json);
  memcpy(j->args, args, (size_t)k->p.spec->nparams * sizeof *args);
  j->since = kt__now_ms();
  if (role == KT__JOB_FOLLOW) return j;
  /* A key timed at its tune_at sizes runs on inputs the tuner makes: the
  ** call's are never read, so none are copied. */
  int made = kt__tuneat_moves(&k->p, c, args, NULL, 0);
  if (made)
    kt__log(&k->rt->env.log, KT_LOG_INFO, "%s %s: the call's inputs are not copied: the tuning times its tune_at sizes",
            k->p.spec->name, json);
  if (made) {
    j->synthetic = 1;
    return j;
  }
  /* Past the copy limit, or a copy failed: the tuner makes inputs of its
  ** own instead (tuner.h: own_inputs), and the call's pointers are kept
  ** only for their alignment and aliasing. */
  if (copy_inputs(j, stream, args, k->rt->async_copy_limit)) {
    for (int i = 0; i < KT_MAX_PARAMS; i++) kt__dev_free(j->copy[i]);
    kt__dev_event_destroy(j->ready);
    memset(j->copy, 0, sizeof j->copy);
    j->ready = NULL;
    memcpy(j->args, args, (size_t)k->p.spec->nparams * sizeof *args);
    j->synthetic = 1;
  }
  return j;
}

/* The key's lease, unless another process holds it: 1 to tune now, 0 to
** look again later (its result may land in the cache meanwhile). After
** LEASE_S the lease is not waited for any longer. */
static int take_lease(job *j, int *held, char *host, size_t hostlen) {
  const kt__env *env = &j->k->rt->env;
  const kt__prog *p = &j->k->p;
  char err[KT_ERRMAX];
  int taken = 0;
  long holder = 0;
  *held = 0;
  if (!env->store || kt__store_readonly(env->store)) return 1;
  if (gethostname(host, hostlen)) snprintf(host, hostlen, "localhost");
  if (kt__store_lease(env->store, p->spec->name, p->spec_hash, env->fingerprint, j->json, host, (long)getpid(),
                      LEASE_S, &taken, &holder, err, sizeof err)) {
    kt__log(&env->log, KT_LOG_WARN, "%s", err);
    return 1;
  }
  *held = taken;
  return taken || kt__now_ms() - j->since > LEASE_S * 1e3;
}

/* Launches of the key use cfg from now on. */
static void install(job *j, const int64_t *cfg) {
  kt_kernel *k = j->k;
  pthread_mutex_lock(&k->tune_lock);
  kt_status st = kt__tuned_replace(k, j->entry, &j->c, cfg);
  pthread_mutex_unlock(&k->tune_lock);
  if (st) kt__log(&k->rt->env.log, KT_LOG_WARN, "%s", kt__errmsg(k->rt->env.id));
}

/* A config another process stored for the key since the miss. */
static int stored(job *j, int64_t *cfg) { return kt__cached_config(j->k, &j->c, j->json, cfg); }

/* Tune the job's key on stream ws; *best is the winner (or the default,
** when the tuning says to use it). */
static kt_status tune(job *j, kt_stream ws, int64_t *best) {
  kt_kernel *k = j->k;
  kt_runtime *rt = k->rt;
  int64_t fallback[KT_MAX_CFIELDS];
  kt__call probe = j->c;
  char err[KT_ERRMAX];
  kt__tuneopts o = rt->tune;
  o.own_inputs = j->synthetic;
  kt_status st = kt__call_fallback(&k->p, &probe, fallback);
  if (!st && j->ready && (st = kt__dev_wait_event(ws, j->ready, err, sizeof err)))
    st = kt__err(rt->env.id, st, "%s: %s", k->p.spec->name, err);
  kt__tuner *t = NULL;
  double t0 = kt__now_ms();
  if (!st) st = kt__tuner_new(&k->p, &o, &j->c, j->args, j->json, &t);
  if (!st) st = kt__tuner_run(t, ws, fallback, best);
  atomic_fetch_add_explicit(&rt->env.n.tunings, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&rt->env.n.tune_us, (uint_fast64_t)((kt__now_ms() - t0) * 1000), memory_order_relaxed);
  if (st == KT_ERR_NO_CONFIG) memcpy(best, fallback, sizeof fallback);
  kt__tuner_free(t);
  return st == KT_ERR_NO_CONFIG ? KT_OK : st;
}

/* A job of another rank's key: its owner's config replaces the stand-in
** once it comes; past the coordinator's timeout the stand-in stays. */
static int follow(job *j) {
  kt_runtime *rt = j->k->rt;
  int64_t cfg[KT_MAX_CFIELDS];
  char why[KT_ERRMAX];
  int rc = kt__coord_fetch(j->k, &j->c, j->json, FOLLOW_POLL_MS, cfg, why, sizeof why);
  if (rc == 1 && kt__now_ms() - j->since < rt->coord.timeout_s * 1e3 && !atomic_load(&rt->closing)) return 1;
  if (!rc) {
    install(j, cfg);
    atomic_fetch_add_explicit(&rt->env.n.followed, 1, memory_order_relaxed);
  } else {
    kt__log(&rt->env.log, KT_LOG_WARN, "async: %s %s: %s; its stand-in stays", j->k->p.spec->name, j->json, why);
    atomic_fetch_add_explicit(&rt->env.n.coord_failed, 1, memory_order_relaxed);
  }
  atomic_fetch_add_explicit(rc ? &rt->env.n.async_failed : &rt->env.n.async_done, 1, memory_order_relaxed);
  return 0;
}

/* The key is settled: launches use cfg from now on, and the owner of a
** key tells the other ranks (or, where another runtime of its rank
** published the key first, launches that one's config). */
static void settled(job *j, const int64_t *cfg) {
  int64_t took[KT_MAX_CFIELDS];
  int follows = j->role == KT__JOB_TUNE_PUBLISH && kt__coord_publish(j->k, &j->c, j->json, cfg, NULL, took);
  install(j, follows ? took : cfg);
  atomic_fetch_add_explicit(&j->k->rt->env.n.async_done, 1, memory_order_relaxed);
}

/* One job: 0 when done (tuned, found, or given up), 1 to look again later. */
static int run_job(job *j, kt_stream ws) {
  kt_runtime *rt = j->k->rt;
  int64_t cfg[KT_MAX_CFIELDS];
  char host[256] = "", err[KT_ERRMAX];
  int held = 0;
  if (j->role == KT__JOB_FOLLOW) return follow(j);
  if (stored(j, cfg)) {
    settled(j, cfg);
    return 0;
  }
  if (!take_lease(j, &held, host, sizeof host)) return 1;
  kt_status st = tune(j, ws, cfg);
  if (held && kt__store_lease_release(rt->env.store, j->k->p.spec->name, j->k->p.spec_hash, rt->env.fingerprint,
                                      j->json, host, (long)getpid(), err, sizeof err))
    kt__log(&rt->env.log, KT_LOG_WARN, "%s", err);
  if (!st) {
    settled(j, cfg);
    return 0;
  }
  if (st != KT_ERR_CANCELLED) {
    kt__log(&rt->env.log, st == KT_ERR_DEVICE_FAULT ? KT_LOG_ERROR : KT_LOG_WARN,
            "async: %s %s: not tuned (%s); its stand-in stays", j->k->p.spec->name, j->json, kt__errmsg(rt->env.id));
    /* The others would wait for the owner until their timeout. */
    if (j->role == KT__JOB_TUNE_PUBLISH) kt__coord_publish(j->k, &j->c, j->json, NULL, kt__errmsg(rt->env.id), cfg);
  }
  atomic_fetch_add_explicit(&rt->env.n.async_failed, 1, memory_order_relaxed);
  return 0;
}

/* The next job whose time has come, or NULL (with *wait_ms until one's
** has, or -1 when the queue is empty). Under the lock. */
static job *next_job(kt__async *a, double *wait_ms) {
  double now = kt__now_ms();
  *wait_ms = -1;
  for (job **pp = &a->head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
    job *j = *pp;
    if (j->not_before > now) {
      if (*wait_ms < 0 || j->not_before - now < *wait_ms) *wait_ms = j->not_before - now;
      continue;
    }
    *pp = j->next;
    if (a->tail == j) a->tail = prev;
    j->next = NULL;
    return j;
  }
  return NULL;
}

static void push(kt__async *a, job *j) {
  if (a->tail) a->tail->next = j;
  else a->head = j;
  a->tail = j;
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *m, double ms) {
  struct timespec ts;
  kt__realtime_in(ms, &ts);
  pthread_cond_timedwait(cv, m, &ts);
}

/* Jobs left when the tuner stops (closing, or the context lost). */
static void drop_all(kt__async *a) {
  for (job *j = a->head, *next; j; j = next) {
    next = j->next;
    job_free(j);
    a->pending--;
  }
  a->head = a->tail = NULL;
  pthread_cond_broadcast(&a->idle);
}

static void *worker(void *arg) {
  kt__async *a = arg;
  kt_runtime *rt = a->rt;
  char err[KT_ERRMAX];
  kt_stream ws = NULL;
  /* The thread's CUDA calls must not fail because the application captures
  ** a graph in another thread; it works on a stream of its own. */
  if (kt__dev_use(rt->env.ctx, err, sizeof err) || kt__dev_capture_relaxed(err, sizeof err) ||
      kt__dev_stream_create(&ws, err, sizeof err)) {
    kt__log(&rt->env.log, KT_LOG_ERROR, "async: the background tuner cannot start: %s", err);
    pthread_mutex_lock(&a->lock);
    a->stop = 1;
  } else {
    pthread_mutex_lock(&a->lock);
  }
  while (!a->stop) {
    double wait_ms;
    job *j = next_job(a, &wait_ms);
    if (!j) {
      if (wait_ms < 0) pthread_cond_wait(&a->work, &a->lock);
      else timed_wait(&a->work, &a->lock, wait_ms);
      continue;
    }
    pthread_mutex_unlock(&a->lock);
    int later = run_job(j, ws);
    pthread_mutex_lock(&a->lock);
    if (later && !a->stop) {
      j->not_before = kt__now_ms() + LEASE_RETRY_MS;
      push(a, j);
      continue;
    }
    job_free(j);
    if (--a->pending == 0) pthread_cond_broadcast(&a->idle);
  }
  drop_all(a);
  pthread_mutex_unlock(&a->lock);
  kt__dev_stream_destroy(ws);
  return NULL;
}

/* Background tuners alive in the process, stopped at exit: a thread still
** inside a CUDA or NVRTC call while the driver or NVRTC tears down would
** crash the exit. NVRTC registers its teardown at its first compile in the
** process, so the hook is registered after one (device/nvrtc.h): it then
** runs first. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static kt__async *live[64];
static int nlive, exit_hooked, fork_hooked;

/* live_lock held across a fork, so that the child's copy is consistent;
** the child drops the parent's tuners, whose threads it does not have. */
static void fork_prepare(void) { pthread_mutex_lock(&live_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&live_lock); }
static void fork_child(void) {
  nlive = 0;
  pthread_mutex_unlock(&live_lock);
}

static void stop_thread(kt__async *a) {
  atomic_store(&a->rt->closing, 1);
  pthread_mutex_lock(&a->lock);
  a->stop = 1;
  pthread_cond_broadcast(&a->work);
  pthread_mutex_unlock(&a->lock);
  pthread_join(a->thread, NULL);
  pthread_mutex_lock(&a->lock);
  a->ended = 1;
  pthread_cond_broadcast(&a->idle);
  pthread_mutex_unlock(&a->lock);
}

static void stop_all_at_exit(void) {
  pthread_mutex_lock(&live_lock);
  for (int i = 0; i < nlive; i++) stop_thread(live[i]);
  nlive = 0;
  pthread_mutex_unlock(&live_lock);
}

/* The runtime's tuner, made and started on first use (under rt->lock). */
static kt__async *tuner_of(kt_runtime *rt) {
  if (rt->async) return rt->async;
  kt__async *a = kt__calloc(1, sizeof *a);
  if (!a) return NULL;
  a->rt = rt;
  a->pid = getpid();
  int ok = !pthread_mutex_init(&a->lock, NULL);
  ok = ok && !pthread_cond_init(&a->work, NULL) && !pthread_cond_init(&a->idle, NULL);
  pthread_mutex_lock(&live_lock);
  ok = ok && nlive < (int)(sizeof live / sizeof live[0]) && !pthread_create(&a->thread, NULL, worker, a);
  if (ok) {
    live[nlive++] = a;
    if (!exit_hooked) exit_hooked = !atexit(stop_all_at_exit);
    if (!fork_hooked) fork_hooked = !pthread_atfork(fork_prepare, fork_parent, fork_child);
  }
  pthread_mutex_unlock(&live_lock);
  if (!ok) {
    kt__free(a);
    return NULL;
  }
  a->started = 1;
  return rt->async = a;
}

kt_status kt__async_submit(kt_kernel *k, const kt__call *c, const char *json, const kt__tuned *entry, kt_stream stream,
                           const kt_arg *args, kt__job_role role) {
  kt_runtime *rt = k->rt;
  char err[KT_ERRMAX];
  if (kt__nvrtc_warm(rt->env.arch, err, sizeof err)) /* once a process; before the exit hook */
    kt__log(&rt->env.log, KT_LOG_DEBUG, "async: NVRTC does not compile in this process: %s", err);
  pthread_mutex_lock(&rt->lock);
  int stopped = atomic_load(&rt->closing);
  kt__async *a = stopped ? NULL : tuner_of(rt);
  pthread_mutex_unlock(&rt->lock);
  if (stopped)
    return kt__err(rt->env.id, KT_ERR_CANCELLED, "%s %s: background tuning was stopped (kt_runtime_stop_tuning)",
                   k->p.spec->name, json);
  if (!a) return kt__err(rt->env.id, KT_ERR_NOMEM, "%s %s: cannot start the background tuner", k->p.spec->name, json);
  if (!here(a))
    return kt__err(rt->env.id, KT_ERR_CANCELLED, "%s %s: the background tuner runs in pid %ld, which this process was forked from",
                   k->p.spec->name, json, (long)a->pid);
  pthread_mutex_lock(&a->lock);
  int full = a->pending >= QUEUE_MAX, queued = 0;
  for (job *q = a->head; q && !queued; q = q->next) queued = q->entry == entry;
  pthread_mutex_unlock(&a->lock);
  if (queued) return KT_OK;
  if (full)
    return kt__err(rt->env.id, KT_ERR_NOMEM, "%s %s: %d keys are waiting for the background tuner already",
                   k->p.spec->name, json, QUEUE_MAX);
  job *j = job_new(k, c, json, entry, stream, args, role);
  if (!j) return kt__err(rt->env.id, KT_ERR_NOMEM, "%s %s: out of memory", k->p.spec->name, json);
  pthread_mutex_lock(&a->lock);
  if (a->stop) {
    pthread_mutex_unlock(&a->lock);
    job_free(j);
    return kt__err(rt->env.id, KT_ERR_CANCELLED, "%s %s: the background tuner has stopped", k->p.spec->name, json);
  }
  push(a, j);
  a->pending++;
  pthread_cond_signal(&a->work);
  pthread_mutex_unlock(&a->lock);
  atomic_fetch_add_explicit(&rt->env.n.async_queued, 1, memory_order_relaxed);
  return KT_OK;
}

uint64_t kt__async_pending(kt_runtime *rt) {
  pthread_mutex_lock(&rt->lock);
  kt__async *a = rt->async;
  pthread_mutex_unlock(&rt->lock);
  if (!a || !here(a)) return 0;
  pthread_mutex_lock(&a->lock);
  uint64_t n = (uint64_t)a->pending;
  pthread_mutex_unlock(&a->lock);
  return n;
}

kt_status kt_runtime_wait_tuning(kt_runtime *rt, double timeout_s) {
  if (!rt || timeout_s != timeout_s)
    return kt__misuse(rt, "kt_runtime_wait_tuning", !rt ? "rt is NULL" : "timeout_s is NaN");
  /* The tuner's own callbacks would wait for themselves. */
  kt_status st = kt__reentry(rt, "kt_runtime_wait_tuning", KT__CB_ROWS);
  if (st) return st;
  pthread_mutex_lock(&rt->lock);
  kt__async *a = rt->async;
  pthread_mutex_unlock(&rt->lock);
  if (!a || !here(a)) return KT_OK;
  double deadline = kt__now_ms() + timeout_s * 1e3;
  pthread_mutex_lock(&a->lock);
  while (a->pending > 0 && (timeout_s < 0 || kt__now_ms() < deadline)) {
    if (timeout_s < 0) pthread_cond_wait(&a->idle, &a->lock);
    else timed_wait(&a->idle, &a->lock, deadline - kt__now_ms());
  }
  int left = a->pending;
  pthread_mutex_unlock(&a->lock);
  if (!left) return KT_OK;
  return kt__err(rt->env.id, KT_ERR_TIMEOUT, "kt_runtime_wait_tuning: %d keys still queued or tuning after %g s",
                 left, timeout_s);
}

/* Stop a's thread, or, where the exit hook or another caller is stopping
** it, wait until they have: either way its thread has ended on return. */
static void stop_once(kt__async *a) {
  if (!here(a)) return;
  pthread_mutex_lock(&live_lock);
  int found = 0;
  for (int i = 0; i < nlive; i++)
    if (live[i] == a) live[i] = live[--nlive], found = 1;
  pthread_mutex_unlock(&live_lock);
  if (found) {
    stop_thread(a);
    return;
  }
  pthread_mutex_lock(&a->lock);
  while (!a->ended) pthread_cond_wait(&a->idle, &a->lock);
  pthread_mutex_unlock(&a->lock);
}

kt_status kt_runtime_stop_tuning(kt_runtime *rt) {
  if (!rt) return kt__misuse(NULL, "kt_runtime_stop_tuning", "rt is NULL");
  kt_status st = kt__reentry(rt, "kt_runtime_stop_tuning", KT__CB_ROWS);
  if (st) return st;
  /* Set before rt->lock is taken: a submitter that takes the lock later
  ** starts no tuner; one that started it before, this call finds. */
  atomic_store(&rt->closing, 1);
  pthread_mutex_lock(&rt->lock);
  kt__async *a = rt->async;
  pthread_mutex_unlock(&rt->lock);
  /* a stays allocated until kt_runtime_close: a thread that read it under
  ** rt->lock may still queue on it, and finds it stopped. */
  if (a) stop_once(a);
  return KT_OK;
}

void kt__async_stop(kt_runtime *rt) {
  kt__async *a = rt->async;
  if (!a) return;
  if (here(a)) {
    stop_once(a);
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->idle);
    pthread_mutex_destroy(&a->lock);
  }
  kt__free(a); /* a forked child's copy: its jobs' copies are the parent's */
  rt->async = NULL;
}
