/* Synthetic inputs for a call described by a shape (tools/shape.h): every
** non-null pointer gets a device allocation of its extent, offset as the
** shape says (x@2), and filled as the spec's "init" says: randn,
** uniform(a,b), ones, arange, permutation(n) (a row map: a permutation of
** [0, n), repeated when the extent is longer), mask(p) (1 with probability
** p). Inputs without an init are randn (floats) or 0 (integers); outputs are
** zeroed. Used by ktune tune and ktune bench. */
#ifndef KT_SYNTH_H
#define KT_SYNTH_H

#include <stdint.h>

#include "ktune.h"

typedef struct synth {
  kt_runtime *rt;
  int n;
  uint64_t alloc[64];
  kt_arg args[64];  /* the call, with real device pointers */
} synth;

/* Element i of a host array of dtype t, from or as a double: bf16 and f16
** rounded to nearest even, NaN and infinities kept, integers truncated. */
void synth_put(kt_dtype t, void *dst, size_t i, double v);
double synth_get(kt_dtype t, const void *src, size_t i);

/* shape: the args shape_args() made (fake pointers). Returns 0, or -1 with
** the reason in err (an unknown generator, out of device memory). */
int synth_make(synth *s, kt_runtime *rt, kt_kernel *k, const kt_arg *shape, uint64_t seed, char *err,
               size_t errlen);
void synth_free(synth *s);

#endif
