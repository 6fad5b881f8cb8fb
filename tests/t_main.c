#include <stdlib.h>
#include <string.h>

#include "faults.h"
#include "harness.h"

extern const kt_test t_expr_tests[], t_spec_tests[], t_compile_tests[], t_launch_tests[],
    t_cli_tests[], t_store_tests[], t_tune_tests[], t_trust_tests[], t_fault_tests[], t_fuzz_tests[],
    t_convention_tests[], t_coord_tests[], t_record_tests[], t_jax_tests[], t_jaxffi_tests[],
    t_fastcall_tests[];

int exit_while_compiling(int warm);

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--exit-while-compiling")) return exit_while_compiling(atoi(argv[2]));
  t_faults_install();
  const kt_test *const suites[] = {t_expr_tests,     t_spec_tests,      t_launch_tests,   t_compile_tests,
                                   t_store_tests,    t_trust_tests,     t_fault_tests,    t_fuzz_tests,
                                   t_tune_tests,     t_coord_tests,     t_record_tests,   t_jax_tests,
                                   t_jaxffi_tests,   t_fastcall_tests,  t_cli_tests,      t_convention_tests,
                                   NULL};
  return t_main(suites, argc, argv);
}
