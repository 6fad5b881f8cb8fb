/* What the ktune subcommands share: option parsing (getopt_long), the exit
** codes, the log sink and runtime options, messages in the user's words,
** JSON written with cJSON, and progress on a terminal. */
#ifndef KT_CLI_H
#define KT_CLI_H

#include <cJSON.h>
#include <stdio.h>

#include "ktune.h"

/* Exit codes, the same for every command (`ktune --help`). */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* Positional arguments, or the values of a repeated option. */
typedef struct cli_list {
  const char *v[256];
  int n;
} cli_list;

/* One option: --name (and -letter when not 0). An option with a value
** stores it in *value (the last one given wins) or appends it to *list; one
** without sets *flag to 1. */
typedef struct cli_opt {
  const char *name;
  int letter;
  const char **value;
  cli_list *list;
  int *flag;
} cli_opt;

typedef struct cli_cmd {
  const char *name;      /* "tune" */
  const char *help;      /* printed by --help and -h */
  const cli_opt *opts;   /* ends with a zeroed entry */
  cli_list *pos;         /* positional arguments */
  int min_pos, max_pos;
  const char *pos_what;  /* "a spec": what a missing one is called */
} cli_cmd;

/* Parse argv[1..] (argv[0] is the command's word) with getopt_long:
** --name=value, --name value, -xVALUE, combined short flags and `--` all
** work. Returns 0 to go on, -1 after printing the help (exit 0), or
** EXIT_USAGE after saying what is wrong. */
int cli_parse(const cli_cmd *c, int argc, char **argv);
/* A usage error: "ktune CMD: message" and the hint; returns EXIT_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A failure: "ktune CMD: message" on stderr; returns EXIT_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* kt_errmsg(rt) in the user's words: without the library function's name
** an embedder sees first ("kt_runtime_open: arch ..." says "arch ..."). */
const char *cli_errmsg(const kt_runtime *rt);

/* s as kt_text_visible(KT_TEXT_CONTROLS) shows it, in buf (n bytes, cut
** where it ends), or s itself where it shows as it is: text from a file (a
** path, a cached row) printed to a terminal stays on its line and cannot
** move the cursor, recolour or reverse what follows. */
const char *cli_visible(const char *s, char *buf, size_t n);
/* Options with the library's own log; arch NULL means "from the device". */
void cli_options(kt_options *o, const char *arch, int no_device);
/* A runtime with neither device nor cache, for reading specs and keys and
** compiling for arch (NULL: for none), progress on a terminal; NULL where
** it does not open, which is said as cmd's error unless quiet. quiet also
** keeps its log to errors, for a command whose second runtime says its
** warnings. Caller owns the runtime; close with kt_runtime_close(). */
kt_runtime *cli_offline(const char *cmd, const char *arch, int quiet);
/* A kt_progress_fn that draws "KERNEL: WHAT done/total" on a terminal's
** stderr (nothing elsewhere); key names what is counted. */
void cli_progress(void *user, const char *kernel, const char *key, int done, int total, double best_us);

/* Print a JSON value (consumed) on one line of stdout, as UTF-8: a byte of
** a string that is not is written as the text \xNN. EXIT_FAIL when it
** could not be made (out of memory), else EXIT_OK. */
int cli_print_json(cJSON *v);
/* A number, or null for a value that is unknown (< 0). */
cJSON *cli_json_num(double v);

/* `ktune --help`'s table of environment variables, one per line. */
void cli_print_env(FILE *f);

int cmd_compile(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_key(int argc, char **argv);
int cmd_lint(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
