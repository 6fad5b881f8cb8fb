/* ktune._fastcall, the Python package's launch path in C, against its
** ctypes path without a GPU (tests/python/test_fastcall.py), its norm
** bodies on stand-in tensors (tests/python/test_fastnorm.py), and its torch
** norms against a stand-in for torch's stable C ABI
** (tests/python/test_fastaten.py); skipped where Python's headers were
** missing and make did not build it. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* Runs a script of tests/python and checks its closing line. */
static void python_script(const char *script, const char *last_line) {
  char out[8192], cmd[256];
  snprintf(cmd, sizeof cmd, "KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 tests/python/%s", script);
  int rc = t_sh(out, sizeof out, cmd);
  if (strstr(out, "was not built here")) SKIP("ktune._fastcall was not built (no Python headers)");
  ASSERT_LAST_LINE(out, last_line);
  ASSERT_EQ(rc, 0);
}

static void the_c_launch_path_packs_as_ctypes_does(void) {
  python_script("test_fastcall.py", "6 passed, 0 failed, 0 skipped\n");
}

static void the_c_norm_bodies_launch_as_ops_does(void) {
  python_script("test_fastnorm.py", "9 passed, 0 failed, 0 skipped\n");
}

static void the_torch_norms_run_the_kernels_under_torchs_operators(void) {
  python_script("test_fastaten.py", "8 passed, 0 failed, 0 skipped\n");
}

const kt_test t_fastcall_tests[] = {
    {"fastcall_the_c_launch_path_packs_as_ctypes_does", the_c_launch_path_packs_as_ctypes_does},
    {"fastcall_the_c_norm_bodies_launch_as_ops_does", the_c_norm_bodies_launch_as_ops_does},
    {"fastcall_the_torch_norms_run_the_kernels_under_torchs_operators",
     the_torch_norms_run_the_kernels_under_torchs_operators},
    {NULL, NULL},
};
