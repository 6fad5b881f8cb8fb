/* Helpers for GPU tests: a runtime on GPU 0 (or a clean skip), host-side
** dtype conversion and deterministic random data. */
#ifndef KT_GPU_UTIL_H
#define KT_GPU_UTIL_H

#include <stdint.h>

#include "ktune.h"

/* A runtime on GPU 0, or NULL after t_skip() saying why (t_fail when a
** GPU is there but the runtime fails). o NULL: defaults. */
kt_runtime *g_open_with(const kt_options *o);
kt_runtime *g_open(void);
/* g_open in the given mode (KT_MODE_OFF: the default config, no tuning). */
kt_runtime *g_open_mode(kt_mode mode);
/* Load kernels: pairs of (spec path, kt_kernel **), then NULL. 0, or -1
** after t_fail() naming the spec that did not load. */
int g_load_kernels(kt_runtime *rt, ...);
/* Uniform in [lo, hi) from a seeded generator. */
double g_uniform(uint64_t *state, double lo, double hi);
/* Store n doubles as dtype into dst; read one back (kt_dtype_store and
** kt_dtype_load). */
void g_store(kt_dtype t, void *dst, const double *src, size_t n);
double g_load(kt_dtype t, const void *src, size_t i);
/* Each of h's n values rounded to dtype t, through stage (room for n). */
void g_round(kt_dtype t, void *stage, double *h, size_t n);

/* A device buffer of n elements with its host copy h (as doubles). The
** allocation has room for offset elements before ptr (to break alignment)
** and a poisoned tail after the n elements. */
typedef struct g_buf {
  kt_runtime *rt;
  kt_dtype dt;
  size_t n, esz, bytes;
  uint64_t alloc, ptr;
  double *h;
  void *stage;
} g_buf;

int g_buf_make(g_buf *b, kt_runtime *rt, kt_dtype dt, size_t n, int offset);
/* Uniform values rounded to the dtype, so a reference sees what the GPU sees. */
void g_buf_rand(g_buf *b, uint64_t *seed, double lo, double hi);
void g_buf_round(g_buf *b);
/* The whole allocation poisoned (0xFF bytes: NaN for floats), then h. */
int g_buf_upload(g_buf *b);
int g_buf_poison(g_buf *b);
/* Compares the first n elements with ref (|y - r| <= atol + rtol |r|) and
** checks that the bytes around them kept their poison. Returns the number
** of bad elements (1 for a stray write), describing the first in msg. */
long g_buf_check(g_buf *b, const double *ref, size_t n, double atol, double rtol, const char *what,
                 char *msg, size_t msglen);
void g_buf_free(g_buf *b);

/* The norm of rows of D in x into y, in doubles: LayerNorm (rms 0) or
** RMSNorm (rms 1, no mean), times w, plus b where b is not NULL. */
void g_norm_ref(const double *x, const double *w, const double *b, int rows, int D, int rms, double eps, double *y);

#endif
