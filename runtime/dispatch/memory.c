#include "dispatch/handles.h"

static kt_status need_device(kt_runtime *rt, const char *call, char *err, size_t errlen) {
  if (!rt) return kt__misuse(NULL, call, "rt is NULL");
  if (!rt->env.have_device)
    return kt__err(rt->env.id, KT_ERR_NO_DEVICE, "%s: this runtime was opened without a device", call);
  kt_status st = kt__dev_use(rt->env.ctx, err, errlen);
  if (st) return kt__err(rt->env.id, st, "%s: %s", call, err);
  return KT_OK;
}

#define WITH_DEVICE(call, body)                          \
  do {                                                   \
    char err[KT_ERRMAX];                                 \
    kt_status st = need_device(rt, call, err, sizeof err); \
    if (st) return st;                                   \
    if ((st = (body))) return kt__err(rt->env.id, st, "%s", err); \
    return KT_OK;                                        \
  } while (0)

kt_status kt_device_alloc(kt_runtime *rt, size_t bytes, uint64_t *out) {
  if (!out) return kt__misuse(rt, "kt_device_alloc", "out is NULL");
  WITH_DEVICE("kt_device_alloc", kt__dev_malloc(out, bytes, err, sizeof err));
}

kt_status kt_device_free(kt_runtime *rt, uint64_t p) {
  if (!p) return KT_OK;
  WITH_DEVICE("kt_device_free", (kt__dev_free(p), KT_OK));
}

kt_status kt_device_upload(kt_runtime *rt, uint64_t dst, const void *src, size_t bytes) {
  if (!src && bytes) return kt__misuse(rt, "kt_device_upload", "src is NULL");
  WITH_DEVICE("kt_device_upload", kt__dev_htod(dst, src, bytes, err, sizeof err));
}

kt_status kt_device_download(kt_runtime *rt, void *dst, uint64_t src, size_t bytes) {
  if (!dst && bytes) return kt__misuse(rt, "kt_device_download", "dst is NULL");
  WITH_DEVICE("kt_device_download", kt__dev_dtoh(dst, src, bytes, err, sizeof err));
}

static kt_status fill(uint64_t dst, uint8_t byte, size_t bytes, char *err, size_t errlen) {
  kt_status st = kt__dev_memset8_async(dst, byte, bytes, NULL, err, errlen);
  return st ? st : kt__dev_sync(NULL, err, errlen);
}

kt_status kt_device_fill(kt_runtime *rt, uint64_t dst, uint8_t byte, size_t bytes) {
  WITH_DEVICE("kt_device_fill", fill(dst, byte, bytes, err, sizeof err));
}

kt_status kt_stream_sync(kt_runtime *rt, kt_stream s) {
  WITH_DEVICE("kt_stream_sync", kt__dev_sync(s, err, sizeof err));
}

kt_status kt_stream_create(kt_runtime *rt, kt_stream *out) {
  if (!out) return kt__misuse(rt, "kt_stream_create", "out is NULL");
  WITH_DEVICE("kt_stream_create", kt__dev_stream_create(out, err, sizeof err));
}

kt_status kt_stream_destroy(kt_runtime *rt, kt_stream s) {
  if (!s) return KT_OK;
  WITH_DEVICE("kt_stream_destroy", (kt__dev_stream_destroy(s), KT_OK));
}
