/* --shape parsing against the bundled layernorm_fwd (every kind of param),
** then the key of the call it makes; input that starts with '{' is a line
** of a --shapes file, turned into a shape first. */
#include <stdlib.h>
#include <string.h>

#include "../../tools/shape.h"
#include "fuzz.h"
#include "ktune.h"

static kt_kernel *kernel(void) {
  static kt_kernel *k;
  if (!k) k = kt_fuzz_kernel("kernels_src/layernorm_fwd.json", NULL);
  return k;
}

int kt_fuzz_shape(const uint8_t *data, size_t size) {
  kt_kernel *k = kernel();
  char *text = malloc(size + 1), err[1024], key[2048];
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  kt_arg args[64];
  char shape[SHAPE_MAX], kernel[KT_NAME_MAX + 1];
  const char *s = text;
  if (text[0] == '{') s = shape_from_json(text, shape, sizeof shape, kernel, sizeof kernel, err, sizeof err) ? NULL : shape;
  if (s && !shape_args(k, s, args, err, sizeof err)) kt_kernel_key(k, args, kt_kernel_nparams(k), key, sizeof key);
  free(text);
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_shape)
