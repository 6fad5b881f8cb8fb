/* The reader of a source's headers (spec/source.h): the input is a source
** text, its includes looked up in tests/fuzz/headers, whose headers include
** one another (a cycle, a parent directory, an angle name, a name found
** nowhere). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spec/source.h"

int kt_fuzz_source(const uint8_t *data, size_t size) {
  static char dir[PATH_MAX];
  if (!dir[0] && !realpath("tests/fuzz/headers", dir)) abort(); /* run from the tree's root */
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  char err[1024];
  uint64_t h;
  kt__source_headers(text, dir, "k.cu", &h, err, sizeof err);
  free(text);
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_source)
