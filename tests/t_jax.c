/* ktune.jax without a GPU, where jax imports (skipped elsewhere): its vmap
** rules over an emulation of the kernels (tests/python/test_jax_fold.py),
** and ranks that agree through jax.distributed. */
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

/* ktune.distributed.enable_jax over jax.distributed's key-value client:
** three JAX processes on the CPU, each a runtime without a device
** (tests/python/test_coord_jax_cpu.py). */
static void jax_processes_agree_through_their_key_value_store(void) {
  char out[16384];
  if (t_sh(out, sizeof out, "python3 -c 'import jax'")) SKIP("jax does not import here");
  int rc = t_sh(out, sizeof out, "KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python "
                                 "python3 tests/python/test_coord_jax_cpu.py");
  ASSERT_LAST_LINE(out, "5 passed, 0 failed, 0 skipped\n");
  ASSERT_EQ(rc, 0);
}

const kt_test t_jax_tests[] = {
    {"jax_vmap_folds_the_batch_into_the_rows", vmap_folds_the_batch_into_the_rows},
    {"jax_processes_agree_through_their_key_value_store", jax_processes_agree_through_their_key_value_store},
    {NULL, NULL},
};
