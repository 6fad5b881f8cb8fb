#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "base/alloc.h"

typedef struct job {
  atomic_int next;
  int n;
  void (*fn)(void *, int);
  void *user;
} job;

static void *worker(void *arg) {
  job *j = arg;
  for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) j->fn(j->user, i);
  return NULL;
}

/* The CPUs this process may run on (taskset, a container's cpuset), not
** every CPU of the machine: more compiling threads than that only queue. */
int kt__ncpus(void) {
  cpu_set_t set;
  if (!sched_getaffinity(0, sizeof set, &set) && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

void kt__parallel_for(int n, int nthreads, void (*fn)(void *user, int i),
                      void *user) {
  job j = {.n = n, .fn = fn, .user = user};
  atomic_init(&j.next, 0);
  if (nthreads > n) nthreads = n;
  if (nthreads > 64) nthreads = 64;
  pthread_t t[64];
  int started = 0;
  /* A thread that cannot be started only means less parallelism. */
  for (int i = 1; i < nthreads; i++)
    if (!pthread_create(&t[started], NULL, worker, &j)) started++;
  worker(&j);
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
}
