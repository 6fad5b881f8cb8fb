/* --shape parsing against the bundled layernorm_fwd (every kind of param),
** then the key of the call it makes. */
#include <stdlib.h>
#include <string.h>

#include "../../tools/shape.h"
#include "fuzz.h"
#include "ktune.h"

static kt_kernel *kernel(void) {
  static kt_runtime *rt;
  static kt_kernel *k;
  if (k) return k;
  kt_options o;
  kt_options_init(&o);
  o.no_device = 1;
  o.no_cache = 1;
  o.arch = "sm_90";
  o.log_level = KT_LOG_ERROR;
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", &k)) abort();
  return k;
}

int kt_fuzz_shape(const uint8_t *data, size_t size) {
  kt_kernel *k = kernel();
  char *text = malloc(size + 1), err[1024], key[2048];
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  kt_arg args[64];
  if (!shape_args(k, text, args, err, sizeof err)) kt_kernel_key(k, args, kt_kernel_nparams(k), key, sizeof key);
  free(text);
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_shape)
