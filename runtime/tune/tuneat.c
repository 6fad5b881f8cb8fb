#include "tune/tuneat.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

/* The value tune_at gives param i for the call c; 0 when it gives none
** that can stand in (why then says what is wrong, or is empty). */
static int value_at(const kt__prog *p, const kt__call *c, int i, int64_t *v, char *why, size_t n) {
  const kt__param *q = &p->spec->params[i];
  int rc = kt__expr_eval(&q->tune_at, c->slots, v);
  int64_t hi = q->type == KT__P_I32 ? INT32_MAX : INT64_MAX;
  if (rc) snprintf(why, n, "%s in \"%s\"", kt__eval_strerror(rc), q->tune_at.text);
  else if (*v < 1 || *v > hi) snprintf(why, n, "\"%s\" is %lld, not a size", q->tune_at.text, (long long)*v);
  return !rc && *v >= 1 && *v <= hi;
}

/* The args of c with each tune_at size in place; the sizes that moved, as
** "N=16384", in now and "N=1" in was (n bytes each). Returns how many moved;
** -1 when a value will not do, with why in now. */
static int move_sizes(const kt__prog *p, const kt__call *c, kt_arg *args, char *now, char *was, size_t n) {
  const kt__spec *s = p->spec;
  int moved = 0;
  size_t un = 0, uw = 0;
  *now = *was = 0;
  for (int i = 0; i < s->nparams; i++) {
    if (!s->params[i].tune_at.text) continue;
    int64_t v;
    if (!value_at(p, c, i, &v, now, n)) return -1;
    if (v == c->slots[i]) continue;
    if (s->params[i].type == KT__P_I32) args[i].v.i32 = (int32_t)v;
    else args[i].v.i64 = v;
    if (un < n)
      un += (size_t)snprintf(now + un, n - un, "%s%s=%lld", moved ? "," : "", s->params[i].name, (long long)v);
    if (uw < n)
      uw += (size_t)snprintf(was + uw, n - uw, "%s%s=%lld", moved ? "," : "", s->params[i].name,
                             (long long)c->slots[i]);
    moved++;
  }
  return moved;
}

/* What the plan for c comes to: PLAN_ON (a is filled), PLAN_NONE (no size
** moves), or why the call's own sizes are timed instead (now and was as
** move_sizes leaves them, n bytes each). Logs nothing. */
enum { PLAN_ON, PLAN_NONE, PLAN_NOT_A_SIZE, PLAN_UNBOUND, PLAN_OTHER_KEY };
static int plan(kt__prog *p, const kt__call *c, const kt_arg *args, kt__tuneat *a, char *now, char *was, size_t n) {
  const kt__spec *s = p->spec;
  memset(a, 0, sizeof *a);
  memcpy(a->args, args, (size_t)s->nparams * sizeof *args);
  int moved = move_sizes(p, c, a->args, now, was, n);
  if (moved <= 0) return moved < 0 ? PLAN_NOT_A_SIZE : PLAN_NONE;
  /* The moved call must have the caller's key, or its winner would be
  ** another key's. */
  int64_t k0[KT_MAX_KEY], k1[KT_MAX_KEY];
  kt__call c0 = *c;
  if (kt__call_key(p, &c0, k0) || kt__call_bind(p, a->args, s->nparams, &a->c) || kt__call_key(p, &a->c, k1))
    return PLAN_UNBOUND;
  if (memcmp(k0, k1, (size_t)p->keydef.n * sizeof *k0)) return PLAN_OTHER_KEY;
  snprintf(a->what, sizeof a->what, "%s (the call's %s)", now, was);
  a->on = 1;
  return PLAN_ON;
}

void kt__tuneat_plan(kt__prog *p, const kt__call *c, const kt_arg *args, const char *key, kt__tuneat *a) {
  const char *name = p->spec->name;
  char now[128], was[128];
  switch (plan(p, c, args, a, now, was, sizeof now)) {
  case PLAN_NOT_A_SIZE:
    kt__log(&p->env->log, KT_LOG_WARN, "%s %s: tune_at: %s; tuned at the call's sizes", name, key, now);
    break;
  case PLAN_UNBOUND:
    kt__log(&p->env->log, KT_LOG_WARN, "%s %s: tune_at: at %s: %s; tuned at the call's %s", name, key, now,
            kt__errmsg(p->env->id), was);
    break;
  case PLAN_OTHER_KEY:
    kt__log(&p->env->log, KT_LOG_WARN, "%s %s: tune_at: at %s the call has another key; tuned at the call's %s",
            name, key, now, was);
    break;
  default:
    break;
  }
}

int kt__tuneat_moves(kt__prog *p, const kt__call *c, const kt_arg *args, char *what, size_t n) {
  kt__tuneat a;
  char now[128], was[128];
  int on = plan(p, c, args, &a, now, was, sizeof now) == PLAN_ON;
  if (what && n) snprintf(what, n, "%s", on ? a.what : "");
  return on;
}

kt_status kt__tuneat_inputs(kt__prog *p, uint64_t seed, kt__tuneat *a) {
  kt_status st = kt__inputs_make(p, &a->c, a->args, seed, &a->in);
  if (st) {
    kt__inputs_free(&a->in);
    return st;
  }
  memcpy(a->args, a->in.args, sizeof a->args);
  return KT_OK;
}

void kt__tuneat_free(kt__tuneat *a) { kt__inputs_free(&a->in); }
