/* Shared by the ktune subcommands. */
#ifndef KT_CLI_H
#define KT_CLI_H

#include "ktune.h"

/* Exit codes, documented in `ktune --help`. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* The log sink of the CLI: "ktune: warn: ..." on stderr. */
void cli_log(void *user, kt_log_level level, const char *msg);
/* Options with the CLI's log sink; arch NULL means "from the device". */
void cli_options(kt_options *o, const char *arch, int no_device);
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

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
