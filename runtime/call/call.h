/* One call of a program: its args bound to the spec's slots, a config set
** and checked against the constraints, its tuning key, and its launch. All
** of it needs no lock and allocates nothing; messages name the kernel and
** the param, field or expression at fault. */
#ifndef KT_CALL_H
#define KT_CALL_H

#include "device/variant.h"

/* The launch geometry of a call with its config set, and (once launched)
** the function that ran. */
typedef struct kt__dims {
  uint32_t grid[3], block[3], smem;
  void *fn;
} kt__dims;

/* Bind args (the spec's params in order) into c: scalar values, pointer
** null-ness, alignment class and element size, type variables, builtins.
** KT_ERR_ARGS names the arg that does not fit. */
kt_status kt__call_bind(kt__prog *p, const kt_arg *args, int nargs, kt__call *c);
/* Set config values and evaluate derived constants and smem. */
kt_status kt__call_config(kt__prog *p, kt__call *c, const int64_t *cfg);
/* The same when kt__call_key has evaluated the param-only constants. */
kt_status kt__call_config_keyed(kt__prog *p, kt__call *c, const int64_t *cfg);
/* *bad: index of the first constraint violated, or -1. KT_ERR_EVAL sets
** *bad to the constraint that could not be evaluated. */
kt_status kt__call_check(kt__prog *p, const kt__call *c, int *bad);
/* The default config, else the first of the space valid for this call;
** KT_ERR_NO_CONFIG when none is. c is left configured with it. */
kt_status kt__call_fallback(kt__prog *p, kt__call *c, int64_t *cfg);
/* Evaluate the param-only derived constants and build the tuning key
** (p->keydef.n values). */
kt_status kt__call_key(kt__prog *p, kt__call *c, int64_t *key);
/* Whether cfg satisfies every constraint for c; out gets c with cfg set. */
int kt__call_valid(kt__prog *p, const kt__call *c, const int64_t *cfg, kt__call *out);
/* Whether json is a config of the space that satisfies every constraint
** for c (a cached row may come from another version or machine); cfg gets
** it. */
int kt__call_config_valid(kt__prog *p, const kt__call *c, const char *json, int64_t *cfg);
/* Parse "BLOCK=256,VEC=4" (every field once, values in the space). */
kt_status kt__config_parse(kt__prog *p, const char *text, int64_t *cfg);
/* Parse, set and check a config given as text (KT_ERR_CONSTRAINT names
** the constraint violated). */
kt_status kt__call_forced(kt__prog *p, kt__call *c, const char *config);
/* cfg as "BLOCK=256,VEC=4", in the spec's field order. */
void kt__config_format(const kt__prog *p, const int64_t *cfg, char *buf, size_t n);

/* Grid, block and dynamic shared memory of c, range-checked. */
kt_status kt__call_dims(kt__prog *p, const kt__call *c, kt__dims *d);
/* The first dimension in which c (config set) has a grid of 0, so that it
** launches no program (N = 0 where the grid follows N); -1 where none is
** 0 or the dims do not evaluate (the launch then says why). */
int kt__call_empty_grid(kt__prog *p, const kt__call *c);
/* KT_ERR_INVALID where c (config set) launches no program, so that timing
** it could tell no config from another: "NAME KEY: nothing to time: the
** call launches no program (grid[0], cdiv(N, ROWS), is 0 under the default
** config)", key NULL to leave it out, dflt nonzero where c holds the
** default config. KT_OK where c launches programs. */
kt_status kt__call_timeable(kt__prog *p, const kt__call *c, const char *key, int dflt);
/* Launch c (config set) on stream: fn is its variant's function when the
** caller knows it, else NULL to look it up (compiling on first use). When
** out is not NULL it receives the dims and function launched (grid[0] 0
** when the grid is empty and nothing was launched). Allocates nothing once compiled. */
kt_status kt__call_launch(kt__prog *p, const kt__call *c, void *fn, kt_stream stream, const kt_arg *args,
                          kt__dims *out);

#endif
