/* Fuzz targets. Each file defines kt_fuzz_NAME(data, size), which must
** never crash, leak or trip a sanitizer whatever the bytes. Built with
** clang and -DKT_LIBFUZZER, the file also defines libFuzzer's entry point
** (make fuzz); without, the CPU suite replays the corpora through the
** same functions (tests/t_fuzz.c). */
#ifndef KT_FUZZ_H
#define KT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int kt_fuzz_spec(const uint8_t *data, size_t size);
int kt_fuzz_expr(const uint8_t *data, size_t size);
int kt_fuzz_shape(const uint8_t *data, size_t size);
int kt_fuzz_import(const uint8_t *data, size_t size);
int kt_fuzz_coord(const uint8_t *data, size_t size);

#ifdef KT_LIBFUZZER
#define KT_FUZZ_ENTRY(fn) \
  int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fn(data, size); }
#else
#define KT_FUZZ_ENTRY(fn)
#endif

#endif
