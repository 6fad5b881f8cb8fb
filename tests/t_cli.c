/* The ktune CLI's offline commands, run as a user would ($KTUNE_BIN). */
#include <stdlib.h>
#include <sys/stat.h>

#include "harness.h"
#include "ktune.h"

static const char *bin(void) {
  const char *b = getenv("KTUNE_BIN");
  return b && *b ? b : "build/ktune";
}

static void help_and_version(void) {
  char out[8192];
  ASSERT_EQ(t_sh(out, sizeof out, "%s --help", bin()), 0);
  ASSERT_CONTAINS(out, "usage: ktune COMMAND");
  ASSERT_CONTAINS(out, "compile SPEC...");
  ASSERT_EQ(t_sh(out, sizeof out, "%s --version", bin()), 0);
  ASSERT_STR_EQ(out, "ktune " KT_VERSION_STRING "\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --help", bin()), 0);
  ASSERT_CONTAINS(out, "usage: ktune compile SPEC...");
  ASSERT_EQ(t_sh(out, sizeof out, "%s", bin()), 2);
  ASSERT_CONTAINS(out, "usage: ktune COMMAND");
}

static void usage_errors(void) {
  char out[8192];
  ASSERT_EQ(t_sh(out, sizeof out, "%s frobnicate", bin()), 2);
  ASSERT_STR_EQ(out, "ktune: unknown command 'frobnicate'\nTry 'ktune --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile", bin()), 2);
  ASSERT_STR_EQ(out, "ktune compile: no spec given\nTry 'ktune compile --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile kernels_src/rmsnorm.json --arch", bin()), 2);
  ASSERT_STR_EQ(out, "ktune compile: --arch needs a value such as sm_90\nTry 'ktune compile --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --frob x.json", bin()), 2);
  ASSERT_CONTAINS(out, "unknown option '--frob'");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm9 kernels_src/rmsnorm.json", bin()), 1);
  ASSERT_CONTAINS(out, "arch \"sm9\" is not of the form sm_90");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_90 tests/specs/nope.json", bin()), 1);
  ASSERT_CONTAINS(out, "tests/specs/nope.json: cannot read: No such file or directory");
}

static void compile_writes_cubins(void) {
  char out[8192];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_90 -o %s/cubins tests/specs/small.json", bin(), dir), 0);
  ASSERT_CONTAINS(out, "ok    rmsnorm_small.T=bf16.BLOCK=128.ROWS=1.VEC=1.HAS_RES=0  ");
  ASSERT_CONTAINS(out, "8 variants compiled for sm_90, 0 failed\n");
  char path[1024];
  struct stat sb;
  snprintf(path, sizeof path, "%s/cubins/rmsnorm_small.T=bf16.BLOCK=128.ROWS=1.VEC=8.HAS_RES=1.cubin", dir);
  ASSERT_EQ(stat(path, &sb), 0);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

static void gpu_commands_without_a_gpu(void) {
  if (t_have_driver()) SKIP("a CUDA driver is present; this checks the behaviour without one");
  char out[8192];
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile kernels_src/rmsnorm.json", bin()), 1);
  ASSERT_CONTAINS(out, "cannot load the CUDA driver (libcuda.so.1)");
  ASSERT_CONTAINS(out, "(give --arch to compile without a GPU)");
  ASSERT_EQ(t_sh(out, sizeof out, "%s demo", bin()), 1);
  ASSERT_CONTAINS(out, "ktune demo: needs a GPU: kt_runtime_open: cannot load the CUDA driver");
}

const kt_test t_cli_tests[] = {
    {"cli: --help and --version", help_and_version},
    {"cli: usage errors exit 2 with a message", usage_errors},
    {"cli: compile writes one cubin per variant", compile_writes_cubins},
    {"cli: GPU commands say what is missing", gpu_commands_without_a_gpu},
    {NULL, NULL},
};
