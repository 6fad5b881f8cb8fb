/* The public face of the config cache (cache/store.h does the work). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/fileio.h"
#include "base/outfile.h"
#include "cache/text.h"
#include "dispatch/handles.h"
#include "cache/store.h"

/* The cache calls need a runtime and a cache; without a cache they say why
** there is none. why: the first pointer argument missing, or NULL. */
static kt_status need_store(kt_runtime *rt, const char *fn, const char *why) {
  if (!rt) return kt__misuse(NULL, fn, "rt is NULL");
  if (why) return kt__misuse(rt, fn, why);
  kt_status st = kt__reentry(rt, fn, KT__CB_LOCKED);
  if (st) return st;
  if (!rt->env.store) return kt__err(rt->env.id, KT_ERR_CACHE, "no cache: %s", rt->cache_error);
  return KT_OK;
}

const char *kt_cache_path(const kt_runtime *rt) {
  return rt && rt->env.store ? kt__store_path(rt->env.store) : "";
}

/* Rows reach callers as UTF-8 (ktune.h promises it): a text of a file
** ktune did not write shows its malformed bytes as \xNN, in a copy that
** lives until the callback returns. */
typedef struct shown {
  char *copies[8];
  int n, oom;
} shown;

static const char *show(shown *sh, const char *s) {
  if (!s || kt__text_utf8(s) || sh->n == 8) return s;
  size_t n = 4 * strlen(s) + 1;
  char *c = kt__malloc(n);
  if (!c) return sh->oom = 1, "";
  sh->copies[sh->n++] = c;
  kt__text_visible(s, 0, c, n);
  return c;
}

static int shown_end(shown *sh, int stop) {
  for (int i = 0; i < sh->n; i++) kt__free(sh->copies[i]);
  return stop || sh->oom;
}

typedef struct list_ctx {
  kt_cache_row_fn fn;
  void *user;
  int oom;
} list_ctx;

/* The row a listing's callback is shown on this thread, with the file's
** own texts: kt_cache_trials given that row looks its trials up by those,
** also where a text was shown with \xNN. */
typedef struct shown_row {
  const kt_cache_row *row;
  const kt__cfgrow *file;
} shown_row;
static _Thread_local const shown_row *being_shown;

static int on_row(void *user, const kt__cfgrow *r, int from_system) {
  list_ctx *c = user;
  shown sh = {0};
  kt_cache_row row = {.kernel = show(&sh, r->kernel), .spec_hash = show(&sh, r->spec_hash),
                      .device = show(&sh, r->device), .key = show(&sh, r->key), .config = show(&sh, r->config),
                      .time_us = r->time_us, .candidates = (int)r->candidates, .rejected = (int)r->rejected,
                      .nvrtc_version = show(&sh, r->nvrtc_version), .driver_version = show(&sh, r->driver_version),
                      .created_at = r->created_at, .updated_at = r->updated_at, .from_system = from_system};
  int stop = 1;
  if (!sh.oom) {
    const shown_row now = {&row, r}, *before = being_shown;
    being_shown = &now;
    kt__callback_enter(KT__CB_ROWS);
    stop = c->fn(c->user, &row);
    kt__callback_leave(KT__CB_ROWS);
    being_shown = before;
  }
  c->oom |= sh.oom;
  return shown_end(&sh, stop);
}

/* A listing's end: what the store said, or out of memory for a copy. */
static kt_status listed(kt_runtime *rt, kt_status st, int oom, const char *err) {
  if (st) return kt__err(rt->env.id, st, "%s", err);
  if (oom) return kt__err(rt->env.id, KT_ERR_NOMEM, "%s: out of memory", kt_cache_path(rt));
  return KT_OK;
}

kt_status kt_cache_list(kt_runtime *rt, const char *kernel, kt_cache_row_fn fn, void *user) {
  kt_status st = need_store(rt, "kt_cache_list", !fn ? "fn is NULL" : NULL);
  if (st) return st;
  list_ctx c = {fn, user, 0};
  char err[KT_ERRMAX];
  st = kt__store_list(rt->env.store, kernel, on_row, &c, err, sizeof err);
  return listed(rt, st, c.oom, err);
}

typedef struct trial_ctx {
  kt_trial_row_fn fn;
  void *user;
  int oom;
} trial_ctx;

static int on_trial(void *user, const kt__trialrow *r) {
  trial_ctx *c = user;
  shown sh = {0};
  kt_trial_row row = {.config = show(&sh, r->config), .status = show(&sh, r->status),
                      .detail = show(&sh, r->detail), .median_us = r->median_us, .spread_us = r->spread_us,
                      .registers = (int)r->registers, .smem_bytes = (int)r->smem_bytes,
                      .spill_bytes = (int)r->spill_bytes};
  int stop = 1;
  if (!sh.oom) {
    kt__callback_enter(KT__CB_ROWS);
    stop = c->fn(c->user, &row);
    kt__callback_leave(KT__CB_ROWS);
  }
  c->oom |= sh.oom;
  return shown_end(&sh, stop);
}

kt_status kt_cache_trials(kt_runtime *rt, const kt_cache_row *of, kt_trial_row_fn fn, void *user) {
  kt_status st = need_store(rt, "kt_cache_trials", !of ? "of is NULL" : !fn ? "fn is NULL" : NULL);
  if (st) return st;
  trial_ctx c = {fn, user, 0};
  char err[KT_ERRMAX];
  const kt__cfgrow *f = being_shown && being_shown->row == of ? being_shown->file : NULL;
  kt__cfgrow by = f ? *f : (kt__cfgrow){.kernel = of->kernel, .spec_hash = of->spec_hash, .device = of->device,
                                        .key = of->key};
  st = kt__store_trials(rt->env.store, by.kernel, by.spec_hash, by.device, by.key, on_trial, &c, err, sizeof err);
  return listed(rt, st, c.oom, err);
}

kt_status kt_cache_counts(kt_runtime *rt, long counts[4]) {
  kt_status st = need_store(rt, "kt_cache_counts", !counts ? "counts is NULL" : NULL);
  if (st) return st;
  char err[KT_ERRMAX];
  if ((st = kt__store_counts(rt->env.store, counts, err, sizeof err))) return kt__err(rt->env.id, st, "%s", err);
  return KT_OK;
}

typedef struct claim_ctx {
  kt_quarantine_fn fn;
  void *user;
} claim_ctx;

static void on_claim(void *user, const char *kernel, const char *key, const char *config) {
  claim_ctx *c = user;
  kt__callback_enter(KT__CB_ROWS);
  c->fn(c->user, kernel, key, config);
  kt__callback_leave(KT__CB_ROWS);
}

kt_status kt_cache_quarantine_claim(kt_runtime *rt, long pid, const char *reason, kt_quarantine_fn fn,
                                    void *user) {
  kt_status st = need_store(rt, "kt_cache_quarantine_claim", !reason ? "reason is NULL" : NULL);
  if (st) return st;
  char err[KT_ERRMAX];
  claim_ctx c = {fn, user};
  if ((st = kt__store_quarantine_claim(rt->env.store, pid, reason, fn ? on_claim : NULL, &c, err, sizeof err)))
    return kt__err(rt->env.id, st, "%s", err);
  return KT_OK;
}

/* An export's end: a write failure names the file (name), the store's
** other errors name the cache. */
static kt_status export_result(kt_runtime *rt, kt_status st, const char *name, const char *err) {
  if (st == KT_ERR_IO) return kt__err(rt->env.id, st, "%s: %s", name, err);
  return st ? kt__err(rt->env.id, st, "%s", err) : KT_OK;
}

kt_status kt_cache_export(kt_runtime *rt, const char *path, int with_binaries) {
  kt_status st = need_store(rt, "kt_cache_export", !path ? "path is NULL" : !*path ? "path is empty" : NULL);
  if (st) return st;
  char err[KT_ERRMAX];
  if (!strcmp(path, "-")) {
    errno = 0;
    st = kt__store_export(rt->env.store, stdout, with_binaries, err, sizeof err);
    return export_result(rt, st, "standard output", err);
  }
  if (kt__store_is_own_file(rt->env.store, path))
    return kt__err(rt->env.id, KT_ERR_INVALID, "%s: cannot export into the cache itself", path);
  /* Whole or not at all: an export that fails leaves the file as it was. */
  kt__outfile out;
  int e = kt__out_open(&out, path, 0);
  if (e) return kt__err(rt->env.id, KT_ERR_IO, "%s: cannot write: %s", path, strerror(e));
  errno = 0;
  st = kt__store_export(rt->env.store, out.f, with_binaries, err, sizeof err);
  /* The store names its own failures; the commit's are the file's. */
  if ((e = kt__out_end(&out, !st)) && !st) {
    snprintf(err, sizeof err, "cannot write: %s", strerror(e));
    st = KT_ERR_IO;
  }
  return export_result(rt, st, path, err);
}

kt_status kt_cache_import(kt_runtime *rt, const char *path, int with_binaries, long counts[5]) {
  kt_status st = need_store(rt, "kt_cache_import",
                            !path ? "path is NULL" : !*path ? "path is empty" : !counts ? "counts is NULL" : NULL);
  if (st) return st;
  char *text, buf[64];
  int in = !strcmp(path, "-");
  const char *name = in ? "standard input" : path;
  int e = in ? kt__read_stdin(KT__IMPORT_MAX, &text, NULL) : kt__read_file(path, KT__IMPORT_MAX, &text, NULL);
  if (e)
    return kt__err(rt->env.id, e == ENOMEM ? KT_ERR_NOMEM : e < 0 ? KT_ERR_INVALID : KT_ERR_IO, "%s: cannot read: %s",
                   name, kt__read_strerror(e, KT__IMPORT_MAX, buf, sizeof buf));
  char err[KT_ERRMAX];
  st = kt__store_import(rt->env.store, name, text, with_binaries, counts, err, sizeof err);
  kt__free(text);
  return st ? kt__err(rt->env.id, st, "%s", err) : KT_OK;
}

/* What is wrong with kt_cache_gc's arguments, or NULL. */
static const char *gc_misuse(kt_kernel *const *kernels, int n, const long *configs_removed,
                             const long *binaries_removed) {
  if (n < 0) return "n is negative";
  if (n && !kernels) return "kernels is NULL";
  for (int i = 0; i < n; i++)
    if (!kernels[i]) return "an entry of kernels is NULL";
  return !configs_removed || !binaries_removed ? "configs_removed or binaries_removed is NULL" : NULL;
}

kt_status kt_cache_gc(kt_runtime *rt, kt_kernel *const *kernels, int n, long *configs_removed,
                      long *binaries_removed) {
  kt_status st = need_store(rt, "kt_cache_gc", gc_misuse(kernels, n, configs_removed, binaries_removed));
  if (st) return st;
  const char **names = kt__calloc((size_t)n + 1, sizeof *names);
  const char **hashes = kt__calloc((size_t)n + 1, sizeof *hashes);
  char err[KT_ERRMAX];
  if (!names || !hashes) {
    st = KT_ERR_NOMEM;
    snprintf(err, sizeof err, "kt_cache_gc: out of memory");
  } else {
    for (int i = 0; i < n; i++) {
      names[i] = kernels[i]->p.spec->name;
      hashes[i] = kernels[i]->p.spec_hash;
    }
    st = kt__store_gc(rt->env.store, names, hashes, n, configs_removed, binaries_removed, err, sizeof err);
  }
  kt__free(names);
  kt__free(hashes);
  return st ? kt__err(rt->env.id, st, "%s", err) : KT_OK;
}
