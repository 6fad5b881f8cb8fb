#include <string.h>

#include "harness.h"

extern const kt_test gpu_rmsnorm_tests[], gpu_tune_tests[], gpu_alias_tests[], gpu_async_tests[], gpu_norm_tests[],
    gpu_ops_tests[], gpu_cli_tests[];
extern const char *g_self;
int fault_child(const char *cache);
int alias_child(const char *cache);
int exit_child(const char *cache);

int main(int argc, char **argv) {
  g_self = argv[0];
  if (argc == 3 && !strcmp(argv[1], "--fault-child")) return fault_child(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--alias-child")) return alias_child(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--exit-child")) return exit_child(argv[2]);
  const kt_test *const suites[] = {gpu_rmsnorm_tests, gpu_tune_tests, gpu_alias_tests, gpu_async_tests,
                                   gpu_norm_tests,    gpu_ops_tests,  gpu_cli_tests,   NULL};
  return t_main(suites, argc, argv);
}
