/* Where a tuning times its key. A size the key leaves out (a norm's rows)
** is shared by every call of the key, but not every value of it tells the
** configs apart: one row takes a launch's latency whatever the config, so
** a key first met at one row would keep a config picked by noise for every
** later call, rows by the million included. A spec's "tune_at" gives such
** a size the value to time at; the tuner then runs the key there, on
** inputs made from the spec's "init" (tune/inputs.h), never on the
** caller's buffers. */
#ifndef KT_TUNEAT_H
#define KT_TUNEAT_H

#include "tune/inputs.h"

typedef struct kt__tuneat {
  int on;                    /* 1: the tuner times c with args, not the caller's call */
  kt__call c;                /* the call at the tune_at sizes, bound and keyed */
  kt_arg args[KT_MAX_PARAMS]; /* the caller's args with those sizes; the
                                pointers become in's once made */
  kt__inputs in;             /* its inputs (none until kt__tuneat_inputs) */
  char what[256];            /* "N=16384 (the call's N=1)", for messages */
} kt__tuneat;

/* Fill a from the call c of args: a->on is 1 where the spec gives a
** "tune_at" whose value differs from the call's and leaves the key as it
** is; otherwise 0 (a value that cannot be evaluated, is below 1 or beyond
** the param's type, or moves the key, is logged and left alone). Touches
** no device. */
void kt__tuneat_plan(kt__prog *p, const kt__call *c, const kt_arg *args, const char *key, kt__tuneat *a);
/* Whether kt__tuneat_plan would time c of args at its tune_at sizes (a->on),
** without logging why not: such a tuning never reads the caller's inputs.
** what (n bytes; may be NULL) gets a->what, or "". Touches no device and
** holds nothing. */
int kt__tuneat_moves(kt__prog *p, const kt__call *c, const kt_arg *args, char *what, size_t n);
/* Make a's inputs (a->on), seeded with seed, and point a->args at them. On
** failure nothing is held and kt_errmsg() of p's runtime says why. */
kt_status kt__tuneat_inputs(kt__prog *p, uint64_t seed, kt__tuneat *a);
void kt__tuneat_free(kt__tuneat *a);

#endif
