/* ktune tune: pre-warm the cache for a list of (spec, shape) calls, on
** synthetic inputs, in this process or in worker processes (one per GPU,
** restarted when a trial faults or hangs): options and the job list here,
** reports in tunereport.c, running in tunepool.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "shape.h"
#include "tunerun.h"

static const char help[] =
    "usage: ktune tune SPEC... (--shape SHAPE)... [--shapes FILE] [options]\n"
    "\n"
    "Tune each (spec, shape) on synthetic inputs and store the winners in the\n"
    "cache. Shapes that map to one tuning key are tuned once. Keys already\n"
    "cached are skipped (and counted) unless --force.\n"
    "\n"
    "  --shape SHAPE       a call: 'N=4096,D=2048,T=bf16,res=null,x@2' (see ktune key)\n"
    "  --shapes FILE       calls as JSON lines: {\"kernel\": \"layernorm_fwd\", \"N\": 4096,\n"
    "                      \"D\": 2048, \"T\": \"bf16\", \"res\": null}; \"kernel\" (optional)\n"
    "                      picks the spec; \"x@\": 2 offsets a pointer by bytes\n"
    "  --force             tune keys that are cached already (again)\n"
    "  --isolate           run trials in worker processes: a config that faults or\n"
    "                      hangs kills only its worker, is quarantined, and tuning\n"
    "                      goes on in a fresh worker\n"
    "  --trial-timeout S   with --isolate: a worker silent for S seconds (default 60;\n"
    "                      5 x S before its first trial, which includes compiling) is\n"
    "                      killed and its config quarantined as a hang\n"
    "  --devices LIST      GPUs to use: 0,1,... or all (default 0); jobs are spread\n"
    "                      over them, one worker process each\n"
    "  --strategy NAME     exhaustive, random or local (default: exhaustive up to 256\n"
    "                      candidates, else random with a 10 s budget)\n"
    "  --budget S          stop starting trials of a key after S seconds\n"
    "  --no-prune          compile and measure every candidate, also those whose\n"
    "                      field values the measurements so far say lose\n"
    "  --cache PATH        the cache file (default: $KTUNE_CACHE, else the user cache)\n"
    "  --json              one JSON object per key on stdout, then a summary object\n"
    "  --plain             plain lines even on a terminal (no progress bar)\n"
    "\n"
    "Without --isolate a config that faults ends the run, named and quarantined.\n"
    "exit codes: 0 every key tuned or cached, 1 a key failed, 2 usage\n";

/* 0, -1 out of memory, or -2 for a shape too long to keep whole. */
static int add_job(tune_run *r, int spec, const char *shape) {
  if (strlen(shape) >= SHAPE_MAX) return -2;
  if (r->njobs == r->cap) {
    int cap = r->cap ? 2 * r->cap : 16;
    job *nj = realloc(r->jobs, (size_t)cap * sizeof *nj);
    if (!nj) return -1;
    r->jobs = nj;
    r->cap = cap;
  }
  job *j = &r->jobs[r->njobs++];
  memset(j, 0, sizeof *j);
  j->spec = spec;
  j->same_as = -1;
  snprintf(j->shape, sizeof j->shape, "%s", shape);
  return 0;
}

/* The longest line of a --shapes file (a shape at its bounds, spelled as
** JSON with room to spare), and the most bytes read from one: a device
** such as /dev/zero ends there. */
enum { SHAPES_LINE_MAX = 4 * SHAPE_MAX };
_Static_assert(SHAPES_LINE_MAX == 16384, "read_line's message names the bound");
#define SHAPES_FILE_MAX ((size_t)1 << 30)
/* Lines with errors said before the rest of a file is left unread: a file
** that is no shapes file at all (random bytes) would say millions. */
enum { SHAPES_ERRORS_MAX = 20 };

/* What read_line says of a line that holds a NUL byte and no line end in
** SHAPES_LINE_MAX bytes: no text (/dev/zero, a binary), never read on. */
static const char not_text[] = "a NUL byte and no line end in 16384 bytes: not a text file; the rest is not read";

/* One line of f, its newline dropped, into line (SHAPES_LINE_MAX + 1
** bytes): 1, or 0 at the end of f (or past SHAPES_FILE_MAX bytes, *total
** counting them). A line too long or holding a NUL byte is read to its end
** and *why says what is wrong with it; one with both ends there, *why
** not_text. */
static int read_line(FILE *f, char *line, size_t *total, const char **why) {
  size_t n = 0, len = 0;
  int c, any = 0, nul = 0;
  *why = NULL;
  while ((c = getc(f)) != EOF && ++*total <= SHAPES_FILE_MAX) {
    any = 1;
    if (c == '\n') break;
    len++;
    if (!c) *why = "a NUL byte in the line", nul = 1;
    else if (n < SHAPES_LINE_MAX) line[n++] = (char)c;
    else if (!*why) *why = "longer than 16384 bytes";
    if (nul && len > SHAPES_LINE_MAX) {
      *why = not_text;
      break;
    }
  }
  line[n] = 0;
  return any && *total <= SHAPES_FILE_MAX;
}

/* One line's shape given to each spec it names. 0, or 1 (said). */
static int shapes_line(tune_run *r, const char *path, int lineno, const char *p) {
  char shape[SHAPE_MAX], kernel[KT_NAME_MAX + 1], err[512];
  if (shape_from_json(p, shape, sizeof shape, kernel, sizeof kernel, err, sizeof err))
    return cli_fail("tune", "%s:%d: %s", path, lineno, err);
  int matched = 0, rc = 0;
  for (int s = 0; s < r->o.nspecs; s++) {
    if (kernel[0] && strcmp(kernel, r->o.names[s])) continue;
    matched = 1;
    if (add_job(r, s, shape)) rc = cli_fail("tune", "out of memory");
  }
  if (!matched) rc = cli_fail("tune", "%s:%d: kernel \"%s\" is none of the specs given", path, lineno, kernel);
  return rc;
}

static int load_shapes(tune_run *r, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    cli_fail("tune", "%s: %s", path, strerror(errno));
    return -1;
  }
  static char line[SHAPES_LINE_MAX + 1];
  size_t total = 0;
  int lineno = 0, rc = 0, bad = 0;
  for (const char *why; bad < SHAPES_ERRORS_MAX && read_line(f, line, &total, &why);) {
    lineno++;
    const char *p = line + strspn(line, " \t\r"); /* a blank line of a file with CRLF ends is blank */
    if (why) rc = cli_fail("tune", "%s:%d: %s", path, lineno, why), bad++;
    if (why == not_text) break;
    else if (*p && *p != '#' && shapes_line(r, path, lineno, p)) rc = 1, bad++;
  }
  if (bad == SHAPES_ERRORS_MAX && read_line(f, line, &total, &(const char *){NULL}))
    cli_fail("tune", "%s: %d lines with errors; the lines after line %d are not read", path, bad, lineno);
  int read_error = ferror(f);
  fclose(f);
  if (read_error) return cli_fail("tune", "%s: cannot read: %s", path, strerror(errno)), -1;
  if (total > SHAPES_FILE_MAX) return cli_fail("tune", "%s: larger than 1 GiB", path), -1;
  if (!lineno) cli_fail("tune", "%s: no shapes", path);
  return lineno ? rc : -1;
}

static int parse_devices(topts *o, const char *s) {
  if (!strcmp(s, "all")) {
    o->ndev = -1;
    return 0;
  }
  o->ndev = 0;
  while (*s) {
    char *end;
    long d = strtol(s, &end, 10);
    if (end == s || d < 0 || d > 63 || o->ndev == 64 || (*end && *end != ',')) return -1;
    o->devices[o->ndev++] = (int)d;
    s = *end ? end + 1 : end;
  }
  return o->ndev ? 0 : -1;
}

typedef struct targs {
  cli_list specs, shapes;
  const char *shapes_file, *timeout, *budget, *strategy, *devices;
} targs;

/* The options' values, checked; a usage error's exit code, or 0. */
static int check_options(tune_run *r, const targs *a) {
  static const struct {
    const char *name;
    kt_strategy s;
  } strategies[] = {{"exhaustive", KT_STRATEGY_EXHAUSTIVE}, {"random", KT_STRATEGY_RANDOM}, {"local", KT_STRATEGY_LOCAL}};
  const char *secs[2] = {a->timeout, a->budget};
  double *dst[2] = {&r->o.trial_timeout, &r->o.budget};
  static const char *names[2] = {"--trial-timeout", "--budget"};
  for (int i = 0; i < 2; i++) {
    char *end;
    if (!secs[i]) continue;
    double v = strtod(secs[i], &end);
    if (end == secs[i] || *end || !(v > 0)) return cli_usage("tune", "%s needs a number of seconds > 0", names[i]);
    *dst[i] = v;
  }
  if (a->strategy) {
    size_t i = 0;
    while (i < sizeof strategies / sizeof strategies[0] && strcmp(a->strategy, strategies[i].name)) i++;
    if (i == sizeof strategies / sizeof strategies[0])
      return cli_usage("tune", "--strategy must be exhaustive, random or local");
    r->o.strategy = strategies[i].s;
  }
  if (a->devices && parse_devices(&r->o, a->devices)) return cli_usage("tune", "--devices takes a list such as 0,1 or all");
  if (!a->shapes.n && !a->shapes_file) return cli_usage("tune", "no shape given: use --shape or --shapes");
  if (r->o.json && r->o.plain) return cli_usage("tune", "--json and --plain exclude each other");
  return 0;
}

static int parse_args(tune_run *r, targs *a, int argc, char **argv) {
  const cli_opt opts[] = {{"shape", 0, NULL, &a->shapes, NULL},   {"shapes", 0, &a->shapes_file, NULL, NULL},
                          {"force", 0, NULL, NULL, &r->o.force},   {"isolate", 0, NULL, NULL, &r->o.isolate},
                          {"json", 0, NULL, NULL, &r->o.json},     {"plain", 0, NULL, NULL, &r->o.plain},
                          {"trial-timeout", 0, &a->timeout, NULL, NULL}, {"budget", 0, &a->budget, NULL, NULL},
                          {"strategy", 0, &a->strategy, NULL, NULL},   {"devices", 0, &a->devices, NULL, NULL},
                          {"cache", 0, &r->o.cache, NULL, NULL},   {"no-prune", 0, NULL, NULL, &r->o.no_prune},
                          {0}};
  cli_cmd c = {"tune", help, opts, &a->specs, 1, 256, "spec"};
  int rc = cli_parse(&c, argc, argv);
  if (rc) return rc;
  for (int i = 0; i < a->specs.n; i++) r->o.specs[i] = a->specs.v[i];
  r->o.nspecs = a->specs.n;
  return check_options(r, a);
}

/* Each job's key, before any GPU work, by a runtime without a device;
** jobs with the key of an earlier one are marked. A usage error's exit
** code, or 0. */
static int keys(tune_run *r, kt_runtime *meta, kt_kernel **ks) {
  for (int i = 0; i < r->njobs; i++) {
    job *j = &r->jobs[i];
    kt_arg args[64];
    char err[600];
    if (shape_args(ks[j->spec], j->shape, args, err, sizeof err))
      return cli_usage("tune", "%s: --shape %s: %s", r->o.specs[j->spec], j->shape, err);
    if (kt_kernel_key(ks[j->spec], args, kt_kernel_nparams(ks[j->spec]), j->key, sizeof j->key))
      return cli_usage("tune", "%s: --shape %s: %s", r->o.specs[j->spec], j->shape, cli_errmsg(meta));
    for (int p = 0; p < i && j->same_as < 0; p++)
      if (r->jobs[p].spec == j->spec && r->jobs[p].same_as < 0 && !strcmp(r->jobs[p].key, j->key)) j->same_as = p;
  }
  return 0;
}

/* The specs loaded (names kept), the jobs listed and keyed. */
static int plan(tune_run *r, const targs *a) {
  kt_kernel *ks[256];
  kt_runtime *meta = cli_offline("tune", "sm_90", 0);
  int rc = meta ? EXIT_OK : EXIT_FAIL;
  for (int s = 0; s < r->o.nspecs && !rc; s++) {
    if (kt_kernel_load(meta, r->o.specs[s], &ks[s])) rc = cli_fail("tune", "%s", cli_errmsg(meta));
    else snprintf(r->o.names[s], sizeof r->o.names[s], "%s", kt_kernel_name(ks[s]));
  }
  for (int i = 0; i < a->shapes.n && !rc; i++)
    for (int s = 0; s < r->o.nspecs && !rc; s++) {
      int e = add_job(r, s, a->shapes.v[i]);
      if (e == -2) rc = cli_usage("tune", "--shape %.40s...: longer than %d characters", a->shapes.v[i], SHAPE_MAX - 1);
      else if (e) rc = cli_fail("tune", "out of memory");
    }
  if (!rc && a->shapes_file && load_shapes(r, a->shapes_file)) rc = EXIT_USAGE;
  if (!rc) rc = keys(r, meta, ks);
  kt_runtime_close(meta);
  return rc;
}

int cmd_tune(int argc, char **argv) {
  tune_run r;
  targs a;
  memset(&r, 0, sizeof r);
  memset(&a, 0, sizeof a);
  r.o.trial_timeout = 60;
  r.compiles = -1;
  r.o.ndev = 1;
  r.current = -1;
  int rc = parse_args(&r, &a, argc, argv);
  if (!rc) rc = plan(&r, &a);
  if (rc) {
    free(r.jobs);
    return rc < 0 ? EXIT_OK : rc;
  }
  r.tty = isatty(2);
  r.t0 = tunejob_now();
  int st = r.o.isolate || r.o.ndev != 1 ? run_workers(&r) : run_inprocess(&r);
  int failed = st < 0 ? -1 : run_summary(&r);
  free(r.jobs);
  return st || failed ? EXIT_FAIL : EXIT_OK;
}
