/* NVRTC in helper processes (ktune-nvrtc). NVRTC serializes some of its
** stages across the threads of one process, so that 16 compiling threads
** keep about half of 16 CPUs busy; the same compiles spread over processes
** do not wait on each other. A build's groups go to helpers, started on
** demand (at most one per compiling thread) and ended after a few idle
** seconds; without a helper, compiles run in this process as before.
** Thread-safe. */
#ifndef KT_RCOMPILE_H
#define KT_RCOMPILE_H

#include <stddef.h>

#include "base/error.h"

/* As kt__nvrtc_compile_many, in a helper process when one can be had,
** else in this process (without "--pch": a process that ends by a signal
** would leave NVRTC's precompiled headers behind, device/pchdir.h). A
** helper that crashes while compiling fails the group (KT_ERR_COMPILE,
** "the NVRTC helper process died: signal 11"): whatever killed it would
** kill this process too. One ended from outside (SIGKILL, SIGTERM) hands
** the group to a fresh helper, twice at most. The first helper that cannot
** be started turns helpers off for the process, with a log line.
** *refused is 1 where the status is NVRTC's own answer that the source
** does not compile (KT_ERR_COMPILE from NVRTC, here or in a helper), a
** verdict the next compile would give again; 0 for every other status
** (a helper that died, NVRTC missing, out of memory). */
kt_status kt__rc_compile_many(const kt__logger *log, const char *src, const char *prog_name,
                              const char *const *exprs, int n, const char *const *opts, int nopts, void **cubin,
                              size_t *size, char **lowered, int *refused, char *err, size_t errlen);

/* Where compiles run, for people: "helper processes (PATH)", or "this
** process (WHY)". Starts nothing. */
void kt__rc_describe(char *out, size_t n);

/* End this process's helpers and look for the helper again when next
** needed (the environment may have changed); kt_runtime_close calls it
** when the last runtime closes. Tests: later helpers wait idle_ms for a
** request (0: the default). */
void kt__rc_reset(int idle_ms);
/* Tests: how many helpers this process has started. */
unsigned kt__rc_started(void);

/* The helper's body: answers requests on fd until it is closed, or until
** idle_ms pass without one; nvrtc_file is the NVRTC its parent loaded
** ("" to look for it as the parent would). NVRTC's "--pch" is dropped
** unless pch says this process owns where NVRTC writes precompiled headers
** (device/pchdir.h), as it is from compiles in the library's own process.
** Returns the exit status. */
int kt__rc_serve(int fd, const char *nvrtc_file, int idle_ms, int pch);

#endif
