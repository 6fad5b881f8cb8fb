/* Where a helper process's NVRTC keeps its precompiled headers. NVRTC
** writes them (9 to 22 MB a process) under $TMPDIR, in
** "__nvrtc_auto_pch_PID_N", and removes them only from exit(): a process
** that ends by a signal or _exit leaves them for good. So a helper
** (ktune-nvrtc) gives NVRTC a directory of its own, "ktune-nvrtc.PID.XXXXXX"
** under $TMPDIR (else /tmp), holds an flock on it while it lives, removes
** it when it ends or on SIGTERM, and on its start removes the directories
** of helpers that are gone (nothing holds their lock). Processes that are
** not helpers never ask NVRTC for precompiled headers. Linux only. */
#ifndef KT_PCHDIR_H
#define KT_PCHDIR_H

#include <stddef.h>

/* In a helper, before NVRTC is loaded: removes the directories dead helpers
** left, makes this process's own, points TMPDIR at it and removes it on
** SIGTERM. 0, or -1 with why in why[n] (the helper then compiles without
** precompiled headers, which nothing would remove). Once a process. */
int kt__pchdir_claim(char *why, size_t n);

/* Removes the directory kt__pchdir_claim made; at the helper's end. */
void kt__pchdir_release(void);

/* Removes, under dir, the "ktune-nvrtc.*" directories of this user whose
** lock nothing holds and that have not changed for min_age_s seconds (a
** helper locks its directory a moment after making it). Never follows a
** link. How many it removed. */
int kt__pchdir_sweep(const char *dir, int min_age_s);

#endif
