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
float g_bf16_to_f(uint16_t h);
uint16_t g_f_to_bf16(float f);
/* Uniform in [lo, hi) from a seeded generator. */
double g_uniform(uint64_t *state, double lo, double hi);
/* Store n doubles as dtype (f32 or bf16) into dst; read them back. */
void g_store(kt_dtype t, void *dst, const double *src, size_t n);
double g_load(kt_dtype t, const void *src, size_t i);

#endif
