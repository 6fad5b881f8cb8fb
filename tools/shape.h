/* A call described in words, "N=24000,D=256,T=bf16,res=null,x@2", turned
** into launch args for a spec. Pointers are taken as non-null and 16-byte
** aligned unless the shape says NAME=null or NAME@BYTES (an address offset
** by BYTES). A type variable takes its dtype from NAME=dtype or dtype=...;
** scalars the key ignores take the spec's numeric "init", else 1 (f32: 0). */
#ifndef KT_SHAPE_H
#define KT_SHAPE_H

#include "ktune.h"

/* The longest shape text a tool keeps, its NUL included: every param of a
** spec at its bounds (32 names of 64 characters with an i64 each). */
#define SHAPE_MAX 4096

/* Fills args (nparams of them); returns 0, or -1 with the reason in err. */
int shape_args(kt_kernel *k, const char *shape, kt_arg *args, char *err, size_t errlen);

/* A line of a --shapes file (a JSON object: {"kernel": "layernorm_fwd",
** "N": 4096, "T": "bf16", "res": null, "x@": 2}) as a shape string in shape
** (n bytes); kernel (kn bytes) gets "kernel", or "" when the line has none.
** Returns 0, or -1 with the reason in err. */
int shape_from_json(const char *line, char *shape, size_t n, char *kernel, size_t kn, char *err, size_t errlen);

#endif
