/* ktune._fastcall, the Python package's launch path in C, against its
** ctypes path without a GPU (tests/python/test_fastcall.py); skipped where
** Python's headers were missing and make did not build it. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

static void the_c_launch_path_packs_as_ctypes_does(void) {
  char out[8192];
  int rc = t_sh(out, sizeof out, "KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 "
                                 "tests/python/test_fastcall.py");
  if (strstr(out, "was not built here")) SKIP("ktune._fastcall was not built (no Python headers)");
  ASSERT_LAST_LINE(out, "5 passed, 0 failed, 0 skipped\n");
  ASSERT_EQ(rc, 0);
}

const kt_test t_fastcall_tests[] = {
    {"fastcall_the_c_launch_path_packs_as_ctypes_does", the_c_launch_path_packs_as_ctypes_does},
    {NULL, NULL},
};
