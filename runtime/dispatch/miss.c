/* The miss policy: a key the tuned table does not have. The cache is asked
** first; then, when the mode allows and the stream is not capturing, the
** key is tuned (once across threads, and across processes through the
** cache's leases). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "cache/store.h"
#include "device/nvrtc.h"
#include "dispatch/report.h"
#include "spec/key.h"

/* A lease outlives any reasonable tuning; a longer one may be taken over,
** which costs a second tuning, never a wrong row (the faster one wins). */
#define LEASE_S 600
#define LEASE_POLL_US 50000

/* One miss being decided. */
typedef struct miss {
  kt_kernel *k;
  kt_runtime *rt;
  kt__call *c;
  const int64_t *key;
  uint64_t h;
  char json[KT_KEY_JSON_MAX];  /* the key as the cache stores it */
  int64_t fallback[KT_MAX_CFIELDS];
  int64_t stored[KT_MAX_CFIELDS];
  int have_stored, capturing;
  int owner;                   /* publishes what it settles (coord.c) */
  int queued;                  /* async: the background tuner settles it */
  kt__report *rep;             /* told what a tuning came to, or NULL */
} miss;

/* A stored config whose variant cannot be made (its cubin damaged and no
** NVRTC to compile it again) is skipped with a warning naming the row.
** With a device the launch needs the variant now anyway; without one it is
** only looked for when it could not be compiled. */
static int stored_buildable(miss *m, const char *json) {
  kt__call v = *m->c;
  void *fn;
  char err[KT_ERRMAX];
  if (!m->rt->env.have_device && !kt__nvrtc_load(m->rt->env.cuda_home, err, sizeof err)) return 1;
  if (kt__call_config(&m->k->p, &v, m->stored) || !kt__variant_get(&m->k->p, &v, &fn)) return 1;
  kt__log(&m->rt->env.log, KT_LOG_WARN, "%s %s: cached config %s is skipped: %s; the default config is used",
          m->k->p.spec->name, m->json, json, kt__errmsg(m->rt->env.id));
  return 0;
}

/* The cached config of the key, unless a retune asks to ignore it. */
static void look_in_cache(miss *m) {
  kt_runtime *rt = m->rt;
  const char *name = m->k->p.spec->name;
  char json[KT_CONFIG_JSON_MAX], err[KT_ERRMAX];
  if (!rt->env.store) return;
  kt_status st = kt__cached_json(m->k, m->json, json, sizeof json, err, sizeof err);
  if (!st && rt->tune.retune && rt->mode == KT_MODE_TUNE) {
    kt__log(&rt->env.log, KT_LOG_INFO, "%s %s: cached config %s is tuned again (retune)", name, m->json, json);
  } else if (!st) {
    m->have_stored = kt__call_config_valid(&m->k->p, m->c, json, m->stored);
    if (!m->have_stored)
      kt__log(&rt->env.log, KT_LOG_WARN,
              "%s %s: cached config %s is not in the spec's space or violates a constraint; ignored", name, m->json,
              json);
    else
      m->have_stored = stored_buildable(m, json);
  } else if (st != KT_ERR_NOT_FOUND) {
    kt__log(&rt->env.log, KT_LOG_WARN, "%s", err);
  }
  if (m->have_stored) atomic_fetch_add_explicit(&rt->env.n.cache_loads, 1, memory_order_relaxed);
}

/* Take the key's lease, or wait while another process (or another runtime
** of this one) holds it. Returns 1 when the holder stored a config
** meanwhile (then in m->stored; *held says whether the lease is ours to
** release), else 0 with the lease ours (*held) or, after LEASE_S, without
** it. */
static int lease_or_wait(miss *m, int *held, char *host, size_t hostlen) {
  kt_runtime *rt = m->rt;
  const kt__prog *p = &m->k->p;
  char err[KT_ERRMAX];
  *held = 0;
  if (gethostname(host, hostlen)) snprintf(host, hostlen, "localhost");
  double deadline = kt__now_ms() + LEASE_S * 1e3;
  for (int said = 0;; said = 1) {
    int taken = 0;
    long holder = 0;
    if (kt__store_lease(rt->env.store, p->spec->name, p->spec_hash, rt->env.fingerprint, m->json, host,
                        (long)getpid(), LEASE_S, &taken, &holder, err, sizeof err)) {
      kt__log(&rt->env.log, KT_LOG_WARN, "%s", err);
      return 0;
    }
    if (taken) {
      *held = 1;
      /* Taken after a wait: the holder may have stored its winner and let
      ** go between two looks. */
      return said && kt__cached_config(m->k, m->c, m->json, m->stored);
    }
    char who[64] = "another runtime of this process";
    if (holder != (long)getpid()) snprintf(who, sizeof who, "process %ld", holder);
    if (!said)
      kt__log(&rt->env.log, KT_LOG_INFO, "%s %s: %s is tuning this key; waiting for its result", p->spec->name,
              m->json, who);
    usleep(LEASE_POLL_US);
    if (kt__cached_config(m->k, m->c, m->json, m->stored)) return 1;
    if (kt__now_ms() > deadline) {
      kt__log(&rt->env.log, KT_LOG_WARN, "%s %s: %s has held the tuning lease for %d s; tuning here too",
              p->spec->name, m->json, who, LEASE_S);
      return 0;
    }
  }
}

/* No tuning now: the cached config, else the fallback. Inside a capture
** the fallback serves this call only, so that the key is tuned after it. */
static kt_status without_tuning(miss *m, const kt__tuned **out, int64_t *cfg) {
  kt_runtime *rt = m->rt;
  kt_kernel *k = m->k;
  if (m->have_stored) return kt__tuned_insert(k, m->c, m->key, m->h, m->stored, 0, out);
  atomic_fetch_add_explicit(&rt->env.n.fallbacks, 1, memory_order_relaxed);
  memcpy(cfg, m->fallback, (size_t)k->p.spec->ncfields * sizeof *cfg);
  if (m->capturing) {
    /* Never tune inside a capture: the graph would record the trials. */
    if (!atomic_exchange(&k->logged_capture, 1))
      kt__log(&rt->env.log, KT_LOG_WARN,
              "%s %s: stream is capturing; the default config used without tuning (tune before capture to avoid "
              "this)",
              k->p.spec->name, m->json);
    return KT_OK;
  }
  if (rt->mode == KT_MODE_CACHE_ONLY && !atomic_exchange(&k->logged_cache_only, 1))
    kt__log(&rt->env.log, KT_LOG_INFO, "%s %s: not in the cache; cache-only mode uses the default config",
            k->p.spec->name, m->json);
  return kt__tuned_insert(k, m->c, m->key, m->h, cfg, 0, out);
}

/* Tune the key now (the tuner t has listed its candidates). Out of device
** memory for the scratch copies, the call still runs with the default
** config, and the key is tuned another time. When every candidate was
** rejected, this process uses the default config for the key (nothing is
** stored, so another process tunes it again). */
static kt_status tune_now(miss *m, kt__tuner *t, kt_stream stream, const kt__tuned **out, int64_t *cfg) {
  kt_runtime *rt = m->rt;
  int64_t best[KT_MAX_CFIELDS];
  double t0 = kt__now_ms();
  kt_status st = kt__tuner_run(t, stream, m->fallback, best);
  if (m->rep) kt__report_tuning(m->rep, t, rt->env.store && !kt__store_readonly(rt->env.store));
  atomic_fetch_add_explicit(&rt->env.n.tunings, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&rt->env.n.tune_us, (uint_fast64_t)((kt__now_ms() - t0) * 1000), memory_order_relaxed);
  if (st == KT_ERR_NOMEM) {
    kt__log(&rt->env.log, KT_LOG_WARN, "%s %s: not enough memory to tune (%s); the default config is used",
            m->k->p.spec->name, m->json, kt__errmsg(rt->env.id));
    memcpy(cfg, m->fallback, (size_t)m->k->p.spec->ncfields * sizeof *cfg);
    atomic_fetch_add_explicit(&rt->env.n.fallbacks, 1, memory_order_relaxed);
    return KT_OK;
  }
  if (st == KT_ERR_NO_CONFIG) {
    kt__log(&rt->env.log, KT_LOG_WARN, "%s; the default config is used by this process and nothing is stored",
            kt__errmsg(rt->env.id));
    atomic_fetch_add_explicit(&rt->env.n.fallbacks, 1, memory_order_relaxed);
    return kt__tuned_insert(m->k, m->c, m->key, m->h, m->fallback, 0, out);
  }
  return st ? st : kt__tuned_insert(m->k, m->c, m->key, m->h, best, 0, out);
}

/* Async mode: launch at once with a stand-in, and have the key tuned in
** the background. Inside a capture the stand-in serves this call only and
** nothing is queued (the copies would be captured): a later call queues. */
static kt_status async_miss(miss *m, kt_stream stream, const kt_arg *args, const kt__tuned **out, int64_t *cfg) {
  kt_runtime *rt = m->rt;
  kt_kernel *k = m->k;
  char from[1100];
  kt__standin(k, m->c, m->key, m->fallback, cfg, from, sizeof from);
  atomic_fetch_add_explicit(&rt->env.n.standins, 1, memory_order_relaxed);
  if (m->capturing) {
    if (!atomic_exchange(&k->logged_capture, 1))
      kt__log(&rt->env.log, KT_LOG_WARN, "%s %s: stream is capturing; %s is used without queueing a tuning",
              k->p.spec->name, m->json, from);
    return KT_OK;
  }
  kt_status st = kt__tuned_insert(k, m->c, m->key, m->h, cfg, 1, out);
  if (st) return st;
  kt__log(&rt->env.log, KT_LOG_INFO, "%s %s: launched with %s while it is tuned in the background", k->p.spec->name,
          m->json, from);
  if ((st = kt__async_submit(k, m->c, m->json, *out, stream, args, m->owner ? KT__JOB_TUNE_PUBLISH : KT__JOB_TUNE))) {
    kt__log(&rt->env.log, KT_LOG_WARN, "%s; the stand-in serves the key in this process", kt__errmsg(rt->env.id));
    atomic_fetch_add_explicit(&rt->env.n.async_failed, 1, memory_order_relaxed);
  }
  m->queued = !st;
  return KT_OK;
}

static kt_status settle(miss *m, kt_stream stream, const kt_arg *args, const kt__tuned **out, int64_t *cfg);

/* The key's message, if it comes within wait_ms, followed: 1 with *st
** what inserting its config gave; 0 with why where it is absent, damaged or
** says its owner failed. */
static int take_published(miss *m, int wait_ms, const kt__tuned **out, kt_status *st, char *why, size_t n) {
  int64_t got[KT_MAX_CFIELDS];
  if (kt__coord_fetch(m->k, m->c, m->json, wait_ms, got, why, n)) return 0;
  atomic_fetch_add_explicit(&m->rt->env.n.followed, 1, memory_order_relaxed);
  *st = kt__tuned_insert(m->k, m->c, m->key, m->h, got, 0, out);
  return 1;
}

/* Another rank owns the key: launch what it settled. In async mode the
** call goes on at once with the cached config or the default as a
** stand-in, and the background tuner waits for the owner's. */
static kt_status follow(miss *m, kt_stream stream, const kt_arg *args, const kt__tuned **out) {
  kt_runtime *rt = m->rt;
  kt_kernel *k = m->k;
  const int64_t *own = m->have_stored ? m->stored : m->fallback;
  char why[KT_ERRMAX];
  kt_status st;
  if (rt->mode == KT_MODE_ASYNC && rt->env.have_device) {
    if ((st = kt__tuned_insert(k, m->c, m->key, m->h, own, 1, out))) return st;
    atomic_fetch_add_explicit(&rt->env.n.standins, 1, memory_order_relaxed);
    if ((st = kt__async_submit(k, m->c, m->json, *out, stream, args, KT__JOB_FOLLOW))) {
      kt__log(&rt->env.log, KT_LOG_WARN, "%s; this rank keeps its own config for the key", kt__errmsg(rt->env.id));
      atomic_fetch_add_explicit(&rt->env.n.coord_failed, 1, memory_order_relaxed);
    }
    return KT_OK;
  }
  if (take_published(m, kt__coord_wait_ms(rt), out, &st, why, sizeof why)) return st;
  kt__log(&rt->env.log, KT_LOG_WARN, "%s %s: %s; the %s config is used", k->p.spec->name, m->json, why,
          m->have_stored ? "cached" : "default");
  atomic_fetch_add_explicit(&rt->env.n.coord_failed, 1, memory_order_relaxed);
  if (!m->have_stored) atomic_fetch_add_explicit(&rt->env.n.fallbacks, 1, memory_order_relaxed);
  return kt__tuned_insert(k, m->c, m->key, m->h, own, 0, out);
}

/* The owner tells the other ranks what it settled (unless the background
** tuner will, or a capture kept it from settling anything). Where another
** runtime of this rank published the key first, its config replaces ours. */
static kt_status tell_ranks(miss *m, kt_status st, const kt__tuned *out, int64_t *cfg) {
  int64_t took[KT_MAX_CFIELDS];
  if (m->queued || m->capturing) return st;
  if (st) {
    kt__coord_publish(m->k, m->c, m->json, NULL, kt__errmsg(m->rt->env.id), took);
    return st;
  }
  if (!kt__coord_publish(m->k, m->c, m->json, out ? kt__tuned_choice(out)->cfg : cfg, NULL, took)) return st;
  if (out) return kt__tuned_replace(m->k, out, m->c, took);
  memcpy(cfg, took, (size_t)m->k->p.spec->ncfields * sizeof *cfg);
  return st;
}

/* With the kernel's tune lock held: the cache, then a tuning when the mode
** and the stream allow one (in async mode, queued; a report asked for is a
** tuning now). With ranks, the key's owner does this and tells the others. */
static kt_status decide(miss *m, kt_stream stream, const kt_arg *args, const kt__tuned **out, int64_t *cfg) {
  kt_runtime *rt = m->rt;
  kt_kernel *k = m->k;
  char err[KT_ERRMAX];
  kt_status st;
  /* A thread's first call may arrive here before anything made the
  ** runtime's context current in it. */
  if (rt->env.have_device && (st = kt__dev_use(rt->env.ctx, err, sizeof err)))
    return kt__err(rt->env.id, st, "%s: %s", k->p.spec->name, err);
  if (rt->env.have_device && kt__dev_is_capturing(stream, &m->capturing, err, sizeof err)) m->capturing = 0;
  look_in_cache(m);
  if (!m->have_stored && rt->record_path) kt__record(k, args);
  if (!kt__coord_on(rt) || m->capturing || rt->mode == KT_MODE_OFF) return settle(m, stream, args, out, cfg);
  if (!kt__coord_owns(k, m->json)) return follow(m, stream, args, out);
  /* The key's message in the store already: another runtime of this rank
  ** (a process that drives several GPUs of one model, as a JAX host does)
  ** or an earlier run over the same store settled it. Followed, not
  ** settled again, so that every runtime of the job runs one config. */
  if (take_published(m, 0, out, &st, err, sizeof err)) return st;
  m->owner = 1;
  st = settle(m, stream, args, out, cfg);
  return tell_ranks(m, st, *out, cfg);
}

/* The key settled by this process alone: the cache's config, else a
** tuning when the mode and the stream allow one. */
static kt_status settle(miss *m, kt_stream stream, const kt_arg *args, const kt__tuned **out, int64_t *cfg) {
  kt_runtime *rt = m->rt;
  kt_kernel *k = m->k;
  char err[KT_ERRMAX];
  kt_status st;
  int async = rt->mode == KT_MODE_ASYNC && !m->rep;
  if (async && !m->have_stored && rt->env.have_device) return async_miss(m, stream, args, out, cfg);
  int tunes = rt->mode == KT_MODE_TUNE || (rt->mode == KT_MODE_ASYNC && m->rep);
  /* After kt_runtime_stop_tuning a launch's miss runs untuned, as in
  ** cache-only mode; an asked-for tuning (a report) is cancelled. */
  int stopped = atomic_load(&rt->closing) && !m->rep;
  if (!tunes || async || stopped || m->capturing || !rt->env.have_device) return without_tuning(m, out, cfg);
  kt__tuner *t;
  kt__tuneopts o = rt->tune;
  o.own_inputs = m->rep && m->rep->own_inputs;
  if ((st = kt__tuner_new(&k->p, &o, m->c, args, m->json, &t))) return st;
  int held = 0;
  char host[256] = "";
  if (m->have_stored && !kt__tuner_open(t))
    st = kt__tuned_insert(k, m->c, m->key, m->h, m->stored, 0, out);
  else if (rt->env.store && lease_or_wait(m, &held, host, sizeof host))
    st = kt__tuned_insert(k, m->c, m->key, m->h, m->stored, 0, out);
  else
    st = tune_now(m, t, stream, out, cfg);
  if (held && kt__store_lease_release(rt->env.store, k->p.spec->name, k->p.spec_hash, rt->env.fingerprint, m->json,
                                      host, (long)getpid(), err, sizeof err))
    kt__log(&rt->env.log, KT_LOG_WARN, "%s", err);
  kt__tuner_free(t);
  return st;
}

/* A call the default config runs no program for (N = 0 where the grid
** follows N) does what any config that agrees with it does: nothing. A
** launch of it settles nothing (KT_OK, the default in cfg), so the key's
** first call with work tunes the key; a tuning asked for at its sizes has
** nothing to time (*st). 0 where the call runs programs, or where a tuning
** of it is timed at other sizes (tune_at). */
static int launches_nothing(kt_kernel *k, const kt__call *c, const int64_t *key, const kt__report *rep,
                            const int64_t *fallback, int64_t *cfg, kt_status *st) {
  if (kt__call_empty_grid(&k->p, c) < 0 || (rep && rep->pub.timed_at)) return 0;
  *st = KT_OK;
  if (!rep) {
    memcpy(cfg, fallback, (size_t)k->p.spec->ncfields * sizeof *cfg);
    return 1;
  }
  char json[KT_KEY_JSON_MAX];
  kt__key_json(&k->p.keydef, key, json, sizeof json);
  *st = kt__call_timeable(&k->p, c, json, 1);
  return 1;
}

kt_status kt__miss(kt_kernel *k, kt__call *c, const int64_t *key, uint64_t h, kt_stream stream, const kt_arg *args,
                   const kt__tuned **out, int64_t *cfg, kt__report *rep) {
  kt_runtime *rt = k->rt;
  *out = NULL;
  miss m = {.k = k, .rt = rt, .c = c, .key = key, .h = h, .rep = rep};
  kt_status st = kt__call_fallback(&k->p, c, m.fallback);
  if (st) return st;
  if (launches_nothing(k, c, key, rep, m.fallback, cfg, &st)) return st;
  atomic_fetch_add_explicit(&rt->env.n.misses, 1, memory_order_relaxed);
  if (!rt->miss_runs_default) {
    pthread_mutex_lock(&k->tune_lock);
  } else if (pthread_mutex_trylock(&k->tune_lock)) {
    /* Another thread is tuning: run the default now, look again later. */
    atomic_fetch_add_explicit(&rt->env.n.fallbacks, 1, memory_order_relaxed);
    memcpy(cfg, m.fallback, (size_t)k->p.spec->ncfields * sizeof *cfg);
    return KT_OK;
  }
  /* Single flight: whoever tuned this key while we waited left it here. */
  if ((*out = kt__tuned_find(k, key, h))) {
    pthread_mutex_unlock(&k->tune_lock);
    return KT_OK;
  }
  kt__key_json(&k->p.keydef, key, m.json, sizeof m.json);
  st = decide(&m, stream, args, out, cfg);
  pthread_mutex_unlock(&k->tune_lock);
  return st;
}
