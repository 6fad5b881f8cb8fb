/* What a public call says of arguments it cannot take: a NULL handle or
** pointer, a value out of range, a buffer too small for its text; and what
** it gives back in a caller's struct of another version than its own. */
#include <stdio.h>
#include <string.h>

#include "dispatch/handles.h"

kt_status kt__misuse(const kt_runtime *rt, const char *fn, const char *why) {
  return kt__err(rt ? rt->env.id : 0, KT_ERR_INVALID, "%s: %s", fn, why);
}

kt_status kt__reentry(const kt_runtime *rt, const char *fn, int kind) {
  if (!kt__in_callback(kind)) return KT_OK;
  if (kind == KT__CB_ROWS)
    return kt__misuse(rt, fn, "called from a callback of one of the runtime's calls, which is still running: call it "
                              "once that call has returned");
  return kt__misuse(rt, fn, "called from a log, progress or coordinator callback, which runs while the runtime may "
                            "hold the locks this call takes");
}

kt_status kt__copy_out(const kt_runtime *rt, const char *fn, const char *what, const char *text, char *buf,
                       size_t n) {
  size_t len = strlen(text) + 1;
  if (len <= n) {
    memcpy(buf, text, len);
    return KT_OK;
  }
  buf[0] = 0;
  char why[128];
  snprintf(why, sizeof why, "the %s needs %zu bytes, bufsize is %zu", what, len, n);
  return kt__misuse(rt, fn, why);
}

void kt__copy_sized(void *out, const void *all, size_t known) {
  size_t have;
  memcpy(&have, out, sizeof have);
  size_t n = have < known ? have : known;
  memcpy(out, all, n);
  memcpy(out, &n, sizeof n);
}
