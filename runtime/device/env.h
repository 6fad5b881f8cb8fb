/* What the layers from variants up share of one runtime: where messages
** and log lines go, the cache, the device and the counters of
** kt_runtime_stats(). Dispatch owns it (struct kt_runtime embeds one);
** the layers below it receive a pointer and never reach further up. */
#ifndef KT_ENV_H
#define KT_ENV_H

#include <stdatomic.h>

#include "base/error.h"
#include "device/driver.h"

struct kt_store;

/* Counters of kt_runtime_stats(), bumped from any thread. */
typedef struct kt__counters {
  atomic_uint_fast64_t misses, tunings, trials, compiles, cache_loads, binary_loads, fallbacks;
  atomic_uint_fast64_t tune_us, compile_us;
  atomic_uint_fast64_t standins, async_queued, async_done, async_failed;
  atomic_uint_fast64_t published, followed, coord_failed;
} kt__counters;

typedef struct kt__env {
  uint64_t id;             /* the runtime's error-message slot (kt__err) */
  kt__logger log;
  struct kt_store *store;  /* NULL when no cache is used */
  int have_device;
  void *ctx;               /* the device's primary context */
  kt__devinfo dev;
  char arch[16];           /* "sm_90" */
  int cc;                  /* 90 for sm_90 */
  char fingerprint[300];   /* "NAME/sm_XY/SMS": GPUs of one model share rows */
  char *cuda_home;
  kt__counters n;
} kt__env;

#endif
