/* The spec loader on any bytes: a spec file as written (sources resolve
** beside the bundled kernels). */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "fuzz.h"
#include "spec/spec.h"

int kt_fuzz_spec(const uint8_t *data, size_t size) {
  char err[2048];
  kt__spec *s = NULL;
  if (kt__spec_parse("fuzz.json", (const char *)data, size, "kernels_src", &s, err, sizeof err) == KT_OK &&
      (!s || !s->name))
    abort();
  kt__spec_free(s);
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_spec)
