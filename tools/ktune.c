/* ktune: the command line of the library (docs/cli.md). */
#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

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
    "  list [KERNEL]   the cached configs as a table\n"
    "  show KERNEL     cached configs of a kernel with every candidate measured\n"
    "  export [-o FILE] [--binaries]\n"
    "                  write the cache as JSON (cubins too with --binaries)\n"
    "  import FILE [--binaries]\n"
    "                  merge an export (- reads standard input): the faster\n"
    "                  config of a key wins; its cubins only with --binaries\n"
    "  gc [SPEC...]    drop configs of stale specs and unreferenced binaries\n"
    "\n"
    "options of every command: --help; --cache PATH where a cache is used;\n"
    "--json for output scripts read (list, show, info, key, lint, bench, tune,\n"
    "import, gc). Options take --name=value or --name value.\n"
    "  --help          this text; `ktune COMMAND --help` for one command\n"
    "  --version       library version\n"
    "\n"
    "exit codes: 0 success, 1 the command failed, 2 usage error\n"
    "\n"
    "environment:\n";

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
} command;

static const command commands[] = {
    {"compile", cmd_compile}, {"tune", cmd_tune}, {"bench", cmd_bench},   {"key", cmd_key},
    {"lint", cmd_lint},       {"demo", cmd_demo}, {"info", cmd_info},     {"list", cmd_list},
    {"show", cmd_show},       {"export", cmd_export}, {"import", cmd_import}, {"gc", cmd_gc},
};

/* NVRTC allocates and frees large blocks in every compile. By default glibc
** returns them to the kernel (munmap, heap trims) and the next compile faults
** them in again, which costs the kernel time and, across compile threads,
** contention on the process's address space. This process keeps them. A
** library leaves the embedding process's allocator alone; the command line
** is its own process. */
static void keep_freed_memory(void) {
#ifdef __GLIBC__
  (void)mallopt(M_MMAP_THRESHOLD, 256 << 20); /* 0 on failure: the default stays */
  (void)mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : NULL;
  keep_freed_memory();
  if (!cmd || !strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    FILE *f = cmd ? stdout : stderr;
    fputs(usage_text, f);
    cli_print_env(f);
    return cmd ? EXIT_OK : EXIT_USAGE;
  }
  if (!strcmp(cmd, "--version")) {
    printf("ktune %s\n", kt_libversion());
    return EXIT_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(cmd, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "ktune: unknown command '%s'\nTry 'ktune --help'.\n", cmd);
  return EXIT_USAGE;
}
