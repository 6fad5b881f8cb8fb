/* The tuner's pure logic, on the CPU: keys, alias groups, comparisons,
** cached configs, single flight. */
#include <math.h>
#include <sqlite3.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "call/alias.h"
#include "device/nvrtc.h"
#include "tune/compare.h"
#include "tune/evidence.h"
#include "tune/inputs.h"
#include "tune/search.h"
#include "tune/tuneat.h"
#include "tune/tuner.h"
#include "harness.h"
#include "spec/key.h"
#include "ktune.h"
#include "dispatch/handles.h"
#include "spec/spec.h"
#include "spec/init.h"
#include "cache/store.h"

int kt__test_tuned_count(const kt_kernel *k);


#define RMS(y, x, res, w, n, d, t) \
  {kt_arg_ptr(y, t), kt_arg_ptr(x, t), kt_arg_ptr(res, t), kt_arg_ptr(w, t), kt_arg_i32(n), kt_arg_i32(d), kt_arg_f32(1e-6f)}

/* The token count is "ignore": every T maps to one key. (The upstream bug:
** a key holding NB = cdiv(T, 2048) tuned again for every new T.) */
static void keys_ignore_what_the_spec_says(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("kernels_src/rmsnorm.json", &rt);
  if (!k) return;
  static const int Ts[] = {1, 7, 32, 100, 450, 500, 5000, 10000, 20000, 24000};
  char first[512], key[512];
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
    kt_arg a[] = RMS(0x100000, 0x200000, 0, 0x300000, Ts[i], 256, KT_BF16);
    a[6] = kt_arg_f32((float)Ts[i]); /* eps is ignored too */
    ASSERT_STATUS(kt_kernel_key(k, a, 7, i ? key : first, sizeof key), KT_OK);
    if (i) ASSERT_STR_EQ(key, first);
  }
  ASSERT_STR_EQ(first, "{\"D\":256,\"HAS_RES\":0,\"T\":\"bf16\",\"res\":0,\"w\":16,\"x\":16,\"y\":16}");
  kt_arg b[] = RMS(0x100000, 0x200000, 0x400000, 0x300000, 9, 257, KT_F32);
  ASSERT_STATUS(kt_kernel_key(k, b, 7, key, sizeof key), KT_OK);
  ASSERT_STR_EQ(key, "{\"D\":257,\"HAS_RES\":1,\"T\":\"f32\",\"res\":16,\"w\":16,\"x\":16,\"y\":16}");
  kt_runtime_close(rt);
}

/* chunk_state_fwd's grid is tiles x BH, and the best tile follows BH (a
** winner tuned at BH = 1 ran 3.5x slower at BH = 512 than that key's own):
** BH is in the key as its power-of-two bucket. N, the chunks each block
** walks in turn, is not. */
static void chunk_state_keys_hold_the_bh_bucket(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("kernels_src/chunk_state_fwd.json", &rt);
  if (!k) return;
  static const struct {
    int bh, n, bucket;
  } cases[] = {{1, 32, 1}, {3, 32, 4}, {33, 1, 64}, {64, 500, 64}, {65, 32, 128}, {512, 8, 512}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kt_arg a[] = {kt_arg_ptr(0x100000, KT_F32),  kt_arg_ptr(0x200000, KT_BF16), kt_arg_ptr(0x300000, KT_BF16),
                  kt_arg_ptr(0x400000, KT_F32),  kt_arg_ptr(0, KT_F32),         kt_arg_i32(cases[i].bh),
                  kt_arg_i32(cases[i].n),        kt_arg_i32(64),                kt_arg_i32(64),
                  kt_arg_i32(64)};
    char key[512], want[512];
    ASSERT_STATUS(kt_kernel_key(k, a, 10, key, sizeof key), KT_OK);
    snprintf(want, sizeof want,
             "{\"BH\":%d,\"C\":64,\"CC\":64,\"DK\":64,\"DV\":64,\"KD\":64,\"NS\":0,\"T\":\"bf16\",\"VD\":64,"
             "\"decay\":16,\"h\":16,\"h0\":0,\"k\":16,\"v\":16}",
             cases[i].bucket);
    ASSERT_STR_EQ(key, want);
  }
  kt_runtime_close(rt);
}

static void alignment_classes(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("kernels_src/rmsnorm.json", &rt);
  if (!k) return;
  static const struct {
    uint64_t off;
    const char *want;
  } cases[] = {{0, "\"x\":16"}, {2, "\"x\":2"}, {4, "\"x\":4"}, {6, "\"x\":2"},
               {8, "\"x\":8"}, {12, "\"x\":4"}, {24, "\"x\":8"}, {48, "\"x\":16"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kt_arg a[] = RMS(0x100000, 0x200000 + cases[i].off, 0, 0x300000, 4, 64, KT_BF16);
    char key[512];
    ASSERT_STATUS(kt_kernel_key(k, a, 7, key, sizeof key), KT_OK);
    ASSERT_CONTAINS(key, cases[i].want);
  }
  /* Below the element's own alignment there is no class: the call is refused. */
  kt_arg odd[] = RMS(0x100000, 0x200001, 0, 0x300000, 4, 64, KT_BF16);
  char key[512];
  ASSERT_STATUS(kt_kernel_key(k, odd, 7, key, sizeof key), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: arg 1 (x) at 0x200001 is not aligned to its bf16 elements (2 bytes)");
  kt_runtime_close(rt);
}

static void pow2_buckets(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("tests/specs/add_one.json", &rt);
  if (!k) return;
  static const long long ns[][2] = {{1, 1}, {2, 2}, {3, 4}, {1000, 1024}, {1024, 1024}, {1025, 2048}, {0, 0}};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    kt_arg a[] = {kt_arg_ptr(0x1000, KT_F32), kt_arg_i64(ns[i][0])};
    char key[128], want[128];
    ASSERT_STATUS(kt_kernel_key(k, a, 2, key, sizeof key), KT_OK);
    snprintf(want, sizeof want, "{\"n\":%lld,\"x\":16}", ns[i][1]);
    ASSERT_STR_EQ(key, want);
  }
  kt_runtime_close(rt);
}

static void alias_groups(void) {
  /* adjacent, not overlapping */
  kt__range a[] = {{0, 100, 0, 1, -1, 0}, {100, 200, 1, 0, -1, 0}};
  ASSERT_EQ(kt__alias_group(a, 2), 2);
  ASSERT_TRUE(a[0].group != a[1].group);
  /* nested */
  kt__range b[] = {{0, 1000, 0, 1, -1, 0}, {200, 300, 1, 0, -1, 0}, {2000, 3000, 2, 0, -1, 0}};
  ASSERT_EQ(kt__alias_group(b, 3), 2);
  ASSERT_EQ(b[0].group, b[1].group);
  ASSERT_TRUE(b[2].group != b[0].group);
  /* identical */
  kt__range c[] = {{500, 900, 0, 1, -1, 0}, {500, 900, 1, 0, -1, 0}};
  ASSERT_EQ(kt__alias_group(c, 2), 1);
  ASSERT_EQ(c[0].group, c[1].group);
  /* three-way chain: A overlaps B, B overlaps C, A does not touch C */
  kt__range d[] = {{200, 350, 2, 0, -1, 0}, {0, 100, 0, 1, -1, 0}, {50, 250, 1, 0, -1, 0}};
  ASSERT_EQ(kt__alias_group(d, 3), 1);
  ASSERT_EQ(d[0].group, d[1].group);
  ASSERT_EQ(d[1].group, d[2].group);
  /* one byte of overlap counts */
  kt__range e[] = {{0, 101, 0, 1, -1, 0}, {100, 200, 1, 0, -1, 0}, {300, 300, 2, 0, -1, 0}};
  ASSERT_EQ(kt__alias_group(e, 3), 2);
  ASSERT_EQ(e[0].group, e[1].group);
  /* An empty range (an extent of 0) inside another, or at its start,
  ** shares no byte and splits nothing: x, read inside written y, stays in
  ** y's group, so a tuning's scratch copy of y holds x too. */
  kt__range f[] = {{0, 100, 0, 1, -1, 0}, {50, 50, 1, 0, -1, 0}, {60, 80, 2, 0, -1, 0}};
  ASSERT_EQ(kt__alias_group(f, 3), 2);
  ASSERT_EQ(f[0].group, f[2].group);
  ASSERT_TRUE(f[1].group != f[0].group);
  for (int first = 0; first < 3; first++) {
    kt__range g[3] = {{0, 0, 1, 0, -1, 0}, {0, 100, 0, 1, -1, 0}, {0, 100, 2, 0, -1, 0}};
    kt__range t = g[0];
    g[0] = g[first], g[first] = t; /* the empty range sorted anywhere among equal starts */
    ASSERT_EQ(kt__alias_group(g, 3), 2);
    int y = g[0].param == 0 ? 0 : g[1].param == 0 ? 1 : 2, x = g[0].param == 2 ? 0 : g[1].param == 2 ? 1 : 2;
    ASSERT_EQ(g[y].group, g[x].group);
  }
}

static void comparisons(void) {
  float ref[6] = {1.0f, -2.0f, NAN, INFINITY, 0.0f, 1000.0f};
  float got[6] = {1.00001f, -2.0f, NAN, INFINITY, 1e-6f, 1000.05f};
  char why[300] = "";
  ASSERT_EQ(kt__compare(KT_F32, ref, got, 6, 1e-5, 1e-4, why, sizeof why), 0);
  got[2] = 0.0f; /* a NaN the reference has must be there */
  ASSERT_EQ(kt__compare(KT_F32, ref, got, 6, 1e-5, 1e-4, why, sizeof why), 1);
  ASSERT_CONTAINS(why, "element 2: 0, reference nan");
  got[2] = NAN;
  got[4] = NAN; /* and none it has not */
  ASSERT_EQ(kt__compare(KT_F32, ref, got, 6, 1e-5, 1e-4, why, sizeof why), 1);
  got[4] = 0;
  got[3] = -INFINITY;
  ASSERT_EQ(kt__compare(KT_F32, ref, got, 6, 1e-5, 1e-4, why, sizeof why), 1);
  got[3] = 1e30f; /* finite is not infinite */
  ASSERT_EQ(kt__compare(KT_F32, ref, got, 6, 1e-5, 1e-4, why, sizeof why), 1);
  got[3] = INFINITY;
  got[5] = 1000.2f; /* 2e-4 relative: over rtol */
  ASSERT_EQ(kt__compare(KT_F32, ref, got, 6, 1e-5, 1e-4, why, sizeof why), 1);
  /* bf16 0x3f80 = 1.0, 0x3f81 = 1.0078125; f16 0x3c00 = 1.0, 0x3c01 = 1.00098 */
  uint16_t rb[2] = {0x3f80, 0x7fc0}, gb[2] = {0x3f81, 0x7fc0};
  ASSERT_EQ(kt__compare(KT_BF16, rb, gb, 2, 1e-2, 1.6e-2, why, sizeof why), 0);
  ASSERT_EQ(kt__compare(KT_BF16, rb, gb, 2, 0, 1e-3, why, sizeof why), 1);
  uint16_t rh[2] = {0x3c00, 0x7c00}, gh[2] = {0x3c01, 0x7c00};
  ASSERT_TRUE(fabs(kt_dtype_load(KT_F16, gh, 0) - 1.0009765625) < 1e-12);
  ASSERT_TRUE(isinf(kt_dtype_load(KT_F16, rh, 1)));
  ASSERT_EQ(kt__compare(KT_F16, rh, gh, 2, 1e-3, 2e-3, why, sizeof why), 0);
  int64_t ri[2] = {INT64_C(9007199254740993), 5}, gi[2] = {INT64_C(9007199254740992), 5};
  ASSERT_EQ(kt__compare(KT_I64, ri, gi, 2, 0, 0, why, sizeof why), 1);
  int32_t r32[3] = {1, 2, 3}, g32[3] = {1, 2, 3};
  ASSERT_EQ(kt__compare(KT_I32, r32, g32, 3, 0, 0, why, sizeof why), 0);
}

static void large_outputs_compare_in_parallel(void) {
  size_t n = 3000000;
  float *r = malloc(n * 4), *g = malloc(n * 4);
  ASSERT_TRUE(r && g);
  for (size_t i = 0; i < n; i++) r[i] = g[i] = (float)(i % 977) * 0.25f;
  g[2500000] += 1.0f;
  g[2999999] = NAN;
  char why[300] = "";
  size_t bad = kt__compare_parallel(KT_F32, r, g, n, 1e-5, 1e-4, why, sizeof why);
  free(r);
  free(g);
  ASSERT_EQ(bad, 2);
  ASSERT_CONTAINS(why, "element 2500000: ");
}

/* The alias rules, on an offline runtime (no device needed: a refusal
** comes before any work). In place means identical ranges: a written arg
** sharing part of another arg's bytes (one element, one row, one range
** inside another) is refused with both params and the shared bytes named;
** a kernel that cannot run in place refuses even identical ranges; two
** written args never share bytes. An allowed call gets as far as the
** device. */
static void alias_rules(void) {
  kt_runtime *rt = t_offline(1);
  ASSERT_TRUE(rt);
  kt_kernel *sh, *rms, *ln;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/shift.json", &sh), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &rms), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", &ln), KT_OK);
  const uint64_t X = 0x100000; /* rmsnorm: N=4 rows of D=256 f32, 4096 bytes */
  kt_arg r[] = {kt_arg_ptr(X, KT_F32), kt_arg_ptr(X, KT_F32), kt_arg_ptr(0, KT_F32), kt_arg_ptr(0x200000, KT_F32),
                kt_arg_i32(4), kt_arg_i32(256), kt_arg_f32(1e-5f)};
  ASSERT_STATUS(kt_launch(rms, NULL, r, 7), KT_ERR_NO_DEVICE); /* identical: in place */
  static const struct {
    uint64_t y, w;
    const char *msg;
  } rmscases[] = {
      {X + 4, 0x200000,
       "rmsnorm_fwd: y (written) overlaps x in 4092 bytes (y starts 4 bytes after x); running in place needs "
       "identical ranges"},
      {X - 1024, 0x200000,
       "rmsnorm_fwd: y (written) overlaps x in 3072 bytes (y starts 1024 bytes before x); running in place needs "
       "identical ranges"},
      {X, X + 1024, /* w (one row) inside y and x */
       "rmsnorm_fwd: y (written) overlaps w in 1024 bytes (y starts 1024 bytes before w); running in place needs "
       "identical ranges"},
  };
  for (size_t i = 0; i < sizeof rmscases / sizeof rmscases[0]; i++) {
    r[0].v.ptr = rmscases[i].y;
    r[3].v.ptr = rmscases[i].w;
    ASSERT_STATUS(kt_launch(rms, NULL, r, 7), KT_ERR_ALIAS);
    ASSERT_STR_EQ(kt_errmsg(rt), rmscases[i].msg);
    char cfg[256];
    ASSERT_STATUS(kt_kernel_config_for(rms, r, 7, cfg, sizeof cfg), KT_ERR_ALIAS);
    /* A forced config obeys the same rules (it once launched), and so does
    ** a timing, which launches the call again and again. */
    ASSERT_STATUS(kt_launch_config(rms, NULL, r, 7, "BLOCK=128,ROWS=1,VEC=1"), KT_ERR_ALIAS);
    ASSERT_STR_EQ(kt_errmsg(rt), rmscases[i].msg);
    double med, spread;
    ASSERT_STATUS(kt_kernel_time(rms, r, 7, NULL, &med, &spread), KT_ERR_ALIAS);
    ASSERT_STATUS(kt_kernel_time(rms, r, 7, "BLOCK=128,ROWS=1,VEC=1", &med, &spread), KT_ERR_ALIAS);
    ASSERT_STR_EQ(kt_errmsg(rt), rmscases[i].msg);
  }
  r[0].v.ptr = X + 4096; /* adjacent: nothing shared */
  r[3].v.ptr = 0x200000;
  ASSERT_STATUS(kt_launch(rms, NULL, r, 7), KT_ERR_NO_DEVICE);
  ASSERT_STATUS(kt_launch_config(rms, NULL, r, 7, "BLOCK=128,ROWS=1,VEC=1"), KT_ERR_NO_DEVICE);
  r[0].v.ptr = X; /* identical: in place */
  ASSERT_STATUS(kt_launch_config(rms, NULL, r, 7, "BLOCK=128,ROWS=1,VEC=1"), KT_ERR_NO_DEVICE);
  /* A size below 0 describes no buffer: refused before any range is
  ** compared (its bytes counted as none, it would share none). */
  r[0].v.ptr = X + 4;
  r[5] = kt_arg_i32(-256);
  ASSERT_STATUS(kt_launch(rms, NULL, r, 7), KT_ERR_ARGS);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_fwd: arg 0 (y): its extent, N * D, is -1024 elements: below 0");
  ASSERT_STATUS(kt_launch_config(rms, NULL, r, 7, "BLOCK=128,ROWS=1,VEC=1"), KT_ERR_ARGS);
  double med_us, spread_us;
  ASSERT_STATUS(kt_kernel_time(rms, r, 7, NULL, &med_us, &spread_us), KT_ERR_ARGS);
  r[5] = kt_arg_i32(256);

  kt_arg a[] = {kt_arg_ptr(0x10000, KT_F32), kt_arg_ptr(0x10000, KT_F32), kt_arg_i32(100)};
  ASSERT_STATUS(kt_launch(sh, NULL, a, 3), KT_ERR_ALIAS);
  ASSERT_STR_EQ(kt_errmsg(rt), "shift_left: y (written) overlaps x in 400 bytes (both start at the same byte); "
                               "this kernel cannot run in place");
  a[1].v.ptr = 0x10000 + 396; /* the last element of y is x's first */
  ASSERT_STATUS(kt_launch(sh, NULL, a, 3), KT_ERR_ALIAS);
  ASSERT_STR_EQ(kt_errmsg(rt), "shift_left: y (written) overlaps x in 4 bytes (y starts 396 bytes before x); this "
                               "kernel cannot run in place");
  a[1].v.ptr = 0x10000 - 4; /* x is 404 bytes: y nested in it */
  ASSERT_STATUS(kt_launch(sh, NULL, a, 3), KT_ERR_ALIAS);
  ASSERT_STR_EQ(kt_errmsg(rt), "shift_left: y (written) overlaps x in 400 bytes (y starts 4 bytes after x); this "
                               "kernel cannot run in place");
  a[1].v.ptr = 0x10000 + 400; /* adjacent: fine */
  ASSERT_STATUS(kt_launch(sh, NULL, a, 3), KT_ERR_NO_DEVICE);

  /* layernorm_fwd: y and res_out both written, identical. */
  kt_arg l[] = {kt_arg_ptr(X, KT_F32),   kt_arg_ptr(0x300000, KT_F32), kt_arg_ptr(0, KT_F32), kt_arg_ptr(X, KT_F32),
                kt_arg_ptr(0, KT_F32),   kt_arg_ptr(0, KT_F32),        kt_arg_ptr(0, KT_F32), kt_arg_ptr(0, KT_F32),
                kt_arg_i32(4),           kt_arg_i32(256),              kt_arg_i32(1),         kt_arg_f32(1e-5f),
                kt_arg_i32(1)};
  ASSERT_STATUS(kt_launch(ln, NULL, l, 13), KT_ERR_ALIAS);
  ASSERT_STR_EQ(kt_errmsg(rt), "layernorm_fwd: y (written) overlaps res_out (written) in all 4096 bytes (the same "
                               "range); two written args cannot share bytes");
  l[3].v.ptr = X + 4096;
  ASSERT_STATUS(kt_launch(ln, NULL, l, 13), KT_ERR_NO_DEVICE);
  /* The reads may share anything. */
  l[2].v.ptr = 0x300000 + 4;
  ASSERT_STATUS(kt_launch(ln, NULL, l, 13), KT_ERR_NO_DEVICE);

  /* A consumed arg (left undefined) shares bytes with nothing, even in a
  ** spec that runs in place; its output may still be its other input. */
  kt_kernel *dr;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/drain.json", &dr), KT_OK);
  kt_param_info pi = {.size = sizeof pi};
  ASSERT_STATUS(kt_kernel_param(dr, 1, &pi), KT_OK);
  ASSERT_STR_EQ(pi.access, "consumed");
  kt_arg d[] = {kt_arg_ptr(0x500000, KT_F32), kt_arg_ptr(0x600000, KT_F32), kt_arg_ptr(0x600000, KT_F32),
                kt_arg_i32(100)};
  ASSERT_STATUS(kt_launch(dr, NULL, d, 4), KT_ERR_ALIAS);
  ASSERT_STR_EQ(kt_errmsg(rt), "drain: x (consumed) overlaps w in all 400 bytes (the same range); a consumed arg is "
                               "left undefined, so it cannot share bytes");
  d[0].v.ptr = d[2].v.ptr = 0x700000; /* y in place of w */
  ASSERT_STATUS(kt_launch(dr, NULL, d, 4), KT_ERR_NO_DEVICE);
  d[1].v.ptr = 0x700000; /* x in place of y: two written args */
  ASSERT_STATUS(kt_launch(dr, NULL, d, 4), KT_ERR_ALIAS);
  ASSERT_STR_EQ(kt_errmsg(rt), "drain: y (written) overlaps x (written) in all 400 bytes (the same range); two "
                               "written args cannot share bytes");
  kt_runtime_close(rt);
}

/* The rules on ranges alone, including ranges that end at the end of the
** address space (a call's buffer never runs past it: t_launch). */
static void alias_partners(void) {
  kt__range r[3] = {{100, 200, 0, 1, 0, 0}, {100, 200, 1, 0, 0, 0}, {UINT64_MAX - 8, UINT64_MAX, 2, 0, 0, 0}};
  ASSERT_EQ(kt__alias_partner(r, 3, 0, 1), -1);
  ASSERT_EQ(kt__alias_partner(r, 3, 0, 0), 1);
  ASSERT_EQ(kt__alias_partner(r, 3, 1, 0), -1); /* only written ranges have partners */
  r[1].written = 1;
  ASSERT_EQ(kt__alias_partner(r, 3, 0, 1), 1);
  r[1] = (kt__range){150, 150, 1, 0, 0, 0}; /* empty: shares nothing */
  ASSERT_EQ(kt__alias_partner(r, 3, 0, 0), -1);
  r[0] = (kt__range){UINT64_MAX - 4, UINT64_MAX, 0, 1, 0, 0};
  ASSERT_EQ(kt__alias_partner(r, 3, 0, 1), 2);
  /* A consumed range (left undefined) shares bytes with nothing, not even
  ** an identical read in a spec that runs in place. */
  kt__range q[2] = {{100, 200, 0, 1, 0, 1}, {100, 200, 1, 0, 0, 0}};
  ASSERT_EQ(kt__alias_partner(q, 2, 0, 1), 1);
  q[1].start = 200;
  q[1].end = 300; /* adjacent */
  ASSERT_EQ(kt__alias_partner(q, 2, 0, 1), -1);
}

static void cached_configs_are_validated(void) {
  char err[2048];
  kt__spec *s;
  ASSERT_STATUS(kt__spec_load("kernels_src/rmsnorm.json", &s, err, sizeof err), KT_OK);
  int64_t cfg[8];
  ASSERT_EQ(kt__config_from_json(s, "{\"BLOCK\":256,\"ROWS\":2,\"VEC\":8}", cfg), 0);
  ASSERT_EQ(cfg[0] * 100 + cfg[1] * 10 + cfg[2], 25628);
  char back[128];
  kt__config_json(s, cfg, back, sizeof back);
  ASSERT_STR_EQ(back, "{\"BLOCK\":256,\"ROWS\":2,\"VEC\":8}");
  ASSERT_EQ(kt__config_from_json(s, "{\"BLOCK\":300,\"ROWS\":2,\"VEC\":8}", cfg), -1);
  ASSERT_EQ(kt__config_from_json(s, "{\"BLOCK\":256,\"VEC\":8}", cfg), -1);
  ASSERT_EQ(kt__config_from_json(s, "{\"BLOCK\":256,\"ROWS\":2,\"VEC\":8,\"X\":1}", cfg), -1);
  ASSERT_EQ(kt__config_from_json(s, "{\"BLOCK\":256,\"BLOCK\":256,\"VEC\":8}", cfg), -1);
  ASSERT_EQ(kt__config_from_json(s, "[1,2]", cfg), -1);
  kt__spec_free(s);
}

static void logto(void *user, kt_log_level level, const char *msg) {
  (void)level;
  char *buf = user;
  size_t n = strlen(buf);
  snprintf(buf + n, 4096 - n, "%s\n", msg);
}

/* An offline runtime whose log goes to logged (a buffer of 4096), on the
** cache at path where path is not NULL. */
static kt_runtime *offline_logged(const char *path, char *logged) {
  kt_options o;
  t_offline_options(&o);
  if (path) o.cache_path = path;
  o.log = logto;
  o.log_user = logged;
  o.log_level = KT_LOG_INFO;
  kt_runtime *rt = NULL;
  return kt_runtime_open(&rt, &o) ? NULL : rt;
}

/* A call of tests/specs/small.json (64 rows of 256) on an offline runtime
** whose cache is NAME in the test folder and whose log goes to logged:
** bound, with its key. 0, or -1 where any step failed. */
typedef struct small_call {
  kt_runtime *rt;
  kt_kernel *k;
  kt_arg a[7];
  kt__call c;
  char key[256];
} small_call;

static int small_call_open(small_call *sc, const char *name, char *logged) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", t_tmpdir(), name);
  const kt_arg a[] = RMS(0x100000, 0x200000, 0, 0x300000, 64, 256, KT_BF16);
  memcpy(sc->a, a, sizeof a);
  if (!(sc->rt = offline_logged(path, logged))) return -1;
  if (kt_kernel_load(sc->rt, "tests/specs/small.json", &sc->k) || kt__call_bind(&sc->k->p, sc->a, 7, &sc->c) ||
      kt_kernel_key(sc->k, sc->a, 7, sc->key, sizeof sc->key)) {
    kt_runtime_close(sc->rt);
    return -1;
  }
  return 0;
}

/* The four configs of small_call's key, and a trial row of one of them
** written to its cache: 0, or -1. */
static const char *const small_cfgs[4] = {"{\"BLOCK\":128,\"ROWS\":1,\"VEC\":1}", "{\"BLOCK\":128,\"ROWS\":1,\"VEC\":8}",
                                          "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":1}", "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":8}"};

static int put_small_trial_said(const small_call *sc, const char *config, const char *status, double median_us,
                               const char *detail) {
  char err[KT_ERRMAX];
  kt__trialrow tr = {.kernel = "rmsnorm_small", .spec_hash = sc->k->p.spec_hash, .device = sc->rt->env.fingerprint,
                     .key = sc->key, .config = config, .status = status, .median_us = median_us,
                     .spread_us = median_us > 0 ? 0.1 : -1, .detail = detail};
  return kt__store_put_trial(sc->rt->env.store, &tr, err, sizeof err) ? -1 : 0;
}

static int put_small_trial(const small_call *sc, const char *config, const char *status, double median_us) {
  return put_small_trial_said(sc, config, status, median_us, "");
}

/* A key whose every stored trial is a rejection is not a dead end: the
** next tuning measures the rejections again (never a quarantined fault),
** and says why. One usable row is enough to leave them alone. */
static void rejected_keys_are_measured_again(void) {
  static char logged[4096];
  small_call sc;
  ASSERT_EQ(small_call_open(&sc, "dead.db", logged), 0);
  kt_runtime *rt = sc.rt;
  kt_kernel *k = sc.k;
  const char *key = sc.key;
  const char *const *cfgs = small_cfgs;
  /* A "fault" row whose quarantine row is gone (the user removed it) is a
  ** rejection like the others; the quarantined config stays out, also
  ** where its own row says "fault" as a faulting tuning leaves it. */
  static const char *status[] = {"mismatch", "fault", "mismatch", "fault"};
  char err[KT_ERRMAX], said[128];
  /* A mismatch is this NVRTC's verdict: it names it (tune/tuner.c). */
  int v = kt__nvrtc_version();
  snprintf(said, sizeof said, "NVRTC %d.%d: y[0] differs", v / 1000, v % 1000 / 10);
  for (int i = 0; i < 4; i++)
    ASSERT_EQ(put_small_trial_said(&sc, cfgs[i], status[i], -1, strcmp(status[i], "fault") ? said : ""), 0);
  ASSERT_EQ(kt__store_quarantine(rt->env.store, "rmsnorm_small", k->p.spec_hash, rt->env.fingerprint, key, cfgs[3],
                                 "fault: illegal address", err, sizeof err),
            0);
  logged[0] = 0;
  kt__tuner *t;
  ASSERT_STATUS(kt__tuner_new(&k->p, &rt->tune, &sc.c, sc.a, key, &t), KT_OK);
  ASSERT_EQ(kt__tuner_pending(t), 3);
  int n;
  const kt__cand *cd = kt__tuner_candidates(t, &n);
  ASSERT_EQ(n, 4);
  for (int i = 0; i < n; i++) ASSERT_EQ(cd[i].quarantined, !strcmp(cd[i].json, cfgs[3]));
  kt__tuner_free(t);
  char want[512];
  snprintf(want, sizeof want, "rmsnorm_small %s: skipping quarantined config %s (fault: illegal address)", key,
           cfgs[3]);
  ASSERT_CONTAINS(logged, want);
  snprintf(want, sizeof want, "rmsnorm_small %s: the cache holds no usable config for this key, only 3 rejected "
                              "trials; measuring them again", key);
  ASSERT_CONTAINS(logged, want);
  ASSERT_EQ(put_small_trial(&sc, cfgs[2], "ok", 5), 0);
  logged[0] = 0;
  ASSERT_STATUS(kt__tuner_new(&k->p, &rt->tune, &sc.c, sc.a, key, &t), KT_OK);
  ASSERT_EQ(kt__tuner_pending(t), 0);
  kt__tuner_free(t);
  ASSERT_TRUE(!strstr(logged, "measuring them again"));
  kt_runtime_close(rt);
}

/* An "ok" trial whose time is no time (NULL, zero, negative, text; a
** damaged or hand-edited row) settles nothing: it would win every tuning
** of the key and feed the pruning a time no config has. Its candidate is
** measured again; a sound row still settles its own. */
static void damaged_ok_trials_are_measured_again(void) {
  static char logged[4096];
  small_call sc;
  ASSERT_EQ(small_call_open(&sc, "damaged.db", logged), 0);
  kt_runtime *rt = sc.rt;
  kt_kernel *k = sc.k;
  const char *const *cfgs = small_cfgs;
  static const double medians[] = {-1 /* NULL */, 0, 7 /* made text below */, 5};
  char path[700], sql[256];
  for (int i = 0; i < 4; i++) ASSERT_EQ(put_small_trial(&sc, cfgs[i], "ok", medians[i]), 0);
  kt_runtime_info in = {.size = sizeof in};
  ASSERT_STATUS(kt_runtime_get_info(rt, &in), KT_OK);
  snprintf(path, sizeof path, "%s", in.cache_path);
  snprintf(sql, sizeof sql, "UPDATE trials SET median_us = 'fast' WHERE config = '%s'", cfgs[2]);
  ASSERT_EQ(t_db_exec(path, sql), 0);
  ASSERT_EQ(t_db_int(path, "SELECT count(*) FROM trials WHERE median_us IS NULL"), 1);
  ASSERT_EQ(t_db_int(path, "SELECT count(*) FROM trials WHERE typeof(median_us) = 'text'"), 1);
  kt__tuner *t;
  ASSERT_STATUS(kt__tuner_new(&k->p, &rt->tune, &sc.c, sc.a, sc.key, &t), KT_OK);
  ASSERT_EQ(kt__tuner_pending(t), 3);
  int n;
  const kt__cand *cd = kt__tuner_candidates(t, &n);
  ASSERT_EQ(n, 4);
  for (int i = 0; i < n; i++)
    if (!strcmp(cd[i].json, cfgs[3])) ASSERT_TRUE(cd[i].prior && cd[i].status == KT_TRIAL_OK && cd[i].median == 5);
  kt__tuner_free(t);
  /* "pruned" is never stored (a pruned candidate is only reported, and
  ** the schema's CHECK refuses it): a row that says so, written past the
  ** CHECK, settles nothing either. So does a negative time. */
  snprintf(sql, sizeof sql, "PRAGMA ignore_check_constraints = ON; UPDATE trials SET status = 'pruned' WHERE config = '%s'",
           cfgs[0]);
  ASSERT_EQ(t_db_exec(path, sql), 0);
  snprintf(sql, sizeof sql, "UPDATE trials SET median_us = -2.5 WHERE config = '%s'", cfgs[1]);
  ASSERT_EQ(t_db_exec(path, sql), 0);
  ASSERT_STATUS(kt__tuner_new(&k->p, &rt->tune, &sc.c, sc.a, sc.key, &t), KT_OK);
  ASSERT_EQ(kt__tuner_pending(t), 3);
  kt__tuner_free(t);
  /* A configs row whose time is text: the key is cached, its time unknown
  ** (-1), not 0. */
  char *q = sqlite3_mprintf("INSERT INTO configs (kernel, spec_hash, device, key, config, time_us, created_at, "
                            "updated_at) VALUES ('rmsnorm_small', %Q, %Q, %Q, %Q, 'fast', 1, 1)",
                            k->p.spec_hash, rt->env.fingerprint, sc.key, cfgs[3]);
  ASSERT_EQ(t_db_exec(path, q), 0);
  sqlite3_free(q);
  kt_tune_report *r = NULL;
  ASSERT_STATUS(kt_kernel_lookup(k, sc.a, 7, &r), KT_OK);
  ASSERT_TRUE(r && r->outcome == KT_TUNE_CACHED && !strcmp(r->config, cfgs[3]));
  ASSERT_TRUE(r && r->time_us == -1);
  kt_tune_report_free(r);
  kt_runtime_close(rt);
}

/* A rejection of the code a compiler made (compile_error, resources,
** mismatch, oob_write) is the verdict of the NVRTC that gave it, named at
** the start of its detail: a row without this NVRTC's name (another
** version's, or one an older ktune wrote without a name) settles nothing,
** since this compiler may take the source, use fewer registers or make
** code that computes right. A fault or a timeout settles whatever its
** detail says. */
static void compile_verdicts_of_another_nvrtc_are_measured_again(void) {
  static const struct {
    const char *status;
    kt_trial_status ts;
    const char *said;
  } verdicts[] = {{"compile_error", KT_TRIAL_COMPILE_ERROR, "small.cu(3): error: B too large"},
                  {"resources", KT_TRIAL_RESOURCES, "spills 24 bytes per thread to local memory"},
                  {"mismatch", KT_TRIAL_MISMATCH, "y[3] = 1.5, the reference 1.25"},
                  {"oob_write", KT_TRIAL_OOB_WRITE, "y: 4 bytes written past its end"},
                  {"fault", KT_TRIAL_FAULT, "an illegal memory access was encountered"}};
  for (size_t k = 0; k < sizeof verdicts / sizeof verdicts[0]; k++) {
    static char logged[4096];
    char db[64], mine[256], other[256];
    small_call sc;
    snprintf(db, sizeof db, "verdicts-%s.db", verdicts[k].status);
    ASSERT_EQ(small_call_open(&sc, db, logged), 0);
    const char *const *cfgs = small_cfgs;
    kt__tuner *t;
    ASSERT_STATUS(kt__tuner_new(&sc.k->p, &sc.rt->tune, &sc.c, sc.a, sc.key, &t), KT_OK);
    kt__tuner_free(t);
    /* Read once the tuner has loaded NVRTC: 0 before, when this test runs alone. */
    int v = kt__nvrtc_version();
    ASSERT_TRUE(v >= 12000);
    snprintf(mine, sizeof mine, "NVRTC %d.%d: %s", v / 1000, v % 1000 / 10, verdicts[k].said);
    snprintf(other, sizeof other, "NVRTC %d.%d: %s", v / 1000 - 1, 8, verdicts[k].said);
    ASSERT_EQ(put_small_trial_said(&sc, cfgs[0], verdicts[k].status, -1, verdicts[k].said), 0);
    ASSERT_EQ(put_small_trial_said(&sc, cfgs[1], verdicts[k].status, -1, other), 0);
    ASSERT_EQ(put_small_trial_said(&sc, cfgs[2], verdicts[k].status, -1, mine), 0);
    ASSERT_EQ(put_small_trial(&sc, cfgs[3], "ok", 5), 0);
    ASSERT_STATUS(kt__tuner_new(&sc.k->p, &sc.rt->tune, &sc.c, sc.a, sc.key, &t), KT_OK);
    int by_compiler = verdicts[k].ts != KT_TRIAL_FAULT;
    ASSERT_EQ(kt__tuner_pending(t), by_compiler ? 2 : 0);
    int n;
    const kt__cand *cd = kt__tuner_candidates(t, &n);
    ASSERT_EQ(n, 4);
    for (int i = 0; i < n; i++) {
      int settled = !by_compiler || !strcmp(cd[i].json, cfgs[2]) || !strcmp(cd[i].json, cfgs[3]);
      ASSERT_EQ(cd[i].prior, settled);
      if (!strcmp(cd[i].json, cfgs[2])) ASSERT_EQ(cd[i].status, verdicts[k].ts);
    }
    kt__tuner_free(t);
    kt_runtime_close(sc.rt);
  }
}

/* The plan of where a key is timed (tune/tuneat.h), for the call at N rows
** of D; the log it wrote in logged. */
static int tuneat_plan(kt_kernel *k, int n, int d, kt__tuneat *at, char *logged) {
  kt_arg a[] = RMS(0x100000, 0x200000, 0, 0x300000, n, d, KT_BF16);
  kt__call c;
  char key[256];
  logged[0] = 0;
  if (kt__call_bind(&k->p, a, 7, &c) || kt_kernel_key(k, a, 7, key, sizeof key)) return -1;
  kt__tuneat_plan(&k->p, &c, a, key, at);
  return 0;
}

/* Calls of tests/specs/tune_at.json (N rows of D) and where a tuning of
** each is timed: the moved sizes and the call's, or NULL where none moves
** (at D = 24 tune_at gives no size, at D = 40 a size with another key). */
static const struct {
  int n, d;
  const char *at;
} tune_at_calls[] = {{1, 256, "N=256 (the call's N=1)"}, {5000, 256, "N=256 (the call's N=5000)"},
                     {256, 256, NULL}, {3, 24, NULL}, {1, 40, NULL}};

/* A size the key ignores is timed where the spec's tune_at says: the moved
** call has the caller's key, the same pointers and other scalars; a value
** that is not a size, or that moves the key, leaves the call as it is and
** says so (kt__tuneat_moves tells the same without a word). The candidates
** are the configs valid for both calls. */
static void tune_at_moves_the_timed_call(void) {
  static char logged[4096];
  kt_runtime *rt = offline_logged(NULL, logged);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/tune_at.json", &k), KT_OK);
  kt__tuneat at;
  ASSERT_EQ(tuneat_plan(k, 1, 256, &at, logged), 0);
  ASSERT_EQ(at.on, 1);
  ASSERT_EQ(at.c.slots[4], 256);
  ASSERT_EQ(at.args[4].v.i32, 256);
  ASSERT_EQ(at.args[5].v.i32, 256);
  ASSERT_EQ((long long)at.args[1].v.ptr, 0x200000);
  ASSERT_STR_EQ(at.what, "N=256 (the call's N=1)");
  ASSERT_STR_EQ(logged, "");
  kt__tuneat_free(&at);
  ASSERT_EQ(tuneat_plan(k, 256, 256, &at, logged), 0);
  ASSERT_EQ(at.on, 0);
  ASSERT_STR_EQ(logged, "");
  ASSERT_EQ(tuneat_plan(k, 5000, 256, &at, logged), 0);
  ASSERT_EQ(at.on, 1);
  ASSERT_STR_EQ(at.what, "N=256 (the call's N=5000)");
  ASSERT_EQ(tuneat_plan(k, 3, 24, &at, logged), 0);
  ASSERT_EQ(at.on, 0);
  ASSERT_CONTAINS(logged, "rmsnorm_tune_at {\"D\":24,");
  ASSERT_CONTAINS(logged, "}: tune_at: \"D == 24 ? 0 : cdiv(65536, D)\" is 0, not a size; tuned at the call's sizes\n");
  ASSERT_EQ(tuneat_plan(k, 1, 40, &at, logged), 0);
  ASSERT_EQ(at.on, 0);
  ASSERT_CONTAINS(logged, "}: tune_at: at N=1639 the call has another key; tuned at the call's N=1\n");
  /* kt__tuneat_moves says the same as at.on and at.what, and logs nothing. */
  for (size_t i = 0; i < sizeof tune_at_calls / sizeof tune_at_calls[0]; i++) {
    kt_arg a[] = RMS(0x100000, 0x200000, 0, 0x300000, tune_at_calls[i].n, tune_at_calls[i].d, KT_BF16);
    kt__call c;
    char what[256];
    ASSERT_STATUS(kt__call_bind(&k->p, a, 7, &c), KT_OK);
    logged[0] = 0;
    ASSERT_EQ(kt__tuneat_moves(&k->p, &c, a, what, sizeof what), tune_at_calls[i].at != NULL);
    ASSERT_STR_EQ(what, tune_at_calls[i].at ? tune_at_calls[i].at : "");
    ASSERT_STR_EQ(logged, "");
  }
  /* Candidates: ROWS <= N holds for ROWS = 4 at the 256 rows timed, not at
  ** the caller's 2, so only ROWS = 1 is tuned; at 300 rows both are. */
  int pending[2];
  for (int i = 0; i < 2; i++) {
    kt_arg a[] = RMS(0x100000, 0x200000, 0, 0x300000, i ? 300 : 2, 256, KT_BF16);
    kt__call c;
    char key[256];
    kt__tuner *t;
    ASSERT_STATUS(kt__call_bind(&k->p, a, 7, &c), KT_OK);
    ASSERT_STATUS(kt_kernel_key(k, a, 7, key, sizeof key), KT_OK);
    ASSERT_STATUS(kt__tuner_new(&k->p, &rt->tune, &c, a, key, &t), KT_OK);
    pending[i] = kt__tuner_pending(t);
    kt__tuner_free(t);
  }
  ASSERT_EQ(pending[0], 2);
  ASSERT_EQ(pending[1], 4);
  kt_runtime_close(rt);
}

/* A report says where a tuning of its call times the key (tune_at), with
** no device: the moved sizes and the call's, or NULL where none moves. */
static void reports_say_where_a_key_is_timed(void) {
  static char logged[4096];
  kt_runtime *rt = offline_logged(NULL, logged);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/tune_at.json", &k), KT_OK);
  for (size_t i = 0; i < sizeof tune_at_calls / sizeof tune_at_calls[0]; i++) {
    /* Buffers far apart: kt_kernel_lookup checks that they do not overlap. */
    kt_arg a[] = RMS(0x10000000, 0x20000000, 0, 0x30000000, tune_at_calls[i].n, tune_at_calls[i].d, KT_BF16);
    for (int tune = 0; tune < 2; tune++) {
      kt_tune_report *r = NULL;
      ASSERT_STATUS(tune ? kt_kernel_tune(k, a, 7, &r) : kt_kernel_lookup(k, a, 7, &r), KT_OK);
      if (!r) return;
      if (tune_at_calls[i].at) ASSERT_STR_EQ(r->timed_at ? r->timed_at : "(null)", tune_at_calls[i].at);
      else ASSERT_TRUE(r->timed_at == NULL);
      kt_tune_report_free(r);
    }
  }
  kt_runtime_close(rt);
}

/* A call that launches no program (N = 0 where the grid is cdiv(N, ROWS))
** has nothing to time: a tuning asked for says so, before any candidate
** or lease, and counts no miss; a lookup answers as ever. Where the spec
** times the key at other sizes (the reduce's tune_at, N = P) the tuning
** goes ahead there. No device needed. */
static void calls_of_no_program_time_nothing(void) {
  static char logged[4096];
  kt_runtime *rt = offline_logged(NULL, logged);
  ASSERT_TRUE(rt);
  kt_kernel *k, *red;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &k), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/layernorm_bwd_reduce.json", &red), KT_OK);
  kt_arg a[] = RMS(0x10000000, 0x20000000, 0, 0x30000000, 0, 256, KT_BF16);
  char key[256], want[512];
  ASSERT_STATUS(kt_kernel_key(k, a, 7, key, sizeof key), KT_OK);
  snprintf(want, sizeof want,
           "rmsnorm_small %s: nothing to time: the call launches no program (grid[0], cdiv(N, ROWS), is 0 under "
           "the default config)",
           key);
  kt_tune_report *r = NULL;
  for (int shape = 0; shape < 2; shape++) {
    ASSERT_STATUS(shape ? kt_kernel_tune_shape(k, a, 7, &r) : kt_kernel_tune(k, a, 7, &r), KT_ERR_INVALID);
    ASSERT_TRUE(r == NULL);
    ASSERT_STR_EQ(kt_errmsg(rt), want);
  }
  ASSERT_STATUS(kt_kernel_lookup(k, a, 7, &r), KT_OK);
  ASSERT_TRUE(r && r->outcome == KT_TUNE_NOT_TUNED);
  kt_tune_report_free(r);
  kt_stats n = {.size = sizeof n};
  ASSERT_STATUS(kt_runtime_stats(rt, &n), KT_OK);
  ASSERT_EQ((long)n.misses, 0);
  /* dw, db, dw_part, db_part, N, D, P: no rows, 66 partial rows. */
  kt_arg b[] = {kt_arg_ptr(0x10000000, KT_BF16), kt_arg_ptr(0, KT_BF16), kt_arg_ptr(0x20000000, KT_F32),
                kt_arg_ptr(0, KT_F32),           kt_arg_i32(0),          kt_arg_i32(1024),
                kt_arg_i32(66)};
  ASSERT_STATUS(kt_kernel_tune(red, b, 7, &r), KT_OK);
  ASSERT_TRUE(r && r->outcome == KT_TUNE_NOT_TUNED);
  ASSERT_STR_EQ(r && r->timed_at ? r->timed_at : "(null)", "N=66 (the call's N=0)");
  kt_tune_report_free(r);
  kt_runtime_close(rt);
}

/* The inputs' values (tune/inputs.h): the same bytes on one thread and on
** seven (chunks seeded by their index; several chunks, the last part
** full), another seed other bytes; randn's mean and variance, uniform's
** bounds, mask's rate, arange, ones and a number exact; outputs zero;
** permutation(n) a permutation of [0, n), repeated. */
static void inputs_fill_values(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("kernels_src/layernorm_fwd.json", &rt);
  if (!k) return;
  const size_t n = 3 * ((size_t)1 << 18) + 1000;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  if (!a || !b) {
    t_fail(__FILE__, __LINE__, "out of memory");
    goto out;
  }
  static const char *inits[] = {"randn", "uniform(-0.5,0.5)", "mask(0.25)", "arange", "ones", "2.5"};
  for (int g = 0; g < 6; g++) {
    kt__param q = {.access = KT__IN};
    ASSERT_EQ(kt__gen_parse(inits[g], &q.gen), 0);
    ASSERT_EQ(kt__inputs_fill(&k->p, NULL, &q, KT_F32, a, n, 42, 1), 0);
    ASSERT_EQ(kt__inputs_fill(&k->p, NULL, &q, KT_F32, b, n, 42, 7), 0);
    if (memcmp(a, b, n * sizeof *a)) t_fail(__FILE__, __LINE__, "%s: one thread and seven differ", inits[g]);
    double sum = 0, sq = 0, lo = a[0], hi = a[0];
    long exact = 0;
    for (size_t i = 0; i < n; i++) {
      sum += a[i], sq += (double)a[i] * a[i];
      lo = a[i] < lo ? a[i] : lo, hi = a[i] > hi ? a[i] : hi;
      exact += a[i] == (g == 3 ? (float)i : g == 4 ? 1.f : 2.5f);
    }
    const double mean = sum / (double)n, var = sq / (double)n - mean * mean;
    if (g == 0) {
      ASSERT_TRUE(fabs(mean) < 0.01 && fabs(var - 1) < 0.01);
      ASSERT_EQ(kt__inputs_fill(&k->p, NULL, &q, KT_F32, b, n, 43, 7), 0);
      ASSERT_TRUE(memcmp(a, b, n * sizeof *a) != 0);
    }
    if (g == 1) ASSERT_TRUE(lo >= -0.5 && hi < 0.5 && fabs(mean) < 0.01);
    if (g == 2) ASSERT_TRUE(lo == 0 && hi == 1 && fabs(mean - 0.25) < 0.01);
    if (g >= 3) ASSERT_EQ(exact, (long)n);
  }
  kt__param out = {.access = KT__OUT};
  a[5] = 1;
  ASSERT_EQ(kt__inputs_fill(&k->p, NULL, &out, KT_F32, a, n, 42, 7), 0);
  ASSERT_TRUE(a[5] == 0 && a[n - 1] == 0);
  kt__param perm = {.access = KT__IN};
  ASSERT_EQ(kt__gen_parse("permutation(1000)", &perm.gen), 0);
  int32_t *m = (int32_t *)a;
  ASSERT_EQ(kt__inputs_fill(&k->p, NULL, &perm, KT_I32, m, 2500, 42, 7), 0);
  char seen[1000] = {0};
  int dup = 0;
  for (int i = 0; i < 1000; i++) dup += m[i] < 0 || m[i] >= 1000 || seen[m[i]]++;
  ASSERT_EQ(dup, 0);
  ASSERT_TRUE(m[1000] == m[0] && m[2499] == m[499]);
out:
  free(a);
  free(b);
  kt_runtime_close(rt);
}

/* kt_kernel_tune (and kt_kernel_tune_shape) as data, where no device can
** tune: the cache's row and trials when it has the key, else the default;
** and the codec. */
static void tune_reports_without_a_device(void) {
  char path[700];
  snprintf(path, sizeof path, "%s/report.db", t_tmpdir());
  kt_options o;
  t_offline_options(&o);
  o.cache_path = path;
  kt_runtime *rt;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &k), KT_OK);
  kt_arg a[] = RMS(0x100000, 0x200000, 0, 0x300000, 64, 256, KT_BF16);
  kt_tune_report *r;
  ASSERT_STATUS(kt_kernel_tune(k, a, 7, &r), KT_OK);
  if (!r) return;
  ASSERT_EQ(r->outcome, KT_TUNE_NOT_TUNED);
  ASSERT_STR_EQ(r->kernel, "rmsnorm_small");
  ASSERT_STR_EQ(r->key, "{\"D\":256,\"HAS_RES\":0,\"T\":\"bf16\",\"res\":0,\"w\":16,\"x\":16,\"y\":16}");
  ASSERT_STR_EQ(r->config, "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":1}");
  ASSERT_STR_EQ(r->default_config, r->config);
  ASSERT_EQ(r->ncandidates, 0);
  ASSERT_TRUE(r->time_us == -1 && r->default_us == -1);
  ASSERT_TRUE(r->timed_at == NULL); /* the spec has no tune_at */
  char key[256];
  snprintf(key, sizeof key, "%s", r->key);
  kt_tune_report_free(r);
  /* Given by its shape alone: the key this process settled just now. */
  ASSERT_STATUS(kt_kernel_tune_shape(k, a, 7, &r), KT_OK);
  if (!r) return;
  ASSERT_EQ(r->outcome, KT_TUNE_KNOWN);
  ASSERT_STR_EQ(r->key, key);
  ASSERT_STR_EQ(r->config, "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":1}");
  kt_tune_report_free(r);
  ASSERT_STATUS(kt_kernel_tune_shape(k, a, 7, NULL), KT_ERR_INVALID);
  char err[KT_ERRMAX];
  static const char *cfgs[] = {"{\"BLOCK\":128,\"ROWS\":1,\"VEC\":8}", "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":1}",
                               "{\"BLOCK\":128,\"ROWS\":1,\"VEC\":1}"};
  static const char *status[] = {"ok", "ok", "mismatch"};
  for (int i = 0; i < 3; i++) {
    kt__trialrow tr = {.kernel = "rmsnorm_small", .spec_hash = k->p.spec_hash, .device = rt->env.fingerprint,
                       .key = key, .config = cfgs[i], .status = status[i], .median_us = 2.0 + i,
                       .spread_us = 0.5, .detail = i == 2 ? "y: 3 elements differ" : ""};
    ASSERT_EQ(kt__store_put_trial(rt->env.store, &tr, err, sizeof err), 0);
  }
  kt__cfgrow row = {.kernel = "rmsnorm_small", .spec_hash = k->p.spec_hash, .device = rt->env.fingerprint,
                    .key = key, .config = cfgs[0], .time_us = 2.0, .candidates = 3, .rejected = 1};
  ASSERT_EQ(kt__store_put_config(rt->env.store, &row, NULL, err, sizeof err), 0);
  kt_runtime_close(rt);
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &k), KT_OK);
  ASSERT_STATUS(kt_kernel_tune_shape(k, a, 7, &r), KT_OK);
  if (!r) return;
  ASSERT_EQ(r->outcome, KT_TUNE_CACHED);
  ASSERT_STR_EQ(r->config, cfgs[0]);
  kt_tune_report_free(r);
  ASSERT_STATUS(kt_kernel_tune(k, a, 7, &r), KT_OK);
  if (!r) return;
  ASSERT_EQ(r->outcome, KT_TUNE_CACHED);
  ASSERT_STR_EQ(r->config, cfgs[0]);
  ASSERT_TRUE(r->time_us == 2.0 && r->default_us == 3.0);
  ASSERT_EQ(r->ncandidates * 100 + r->tried * 10 + r->rejected, 331);
  ASSERT_STR_EQ(r->candidates[0].config, cfgs[0]);
  ASSERT_EQ(r->candidates[2].status, KT_TRIAL_MISMATCH);
  ASSERT_STR_EQ(r->candidates[2].detail, "y: 3 elements differ");
  ASSERT_TRUE(r->candidates[2].median_us == -1 && !r->candidates[2].measured && r->candidates[2].stored);
  kt_tune_report_free(r);
  /* A call the alias rules refuse gets no report. */
  a[0] = a[1];
  a[0].v.ptr += 2;
  ASSERT_STATUS(kt_kernel_tune(k, a, 7, &r), KT_ERR_ALIAS);
  ASSERT_TRUE(r == NULL);
  ASSERT_STATUS(kt_kernel_tune_shape(k, a, 7, &r), KT_ERR_ALIAS);
  ASSERT_TRUE(r == NULL);
  char buf[256];
  ASSERT_STATUS(kt_kernel_config_json(k, "VEC=8,ROWS=1,BLOCK=128", buf, sizeof buf), KT_OK);
  ASSERT_STR_EQ(buf, cfgs[0]);
  ASSERT_STATUS(kt_kernel_config_json(k, "{\"VEC\": 8, \"BLOCK\": 128, \"ROWS\": 1}", buf, sizeof buf), KT_OK);
  ASSERT_STR_EQ(buf, cfgs[0]);
  ASSERT_STATUS(kt_kernel_config_json(k, "VEC=3,ROWS=1,BLOCK=128", buf, sizeof buf), KT_ERR_CONSTRAINT);
  ASSERT_STR_EQ(kt_errmsg(rt), "rmsnorm_small: config \"VEC=3,ROWS=1,BLOCK=128\": VEC=3 is not in the spec's space");
  ASSERT_STATUS(kt_kernel_config_json(k, "{\"VEC\": 8}", buf, sizeof buf), KT_ERR_INVALID);
  kt_runtime_close(rt);
  ASSERT_STATUS(kt_json_canonical("{ \"y\": 16, \"D\": 256.0, \"T\": \"bf16\" }", buf, sizeof buf), KT_OK);
  ASSERT_STR_EQ(buf, "{\"D\":256,\"T\":\"bf16\",\"y\":16}");
  ASSERT_STATUS(kt_json_canonical("{\"D\": [1]}", buf, sizeof buf), KT_ERR_INVALID);
  ASSERT_TRUE(buf[0] != 0);
}

/* Many threads missing the same key at once: one of them decides, the
** others wait for it and find its entry; the table ends with one entry. */
typedef struct racer {
  kt_kernel *k;
  char cfg[128];
  kt_status st;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  kt_arg a[] = RMS(0x100000, 0x200000, 0, 0x300000, 100, 1024, KT_BF16);
  r->st = kt_kernel_config_for(r->k, a, 7, r->cfg, sizeof r->cfg);
  return NULL;
}

static void single_flight(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("kernels_src/rmsnorm.json", &rt);
  if (!k) return;
  racer r[16];
  pthread_t t[16];
  for (int i = 0; i < 16; i++) {
    r[i].k = k;
    pthread_create(&t[i], NULL, race, &r[i]);
  }
  for (int i = 0; i < 16; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 16; i++) {
    ASSERT_STATUS(r[i].st, KT_OK);
    ASSERT_STR_EQ(r[i].cfg, r[0].cfg);
  }
  ASSERT_EQ(kt__test_tuned_count(k), 1);
  kt_runtime_close(rt);
}

/* With miss_runs_default, a thread that misses while the kernel's tuner is
** busy launches the default config at once, and leaves no entry. */
static void miss_runs_default_while_tuning(void) {
  kt_options o;
  t_offline_options(&o);
  o.no_cache = 1;
  o.miss_runs_default = 1;
  kt_runtime *rt;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  pthread_mutex_lock(&k->tune_lock); /* as a tuner would hold it */
  kt_arg a[] = RMS(0x100000, 0x200000, 0, 0x300000, 100, 1024, KT_BF16);
  char cfg[128];
  kt_status st = kt_kernel_config_for(k, a, 7, cfg, sizeof cfg);
  int entries = kt__test_tuned_count(k);
  pthread_mutex_unlock(&k->tune_lock);
  ASSERT_STATUS(st, KT_OK);
  ASSERT_STR_EQ(cfg, "BLOCK=128,ROWS=4,VEC=1");
  ASSERT_EQ(entries, 0);
  ASSERT_STATUS(kt_kernel_config_for(k, a, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_EQ(kt__test_tuned_count(k), 1);
  kt_runtime_close(rt);
}

static void cli_key_and_lint(void) {
  char out[8192];
  const char *bin = getenv("KTUNE_BIN") ? getenv("KTUNE_BIN") : "build/ktune";
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=256,T=bf16 --shape N=24000,D=256,T=bf16 "
                 "--shape N=5,D=256,T=bf16,res=null,x@2",
                 bin),
            0);
  ASSERT_STR_EQ(out,
                "{\"D\":256,\"HAS_RES\":1,\"T\":\"bf16\",\"res\":16,\"w\":16,\"x\":16,\"y\":16}\n"
                "{\"D\":256,\"HAS_RES\":1,\"T\":\"bf16\",\"res\":16,\"w\":16,\"x\":16,\"y\":16}\n"
                "{\"D\":256,\"HAS_RES\":0,\"T\":\"bf16\",\"res\":0,\"w\":16,\"x\":2,\"y\":16}\n");
  /* The backward's reduce: P (the partial rows) by its bucket, N left out. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/layernorm_bwd_reduce.json --shape D=4096,P=264,W=bf16,N=7 "
                 "--shape D=4096,P=300,W=bf16,N=65536 --shape D=4096,P=1,W=bf16,N=1",
                 bin),
            0);
  ASSERT_STR_EQ(out,
                "{\"D\":4096,\"P\":512,\"W\":\"bf16\",\"db\":16,\"db_part\":16,\"dw\":16,\"dw_part\":16}\n"
                "{\"D\":4096,\"P\":512,\"W\":\"bf16\",\"db\":16,\"db_part\":16,\"dw\":16,\"dw_part\":16}\n"
                "{\"D\":4096,\"P\":1,\"W\":\"bf16\",\"db\":16,\"db_part\":16,\"dw\":16,\"dw_part\":16}\n");
  /* A call that no config fits has a key, and a note that its launches
  ** fail; --json gives its default as null and why. */
  ASSERT_EQ(t_sh(out, sizeof out, "(%s key kernels_src/layernorm_fwd.json --shape N=8,G=3,D=64,T=bf16,W=bf16,rms=0 "
                 ">/dev/null)", bin),
            0);
  ASSERT_STR_EQ(out, "ktune key: note: --shape N=8,G=3,D=64,T=bf16,W=bf16,rms=0: layernorm_fwd: no config satisfies "
                     "the constraints for this call (the default fails \"G > 0 && D > 0 && D % G == 0\"); a launch "
                     "of it fails (KT_ERR_NO_CONFIG)\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key --json kernels_src/layernorm_fwd.json --shape N=8,G=3,D=64,T=bf16,W=bf16,rms=0 "
                 "--shape N=8,G=1,D=64,T=bf16,W=bf16,rms=0", bin),
            0);
  ASSERT_CONTAINS(out, "\"default\":null,\"no_config\":\"layernorm_fwd: no config satisfies the constraints for "
                       "this call (the default fails \\\"G > 0 && D > 0 && D % G == 0\\\")\"}");
  ASSERT_CONTAINS(out, "\"rms\":0,\"rstd\":16,\"w\":16,\"x\":16,\"y\":16},\"default\":\"BLOCK=");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,T=bf16", bin), 2);
  ASSERT_CONTAINS(out, "D is in the tuning key; give its value");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape D=1,T=bf16,Q=3", bin), 2);
  ASSERT_CONTAINS(out, "Q is not a param or type variable of rmsnorm_fwd");
  /* A misspelt name is named, not the value it leaves missing. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,Dd=256,T=bf16", bin), 2);
  ASSERT_STR_EQ(out, "ktune key: --shape N=1,Dd=256,T=bf16: Dd is not a param or type variable of rmsnorm_fwd\n"
                     "Try 'ktune key --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=256,TT=bf16", bin), 2);
  ASSERT_CONTAINS(out, ": TT is not a param or type variable of rmsnorm_fwd\n");
  /* Spaces around names and values are not part of them. */
  char spaced[4096];
  ASSERT_EQ(t_sh(spaced, sizeof spaced, "%s key kernels_src/rmsnorm.json --shape 'N=1, D = 256 ,\tT=bf16 ,x @ 2'", bin),
            0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=256,T=bf16,x@2", bin), 0);
  ASSERT_STR_EQ(spaced, out);
  ASSERT_CONTAINS(out, "\"x\":2");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=256,T=bf16,N=2", bin), 2);
  ASSERT_CONTAINS(out, "--shape N=1,D=256,T=bf16,N=2: N is given twice");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=256,T=bf16,x=null,x@16", bin), 2);
  ASSERT_CONTAINS(out, "x is given twice");
  /* Sizes no launch takes (an extent below 0) have no key, and compile
  ** nothing. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=24000,D=-256,T=bf16", bin), 2);
  ASSERT_STR_EQ(out, "ktune key: --shape N=24000,D=-256,T=bf16: rmsnorm_fwd: arg 0 (y): its extent, N * D, is "
                     "-6144000 elements: below 0\nTry 'ktune key --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_CACHE=%s/neg.db %s compile --arch sm_90 kernels_src/rmsnorm.json --shape "
                 "N=2,D=-8,T=bf16 2>&1",
                 t_tmpdir(), bin),
            1);
  ASSERT_CONTAINS(out, "--shape N=2,D=-8,T=bf16: rmsnorm_fwd: arg 0 (y): its extent, N * D, is -16 elements: below 0");
  ASSERT_CONTAINS(out, "0 variants compiled for sm_90, 0 failed");
  /* A value outside its param's type is refused, never wrapped. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=4294967552,T=bf16", bin), 2);
  ASSERT_STR_EQ(out, "ktune key: --shape N=1,D=4294967552,T=bf16: D=4294967552 is not an i32 (a whole number from "
                     "-2147483648 to 2147483647)\nTry 'ktune key --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key tests/specs/add_one.json --shape n=99999999999999999999", bin), 2);
  ASSERT_CONTAINS(out, "n=99999999999999999999 is not an i64 (a whole number that fits in 64 bits)");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=256,T=bf16,eps=1e999", bin), 2);
  ASSERT_CONTAINS(out, "eps=1e999 is not a finite f32");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=256,T=bf16,x@abc", bin), 2);
  ASSERT_CONTAINS(out, "pointer x takes =null or @BYTES (an offset below 4096)");
  ASSERT_EQ(t_sh(out, sizeof out, "%s lint tests/specs/phantom.json", bin), 1);
  ASSERT_CONTAINS(out, "phantom key field: NB is in the tuning key (\"key\": \"exact\")");
  ASSERT_CONTAINS(out, "1 problem in 1 spec\n");
  ASSERT_TRUE(strstr(out, "note:") == NULL); /* its N sets the grid beside ROWS, which has one value */
  ASSERT_EQ(t_sh(out, sizeof out, "%s lint tests/specs/small.json tests/specs/add_one.json", bin), 0);
  ASSERT_STR_EQ(out, "tests/specs/small.json: note: N is left out of the tuning key (\"key\": \"ignore\", no "
                     "\"tune_at\") but sets the grid, as the config field ROWS does: a key tuned at its first call's "
                     "N serves every other N; give N a \"tune_at\" (the size to time the key at) or \"key\": \"pow2\" "
                     "where the best config follows it\n"
                     "0 problems in 2 specs, 1 note\n");
}

/* ktune lint's exit status on spec, written as dir/name; its output in out. */
static int lint_written(const char *dir, const char *name, const char *spec, char *out, size_t n) {
  const char *bin = getenv("KTUNE_BIN") ? getenv("KTUNE_BIN") : "build/ktune";
  char path[800];
  if (t_write_file(dir, name, spec, path, sizeof path)) return -1;
  return t_sh(out, n, "%s lint %s", bin, path);
}

/* A size the key leaves out that sets the grid beside a config field is
** noted (advice: exit status 0), unless it has a tune_at or the grid's
** config field has one value; --json lists notes apart from problems. The
** bug: chunk_state_fwd left batch x heads (its grid's second dimension) out
** of its key, and a tile tuned at one value ran 3.9x slower at another. */
static void lint_notes_sizes_the_key_leaves_out_of_the_grid(void) {
  const char *bin = getenv("KTUNE_BIN") ? getenv("KTUNE_BIN") : "build/ktune";
  const char *dir = t_tmpdir();
  char out[8192], path[800];
  ASSERT_EQ(t_write_file(dir, "g.cu",
                         "template <int TILE>\n__global__ void g(float *h, int BH, int N) {\n"
                         "  if (threadIdx.x == 0) h[blockIdx.y * TILE + blockIdx.x] = N;\n}\n",
                         path, sizeof path),
            0);
  static const char *const bh[] = {"\"key\": \"ignore\"", "\"key\": \"ignore\", \"tune_at\": \"64\"",
                                   "\"key\": \"pow2\""};
  for (int i = 0; i < 3; i++) {
    char spec[1200], name[32];
    snprintf(spec, sizeof spec,
             "{\"name\": \"g\", \"source\": \"g.cu\", \"entry\": \"g\", \"template\": [\"TILE\"],\n"
             " \"params\": [{\"name\": \"h\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\","
             " \"extent\": \"BH * 64\"}, {\"name\": \"BH\", \"type\": \"i32\", %s},"
             " {\"name\": \"N\", \"type\": \"i32\", \"key\": \"ignore\"}],\n"
             " \"config\": {\"TILE\": [16, 32]}, \"default\": {\"TILE\": 16},"
             " \"grid\": [\"64 / TILE\", \"BH\"], \"block\": 32}\n",
             bh[i]);
    snprintf(name, sizeof name, "g%d.json", i);
    ASSERT_EQ(lint_written(dir, name, spec, out, sizeof out), 0);
    if (i == 0) {
      ASSERT_CONTAINS(out, ": note: BH is left out of the tuning key (\"key\": \"ignore\", no \"tune_at\") but sets "
                           "the grid, as the config field TILE does: ");
      ASSERT_CONTAINS(out, "0 problems in 1 spec, 1 note\n");
    } else {
      ASSERT_STR_EQ(out, "0 problems in 1 spec\n");
    }
  }
  snprintf(path, sizeof path, "%s/g0.json", dir);
  ASSERT_EQ(t_sh(out, sizeof out, "%s lint --json %s", bin, path), 0);
  ASSERT_CONTAINS(out, "\"problems\":[],\"notes\":[\"BH is left out of the tuning key");
  ASSERT_CONTAINS(out, "\"problems\":0,\"notes\":1,\"not_loaded\":0}");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* A constraint that holds a config field against a size the key leaves
** out (through a derived constant here) is noted: a call where it refuses
** the key's config runs the fallback. None where the key holds the size. */
static void lint_notes_constraints_on_sizes_the_key_leaves_out(void) {
  const char *dir = t_tmpdir();
  char out[8192], path[800];
  static const char *const n_key[] = {"\"key\": \"ignore\"", "\"key\": \"pow2\""};
  ASSERT_EQ(t_write_file(dir, "c.cu",
                         "template <int TILE, int WIDE>\n__global__ void c(float *h, int BH, int N) {\n"
                         "  if (threadIdx.x == 0) h[blockIdx.x] = TILE + WIDE + BH + N;\n}\n",
                         path, sizeof path),
            0);
  for (int i = 0; i < 2; i++) {
    char spec[1200], name[32];
    snprintf(spec, sizeof spec,
             "{\"name\": \"c\", \"source\": \"c.cu\", \"entry\": \"c\", \"template\": [\"TILE\", \"WIDE\"],\n"
             " \"params\": [{\"name\": \"h\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\","
             " \"extent\": \"64\"}, {\"name\": \"BH\", \"type\": \"i32\"},"
             " {\"name\": \"N\", \"type\": \"i32\", %s}],\n"
             " \"derived\": {\"WIDE\": \"N >= 32\"},\n"
             " \"config\": {\"TILE\": [16, 32]}, \"default\": {\"TILE\": 16},\n"
             " \"constraints\": [\"BH > 0\", \"TILE == 16 || WIDE\"],\n"
             " \"grid\": [\"64 / TILE\", \"BH\"], \"block\": 32}\n",
             n_key[i]);
    snprintf(name, sizeof name, "c%d.json", i);
    ASSERT_EQ(lint_written(dir, name, spec, out, sizeof out), 0);
    if (i == 0)
      ASSERT_CONTAINS(out, ": note: constraints[1] (\"TILE == 16 || WIDE\") holds config fields against N, "
                           "which the key leaves out (\"key\": \"ignore\"): a key tuned at one N serves every "
                           "other, and a call whose N refuses the tuned config runs the default config (or the valid "
                           "one nearest it), never tuned; put N in the key (\"pow2\" or \"exact\") or constrain "
                           "what the key holds\n"
                           "0 problems in 1 spec, 1 note\n");
    else
      ASSERT_STR_EQ(out, "0 problems in 1 spec\n");
  }
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}


/* cfg from "BLOCK=256,ROWS=1,...", parsed as a forced config is. */
static void cfg_of(kt_kernel *k, const char *text, int64_t *cfg) {
  ASSERT_STATUS(kt__config_parse(&k->p, text, cfg), KT_OK);
}

/* Pruning judges a field value beside each of the candidate's other values.
** The case it exists for: on layernorm_bwd at D = 16384, STAGES = 2 and
** REREAD = 1 lost in clusters (CL = 2) and won without; judging STAGES = 2
** alone pruned the winner (BLOCK = 1024, CL = 1) before it was measured. */
static void pruning_judges_values_beside_each_other(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("kernels_src/layernorm_bwd.json", &rt);
  if (!k) return;
  const kt__spec *s = k->p.spec;
  kt__evidence *e = kt__evidence_new(s);
  ASSERT_TRUE(e);
  int64_t cfg[KT_MAX_CFIELDS];
  char why[512] = "";
  static const char *clustered[] = {
      "BLOCK=256,ROWS=1,VEC=8,ITEMS=4,STAGES=2,ACC=0,CL=2,MG=1,REREAD=0,HOLD=0", "BLOCK=256,ROWS=1,VEC=8,ITEMS=4,STAGES=2,ACC=0,CL=2,MG=1,REREAD=1,HOLD=0",
      "BLOCK=256,ROWS=1,VEC=8,ITEMS=4,STAGES=3,ACC=0,CL=2,MG=1,REREAD=0,HOLD=0", "BLOCK=256,ROWS=1,VEC=8,ITEMS=4,STAGES=3,ACC=0,CL=2,MG=1,REREAD=1,HOLD=0",
      "BLOCK=512,ROWS=1,VEC=8,ITEMS=2,STAGES=2,ACC=0,CL=2,MG=1,REREAD=0,HOLD=0", "BLOCK=512,ROWS=1,VEC=8,ITEMS=2,STAGES=2,ACC=0,CL=2,MG=1,REREAD=1,HOLD=0"};
  cfg_of(k, "BLOCK=1024,ROWS=1,VEC=8,ITEMS=2,STAGES=2,ACC=0,CL=1,MG=1,REREAD=1,HOLD=0", cfg);
  ASSERT_EQ(kt__evidence_prunes(e, cfg, why, sizeof why), 0); /* nothing measured */
  for (int i = 0; i < 6; i++) {
    cfg_of(k, clustered[i], cfg);
    kt__evidence_note(e, cfg, 80.0 + i);
  }
  cfg_of(k, "BLOCK=512,ROWS=1,VEC=4,ITEMS=8,STAGES=0,ACC=1,CL=1,MG=1,REREAD=0,HOLD=0", cfg);
  kt__evidence_note(e, cfg, 66.0);
  /* STAGES=2 lost by 21% in 4 candidates, REREAD=1 in 3, VEC=8 in 6, all
  ** beside CL=2: nothing is known of them beside CL=1 or BLOCK=1024. */
  cfg_of(k, "BLOCK=1024,ROWS=1,VEC=8,ITEMS=2,STAGES=2,ACC=0,CL=1,MG=1,REREAD=1,HOLD=0", cfg);
  ASSERT_EQ(kt__evidence_prunes(e, cfg, why, sizeof why), 0);
  cfg_of(k, "BLOCK=512,ROWS=1,VEC=8,ITEMS=4,STAGES=2,ACC=0,CL=1,MG=1,REREAD=1,HOLD=0", cfg);
  ASSERT_EQ(kt__evidence_prunes(e, cfg, why, sizeof why), 0);
  /* Beside values each measured twice or more with it, VEC=8 has lost. */
  cfg_of(k, "BLOCK=512,ROWS=1,VEC=8,ITEMS=2,STAGES=3,ACC=0,CL=2,MG=1,REREAD=1,HOLD=0", cfg);
  ASSERT_EQ(kt__evidence_prunes(e, cfg, why, sizeof why), 1);
  ASSERT_STR_EQ(why, "not compiled: the 6 candidates measured with VEC=8 (at least 2 beside each of its other values) "
                     "took 80.00 us at best, the best measured 66.00 us");
  /* Once VEC=8 wins beside CL=1, what loses is CL=2. */
  cfg_of(k, "BLOCK=1024,ROWS=1,VEC=8,ITEMS=2,STAGES=2,ACC=0,CL=1,MG=1,REREAD=1,HOLD=0", cfg);
  kt__evidence_note(e, cfg, 55.0);
  cfg_of(k, "BLOCK=512,ROWS=1,VEC=8,ITEMS=2,STAGES=3,ACC=0,CL=2,MG=1,REREAD=1,HOLD=0", cfg);
  ASSERT_EQ(kt__evidence_prunes(e, cfg, why, sizeof why), 1);
  ASSERT_STR_EQ(why, "not compiled: the 6 candidates measured with CL=2 (at least 2 beside each of its other values) "
                     "took 80.00 us at best, the best measured 55.00 us");
  /* BLOCK=1024 beside CL=2 was never measured: no prediction. */
  cfg_of(k, "BLOCK=1024,ROWS=1,VEC=8,ITEMS=2,STAGES=2,ACC=0,CL=2,MG=1,REREAD=1,HOLD=0", cfg);
  ASSERT_EQ(kt__evidence_prunes(e, cfg, why, sizeof why), 0);
  /* Five measured are too few, whatever the pairs say. */
  kt__evidence_free(e);
  ASSERT_TRUE((e = kt__evidence_new(s)));
  for (int i = 0; i < 5; i++) {
    cfg_of(k, clustered[i], cfg);
    kt__evidence_note(e, cfg, 80.0);
  }
  cfg_of(k, "BLOCK=512,ROWS=1,VEC=4,ITEMS=8,STAGES=0,ACC=1,CL=1,MG=1,REREAD=0,HOLD=0", cfg);
  kt__evidence_note(e, cfg, 66.0);
  cfg_of(k, clustered[0], cfg);
  ASSERT_EQ(kt__evidence_prunes(e, cfg, why, sizeof why), 0);
  kt__evidence_free(e);
  kt_runtime_close(rt);
}

/* The random search tries first the configs that other keys of the spec
** chose on this device (seeds, the most chosen first), where they are
** candidates of the call; then its seeded order. A config outside the
** call's space and the key's own stored config are no seeds. */
static void random_search_tries_other_keys_configs_first(void) {
  static char logged[4096];
  small_call sc;
  ASSERT_EQ(small_call_open(&sc, "seeds.db", logged), 0);
  char err[KT_ERRMAX];
  static const char *v8 = "{\"BLOCK\":128,\"ROWS\":1,\"VEC\":8}", *v1 = "{\"BLOCK\":128,\"ROWS\":1,\"VEC\":1}",
                    *out = "{\"BLOCK\":64,\"ROWS\":1,\"VEC\":1}", *own = "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":8}";
  const struct {
    int d;
    const char *config;
  } rows[] = {{512, v8}, {1024, v8}, {2048, v1}, {64, out}, {128, out}, {4096, out}, {0, own}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char other[256];
    snprintf(other, sizeof other, "{\"D\":%d,\"HAS_RES\":0,\"T\":\"bf16\",\"res\":0,\"w\":16,\"x\":16,\"y\":16}",
             rows[i].d);
    kt__cfgrow r = {.kernel = "rmsnorm_small", .spec_hash = sc.k->p.spec_hash, .device = sc.rt->env.fingerprint,
                    .key = rows[i].d ? other : sc.key, .config = rows[i].config, .time_us = 2.0};
    ASSERT_EQ(kt__store_put_config(sc.rt->env.store, &r, NULL, err, sizeof err), 0);
  }
  kt__tuner *t;
  ASSERT_STATUS(kt__tuner_new(&sc.k->p, &sc.rt->tune, &sc.c, sc.a, sc.key, &t), KT_OK);
  int n;
  const kt__cand *tc = kt__tuner_candidates(t, &n);
  ASSERT_EQ(n, 4);
  kt__cand cand[4];
  memcpy(cand, tc, sizeof cand);
  int first = -1, second = -1;
  for (int i = 0; i < n; i++) {
    if (!strcmp(cand[i].json, v8)) first = i;
    if (!strcmp(cand[i].json, v1)) second = i;
    ASSERT_EQ(cand[i].seed, i == first ? 1 : i == second ? 2 : 0);
  }
  ASSERT_TRUE(first >= 0 && second >= 0);
  kt__search sr = {sc.k->p.spec, cand, n, NULL, 12345, 4};
  _Alignas(8) unsigned char state[KT__STRATEGY_STATE] = {0};
  int batch[4], plain[4];
  ASSERT_EQ(kt__strategy_random.next(&sr, state, batch), 4);
  ASSERT_EQ(batch[0], first);
  ASSERT_EQ(batch[1], second);
  /* The rest in the order of the search without seeds. */
  for (int i = 0; i < n; i++) cand[i].seed = 0;
  ASSERT_EQ(kt__strategy_random.next(&sr, state, plain), 4);
  int at = 2;
  for (int i = 0; i < 4; i++)
    if (plain[i] != first && plain[i] != second) ASSERT_EQ(batch[at++], plain[i]);
  ASSERT_STR_EQ(logged, "");
  kt__tuner_free(t);
  kt_runtime_close(sc.rt);
}

/* Config field name of cfg, through the spec's index of its fields. */
static double cfg_field(const kt__spec *s, const int64_t *cfg, const char *name) {
  int f = kt__spec_cfield(s, name, strlen(name));
  if (f >= 0) return (double)cfg[f];
  t_fail(__FILE__, __LINE__, "%s: no config field %s", s->name, name);
  return 0;
}

/* A made-up time for a layernorm_bwd config, in the shape of what the
** device shows: the streaming path (ITEMS = 0) far behind, 16-byte vectors
** and a pipeline ahead; distinct for every candidate (i's share). */
static double made_up_us(const kt__spec *s, const int64_t *cfg, int i) {
#define F(name) cfg_field(s, cfg, name)
  const double stages = F("STAGES");
  double t = 40.0 + 1e-6 * i + (F("ITEMS") == 0 ? 360 : 0) + (3 - log2(F("VEC"))) * 4 +
             (stages == 0 ? 6 : stages - 2) + fabs(log2(F("BLOCK")) - 8) * 1.5 + log2(F("ROWS")) + log2(F("MG")) +
             (F("CL") - 1) * 3 + 0.5 * (F("ACC") + F("REREAD"));
#undef F
  return t;
}

/* The local search where constraints leave the default config few valid
** neighbours, all on the slow path (layernorm_bwd at D = 4096: a climb
** from the default never leaves the streaming path). Where the climb
** stalls it measures one batch in the seeded order and climbs on from the
** best measured; it ends at the first batch that finds nothing better.
** Here it ends at the best config of the whole space, having measured
** fewer than half of it. */
static void local_search_leaves_a_stall_through_a_batch(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("kernels_src/layernorm_bwd.json", &rt);
  if (!k) return;
  const kt_arg a[] = {kt_arg_ptr(0x100000, KT_BF16), kt_arg_ptr(0x200000, KT_F32), kt_arg_ptr(0x300000, KT_F32),
                      kt_arg_ptr(0x400000, KT_BF16), kt_arg_ptr(0x500000, KT_BF16), kt_arg_ptr(0x600000, KT_BF16),
                      kt_arg_ptr(0x700000, KT_F32), kt_arg_ptr(0x800000, KT_F32), kt_arg_ptr(0, KT_BF16),
                      kt_arg_i32(16384), kt_arg_i32(4096), kt_arg_i32(1), kt_arg_i32(132), kt_arg_i32(0)};
  kt__call c;
  char key[512];
  ASSERT_STATUS(kt__call_bind(&k->p, a, 14, &c), KT_OK);
  ASSERT_STATUS(kt_kernel_key(k, a, 14, key, sizeof key), KT_OK);
  kt__tuner *t;
  ASSERT_STATUS(kt__tuner_new(&k->p, &rt->tune, &c, a, key, &t), KT_OK);
  int n;
  const kt__cand *tc = kt__tuner_candidates(t, &n);
  kt__cand *cand = malloc((size_t)n * sizeof *cand);
  ASSERT_TRUE(cand);
  memcpy(cand, tc, (size_t)n * sizeof *cand);
  const kt__spec *s = k->p.spec;
  int64_t dflt[KT_MAX_CFIELDS];
  cfg_of(k, "BLOCK=128,ROWS=1,VEC=1,ITEMS=0,STAGES=0,ACC=0,CL=1,MG=1,REREAD=0,HOLD=0", dflt);
  int fastest = 0;
  for (int i = 1; i < n; i++)
    if (made_up_us(s, cand[i].cfg, i) < made_up_us(s, cand[fastest].cfg, fastest)) fastest = i;
  const int items = kt__spec_cfield(s, "ITEMS", 5);
  ASSERT_TRUE(items >= 0);
  kt__search sr = {s, cand, n, dflt, 12345, 8};
  _Alignas(8) unsigned char state[KT__STRATEGY_STATE] = {0};
  int *batch = malloc((size_t)n * sizeof *batch), rounds = 0, measured = 0, m, best = -1, sampled_at = -1;
  ASSERT_TRUE(batch);
  while ((m = kt__strategy_local.next(&sr, state, batch)) > 0 && rounds++ < n) {
    /* A batch of 8 while the best so far streams: the stall's batch. */
    if (sampled_at < 0 && best >= 0 && cand[best].cfg[items] == 0 && m == sr.batch) sampled_at = measured;
    for (int j = 0; j < m; j++) {
      ASSERT_EQ(cand[batch[j]].status, KT__PENDING);
      cand[batch[j]].status = KT_TRIAL_OK;
      cand[batch[j]].median = made_up_us(s, cand[batch[j]].cfg, batch[j]);
      if (best < 0 || cand[batch[j]].median < cand[best].median) best = batch[j];
    }
    measured += m;
  }
  /* The climb from the default stalled on the streaming path, a batch of 8
  ** left it, and the search ended at the fastest config of the space
  ** having measured fewer than half of them. */
  ASSERT_TRUE(sampled_at > 1 && sampled_at < 16);
  ASSERT_EQ(best, fastest);
  ASSERT_TRUE(measured < n / 2);
  free(batch);
  free(cand);
  kt__tuner_free(t);
  kt_runtime_close(rt);
}

/* The fallback where a constraint refuses the default: the valid config
** that changes the fewest fields, each changed field's value nearest the
** default's in the spec's list, not the first config of the whole space.
** With add_one_near (BLOCK 64, 128, 256, 512; ITEMS 1, 2, 4; default 256
** x 4; BLOCK * ITEMS <= n): n = 600 and 512 change BLOCK alone, to its
** neighbour 128 (the space's first config, 64 x 1, changes both); n = 300
** to 64; n = 100 needs both fields; n = 2000 keeps the default; n = 10 has
** none, and the error names the constraint the default fails. */
static void fallback_is_the_valid_config_nearest_the_default(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("tests/specs/add_one_near.json", &rt);
  if (!k) return;
  static const struct {
    int64_t n;
    const char *want;
  } cases[] = {{600, "{\"BLOCK\":128,\"ITEMS\":4}"},
               {512, "{\"BLOCK\":128,\"ITEMS\":4}"},
               {300, "{\"BLOCK\":64,\"ITEMS\":4}"},
               {100, "{\"BLOCK\":64,\"ITEMS\":1}"},
               {2000, "{\"BLOCK\":256,\"ITEMS\":4}"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kt_arg a[] = {kt_arg_ptr(0x100000, KT_F32), kt_arg_i64(cases[i].n)};
    kt_tune_report *r;
    ASSERT_STATUS(kt_kernel_tune(k, a, 2, &r), KT_OK);
    if (!r) break;
    ASSERT_STR_EQ(r->default_config, cases[i].want);
    kt_tune_report_free(r);
  }
  char cfg[64];
  kt_arg at600[] = {kt_arg_ptr(0x100000, KT_F32), kt_arg_i64(600)};
  ASSERT_STATUS(kt_kernel_default_for(k, at600, 2, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(cfg, "BLOCK=128,ITEMS=4");
  kt_arg a[] = {kt_arg_ptr(0x100000, KT_F32), kt_arg_i64(10)};
  kt_tune_report *r = NULL;
  ASSERT_STATUS(kt_kernel_tune(k, a, 2, &r), KT_ERR_NO_CONFIG);
  ASSERT_TRUE(r == NULL);
  ASSERT_STR_EQ(kt_errmsg(rt),
                "add_one_near: no config satisfies the constraints for this call (the default fails \"BLOCK * "
                "ITEMS <= n\")");
  kt_runtime_close(rt);
  /* A constraint no config field moves (layernorm_fwd's on D and G) ends
  ** the search at once, with the same answer the search gave. */
  k = t_offline_kernel("kernels_src/layernorm_fwd.json", &rt);
  if (!k) return;
  kt_arg ln[] = {kt_arg_ptr(0x100000, KT_BF16), kt_arg_ptr(0x200000, KT_BF16), kt_arg_ptr(0, KT_BF16),
                 kt_arg_ptr(0, KT_BF16),        kt_arg_ptr(0, KT_F32),          kt_arg_ptr(0, KT_F32),
                 kt_arg_ptr(0, KT_F32),         kt_arg_ptr(0, KT_F32),          kt_arg_i32(8),
                 kt_arg_i32(1),                 kt_arg_i32(64),                 kt_arg_f32(1e-5f),
                 kt_arg_i32(0)};
  ASSERT_STATUS(kt_kernel_default_for(k, ln, 13, cfg, sizeof cfg), KT_ERR_NO_CONFIG);
  ASSERT_STR_EQ(kt_errmsg(rt), "layernorm_fwd: no config satisfies the constraints for this call (the default fails "
                               "\"G > 0 && D > 0 && D % G == 0\")");
  kt_runtime_close(rt);
}

const kt_test t_tune_tests[] = {
    {"tune: keys leave out ignored params (T, eps)", keys_ignore_what_the_spec_says},
    {"tune: pointer alignment classes in the key", alignment_classes},
    {"tune: chunk_state_fwd's key holds BH's bucket, not N", chunk_state_keys_hold_the_bh_bucket},
    {"tune: pow2 buckets in the key", pow2_buckets},
    {"tune: tune_at moves the timed call, never the key", tune_at_moves_the_timed_call},
    {"tune: the fallback is the valid config nearest the default", fallback_is_the_valid_config_nearest_the_default},
    {"tune: alias groups: adjacent, nested, identical, chained, empty", alias_groups},
    {"tune: comparisons with tolerance, NaN and Inf", comparisons},
    {"tune: cached configs are validated against the space", cached_configs_are_validated},
    {"tune: large outputs compare in parallel, same answer", large_outputs_compare_in_parallel},
    {"tune: alias rules: in place means identical ranges, both params and bytes named", alias_rules},
    {"tune: alias rules on ranges", alias_partners},
    {"tune: a key with only rejected rows is measured again", rejected_keys_are_measured_again},
    {"tune: an ok trial whose time is no time is measured again", damaged_ok_trials_are_measured_again},
    {"tune: a compiler's verdict (compile_error, resources, mismatch, oob_write) of another NVRTC is measured again",
     compile_verdicts_of_another_nvrtc_are_measured_again},
    {"tune: reports as data without a device; the codec in the public header", tune_reports_without_a_device},
    {"tune: the inputs' values, the same on any number of threads", inputs_fill_values},
    {"tune: a report says where its call's key is timed (tune_at)", reports_say_where_a_key_is_timed},
    {"tune: a call that launches no program has nothing to time", calls_of_no_program_time_nothing},
    {"tune: single flight: 16 threads miss one key", single_flight},
    {"tune: a miss while tuning runs the default when asked", miss_runs_default_while_tuning},
    {"tune: ktune key and ktune lint", cli_key_and_lint},
    {"tune: lint notes a size the key leaves out that sets the grid", lint_notes_sizes_the_key_leaves_out_of_the_grid},
    {"tune: lint notes a constraint on a size the key leaves out", lint_notes_constraints_on_sizes_the_key_leaves_out},
    {"tune: pruning judges a field value beside each of the candidate's others", pruning_judges_values_beside_each_other},
    {"tune: the random search tries other keys' configs first", random_search_tries_other_keys_configs_first},
    {"tune: the local search leaves a stall through a batch", local_search_leaves_a_stall_through_a_batch},
    {NULL, NULL},
};
