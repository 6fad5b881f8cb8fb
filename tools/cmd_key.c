/* ktune key and ktune lint: why two calls share a tuning, and what in a
** spec would make them not. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "shape.h"

static const char key_help[] =
    "usage: ktune key SPEC --shape 'N=24000,D=256,T=bf16' [--shape ...] [--json]\n"
    "\n"
    "Print the canonical tuning key of each call, as the cache stores it.\n"
    "Pointers are non-null and 16-byte aligned unless the shape says\n"
    "NAME=null or NAME@BYTES (an address offset by BYTES). Type variables\n"
    "take NAME=dtype (or dtype=...). Params the key ignores may be left out.\n"
    "A call that no config of the spec fits gets a note on stderr saying why\n"
    "(with --json: \"default\" null and \"no_config\"); its launches fail.\n"
    "exit codes: 0 keys printed, 1 the spec did not load, 2 usage (a bad shape)\n";

static const char lint_help[] =
    "usage: ktune lint SPEC... [--arch sm_XY] [--json]\n"
    "\n"
    "Report phantom key fields (scalars in the tuning key that neither the\n"
    "kernel nor the spec reads), variants that do not compile, and spaces that\n"
    "mostly do not compile. Every variant is compiled for the arch (sm_90 by\n"
    "default); a terminal shows the progress. Notes (advice, not problems)\n"
    "name sizes the key leaves out, without tune_at, that set the grid beside\n"
    "a config field, and sizes it leaves out that a constraint holds config\n"
    "fields against.\n"
    "exit codes: 0 no problem, 1 problems found or a spec did not load, 2 usage\n";

/* The key of a call, and the config it runs untuned: a call that no config
** of the spec fits has a key, but every launch of it fails, so that is said
** (a note on stderr; "default": null and "no_config" in JSON). */
static void print_key(kt_kernel *k, kt_runtime *rt, const char *shape, const kt_arg *args, const char *key,
                      cJSON *out) {
  char def[KT_CONFIG_MAX];
  kt_status st = kt_kernel_default_for(k, args, kt_kernel_nparams(k), def, sizeof def);
  const char *why = st ? cli_errmsg(rt) : NULL;
  if (!out) {
    printf("%s\n", key);
    if (why) fprintf(stderr, "ktune key: note: --shape %s: %s; a launch of it fails (%s)\n", shape, why,
                     kt_status_name(st));
    return;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "shape", shape);
  cJSON_AddItemToObject(o, "key", cJSON_Parse(key));
  cJSON_AddItemToObject(o, "default", why ? cJSON_CreateNull() : cJSON_CreateString(def));
  if (why) cJSON_AddStringToObject(o, "no_config", why);
  cJSON_AddItemToArray(out, o);
}

int cmd_key(int argc, char **argv) {
  cli_list spec = {0}, shapes = {0};
  int json = 0;
  const cli_opt opts[] = {{"shape", 0, NULL, &shapes, NULL}, {"json", 0, NULL, NULL, &json}, {0}};
  cli_cmd c = {"key", key_help, opts, &spec, 1, 1, "spec"};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  if (!shapes.n) return cli_usage("key", "give at least one --shape");
  kt_runtime *rt = cli_offline("key", NULL, 0);
  kt_kernel *k;
  if (!rt) return EXIT_FAIL;
  if (kt_kernel_load(rt, spec.v[0], &k)) {
    cli_fail("key", "%s", cli_errmsg(rt));
    kt_runtime_close(rt);
    return EXIT_FAIL;
  }
  cJSON *out = json ? cJSON_CreateArray() : NULL;
  for (int i = 0; i < shapes.n && !rc; i++) {
    kt_arg args[64];
    char err[1024], key[KT_KEY_MAX];
    if (shape_args(k, shapes.v[i], args, err, sizeof err)) rc = cli_usage("key", "--shape %s: %s", shapes.v[i], err);
    else if (kt_kernel_key(k, args, kt_kernel_nparams(k), key, sizeof key))
      rc = cli_usage("key", "--shape %s: %s", shapes.v[i], cli_errmsg(rt));
    else
      print_key(k, rt, shapes.v[i], args, key, out);
  }
  if (out && !rc) rc = cli_print_json(out);
  else cJSON_Delete(out);
  kt_runtime_close(rt);
  return rc;
}

typedef struct lint_out {
  const char *spec;
  cJSON *problems, *notes; /* --json */
  int nnotes;
} lint_out;

#define NOTE "note: "

static void on_problem(void *user, const char *msg) {
  lint_out *l = user;
  int note = !strncmp(msg, NOTE, strlen(NOTE));
  l->nnotes += note;
  if (l->problems) cJSON_AddItemToArray(note ? l->notes : l->problems, cJSON_CreateString(note ? msg + strlen(NOTE) : msg));
  else printf("%s: %s\n", l->spec, msg);
}

/* One spec: its problems, or why it did not load (-1); *notes counts its
** advice. */
static int lint_one(kt_runtime *rt, const char *spec, cJSON *out, int *notes) {
  kt_kernel *k;
  int problems = 0;
  cJSON *o = out ? cJSON_CreateObject() : NULL;
  lint_out l = {spec, o ? cJSON_CreateArray() : NULL, o ? cJSON_CreateArray() : NULL, 0};
  int bad = kt_kernel_load(rt, spec, &k) || kt_kernel_lint(k, on_problem, &l, &problems);
  if (bad && !o) cli_fail("lint", "%s", cli_errmsg(rt));
  if (o) {
    cJSON_AddStringToObject(o, "spec", spec);
    cJSON_AddItemToObject(o, "problems", l.problems);
    cJSON_AddItemToObject(o, "notes", l.notes);
    cJSON_AddItemToObject(o, "error", bad ? cJSON_CreateString(cli_errmsg(rt)) : cJSON_CreateNull());
    cJSON_AddItemToArray(out, o);
  }
  *notes += l.nnotes;
  return bad ? -1 : problems;
}

int cmd_lint(int argc, char **argv) {
  cli_list specs = {0};
  const char *arch = "sm_90";
  int json = 0;
  const cli_opt opts[] = {{"arch", 0, &arch, NULL, NULL}, {"json", 0, NULL, NULL, &json}, {0}};
  cli_cmd c = {"lint", lint_help, opts, &specs, 1, 256, "spec"};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  kt_runtime *rt = cli_offline("lint", arch, 0);
  if (!rt) return EXIT_FAIL;
  int total = 0, failed = 0, notes = 0;
  cJSON *out = json ? cJSON_CreateObject() : NULL, *list = out ? cJSON_AddArrayToObject(out, "specs") : NULL;
  for (int i = 0; i < specs.n; i++) {
    int n = lint_one(rt, specs.v[i], list, &notes);
    if (n < 0) failed++;
    else total += n;
  }
  if (out) {
    cJSON_AddNumberToObject(out, "problems", total);
    cJSON_AddNumberToObject(out, "notes", notes);
    cJSON_AddNumberToObject(out, "not_loaded", failed);
    cli_print_json(out);
  } else {
    printf("%d problem%s in %d spec%s", total, total == 1 ? "" : "s", specs.n - failed,
           specs.n - failed == 1 ? "" : "s");
    if (notes) printf(", %d note%s", notes, notes == 1 ? "" : "s");
    if (failed) printf("; %d spec%s did not load", failed, failed == 1 ? "" : "s");
    printf("\n");
  }
  kt_runtime_close(rt);
  return failed || total ? EXIT_FAIL : EXIT_OK;
}
