/* ktune key and ktune lint: why two calls share a tuning, and what in a
** spec would make them not. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "shape.h"

static const char key_help[] =
    "usage: ktune key SPEC --shape 'N=24000,D=256,T=bf16' [--shape ...]\n"
    "\n"
    "Print the canonical tuning key of each call, as the cache stores it.\n"
    "Pointers are non-null and 16-byte aligned unless the shape says\n"
    "NAME=null or NAME@BYTES (an address offset by BYTES). Type variables\n"
    "take NAME=dtype (or dtype=...). Params the key ignores may be left out.\n";

static const char lint_help[] =
    "usage: ktune lint SPEC... [--arch sm_XY]\n"
    "\n"
    "Report phantom key fields (scalars in the tuning key that neither the\n"
    "kernel nor the spec reads) and variants that do not compile.\n"
    "exit codes: 0 no problem, 1 problems found, 2 usage\n";

int cmd_key(int argc, char **argv) {
  const char *spec = NULL, *shapes[64];
  int nshapes = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(key_help, stdout);
      return EXIT_OK;
    } else if (!strcmp(argv[i], "--shape")) {
      if (++i == argc) return cli_usage("key", "--shape needs a value such as 'N=24000,D=256'");
      if (nshapes == 64) return cli_usage("key", "at most 64 shapes");
      shapes[nshapes++] = argv[i];
    } else if (argv[i][0] == '-') {
      return cli_usage("key", "unknown option '%s'", argv[i]);
    } else if (spec) {
      return cli_usage("key", "one spec at a time");
    } else {
      spec = argv[i];
    }
  }
  if (!spec) return cli_usage("key", "no spec given");
  if (!nshapes) return cli_usage("key", "give at least one --shape");
  kt_options o;
  cli_options(&o, NULL, 1);
  o.no_cache = 1;
  kt_runtime *rt;
  kt_kernel *k;
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, spec, &k)) {
    fprintf(stderr, "ktune key: %s\n", kt_errmsg(rt));
    kt_runtime_close(rt);
    return EXIT_FAIL;
  }
  int rc = EXIT_OK;
  for (int i = 0; i < nshapes; i++) {
    kt_arg args[64];
    char err[1024], key[2048];
    if (shape_args(k, shapes[i], args, err, sizeof err)) {
      fprintf(stderr, "ktune key: %s\n", err);
      rc = EXIT_FAIL;
    } else if (kt_kernel_key(k, args, kt_kernel_nparams(k), key, sizeof key)) {
      fprintf(stderr, "ktune key: %s\n", kt_errmsg(rt));
      rc = EXIT_FAIL;
    } else {
      printf("%s\n", key);
    }
  }
  kt_runtime_close(rt);
  return rc;
}

static void on_problem(void *user, const char *msg) {
  printf("%s: %s\n", (const char *)user, msg);
}

int cmd_lint(int argc, char **argv) {
  const char *arch = "sm_90", *specs[256];
  int nspecs = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(lint_help, stdout);
      return EXIT_OK;
    } else if (!strcmp(argv[i], "--arch")) {
      if (++i == argc) return cli_usage("lint", "--arch needs a value such as sm_90");
      arch = argv[i];
    } else if (argv[i][0] == '-') {
      return cli_usage("lint", "unknown option '%s'", argv[i]);
    } else if (nspecs < 256) {
      specs[nspecs++] = argv[i];
    }
  }
  if (!nspecs) return cli_usage("lint", "no spec given");
  kt_options o;
  cli_options(&o, arch, 1);
  o.no_cache = 1;
  kt_runtime *rt;
  if (kt_runtime_open(&rt, &o)) {
    fprintf(stderr, "ktune lint: %s\n", kt_errmsg(rt));
    kt_runtime_close(rt);
    return EXIT_FAIL;
  }
  int total = 0, failed = 0;
  for (int i = 0; i < nspecs; i++) {
    kt_kernel *k;
    int problems = 0;
    if (kt_kernel_load(rt, specs[i], &k) || kt_kernel_lint(k, on_problem, (void *)specs[i], &problems)) {
      fprintf(stderr, "ktune lint: %s\n", kt_errmsg(rt));
      failed = 1;
      continue;
    }
    total += problems;
  }
  printf("%d problem%s in %d spec%s\n", total, total == 1 ? "" : "s", nspecs, nspecs == 1 ? "" : "s");
  kt_runtime_close(rt);
  return failed || total ? EXIT_FAIL : EXIT_OK;
}
