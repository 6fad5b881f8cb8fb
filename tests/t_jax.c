/* ktune.jax without a GPU: its vmap rules over an emulation of the kernels
** (tests/python/test_jax_fold.py), where jax imports; skipped elsewhere. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

static void vmap_folds_the_batch_into_the_rows(void) {
  char out[8192];
  if (t_sh(out, sizeof out, "python3 -c 'import jax'")) SKIP("jax does not import here");
  int rc = t_sh(out, sizeof out, "JAX_PLATFORMS=cpu python3 tests/python/test_jax_fold.py");
  ASSERT_LAST_LINE(out, "14 passed, 0 failed, 0 skipped\n");
  ASSERT_EQ(rc, 0);
}

const kt_test t_jax_tests[] = {
    {"jax_vmap_folds_the_batch_into_the_rows", vmap_folds_the_batch_into_the_rows},
    {NULL, NULL},
};
