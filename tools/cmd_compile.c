#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "shape.h"

static const char help[] =
    "usage: ktune compile SPEC... [--arch sm_XY] [-o DIR] [--shape SHAPE]... [--cache PATH]\n"
    "\n"
    "Compile every variant each spec's space allows: every dtype, config and\n"
    "derived-constant value, less those a constraint on these alone excludes.\n"
    "With --shape, only the variants those calls can use (every config the\n"
    "constraints allow for them); specs with specialized params need it.\n"
    "Runs without a GPU when --arch is given; otherwise the arch of GPU 0.\n"
    "Writes the cache: each cubin goes to its binaries table (with its size\n"
    "and digest), where a GPU machine of that arch loads it without NVRTC;\n"
    "ktune gc keeps the cubins of the specs it is given.\n"
    "Prints one line per variant: status, name, cubin bytes, compile time.\n"
    "\n"
    "  --arch sm_XY  target architecture (e.g. sm_90)\n"
    "  -o DIR        also write DIR/<kernel.constants>.cubin (DIR is created)\n"
    "                and DIR/<kernel>.manifest.json: each cubin's size and digest\n"
    "  --shape SHAPE a call, as for ktune key: 'N=4096,D=2048,T=bf16,res=null'\n"
    "  --cache PATH  the cache file (default: $KTUNE_CACHE, else the user cache)\n"
    "\n"
    "exit codes: 0 every variant compiled, 1 a spec or variant failed, 2 usage\n";

typedef struct tally {
  int ok, failed;
} tally;

static void on_variant(void *user, const char *name, kt_status st, size_t bytes, double ms,
                       const char *err) {
  tally *t = user;
  if (st == KT_OK) {
    t->ok++;
    printf("ok    %s  %zu bytes  %.0f ms\n", name, bytes, ms);
  } else {
    t->failed++;
    printf("FAIL  %s  %s\n", name, err);
  }
  fflush(stdout);
}

int cmd_compile(int argc, char **argv) {
  const char *arch = NULL, *out = NULL, *cache = NULL;
  const char *specs[256], *shapes[64];
  int nspecs = 0, nshapes = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(help, stdout);
      return EXIT_OK;
    } else if (!strcmp(argv[i], "--arch")) {
      if (++i == argc) return cli_usage("compile", "--arch needs a value such as sm_90");
      arch = argv[i];
    } else if (!strcmp(argv[i], "--shape")) {
      if (++i == argc) return cli_usage("compile", "--shape needs a value such as 'N=4096,D=2048,T=bf16'");
      if (nshapes == 64) return cli_usage("compile", "at most 64 shapes");
      shapes[nshapes++] = argv[i];
    } else if (!strcmp(argv[i], "-o")) {
      if (++i == argc) return cli_usage("compile", "-o needs a directory");
      out = argv[i];
    } else if (!strcmp(argv[i], "--cache")) {
      if (++i == argc) return cli_usage("compile", "--cache needs a path");
      cache = argv[i];
    } else if (argv[i][0] == '-') {
      return cli_usage("compile", "unknown option '%s'", argv[i]);
    } else if (nspecs == 256) {
      return cli_usage("compile", "at most 256 specs");
    } else {
      specs[nspecs++] = argv[i];
    }
  }
  if (!nspecs) return cli_usage("compile", "no spec given");
  if (out && mkdir(out, 0777) && errno != EEXIST) {
    fprintf(stderr, "ktune compile: cannot create %s: %s\n", out, strerror(errno));
    return EXIT_FAIL;
  }
  kt_options o;
  cli_options(&o, arch, arch != NULL);
  o.cache_path = cache;
  kt_runtime *rt;
  if (kt_runtime_open(&rt, &o)) {
    fprintf(stderr, "ktune compile: %s%s\n", kt_errmsg(rt),
            arch ? "" : " (give --arch to compile without a GPU)");
    kt_runtime_close(rt);
    return EXIT_FAIL;
  }
  tally t = {0, 0};
  int bad_specs = 0;
  for (int i = 0; i < nspecs; i++) {
    kt_kernel *k;
    if (kt_kernel_load(rt, specs[i], &k)) {
      fprintf(stderr, "ktune compile: %s\n", kt_errmsg(rt));
      bad_specs++;
      continue;
    }
    if (!nshapes) {
      if (kt_kernel_compile_all(k, out, on_variant, &t) == KT_ERR_INVALID) {
        fprintf(stderr, "ktune compile: %s\n", kt_errmsg(rt));
        bad_specs++;
      }
      continue;
    }
    for (int j = 0; j < nshapes; j++) {
      kt_arg args[64];
      char err[512];
      if (shape_args(k, shapes[j], args, err, sizeof err)) {
        fprintf(stderr, "ktune compile: %s: --shape %s: %s\n", specs[i], shapes[j], err);
        bad_specs++;
        continue;
      }
      kt_status st = kt_kernel_compile_for(k, args, kt_kernel_nparams(k), out, on_variant, &t);
      if (st && st != KT_ERR_COMPILE) {
        fprintf(stderr, "ktune compile: %s: --shape %s: %s\n", specs[i], shapes[j], kt_errmsg(rt));
        bad_specs++;
      }
    }
  }
  printf("%d variants compiled for %s, %d failed%s\n", t.ok, kt_runtime_arch(rt), t.failed,
         bad_specs ? ", and a spec did not load" : "");
  kt_runtime_close(rt);
  return t.failed || bad_specs ? EXIT_FAIL : EXIT_OK;
}
