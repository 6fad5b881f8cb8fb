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
    "ktune gc keeps the cubins of the specs it is given. Without -o, a cache\n"
    "that cannot be written fails the command before anything compiles.\n"
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

/* The count up front on stderr (a space may hold thousands of variants),
** then the terminal's progress line. */
static void progress(void *user, const char *kernel, const char *key, int done, int total, double best_us) {
  if (!done) fprintf(stderr, "%s: %d variant%s to compile\n", kernel, total, total == 1 ? "" : "s");
  cli_progress(user, kernel, key, done, total, best_us);
}

typedef struct opts {
  cli_list specs, shapes;
  const char *arch, *out, *cache;
} opts;

/* Every variant of k, or those the shapes can use; *bad counts what did
** not even start (a bad shape, a spec without a space to walk). */
static void compile_spec(kt_runtime *rt, kt_kernel *k, const char *spec, const opts *a, tally *t, int *bad) {
  if (!a->shapes.n) {
    if (kt_kernel_compile_all(k, a->out, on_variant, t) == KT_ERR_INVALID) {
      cli_fail("compile", "%s", cli_errmsg(rt));
      (*bad)++;
    }
    return;
  }
  for (int j = 0; j < a->shapes.n; j++) {
    kt_arg args[64];
    char err[512];
    if (shape_args(k, a->shapes.v[j], args, err, sizeof err)) {
      cli_fail("compile", "%s: --shape %s: %s", spec, a->shapes.v[j], err);
      (*bad)++;
      continue;
    }
    kt_status st = kt_kernel_compile_for(k, args, kt_kernel_nparams(k), a->out, on_variant, t);
    if (st && st != KT_ERR_COMPILE) {
      cli_fail("compile", "%s: --shape %s: %s", spec, a->shapes.v[j], cli_errmsg(rt));
      (*bad)++;
    }
  }
}

/* Each spec loaded once, with no cache and no device (for the arch named,
** or sm_90), its error said; loads[i] says which did. How many load, or
** -1 where that cannot be told. A run where none loads opens no cache,
** and so leaves no cache file behind. */
static int specs_that_load(const opts *a, int *loads) {
  kt_runtime *meta = cli_offline("compile", a->arch ? a->arch : "sm_90", 1);
  if (!meta) return -1;
  int n = 0;
  for (int i = 0; i < a->specs.n; i++) {
    kt_kernel *k;
    loads[i] = !kt_kernel_load(meta, a->specs.v[i], &k);
    if (!loads[i]) cli_fail("compile", "%s", cli_errmsg(meta));
    n += loads[i];
  }
  kt_runtime_close(meta);
  return n;
}

int cmd_compile(int argc, char **argv) {
  opts a = {0};
  const cli_opt options[] = {{"arch", 0, &a.arch, NULL, NULL},
                             {"output", 'o', &a.out, NULL, NULL},
                             {"shape", 0, NULL, &a.shapes, NULL},
                             {"cache", 0, &a.cache, NULL, NULL},
                             {0}};
  cli_cmd c = {"compile", help, options, &a.specs, 1, 256, "spec"};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  if (a.out && mkdir(a.out, 0777) && errno != EEXIST)
    return cli_fail("compile", "cannot create %s: %s", a.out, strerror(errno));
  int loads[256], loaded = specs_that_load(&a, loads);
  if (!loaded) {
    printf("0 variants compiled for %s, 0 failed, %d not started (the error%s above)\n", a.arch ? a.arch : "the GPU",
           a.specs.n, a.specs.n == 1 ? "" : "s");
    return EXIT_FAIL;
  }
  kt_options o;
  cli_options(&o, a.arch, a.arch != NULL);
  o.cache_path = a.cache;
  /* Without -o the cache is what the command makes: one that cannot be
  ** written fails it at once, not after compiling for nothing. */
  o.cache_required = a.out == NULL;
  o.progress = progress;
  kt_runtime *rt;
  if (kt_runtime_open(&rt, &o)) {
    rc = cli_fail("compile", "%s%s", cli_errmsg(rt), a.arch ? "" : " (give --arch to compile without a GPU)");
    kt_runtime_close(rt);
    return rc;
  }
  tally t = {0, 0};
  int bad = 0;
  for (int i = 0; i < a.specs.n; i++) {
    kt_kernel *k;
    if (loaded > 0 && !loads[i]) {
      bad++; /* said above */
    } else if (kt_kernel_load(rt, a.specs.v[i], &k)) {
      cli_fail("compile", "%s", cli_errmsg(rt));
      bad++;
    } else {
      compile_spec(rt, k, a.specs.v[i], &a, &t, &bad);
    }
  }
  /* bad counts specs that did not load and (spec, shape) pairs refused
  ** before compiling: each has its error above. */
  printf("%d variants compiled for %s, %d failed", t.ok, kt_runtime_arch(rt), t.failed);
  if (bad) printf(", %d not started (the error%s above)", bad, bad == 1 ? "" : "s");
  putchar('\n');
  kt_runtime_close(rt);
  return t.failed || bad ? EXIT_FAIL : EXIT_OK;
}
