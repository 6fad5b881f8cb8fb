#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "usage: ktune COMMAND [ARGS]\n"
    "\n"
    "Autotuning GPU kernel runtime: compile, tune and inspect kernels described\n"
    "by JSON specs (see docs/spec-format.md).\n"
    "\n"
    "commands:\n"
    "  compile SPEC... [--arch sm_XY] [-o DIR] [--shape SHAPE]...\n"
    "                  compile every variant the spec allows, or those the shapes\n"
    "                  can use (no GPU needed); with -o, write .cubin files\n"
    "  tune SPEC... --shape SHAPE... [--shapes FILE] [--isolate] [--devices all]\n"
    "                  pre-warm the cache: tune each call on synthetic inputs\n"
    "  bench SPEC --shape SHAPE [--config CONFIG]\n"
    "                  time one config (or the cached one) of a call\n"
    "  key SPEC --shape 'N=24000,D=256,T=bf16'\n"
    "                  the canonical tuning key of a call: why calls share a tuning\n"
    "  lint SPEC...    phantom key fields and variants that do not compile\n"
    "  demo [SPEC]     run the bundled RMSNorm on GPU 0: config, time, GB/s\n"
    "  info            versions, GPUs and their fingerprints, the cache\n"
    "  list [KERNEL]   the cached configs as a table (--json for scripts)\n"
    "  show KERNEL     cached configs of a kernel with every candidate measured\n"
    "  export [-o FILE] [--binaries]\n"
    "                  write the cache as JSON (cubins too with --binaries)\n"
    "  import FILE     merge an export: the faster config of a key wins\n"
    "  gc [SPEC...]    drop configs of stale specs and unreferenced binaries\n"
    "\n"
    "options:\n"
    "  --help          this text; `ktune COMMAND --help` for one command\n"
    "  --version       library version\n"
    "\n"
    "environment: KTUNE_CACHE (cache file), KTUNE_SYSTEM_CACHE (read-only\n"
    "  cache consulted after it), KTUNE_LOG=error|warn|info|debug, CUDA_HOME\n"
    "exit codes: 0 success, 1 a command failed, 2 usage error\n";

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(usage_text, stdout);
    return EXIT_OK;
  }
  if (!strcmp(cmd, "--version")) {
    printf("ktune %s\n", kt_libversion());
    return EXIT_OK;
  }
  if (!strcmp(cmd, "compile")) return cmd_compile(argc - 1, argv + 1);
  if (!strcmp(cmd, "demo")) return cmd_demo(argc - 1, argv + 1);
  if (!strcmp(cmd, "list")) return cmd_list(argc - 1, argv + 1);
  if (!strcmp(cmd, "show")) return cmd_show(argc - 1, argv + 1);
  if (!strcmp(cmd, "export")) return cmd_export(argc - 1, argv + 1);
  if (!strcmp(cmd, "import")) return cmd_import(argc - 1, argv + 1);
  if (!strcmp(cmd, "gc")) return cmd_gc(argc - 1, argv + 1);
  if (!strcmp(cmd, "key")) return cmd_key(argc - 1, argv + 1);
  if (!strcmp(cmd, "lint")) return cmd_lint(argc - 1, argv + 1);
  if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "tune")) return cmd_tune(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
  fprintf(stderr, "ktune: unknown command '%s'\nTry 'ktune --help'.\n", cmd);
  return EXIT_USAGE;
}
