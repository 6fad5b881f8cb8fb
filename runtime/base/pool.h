/* Run fn(user, i) for i in [0, n) on up to nthreads threads (the caller's
** among them). Used to compile variants in parallel: each thread hands
** its NVRTC programs to a helper process (device/rcompile.h). */
#ifndef KT_POOL_H
#define KT_POOL_H

void kt__parallel_for(int n, int nthreads, void (*fn)(void *user, int i),
                      void *user);
/* The CPUs this process may run on, at least 1. */
int kt__ncpus(void);

#endif
