/* Argument binding and config choice, which happen before anything touches
** a device: checked with a runtime opened without one. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "base/clock.h"
#include "harness.h"
#include "tools/shape.h"
#include "ktune.h"

#define ARGS(y, x, res, w, n, d)                                                     \
  {kt_arg_ptr(y, KT_BF16), kt_arg_ptr(x, KT_BF16), kt_arg_ptr(res, KT_BF16),         \
   kt_arg_ptr(w, KT_BF16), kt_arg_i32(n), kt_arg_i32(d), kt_arg_f32(1e-6f)}

static void bad_arguments_are_named(void) {
  kt_runtime *rt = t_offline(0);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  kt_arg a[] = ARGS(0x10000, 0x20000, 0, 0x30000, 4, 256);
  ASSERT_STATUS(kt_launch(k, NULL, a, 6), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: 6 args given, the spec has 7 params");
  a[1].v.ptr = 0;
  ASSERT_STATUS(kt_launch(k, NULL, a, 7), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: arg 1 (x) is null but not optional");
  a[1] = kt_arg_ptr(0x20000, KT_F32);
  ASSERT_STATUS(kt_launch(k, NULL, a, 7), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: arg 1 (x) is f32, but T=bf16 from arg 0 (y)");
  a[1] = kt_arg_ptr(0x20000, KT_BF16);
  a[5] = kt_arg_i64(256);
  ASSERT_STATUS(kt_launch(k, NULL, a, 7), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: arg 5 (D) must be i32, got i64");
  a[5] = kt_arg_i32(256);
  a[0] = kt_arg_ptr(0x10000, KT_I32);
  ASSERT_STATUS(kt_launch(k, NULL, a, 7), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: arg 0 (y): dtype i32 is not one of T's types");
  /* A scalar load at an address its element does not align would fault. */
  a[0] = kt_arg_ptr(0x10001, KT_BF16);
  ASSERT_STATUS(kt_launch(k, NULL, a, 7), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: arg 0 (y) at 0x10001 is not aligned to its bf16 elements (2 bytes)");
  /* Nor may a buffer run past the end of the address space: its last
  ** elements' addresses would wrap round to the first bytes of it. */
  a[0] = kt_arg_ptr(0xfffffffffffffc00ull, KT_BF16);
  static const char wrap[] = "rmsnorm_fwd: arg 0 (y): its extent, N * D, is 1024 elements of 2 bytes: from "
                             "0xfffffffffffffc00 they pass the end of the address space";
  ASSERT_STATUS(kt_launch(k, NULL, a, 7), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), wrap);
  char buf[256];
  ASSERT_STATUS(kt_kernel_key(k, a, 7, buf, sizeof buf), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), wrap);
  a[0] = kt_arg_ptr(0xfffffffffffff000ull, KT_BF16); /* ends short of it: a buffer */
  ASSERT_STATUS(kt_kernel_key(k, a, 7, buf, sizeof buf), KT_OK);
  /* An extent below 0 is no buffer's, for the extents alone too. */
  int64_t ext[7];
  a[5] = kt_arg_i32(-256);
  ASSERT_STATUS(kt_kernel_extents(k, a, 7, ext), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: arg 0 (y): its extent, N * D, is -1024 elements: below 0");
  a[5] = kt_arg_i32(256);
  ASSERT_STATUS(kt_kernel_extents(k, a, 7, ext), KT_OK);
  ASSERT_EQ(ext[0] * 10 + ext[4], 10240);
  a[0] = kt_arg_ptr(0x10000, KT_BF16);
  ASSERT_STATUS(kt_launch(k, NULL, a, 7), KT_ERR_NO_DEVICE);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: this runtime was opened without a device");
  kt_runtime_close(rt);
}

/* A tensor of no elements has a null address (torch, XLA): a pointer whose
** extent is 0 for the call may be null where the spec does not make it
** optional, since nothing reads or writes it. Such a call binds, has a key
** and is looked up; a call that writes nothing launches nothing on a GPU
** (gpu rmsnorm), and without one says there is none. */
static void null_pointers_of_no_elements_bind(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("kernels_src/rmsnorm.json", &rt);
  if (!k) return;
  kt_arg a[] = ARGS(0, 0, 0, 0x30000, 0, 256);
  char key[KT_KEY_MAX];
  ASSERT_STATUS(kt_kernel_key(k, a, 7, key, sizeof key), KT_OK);
  ASSERT_STR_EQ(key, "{\"D\":256,\"HAS_RES\":0,\"T\":\"bf16\",\"res\":0,\"w\":16,\"x\":0,\"y\":0}");
  kt_tune_report *rep = NULL;
  ASSERT_STATUS(kt_kernel_lookup(k, a, 7, &rep), KT_OK);
  kt_tune_report_free(rep);
  ASSERT_STATUS(kt_launch(k, NULL, a, 7), KT_ERR_NO_DEVICE);
  a[4] = kt_arg_i32(3);
  ASSERT_STATUS(kt_kernel_key(k, a, 7, key, sizeof key), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: arg 0 (y) is null but not optional");
  a[0].v.ptr = 0x10000;
  ASSERT_STATUS(kt_launch(k, NULL, a, 7), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: arg 1 (x) is null but not optional");
  kt_runtime_close(rt);
}

/* A call given a NULL handle or pointer, or an index out of range: its
** status, and the message naming the argument, on the runtime (on) or on
** kt_errmsg(NULL) (on is NULL). */
#define MISUSE(call, on, text)                   \
  do {                                           \
    ASSERT_STATUS(call, KT_ERR_INVALID);         \
    ASSERT_STR_EQ(kt_errmsg(on), text);          \
  } while (0)

static void misuse_is_named(void) {
  kt_runtime *rt = t_offline(0);
  ASSERT_TRUE(rt);
  kt_kernel *k, *none[2] = {NULL, NULL};
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  kt_arg a[7] = {0};
  char buf[64];
  long n[5], gone;
  double us;
  int64_t elems[7];
  kt_tune_report *rep;
  kt_stats st = {.size = 8};
  MISUSE(kt_options_init(NULL), NULL, "kt_options_init: o is NULL");
  MISUSE(kt_runtime_open(NULL, NULL), NULL, "kt_runtime_open: out is NULL");
  MISUSE(kt_runtime_get_info(rt, NULL), rt, "kt_runtime_get_info: out is NULL");
  kt_runtime_info ri = {.size = 0};
  MISUSE(kt_runtime_get_info(rt, &ri), rt,
         "kt_runtime_get_info: out->size is smaller than kt_runtime_info's first version");
  MISUSE(kt_runtime_stats(rt, &st), rt, "kt_runtime_stats: out->size is smaller than kt_stats' first version");
  MISUSE(kt_runtime_wait_tuning(rt, NAN), rt, "kt_runtime_wait_tuning: timeout_s is NaN");
  MISUSE(kt_runtime_stop_tuning(NULL), NULL, "kt_runtime_stop_tuning: rt is NULL");
  MISUSE(kt_device_count(NULL), NULL, "kt_device_count: out is NULL");
  MISUSE(kt_kernel_load(rt, NULL, &k), rt, "kt_kernel_load: spec_path is NULL");
  MISUSE(kt_kernel_load(rt, "", &k), rt, "kt_kernel_load: spec_path is empty");
  MISUSE(kt_kernel_load(NULL, "kernels_src/rmsnorm.json", &k), NULL, "kt_kernel_load: rt is NULL");
  MISUSE(kt_launch(NULL, NULL, a, 7), NULL, "kt_launch: k is NULL");
  MISUSE(kt_launch_config(NULL, NULL, a, 7, NULL), NULL, "kt_launch_config: k is NULL");
  MISUSE(kt_kernel_key(k, a, 7, buf, 0), rt, "kt_kernel_key: buf is NULL or bufsize is 0");
  MISUSE(kt_kernel_config_for(k, a, 7, NULL, 8), rt, "kt_kernel_config_for: buf is NULL or bufsize is 0");
  MISUSE(kt_kernel_default_for(NULL, a, 7, buf, 8), NULL, "kt_kernel_default_for: k is NULL");
  MISUSE(kt_kernel_tune(k, a, 7, NULL), rt, "kt_kernel_tune: out is NULL");
  MISUSE(kt_kernel_tune_shape(NULL, a, 7, &rep), NULL, "kt_kernel_tune_shape: k is NULL");
  MISUSE(kt_kernel_lookup(k, a, 7, NULL), rt, "kt_kernel_lookup: out is NULL");
  MISUSE(kt_kernel_compile_all(NULL, NULL, NULL, NULL), NULL, "kt_kernel_compile_all: k is NULL");
  MISUSE(kt_kernel_compile_for(k, NULL, 7, NULL, NULL, NULL), rt, "kt_kernel_compile_for: args is NULL");
  MISUSE(kt_kernel_time(k, a, 7, NULL, &us, NULL), rt, "kt_kernel_time: median_us or spread_us is NULL");
  MISUSE(kt_inputs_make(k, a, 7, 1, NULL), rt, "kt_inputs_make: out is NULL");
  MISUSE(kt_kernel_param(k, 7, NULL), rt, "kt_kernel_param: out is NULL");
  kt_param_info pi = {.size = sizeof pi};
  MISUSE(kt_kernel_param(k, 7, &pi), rt, "kt_kernel_param: i is not a param's index");
  pi.size = sizeof pi - 1;
  MISUSE(kt_kernel_param(k, 0, &pi), rt, "kt_kernel_param: out->size is smaller than kt_param_info's first version");
  pi.size = sizeof pi;
  MISUSE(kt_kernel_param(k, -1, &pi), rt, "kt_kernel_param: i is not a param's index");
  MISUSE(kt_kernel_extents(k, a, 7, NULL), rt, "kt_kernel_extents: elems is NULL");
  MISUSE(kt_kernel_extents(k, NULL, 7, elems), rt, "kt_kernel_extents: args is NULL");
  MISUSE(kt_json_canonical(NULL, buf, sizeof buf), NULL, "kt_json_canonical: json is NULL");
  MISUSE(kt_kernel_config_json(k, NULL, buf, sizeof buf), rt, "kt_kernel_config_json: config is NULL");
  MISUSE(kt_kernel_lint(k, NULL, NULL, NULL), rt, "kt_kernel_lint: problems is NULL");
  MISUSE(kt_device_alloc(rt, 16, NULL), rt, "kt_device_alloc: out is NULL");
  MISUSE(kt_device_upload(rt, 0x1000, NULL, 16), rt, "kt_device_upload: src is NULL");
  MISUSE(kt_device_download(rt, NULL, 0x1000, 16), rt, "kt_device_download: dst is NULL");
  MISUSE(kt_device_fill(NULL, 0x1000, 0, 16), NULL, "kt_device_fill: rt is NULL");
  MISUSE(kt_stream_create(rt, NULL), rt, "kt_stream_create: out is NULL");
  MISUSE(kt_cache_list(rt, NULL, NULL, NULL), rt, "kt_cache_list: fn is NULL");
  MISUSE(kt_cache_trials(rt, NULL, NULL, NULL), rt, "kt_cache_trials: of is NULL");
  MISUSE(kt_cache_counts(NULL, n), NULL, "kt_cache_counts: rt is NULL");
  MISUSE(kt_cache_quarantine_claim(rt, 1, NULL, NULL, NULL), rt, "kt_cache_quarantine_claim: reason is NULL");
  MISUSE(kt_cache_export(rt, NULL, 0), rt, "kt_cache_export: path is NULL");
  MISUSE(kt_cache_export(rt, "", 0), rt, "kt_cache_export: path is empty");
  MISUSE(kt_cache_import(rt, "", 0, n), rt, "kt_cache_import: path is empty");
  MISUSE(kt_cache_import(rt, "-", 0, NULL), rt, "kt_cache_import: counts is NULL");
  MISUSE(kt_cache_gc(rt, NULL, -1, &gone, &gone), rt, "kt_cache_gc: n is negative");
  MISUSE(kt_cache_gc(rt, NULL, 1, &gone, &gone), rt, "kt_cache_gc: kernels is NULL");
  /* An entry of the list NULL was read as a kernel before. */
  none[0] = k;
  MISUSE(kt_cache_gc(rt, none, 2, &gone, &gone), rt, "kt_cache_gc: an entry of kernels is NULL");
  MISUSE(kt_cache_gc(rt, none, 1, &gone, NULL), rt, "kt_cache_gc: configs_removed or binaries_removed is NULL");
  ASSERT_STATUS(kt_cache_gc(rt, none, 1, &gone, &gone), KT_OK);
  kt_runtime_close(rt);
}

/* A spec at the bounds: 32 scalar params in the key and 24 config fields,
** each named with 64 characters. Its keys and configs are longer than the
** buffers that once held them (1024 and 256 or 512 bytes, cut to ""
** past them); they are whole now, and a caller's buffer too small for one
** gets none of it. */
/* A caller built against a newer header passes a larger struct: the
** fields this library knows are filled, out->size says how far, and the
** bytes past them are left as they were. */
#define NEWER(T) \
  struct {       \
    T info;      \
    unsigned char later[64]; \
  }
static int untouched(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != 0xA5) return 0;
  return 1;
}

static void info_structs_of_a_newer_header_are_filled_as_far_as_known(void) {
  kt_runtime *rt = t_offline(0);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  NEWER(kt_runtime_info) r;
  NEWER(kt_param_info) p;
  memset(&r, 0xA5, sizeof r);
  memset(&p, 0xA5, sizeof p);
  r.info.size = sizeof r;
  p.info.size = sizeof p;
  ASSERT_STATUS(kt_runtime_get_info(rt, &r.info), KT_OK);
  ASSERT_STATUS(kt_kernel_param(k, 1, &p.info), KT_OK);
  ASSERT_EQ(r.info.size * 1000 + p.info.size, sizeof r.info * 1000 + sizeof p.info);
  ASSERT_STR_EQ(r.info.arch, "sm_90");
  ASSERT_STR_EQ(p.info.name, "x");
  ASSERT_STR_EQ(p.info.access, "in");
  ASSERT_TRUE(untouched(r.later, sizeof r.later) && untouched(p.later, sizeof p.later));
  kt_runtime_close(rt);
}

/* A wait of any length becomes a deadline pthread_cond_timedwait takes: an
** hour at most (infinity and 1e300 ms would overflow the nanoseconds), now
** for NaN and below 0. */
static void waits_of_any_length_are_deadlines_within_an_hour(void) {
  static const struct {
    double ms, want_s;
  } cases[] = {{INFINITY, 3600}, {1e300, 3600}, {7.2e6, 3600}, {1500, 1.5}, {-5, 0}, {NAN, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct timespec now, at;
    clock_gettime(CLOCK_REALTIME, &now);
    kt__realtime_in(cases[i].ms, &at);
    double s = (double)(at.tv_sec - now.tv_sec) + (at.tv_nsec - now.tv_nsec) / 1e9;
    ASSERT_TRUE(at.tv_nsec >= 0 && at.tv_nsec < 1000000000);
    ASSERT_TRUE(s >= cases[i].want_s - 0.001 && s < cases[i].want_s + 0.5);
  }
}

static void keys_and_configs_at_the_bounds_are_whole(void) {
  char n[72], path[512];
  ASSERT_EQ(t_bounds_spec(t_tmpdir(), path, sizeof path), 0);
  kt_runtime *rt = t_offline(0);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, path, &k), KT_OK);
  kt_arg a[32];
  for (int i = 0; i < 32; i++) a[i] = kt_arg_i64(INT64_MIN);
  static char key[KT_KEY_MAX], canon[KT_KEY_MAX], cfg[KT_CONFIG_MAX], json[KT_CONFIG_MAX];
  ASSERT_STATUS(kt_kernel_key(k, a, 32, key, sizeof key), KT_OK);
  /* {"P00___":-9223372036854775808,...}: 32 fields of 64 + 3 + 20 characters. */
  ASSERT_EQ(strlen(key), 2 + 32 * (64 + 3 + 20) + 31);
  ASSERT_STATUS(kt_json_canonical(key, canon, sizeof canon), KT_OK);
  ASSERT_STR_EQ(canon, key);
  ASSERT_STATUS(kt_kernel_default_for(k, a, 32, cfg, sizeof cfg), KT_OK);
  ASSERT_EQ(strlen(cfg), 24 * (64 + 1 + 17) + 23);
  ASSERT_STATUS(kt_kernel_config_json(k, cfg, json, sizeof json), KT_OK);
  ASSERT_EQ(strlen(json), 2 + 24 * (64 + 3 + 17) + 23);
  /* The CLI's --shape takes names of that length. */
  static char shape[4096];
  char err[256];
  kt_arg b[32];
  for (int i = 0, u = 0; i < 32; i++)
    u += snprintf(shape + u, sizeof shape - (size_t)u, "%s%s=-9223372036854775808", i ? "," : "",
                  t_long_name(n, 'P', i));
  ASSERT_EQ(shape_args(k, shape, b, err, sizeof err), 0);
  ASSERT_EQ(b[31].v.i64, INT64_MIN);
  kt_tune_report *r;
  ASSERT_STATUS(kt_kernel_lookup(k, a, 32, &r), KT_OK);
  ASSERT_STR_EQ(r->key, key);
  ASSERT_STR_EQ(r->default_config, json);
  kt_tune_report_free(r);
  /* A buffer one byte short: "" and the size needed. */
  char want[128];
  size_t klen = strlen(key) + 1;
  snprintf(want, sizeof want, "kt_kernel_key: the key needs %zu bytes, bufsize is %zu", klen, klen - 1);
  ASSERT_STATUS(kt_kernel_key(k, a, 32, key, klen - 1), KT_ERR_INVALID);
  ASSERT_STR_EQ(key, "");
  ASSERT_STR_EQ(kt_errmsg(rt), want);
  ASSERT_STATUS(kt_kernel_default_for(k, a, 32, cfg, 16), KT_ERR_INVALID);
  ASSERT_STR_EQ(cfg, "");
  ASSERT_STR_EQ(kt_errmsg(rt), "kt_kernel_default_for: the config needs 1992 bytes, bufsize is 16");
  ASSERT_STATUS(kt_kernel_config_json(k, json, cfg, 16), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "kt_kernel_config_json: the config needs 2042 bytes, bufsize is 16");
  ASSERT_STATUS(kt_json_canonical(json, cfg, 40), KT_ERR_INVALID);
  ASSERT_STR_EQ(cfg, "kt_json_canonical: the canonical JSON n");
  ASSERT_STR_EQ(kt_errmsg(NULL), "kt_json_canonical: the canonical JSON needs 2042 bytes, bufsize is 40");
  kt_runtime_close(rt);
}

/* Vectorized loads on an unaligned pointer: a config whose vector width
** needs 16-byte alignment is never launched on a pointer that lacks it. */
static void vector_width_needs_alignment(void) {
  kt_runtime *rt = t_offline(0);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  kt_arg a[] = ARGS(0x10000, 0x20002, 0, 0x30000, 4, 2048);
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=256,ROWS=1,VEC=8"), KT_ERR_CONSTRAINT);
  ASSERT_CONTAINS(kt_errmsg(rt), "violates constraints[3]: VEC == 1 || (D % VEC == 0 && align(x)");
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=256,ROWS=1,VEC=1"), KT_ERR_NO_DEVICE);
  a[1].v.ptr = 0x20000;
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=256,ROWS=1,VEC=8"), KT_ERR_NO_DEVICE);
  a[5] = kt_arg_i32(2047);
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=256,ROWS=1,VEC=8"), KT_ERR_CONSTRAINT);
  kt_runtime_close(rt);
}

static void forced_configs_are_checked(void) {
  kt_runtime *rt = t_offline(0);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  kt_arg a[] = ARGS(0x10000, 0x20000, 0, 0x30000, 4, 2048);
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=256,ROWS=1"), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: config \"BLOCK=256,ROWS=1\": VEC is missing");
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=300,ROWS=1,VEC=1"), KT_ERR_CONSTRAINT);
  ASSERT_STR_EQ(kt_errmsg(rt),
                "rmsnorm_fwd: config \"BLOCK=300,ROWS=1,VEC=1\": BLOCK=300 is not in the spec's space");
  /* Past int64: the digits given, not the saturated value strtoll returns. */
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=99999999999999999999999,ROWS=1,VEC=1"), KT_ERR_CONSTRAINT);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: config \"BLOCK=99999999999999999999999,ROWS=1,VEC=1\": "
                               "BLOCK=99999999999999999999999 is not in the spec's space");
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "WARPS=4"), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: config \"WARPS=4\": \"WARPS\" is not a config field");
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=256,BLOCK=256,ROWS=1,VEC=1"), KT_ERR_INVALID);
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=x,ROWS=1,VEC=1"), KT_ERR_INVALID);
  /* Spaces and tabs around a name or a value are not part of it; within
  ** one they are no number. */
  char json[KT_CONFIG_MAX];
  ASSERT_STATUS(kt_kernel_config_json(k, " BLOCK = 256 ,\tROWS=1 , VEC=8 ", json, sizeof json), KT_OK);
  ASSERT_STR_EQ(json, "{\"BLOCK\":256,\"ROWS\":1,\"VEC\":8}");
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=2 56,ROWS=1,VEC=1"), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: config \"BLOCK=2 56,ROWS=1,VEC=1\": BLOCK needs an integer");
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=256, , ROWS=1,VEC=1"), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: config \"BLOCK=256, , ROWS=1,VEC=1\": \", ROWS\" is not a config field");
  /* 128 threads for 8 rows is a quarter warp per row. */
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 7, "BLOCK=128,ROWS=8,VEC=1"), KT_ERR_CONSTRAINT);
  ASSERT_CONTAINS(kt_errmsg(rt), "violates constraints[0]");
  char cfg[128];
  ASSERT_STATUS(kt_kernel_config_for(k, a, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(cfg, "BLOCK=128,ROWS=4,VEC=1");
  kt_runtime_close(rt);
}

/* Blocks that are not a power of two (320, 384, 640, 768 threads) exist in
** layernorm_fwd for rows they cover exactly, one row a block: a row of 5120
** is 640 threads of 8 values, where blocks of 256 hold 6144 and leave a
** sixth of their lanes idle. Anywhere else they are refused, as is an OCC
** that would ask more than an SM's threads. */
static void blocks_that_cover_a_row_exactly(void) {
  kt_runtime *rt = t_offline(0);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", &k), KT_OK);
  /* y x res res_out w b mean rstd N D G eps rms; bf16 rows, bf16 weight and bias */
  kt_arg a[] = {kt_arg_ptr(0x100000, KT_BF16), kt_arg_ptr(0x200000, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(0, KT_BF16), kt_arg_ptr(0x300000, KT_BF16), kt_arg_ptr(0x400000, KT_BF16),
                kt_arg_ptr(0, KT_F32), kt_arg_ptr(0, KT_F32), kt_arg_i32(3), kt_arg_i32(5120),
                kt_arg_i32(1), kt_arg_f32(1e-5f), kt_arg_i32(0)};
  const char *c640 = "BLOCK=640,ROWS=1,VEC=8,ITEMS=1,STAGES=0,PACK=0,OCC=1,WSH=1";
  const char *c320 = "BLOCK=320,ROWS=1,VEC=8,ITEMS=2,STAGES=0,PACK=1,OCC=4,WSH=0";
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 13, c640), KT_ERR_NO_DEVICE);
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 13, c320), KT_ERR_NO_DEVICE);
  /* 640 threads of 8 values twice cover a row of 6144, not exactly. */
  a[9] = kt_arg_i32(6144);
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 13, "BLOCK=640,ROWS=1,VEC=8,ITEMS=2,STAGES=0,PACK=0,OCC=1,WSH=0"),
                KT_ERR_CONSTRAINT);
  ASSERT_CONTAINS(kt_errmsg(rt), "violates constraints[9]: pow2ceil(BLOCK) == BLOCK || (ROWS == 1");
  a[9] = kt_arg_i32(12288);
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 13, "BLOCK=768,ROWS=1,VEC=8,ITEMS=2,STAGES=0,PACK=0,OCC=2,WSH=0"),
                KT_ERR_NO_DEVICE);
  /* 768 threads three times over is more than an SM holds. */
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 13, "BLOCK=768,ROWS=1,VEC=8,ITEMS=2,STAGES=0,PACK=0,OCC=3,WSH=0"),
                KT_ERR_CONSTRAINT);
  ASSERT_CONTAINS(kt_errmsg(rt), "violates constraints[10]: OCC == 1 || (STAGES == 0");
  /* A pipeline's grid counts 1024 / BLOCK blocks an SM: powers of two only. */
  ASSERT_STATUS(kt_launch_config(k, NULL, a, 13, "BLOCK=768,ROWS=1,VEC=8,ITEMS=2,STAGES=2,PACK=0,OCC=1,WSH=0"),
                KT_ERR_CONSTRAINT);
  ASSERT_CONTAINS(kt_errmsg(rt), "violates constraints[9]");
  kt_runtime_close(rt);
}

static void runtime_open_errors(void) {
  kt_options o;
  kt_options_init(&o);
  o.no_device = 1;
  kt_runtime *rt;
  kt_kernel *k;
  /* Without a device or an arch, specs load (for the cache commands) but
  ** nothing compiles. */
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &k), KT_OK);
  ASSERT_STATUS(kt_kernel_compile_all(k, NULL, NULL, NULL), KT_ERR_INVALID);
  ASSERT_CONTAINS(kt_errmsg(rt), ": this runtime has neither a device nor an arch to compile for");
  kt_runtime_close(rt);
  /* A toolkit directory too long for NVRTC's include option is refused,
  ** not passed on cut. */
  static char home[1200];
  snprintf(home, sizeof home, "/%01150d", 0);
  o.cuda_home = home;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &k), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "tests/specs/small.json: the toolkit's directory name (cuda_home) is too long");
  kt_runtime_close(rt);
  o.cuda_home = NULL;
  o.arch = "sm90";
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "kt_runtime_open: arch \"sm90\" is not of the form sm_90, sm_90a or sm_100f");
  kt_runtime_close(rt);
  o.arch = "sm_100af"; /* one suffix at most */
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "kt_runtime_open: arch \"sm_100af\" is not of the form sm_90, sm_90a or sm_100f");
  kt_runtime_close(rt);
  /* A suffix NVRTC takes for no such arch (there is no sm_90 family):
  ** refused once, at open, in NVRTC's words, not by every variant. */
  o.arch = "sm_90f";
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  ASSERT_TRUE(!strncmp(kt_errmsg(rt), "kt_runtime_open: NVRTC 13.", 26));
  ASSERT_CONTAINS(kt_errmsg(rt), " does not compile for sm_90f (NVRTC: ");
  kt_runtime_close(rt);
  o.arch = "sm_90a";
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STR_EQ(kt_runtime_arch(rt), "sm_90a");
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/missing.json", &k), KT_ERR_IO);
  ASSERT_STR_EQ(kt_errmsg(rt), "kernels_src/missing.json: cannot read: No such file or directory");
  kt_runtime_close(rt);
  /* An open refused makes no cache file: a bad arch, or a device that
  ** cannot be opened (no driver here; no such GPU where there is one). */
  char db[700];
  struct stat sb;
  snprintf(db, sizeof db, "%s/refused.db", t_tmpdir());
  o.cache_path = db;
  o.arch = "sm90";
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  kt_runtime_close(rt);
  ASSERT_EQ(stat(db, &sb), -1);
  o.arch = NULL;
  o.no_device = 0;
  o.device = 9999;
  ASSERT_TRUE(kt_runtime_open(&rt, &o) != KT_OK);
  ASSERT_TRUE(kt_errmsg(rt)[0] != 0);
  kt_runtime_close(rt);
  ASSERT_EQ(stat(db, &sb), -1);
  ASSERT_STATUS(kt_runtime_close(NULL), KT_OK);
  ASSERT_STR_EQ(kt_status_name(KT_ERR_ALIAS), "KT_ERR_ALIAS");
  ASSERT_STR_EQ(kt_status_name((kt_status)999), "KT_UNKNOWN");
  ASSERT_STR_EQ(kt_status_str((kt_status)999), "unknown status");
}

static void log_into(void *user, kt_log_level level, const char *msg) {
  (void)level;
  snprintf(user, 512, "%s", msg);
}

/* Modes and the async calls where nothing can tune: KTUNE_MODE is read
** (an unknown value named), a mode out of range refused, waiting and
** stopping return at once, and a caller built against the first kt_stats
** gets its fields. */
static void modes_and_async_calls_without_a_device(void) {
  kt_options o;
  kt_options_init(&o);
  o.no_device = 1;
  o.no_cache = 1;
  static char logged[512];
  o.log = log_into;
  o.log_user = logged;
  kt_runtime *rt;
  setenv("KTUNE_MODE", "fast", 1);
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STR_EQ(logged, "KTUNE_MODE=fast is not a mode (tune, cache-only, off, async): tune is used");
  ASSERT_EQ(kt_runtime_mode(rt), KT_MODE_TUNE);
  kt_runtime_close(rt);
  o.mode = KT_MODE_OFF; /* asked for: the variable is not read */
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_EQ(kt_runtime_mode(rt), KT_MODE_OFF);
  kt_runtime_close(rt);
  o.mode = KT_MODE_DEFAULT;
  ASSERT_EQ(kt_runtime_mode(NULL), KT_MODE_DEFAULT);
  setenv("KTUNE_MODE", "async", 1);
  logged[0] = 0;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STR_EQ(logged, "");
  ASSERT_EQ(kt_runtime_mode(rt), KT_MODE_ASYNC);
  unsetenv("KTUNE_MODE");
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 0), KT_OK);
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, -1), KT_OK);
  ASSERT_STATUS(kt_runtime_wait_tuning(NULL, 0), KT_ERR_INVALID);
  ASSERT_STATUS(kt_runtime_stop_tuning(NULL), KT_ERR_INVALID);
  kt_stats s;
  memset(&s, 0xAB, sizeof s);
  s.size = offsetof(kt_stats, standins);
  ASSERT_STATUS(kt_runtime_stats(rt, &s), KT_OK);
  ASSERT_EQ(s.size, offsetof(kt_stats, standins));
  ASSERT_EQ(s.launches, 0);
  ASSERT_EQ(s.async_pending, 0xABABABABABABABABull); /* past its size: untouched */
  s.size = offsetof(kt_stats, standins) - 1;
  ASSERT_STATUS(kt_runtime_stats(rt, &s), KT_ERR_INVALID);
  /* No tuner was started: stopping is still allowed, twice, and the
  ** runtime then closes as usual. */
  ASSERT_STATUS(kt_runtime_stop_tuning(rt), KT_OK);
  ASSERT_STATUS(kt_runtime_stop_tuning(rt), KT_OK);
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 0), KT_OK);
  kt_runtime_close(rt);
  o.mode = (kt_mode)9;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "kt_runtime_open: mode 9 is not a kt_mode");
  kt_runtime_close(rt);
  /* Each field out of range is named alone. */
  o.mode = KT_MODE_DEFAULT;
  o.strategy = (kt_strategy)-1;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "kt_runtime_open: strategy -1 is not a kt_strategy");
  kt_runtime_close(rt);
  o.strategy = KT_STRATEGY_LOCAL;
  o.budget_s = NAN;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "kt_runtime_open: budget_s nan is not a number of seconds >= 0");
  kt_runtime_close(rt);
  o.budget_s = 0;
  static const int levels[] = {-2, 4, 99};
  for (int i = 0; i < 3; i++) {
    o.log_level = levels[i];
    ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
    char want[128];
    snprintf(want, sizeof want, "kt_runtime_open: log_level %d is not a kt_log_level, nor -1 ($KTUNE_LOG)", levels[i]);
    ASSERT_STR_EQ(kt_errmsg(rt), want);
    kt_runtime_close(rt);
  }
}

/* A runtime told that it needs its cache fails to open without one,
** with the cache's reason, and logs nothing; by default it runs without
** one and says why in the log. */
static void a_required_cache_that_cannot_open_fails_the_open(void) {
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  char db[700], want[900], logged[512] = "";
  struct stat sb;
  kt_runtime *rt;
  kt_options o;
  t_offline_options(&o);
  o.log = log_into;
  o.log_user = logged;
  o.log_level = KT_LOG_WARN;
  o.cache_path = dir;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STR_EQ(kt_cache_path(rt), "");
  kt_runtime_close(rt);
  snprintf(want, sizeof want, "running without a config cache: %s: is a directory, not a cache file", dir);
  ASSERT_STR_EQ(logged, want);
  logged[0] = 0;
  o.cache_required = 1;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_CACHE);
  snprintf(want, sizeof want, "kt_runtime_open: %s: is a directory, not a cache file", dir);
  ASSERT_STR_EQ(kt_errmsg(rt), want);
  kt_runtime_close(rt);
  /* Read-only, a missing file stays missing; to write, one is made. */
  snprintf(db, sizeof db, "%s/required.db", dir);
  o.cache_path = db;
  o.cache_readonly = 1;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_CACHE);
  snprintf(want, sizeof want, "kt_runtime_open: %s: no cache there (nothing was created)", db);
  ASSERT_STR_EQ(kt_errmsg(rt), want);
  kt_runtime_close(rt);
  ASSERT_EQ(stat(db, &sb), -1);
  o.cache_readonly = 0;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STR_EQ(kt_cache_path(rt), db);
  kt_runtime_close(rt);
  ASSERT_EQ(stat(db, &sb), 0);
  ASSERT_STR_EQ(logged, "");
  /* The system cache is never required: one that cannot be read is left
  ** out, as ever, with a warning. */
  o.system_cache_path = dir;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  kt_runtime_close(rt);
  snprintf(want, sizeof want, "%s: system cache not used: %s: is a directory, not a cache file", dir, dir);
  ASSERT_STR_EQ(logged, want);
  o.system_cache_path = NULL;
  o.no_cache = 1;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "kt_runtime_open: no_cache and cache_required are both set");
  kt_runtime_close(rt);
}

/* A log callback runs while the runtime may hold its locks (a miss's
** message, here a record that cannot be written, comes under the kernel's
** tuning lock): a call back into the runtime that would take them is
** refused by name, never a deadlock; calls that take none are answered. */
typedef struct reentry {
  kt_runtime *rt;
  kt_kernel *k;
  int calls;
  kt_status st[9];
  char msg[512], key[256];
} reentry;

static void call_back(void *user, kt_log_level level, const char *msg) {
  reentry *e = user;
  (void)level;
  (void)msg;
  if (e->calls++) return;
  kt_arg a[] = ARGS(0x10000, 0x20000, 0, 0x30000, 8, 512);
  char cfg[128];
  kt_tune_report *r = NULL;
  kt_kernel *k2 = NULL;
  long counts[4];
  e->st[0] = kt_kernel_config_for(e->k, a, 7, cfg, sizeof cfg);
  snprintf(e->msg, sizeof e->msg, "%s", kt_errmsg(e->rt));
  e->st[1] = kt_kernel_lookup(e->k, a, 7, &r);
  e->st[2] = kt_kernel_tune(e->k, a, 7, &r);
  e->st[3] = kt_kernel_load(e->rt, "kernels_src/rmsnorm.json", &k2);
  e->st[4] = kt_cache_counts(e->rt, counts);
  e->st[5] = kt_runtime_wait_tuning(e->rt, 1);
  e->st[6] = kt_runtime_close(e->rt);
  e->st[7] = kt_launch(e->k, NULL, a, 7);
  e->st[8] = kt_kernel_key(e->k, a, 7, e->key, sizeof e->key); /* no lock: answered */
  kt_tune_report_free(r);
}

static void callbacks_that_call_back_are_refused(void) {
  reentry e = {.calls = 0};
  kt_options o;
  t_offline_options(&o);
  o.record_path = "/nonexistent-dir/calls.jsonl";
  o.log = call_back;
  o.log_user = &e;
  o.log_level = KT_LOG_WARN;
  ASSERT_STATUS(kt_runtime_open(&e.rt, &o), KT_OK);
  ASSERT_STATUS(kt_kernel_load(e.rt, "kernels_src/rmsnorm.json", &e.k), KT_OK);
  kt_arg a[] = ARGS(0x10000, 0x20000, 0, 0x30000, 8, 2048);
  char cfg[128];
  ASSERT_STATUS(kt_kernel_config_for(e.k, a, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_EQ(e.calls, 1);
  for (int i = 0; i < 8; i++) ASSERT_STATUS(e.st[i], KT_ERR_INVALID);
  ASSERT_STATUS(e.st[8], KT_OK);
  ASSERT_STR_EQ(e.msg, "kt_kernel_config_for: called from a log, progress or coordinator callback, which runs while "
                       "the runtime may hold the locks this call takes");
  ASSERT_CONTAINS(e.key, "\"D\":512");
  /* Outside the callback the same calls are answered. */
  kt_arg b[] = ARGS(0x10000, 0x20000, 0, 0x30000, 8, 512);
  ASSERT_STATUS(kt_kernel_config_for(e.k, b, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_STATUS(kt_runtime_wait_tuning(e.rt, 1), KT_OK);
  ASSERT_STATUS(kt_runtime_close(e.rt), KT_OK);
}

/* A listing's callback may read the cache (ktune show reads each row's
** trials), but closing the runtime from it would free what the listing
** still uses, and waiting for the tuner would wait for a tuner that waits
** for the listing's lock: refused, the listing goes on, and the close
** after it works. The same for a lint's callback. */
typedef struct closer {
  kt_runtime *rt;
  int rows;
  kt_status st, trials, wait;
  char msg[256];
} closer;

static int no_trial(void *user, const kt_trial_row *t) {
  (void)user;
  (void)t;
  return 0;
}

static int close_from_row(void *user, const kt_cache_row *row) {
  closer *c = user;
  c->rows++;
  c->st = kt_runtime_close(c->rt);
  snprintf(c->msg, sizeof c->msg, "%s", kt_errmsg(c->rt));
  c->trials = kt_cache_trials(c->rt, row, no_trial, NULL);
  c->wait = kt_runtime_wait_tuning(c->rt, 0);
  return 0;
}

static void close_from_lint(void *user, const char *msg) {
  closer *c = user;
  (void)msg;
  c->st = kt_runtime_close(c->rt);
}

static void closing_from_a_callback_is_refused(void) {
  char path[700];
  snprintf(path, sizeof path, "%s/rows.db", t_tmpdir());
  kt_runtime *rt;
  kt_options o;
  t_offline_options(&o);
  o.cache_path = path;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  char json[800];
  ASSERT_EQ(t_write_file(t_tmpdir(), "two.json",
                         "{\"format\": \"ktune-cache\", \"version\": 1, \"configs\": ["
                         "{\"kernel\": \"k\", \"spec_hash\": \"0000000000000001\", \"device\": \"d\", \"key\": {\"D\": 1},"
                         " \"config\": {\"B\": 1}, \"time_us\": 1},"
                         "{\"kernel\": \"k\", \"spec_hash\": \"0000000000000001\", \"device\": \"d\", \"key\": {\"D\": 2},"
                         " \"config\": {\"B\": 1}, \"time_us\": 1}]}",
                         json, sizeof json),
            0);
  long counts[5];
  ASSERT_STATUS(kt_cache_import(rt, json, 0, counts), KT_OK);
  closer c = {.rt = rt};
  ASSERT_STATUS(kt_cache_list(rt, NULL, close_from_row, &c), KT_OK);
  ASSERT_EQ(c.rows, 2);
  ASSERT_STATUS(c.st, KT_ERR_INVALID);
  ASSERT_STATUS(c.trials, KT_OK);
  ASSERT_STR_EQ(c.msg, "kt_runtime_close: called from a callback of one of the runtime's calls, which is still "
                       "running: call it once that call has returned");
  ASSERT_STATUS(c.wait, KT_ERR_INVALID); /* an async tuner would wait for the listing's lock */
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &k), KT_OK);
  int problems = -1;
  c.st = KT_OK;
  ASSERT_STATUS(kt_kernel_lint(k, close_from_lint, &c, &problems), KT_OK);
  ASSERT_EQ(problems, 0); /* one note, which the callback got */
  ASSERT_STATUS(c.st, KT_ERR_INVALID);
  ASSERT_STATUS(kt_runtime_close(rt), KT_OK);
}

const kt_test t_launch_tests[] = {
    {"launch: modes, and async calls without a device", modes_and_async_calls_without_a_device},
    {"launch: bad arguments are named", bad_arguments_are_named},
    {"launch: a null pointer of no elements binds", null_pointers_of_no_elements_bind},
    {"launch: a NULL handle or pointer, or an index out of range, is named", misuse_is_named},
    {"launch: info structs of a newer header are filled as far as this library knows",
     info_structs_of_a_newer_header_are_filled_as_far_as_known},
    {"launch: keys and configs at the bounds are whole, or not given at all", keys_and_configs_at_the_bounds_are_whole},
    {"launch: vector width needs alignment", vector_width_needs_alignment},
    {"launch: forced configs are checked", forced_configs_are_checked},
    {"launch: blocks that cover a row exactly", blocks_that_cover_a_row_exactly},
    {"launch: runtime open errors", runtime_open_errors},
    {"launch: a required cache that cannot open fails the open", a_required_cache_that_cannot_open_fails_the_open},
    {"launch: waits of any length are deadlines within an hour", waits_of_any_length_are_deadlines_within_an_hour},
    {"launch: a callback that calls back into the runtime is refused, never a deadlock",
     callbacks_that_call_back_are_refused},
    {"launch: closing the runtime from a callback of one of its calls is refused", closing_from_a_callback_is_refused},
    {NULL, NULL},
};
