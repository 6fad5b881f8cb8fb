#include <stdlib.h>

#include "harness.h"

extern const kt_test gpu_rmsnorm_tests[];

int main(int argc, char **argv) {
  const kt_test *const suites[] = {gpu_rmsnorm_tests, NULL};
  return t_run(suites, argc > 1 ? argv[1] : getenv("KT_TEST_FILTER"));
}
