/* A message another rank publishes (kt_options.coord), whatever its bytes:
** the follower refuses it or takes a config valid for its call; nothing
** crashes, leaks or is loaded without its digest matching. The message is
** served by a coordinator that returns the fuzz input, to the reader of
** the bundled RMSNorm's small spec: as a follower fetches it, and as an
** owner whose publish the store refused reads the message there. */
#include <stdlib.h>
#include <string.h>

#include "dispatch/handles.h"
#include "fuzz.h"
#include "ktune.h"

static const uint8_t *msg;
static size_t msglen;

/* The store refuses every publish: the name holds another message (the
** fuzz input), which the owner then reads and follows. */
static int publish(void *user, const char *name, const void *bytes, size_t len) {
  (void)user, (void)name, (void)bytes, (void)len;
  return -1;
}

static int fetch(void *user, const char *name, void *buf, size_t cap, size_t *len, int timeout_ms) {
  (void)user, (void)name, (void)timeout_ms;
  *len = msglen;
  memcpy(buf, msg, msglen < cap ? msglen : cap);
  return 0;
}

static kt_kernel *kernel(kt__call *c) {
  static kt_kernel *k;
  static kt__call call;
  if (!k) {
    const kt_coordinator coord = {.rank = 0, .size = 2, .timeout_s = 1, .publish = publish, .fetch = fetch};
    kt_arg a[] = {kt_arg_ptr(1 << 24, KT_BF16), kt_arg_ptr(2 << 24, KT_BF16), kt_arg_ptr(0, KT_BF16),
                  kt_arg_ptr(3 << 24, KT_BF16), kt_arg_i32(64), kt_arg_i32(1024), kt_arg_f32(1e-6f)};
    k = kt_fuzz_kernel("tests/specs/small.json", &coord);
    if (kt__call_bind(&k->p, a, 7, &call)) abort();
  }
  *c = call;
  return k;
}

int kt_fuzz_coord(const uint8_t *data, size_t size) {
  kt__call c;
  kt_kernel *k = kernel(&c);
  int64_t cfg[KT_MAX_CFIELDS];
  char why[KT_ERRMAX];
  msg = data;
  msglen = size;
  kt__coord_fetch(k, &c, "{\"D\":1024}", 0, cfg, why, sizeof why);
  int64_t mine[KT_MAX_CFIELDS];
  if (kt__call_fallback(&k->p, &c, mine)) abort();
  kt__coord_publish(k, &c, "{\"D\":1024}", mine, NULL, cfg);
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_coord)
