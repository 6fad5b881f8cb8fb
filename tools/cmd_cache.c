/* ktune list, show, export, import, gc: the cache as people and scripts see it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char list_help[] =
    "usage: ktune list [KERNEL] [--json] [--cache PATH]\n"
    "\n"
    "Print the cached configs (user cache, then system cache) as a table, or\n"
    "as a JSON array with --json. --cache overrides $KTUNE_CACHE.\n";
static const char show_help[] =
    "usage: ktune show KERNEL [--json] [--cache PATH]\n"
    "\n"
    "Print each cached config of KERNEL with every candidate measured for\n"
    "its key: status, median and spread, registers, shared memory, spills.\n";
static const char export_help[] =
    "usage: ktune export [-o FILE] [--binaries] [--cache PATH]\n"
    "\n"
    "Write the configs (and with --binaries the compiled cubins, base64) as\n"
    "JSON, to FILE or standard output.\n";
static const char import_help[] =
    "usage: ktune import FILE [--cache PATH]\n"
    "\n"
    "Merge an export into the cache: a config replaces the cached one only\n"
    "when it is faster. Reports configs added, kept and replaced.\n";
static const char gc_help[] =
    "usage: ktune gc [SPEC...] [--cache PATH]\n"
    "\n"
    "Remove configs of each SPEC's kernel whose spec hash is not the spec's\n"
    "current one (with their trials and quarantine entries), then compiled\n"
    "binaries that no config refers to.\n";

typedef struct args {
  const char *cmd, *help;
  const char *pos[256];
  int npos;
  const char *cache, *out;
  int json, binaries;
} args;

/* Parse the options every cache command shares; returns -1 after printing
** help, or an exit code > 0 on a usage error. */
static int parse(args *a, int argc, char **argv, int max_pos, int allow_out, int allow_bin) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      fputs(a->help, stdout);
      return -1;
    } else if (!strcmp(s, "--cache")) {
      if (++i == argc) return cli_usage(a->cmd, "--cache needs a path");
      a->cache = argv[i];
    } else if (!strcmp(s, "--json") && !allow_out) {
      a->json = 1;
    } else if (!strcmp(s, "-o") && allow_out) {
      if (++i == argc) return cli_usage(a->cmd, "-o needs a file");
      a->out = argv[i];
    } else if (!strcmp(s, "--binaries") && allow_bin) {
      a->binaries = 1;
    } else if (s[0] == '-' && s[1]) {
      return cli_usage(a->cmd, "unknown option '%s'", s);
    } else if (a->npos == max_pos) {
      return cli_usage(a->cmd, "unexpected argument '%s'", s);
    } else {
      a->pos[a->npos++] = s;
    }
  }
  return 0;
}

/* The cache of a command: read-only for those that only read, so that
** they never create, change or convert a file. */
static kt_runtime *open_cache(const args *a, int readonly) {
  kt_options o;
  cli_options(&o, NULL, 1);
  o.cache_path = a->cache;
  o.cache_readonly = readonly;
  kt_runtime *rt;
  kt_status st = kt_runtime_open(&rt, &o);
  if (!st && kt_cache_path(rt)[0]) return rt;
  kt_runtime_info in = {0};
  if (!st) kt_runtime_get_info(rt, &in);
  fprintf(stderr, "ktune %s: %s\n", a->cmd, st ? kt_errmsg(rt) : in.cache_error);
  kt_runtime_close(rt);
  return NULL;
}

static void json_str(const char *s) {
  putchar('"');
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

typedef struct listing {
  int json, n;
  kt_runtime *rt;
  int with_trials;
} listing;

static void age(char *buf, size_t n, int64_t t) {
  long long s = (long long)(time(NULL) - t);
  if (s < 120) snprintf(buf, n, "%llds", s);
  else if (s < 7200) snprintf(buf, n, "%lldm", s / 60);
  else if (s < 172800) snprintf(buf, n, "%lldh", s / 3600);
  else snprintf(buf, n, "%lldd", s / 86400);
}

static int on_trial(void *user, const kt_trial_row *t) {
  listing *l = user;
  if (l->json) {
    printf("%s{\"config\":%s,\"status\":", l->n++ ? "," : "", t->config);
    json_str(t->status);
    printf(",\"median_us\":%.3f,\"spread_us\":%.3f,\"registers\":%d,\"smem_bytes\":%d,\"spill_bytes\":%d,\"detail\":",
           t->median_us, t->spread_us, t->registers, t->smem_bytes, t->spill_bytes);
    json_str(t->detail);
    printf("}");
  } else {
    char med[32] = "-", spr[32] = "-";
    if (t->median_us >= 0) snprintf(med, sizeof med, "%.2f", t->median_us);
    if (t->spread_us >= 0) snprintf(spr, sizeof spr, "%.2f", t->spread_us);
    printf("    %-40s %-13s %9s %8s %5d %7d %6d  %s\n", t->config, t->status, med, spr, t->registers,
           t->smem_bytes, t->spill_bytes, t->detail ? t->detail : "");
  }
  return 0;
}

static int on_row(void *user, const kt_cache_row *r) {
  listing *l = user;
  if (l->json) {
    printf("%s\n {\"kernel\":", l->n++ ? "," : "");
    json_str(r->kernel);
    printf(",\"spec_hash\":");
    json_str(r->spec_hash);
    printf(",\"device\":");
    json_str(r->device);
    printf(",\"key\":%s,\"config\":%s,\"time_us\":%.3f,\"candidates\":%d,\"rejected\":%d,"
           "\"updated_at\":%lld,\"source\":\"%s\"",
           r->key, r->config, r->time_us, r->candidates, r->rejected, (long long)r->updated_at,
           r->from_system ? "system" : "user");
    if (l->with_trials) {
      listing t = {1, 0, l->rt, 0};
      printf(",\"trials\":[");
      kt_cache_trials(l->rt, r, on_trial, &t);
      printf("]");
    }
    printf("}");
    return 0;
  }
  char a[16];
  age(a, sizeof a, r->updated_at);
  if (!l->n++ && !l->with_trials)
    printf("%-16s %-34s %-30s %-30s %9s %5s %s\n", "kernel", "device", "key", "config", "time_us", "age",
           "source");
  printf("%-16s %-34s %-30s %-30s %9.2f %5s %s\n", r->kernel, r->device, r->key, r->config, r->time_us, a,
         r->from_system ? "system" : "user");
  if (l->with_trials) {
    printf("    %-40s %-13s %9s %8s %5s %7s %6s  %s\n", "candidate", "status", "median_us", "spread", "regs",
           "smem", "spill", "detail");
    listing t = {0, 0, l->rt, 0};
    kt_cache_trials(l->rt, r, on_trial, &t);
    printf("    %d candidates, %d rejected\n\n", r->candidates, r->rejected);
  }
  return 0;
}

static int listing_cmd(int argc, char **argv, const char *cmd, const char *help, int trials) {
  args a = {.cmd = cmd, .help = help};
  int rc = parse(&a, argc, argv, 1, 0, 0);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  if (trials && !a.npos) return cli_usage(cmd, "name the kernel to show");
  kt_runtime *rt = open_cache(&a, 1);
  if (!rt) return EXIT_FAIL;
  listing l = {a.json, 0, rt, trials};
  if (a.json) printf("[");
  kt_status st = kt_cache_list(rt, a.npos ? a.pos[0] : NULL, on_row, &l);
  if (a.json) printf("\n]\n");
  else if (!l.n) printf("no configs cached%s%s in %s\n", a.npos ? " for " : "", a.npos ? a.pos[0] : "", kt_cache_path(rt));
  if (st) fprintf(stderr, "ktune %s: %s\n", cmd, kt_errmsg(rt));
  kt_runtime_close(rt);
  return st ? EXIT_FAIL : EXIT_OK;
}

int cmd_list(int argc, char **argv) { return listing_cmd(argc, argv, "list", list_help, 0); }
int cmd_show(int argc, char **argv) { return listing_cmd(argc, argv, "show", show_help, 1); }

int cmd_export(int argc, char **argv) {
  args a = {.cmd = "export", .help = export_help};
  int rc = parse(&a, argc, argv, 0, 1, 1);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  kt_runtime *rt = open_cache(&a, 1);
  if (!rt) return EXIT_FAIL;
  kt_status st = kt_cache_export(rt, a.out ? a.out : "-", a.binaries);
  if (st) fprintf(stderr, "ktune export: %s\n", kt_errmsg(rt));
  else if (a.out) fprintf(stderr, "ktune export: wrote %s\n", a.out);
  kt_runtime_close(rt);
  return st ? EXIT_FAIL : EXIT_OK;
}

int cmd_import(int argc, char **argv) {
  args a = {.cmd = "import", .help = import_help};
  int rc = parse(&a, argc, argv, 1, 1, 0);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  if (a.out) return cli_usage("import", "unknown option '-o'");
  if (!a.npos) return cli_usage("import", "name the file to import");
  kt_runtime *rt = open_cache(&a, 0);
  if (!rt) return EXIT_FAIL;
  long c[4];
  kt_status st = kt_cache_import(rt, a.pos[0], c);
  if (st) fprintf(stderr, "ktune import: %s\n", kt_errmsg(rt));
  else printf("%ld added, %ld kept, %ld replaced, %ld binaries added\n", c[0], c[1], c[2], c[3]);
  kt_runtime_close(rt);
  return st ? EXIT_FAIL : EXIT_OK;
}

int cmd_gc(int argc, char **argv) {
  args a = {.cmd = "gc", .help = gc_help};
  int rc = parse(&a, argc, argv, 256, 1, 0);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  if (a.out) return cli_usage("gc", "unknown option '-o'");
  kt_runtime *rt = open_cache(&a, 0);
  if (!rt) return EXIT_FAIL;
  kt_kernel *ks[256];
  for (int i = 0; i < a.npos; i++)
    if (kt_kernel_load(rt, a.pos[i], &ks[i])) {
      fprintf(stderr, "ktune gc: %s\n", kt_errmsg(rt));
      kt_runtime_close(rt);
      return EXIT_FAIL;
    }
  long cfgs, bins;
  kt_status st = kt_cache_gc(rt, ks, a.npos, &cfgs, &bins);
  if (st) fprintf(stderr, "ktune gc: %s\n", kt_errmsg(rt));
  else printf("%ld stale configs removed, %ld unreferenced binaries removed\n", cfgs, bins);
  kt_runtime_close(rt);
  return st ? EXIT_FAIL : EXIT_OK;
}
