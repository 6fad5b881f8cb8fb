/* Launch arguments as any caller may pass them, against every bundled
** spec: per param a kind, a dtype and an address or a value drawn from the
** bytes, mostly from the edges (0, -1, the ends of int32 and int64,
** addresses near the end of the address space or misaligned, NaN). The
** calls that need no device (key, extents, config_for, lookup, tune)
** refuse or answer, never crash or overflow, and a launch never runs; an
** answer keeps what it promises: a key and a config fit their bounds
** whole, a chosen config reads back as one of the spec's, and a buffer's
** extent never runs past the address space. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static const char *const specs[] = {
    "kernels_src/rmsnorm.json",         "kernels_src/layernorm_fwd.json",       "kernels_src/layernorm_bwd.json",
    "kernels_src/layernorm_bwd_row.json", "kernels_src/layernorm_bwd_reduce.json", "kernels_src/masked_softmax.json",
    "kernels_src/permute_rows.json",    "kernels_src/permute_rows_bwd.json",    "kernels_src/chunk_state_fwd.json",
    "kernels_src/chunk_state_bwd.json", "kernels_src/chunk_state_bwd_scan.json", "tests/specs/small.json",
    "tests/specs/tune_at.json",
};
enum { NSPECS = sizeof specs / sizeof specs[0] };


static int64_t an_int(kt_fuzz_bytes *b) {
  static const int64_t edges[] = {0, 1, -1, 2, 3, 4, 7, 8, 16, 24, 64, 96, 255, 256, 1000, 1024, 2048, 4096,
                                  8192, 16384, 65536, 1 << 20, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN};
  uint8_t c = kt_fuzz_take(b);
  return c < 224 ? edges[c % (sizeof edges / sizeof edges[0])] : (int64_t)kt_fuzz_take64(b);
}

static float a_float(kt_fuzz_bytes *b) {
  static const float edges[] = {0.0f, 1e-6f, 1e-5f, 1.0f, -1.0f, 0.5f, 1e38f, -1e38f, 1e-45f, INFINITY, -INFINITY};
  uint8_t c = kt_fuzz_take(b);
  if (c == 255) return NAN;
  if (c < 224) return edges[c % (sizeof edges / sizeof edges[0])];
  uint32_t u = (uint32_t)kt_fuzz_take64(b);
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint64_t an_address(kt_fuzz_bytes *b, int i) {
  uint8_t c = kt_fuzz_take(b);
  switch (c % 8) {
  case 0: return 0;
  case 1: return (uint64_t)(i + 1) << 40;                     /* far apart */
  case 2: return ((uint64_t)1 << 40) + (uint64_t)(c >> 3) * 4; /* close: they may overlap */
  case 3: return UINT64_MAX - ((uint64_t)(c >> 3) << 12) + 1;  /* near the end */
  case 4: return ((uint64_t)(i + 1) << 40) + 1;              /* misaligned */
  default: return kt_fuzz_take64(b);
  }
}

static kt_arg an_arg(kt_fuzz_bytes *b, const kt_param_info *p, int i) {
  uint8_t c = kt_fuzz_take(b);
  kt_arg_kind kind = c < 240 ? p->kind : (kt_arg_kind)(c % 6);
  kt_dtype dt = KT_DTYPE_NONE;
  if (kt_dtype_parse(p->dtype, &dt) || (c & 7) == 7) dt = (kt_dtype)(kt_fuzz_take(b) % 12);
  switch (kind) {
  case KT_ARG_PTR: return kt_arg_ptr(an_address(b, i), dt);
  case KT_ARG_I32: return kt_arg_i32((int32_t)an_int(b));
  case KT_ARG_I64: return kt_arg_i64(an_int(b));
  case KT_ARG_F32: return kt_arg_f32(a_float(b));
  default: {
    kt_arg a = kt_arg_i64(an_int(b));
    a.kind = kind;
    return a;
  }
  }
}

/* Every answer checked against what ktune.h promises of it. */
static void check(kt_kernel *k, const kt_arg *a, int n) {
  static char key[KT_KEY_MAX], cfg[KT_CONFIG_MAX], json[KT_CONFIG_MAX];
  int np = kt_kernel_nparams(k);
  int keyed = !kt_kernel_key(k, a, n, key, sizeof key);
  if (keyed && (key[0] != '{' || strlen(key) >= sizeof key)) abort();
  int64_t ext[64];
  if (!kt_kernel_extents(k, a, n, ext))
    for (int i = 0; i < np; i++) {
      uint64_t bytes;
      kt_param_info p = {.size = sizeof p};
      if (kt_kernel_param(k, i, &p) || ext[i] < 0 || (p.kind != KT_ARG_PTR && ext[i])) abort();
      /* A call with a key had its ranges checked: none wraps round. */
      if (keyed && a[i].kind == KT_ARG_PTR && a[i].v.ptr &&
          (__builtin_mul_overflow((uint64_t)ext[i], (uint64_t)kt_dtype_size(a[i].dtype), &bytes) ||
           bytes > UINT64_MAX - a[i].v.ptr))
        abort();
    }
  if (!kt_kernel_config_for(k, a, n, cfg, sizeof cfg) && kt_kernel_config_json(k, cfg, json, sizeof json)) abort();
  kt_tune_report *r = NULL;
  if (!kt_kernel_lookup(k, a, n, &r) && (!r || !r->config || kt_kernel_config_json(k, r->config, json, sizeof json)))
    abort();
  kt_tune_report_free(r);
  r = NULL;
  if (!kt_kernel_tune(k, a, n, &r) && (!r || !r->config || kt_kernel_config_json(k, r->config, json, sizeof json)))
    abort();
  kt_tune_report_free(r);
  /* Without a device nothing launches, whatever the call. */
  if (!kt_launch(k, NULL, a, n) || (keyed && !kt_launch_config(k, NULL, a, n, cfg))) abort();
}

int kt_fuzz_call(const uint8_t *data, size_t size) {
  static kt_kernel *kernels[NSPECS];
  kt_fuzz_bytes b = {data, size};
  uint8_t which = kt_fuzz_take(&b);
  int s = which % NSPECS;
  if (!kernels[s]) kernels[s] = kt_fuzz_kernel(specs[s], NULL);
  kt_kernel *k = kernels[s];
  int np = kt_kernel_nparams(k);
  kt_arg a[64] = {{0}};
  for (int i = 0; i < np && i < 64; i++) {
    kt_param_info p = {.size = sizeof p};
    if (kt_kernel_param(k, i, &p)) abort();
    a[i] = an_arg(&b, &p, i);
  }
  /* Now and then a count other than the spec's. */
  int n = which >= 240 ? np + (int)(which % 3) - 1 : np;
  check(k, a, n < 0 ? 0 : n > 64 ? 64 : n);
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_call)
