/* Inputs the tuner makes itself, from the spec's "init" generators
** (spec/init.h): permutation(n) is a row map, a permutation of [0, n)
** repeated when the extent is longer; mask(p) is 1 with probability p.
** Floats without an init are randn, integers 0, outputs 0. A rejection
** seen on the caller's data is stored as a property of the key only when
** these inputs reproduce it; ktune tune and ktune bench run on them
** (kt_inputs_make). */
#ifndef KT_INPUTS_H
#define KT_INPUTS_H

#include "call/alias.h"

typedef struct kt__inputs {
  int n;
  kt_arg args[KT_MAX_PARAMS];     /* the call with its pointers replaced */
  kt__dptr alloc[KT_MAX_PARAMS];  /* what to free */
} kt__inputs;

/* Device buffers for the non-null pointers of the call c of args: each its
** extent, at the caller's address modulo 256 (so the same alignment class,
** key and variant), filled from seed; args whose ranges are identical in
** the call share one buffer (an in-place call stays in place). Scalars are
** the call's. On failure the message is in kt_errmsg() of p's runtime;
** free in with kt__inputs_free in any case. */
kt_status kt__inputs_make(kt__prog *p, const kt__call *c, const kt_arg *args, uint64_t seed, kt__inputs *in);
/* n values of param q (of type dt) into host, as its init says for the
** call c, from seed, on up to nthreads threads: the same bytes for any
** nthreads (floats and masks are made in chunks seeded by their index).
** 0, or -1 when out of memory. */
int kt__inputs_fill(const kt__prog *p, const kt__call *c, const kt__param *q, kt_dtype dt, void *host, size_t n,
                    uint64_t seed, int nthreads);
void kt__inputs_free(kt__inputs *in);

#endif
