/* What the ktune subcommands share: the log sink, runtime options, usage
** errors. */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>

void cli_log(void *user, kt_log_level level, const char *msg) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  (void)user;
  fprintf(stderr, "ktune: %s: %s\n", level <= KT_LOG_DEBUG ? names[level] : "log", msg);
}

void cli_options(kt_options *o, const char *arch, int no_device) {
  kt_options_init(o);
  o->log = cli_log;
  o->arch = arch;
  o->no_device = no_device;
}

int cli_usage(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "ktune %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry 'ktune %s --help'.\n", cmd);
  return EXIT_USAGE;
}
