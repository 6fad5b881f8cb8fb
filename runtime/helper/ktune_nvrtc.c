/* ktune-nvrtc: the process in which libktune runs NVRTC for a build of
** many variants (runtime/device/rcompile.h says why). The library starts
** it with its end of a socket as descriptor 3; it is not run by hand. */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/pchdir.h"
#include "device/rcompile.h"

int main(int argc, char **argv) {
  if (argc != 4 || strcmp(argv[1], "--serve")) {
    fprintf(stderr, "ktune-nvrtc: the helper process in which libktune compiles kernels; the library starts it\n");
    return 2;
  }
  /* Its life is its parent's socket. A terminal's Ctrl-C, Ctrl-\ or hangup
  ** goes to the whole process group: the parent decides. If it ends, its
  ** end closes and the helper ends through exit; if it lives on (a caught
  ** KeyboardInterrupt), its tuning still needs the helper. */
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  /* NVRTC frees and takes back large blocks in every compile: keep them
  ** (as the ktune command does) rather than fault them in again. */
  (void)mallopt(M_MMAP_THRESHOLD, 256 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 1 << 30);
  char why[512];
  int pch = !kt__pchdir_claim(why, sizeof why);
  int rc = kt__rc_serve(3, argv[3], atoi(argv[2]), pch);
  kt__pchdir_release();
  return rc;
}
