/* Fuzz targets. Each file defines kt_fuzz_NAME(data, size), which must
** never crash, leak or trip a sanitizer whatever the bytes. Built with
** clang and -DKT_LIBFUZZER, the file also defines libFuzzer's entry point
** (make fuzz); without, the CPU suite replays the corpora through the
** same functions (tests/t_fuzz.c). */
#ifndef KT_FUZZ_H
#define KT_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ktune.h"

int kt_fuzz_spec(const uint8_t *data, size_t size);
int kt_fuzz_expr(const uint8_t *data, size_t size);
int kt_fuzz_shape(const uint8_t *data, size_t size);
int kt_fuzz_import(const uint8_t *data, size_t size);
int kt_fuzz_coord(const uint8_t *data, size_t size);
int kt_fuzz_cachefile(const uint8_t *data, size_t size);
int kt_fuzz_source(const uint8_t *data, size_t size);
int kt_fuzz_call(const uint8_t *data, size_t size);
int kt_fuzz_trials(const uint8_t *data, size_t size);

/* The kernel of spec path on a runtime of its own for sm_90 (no device, no
** cache, only errors logged), with coord when not NULL. Made once a
** process and kept: a target calls it on every input. Aborts where it
** cannot be made: a broken harness, not a finding. */
static inline kt_kernel *kt_fuzz_kernel(const char *path, const kt_coordinator *coord) {
  kt_options o;
  kt_options_init(&o);
  o.no_device = 1;
  o.no_cache = 1;
  o.arch = "sm_90";
  o.log_level = KT_LOG_ERROR;
  if (coord) o.coord = *coord;
  kt_runtime *rt;
  kt_kernel *k;
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, path, &k)) abort();
  return k;
}

/* The bytes of an input, read from the front; 0 once they run out. */
typedef struct kt_fuzz_bytes {
  const uint8_t *p;
  size_t n;
} kt_fuzz_bytes;

static inline uint8_t kt_fuzz_take(kt_fuzz_bytes *b) {
  if (!b->n) return 0;
  b->n--;
  return *b->p++;
}

/* Eight bytes, the first the most significant. */
static inline uint64_t kt_fuzz_take64(kt_fuzz_bytes *b) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | kt_fuzz_take(b);
  return v;
}

#ifdef KT_LIBFUZZER
#define KT_FUZZ_ENTRY(fn) \
  int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fn(data, size); }
#else
#define KT_FUZZ_ENTRY(fn)
#endif

#endif
