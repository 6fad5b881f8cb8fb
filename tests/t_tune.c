/* The tuner's pure logic, on the CPU: keys, alias groups, comparisons,
** cached configs, single flight. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "call/alias.h"
#include "tune/compare.h"
#include "harness.h"
#include "spec/key.h"
#include "ktune.h"
#include "dispatch/runtime.h"
#include "spec/spec.h"

int kt__test_tuned_count(const kt_kernel *k);


#define RMS(y, x, res, w, n, d, t) \
  {kt_arg_ptr(y, t), kt_arg_ptr(x, t), kt_arg_ptr(res, t), kt_arg_ptr(w, t), kt_arg_i32(n), kt_arg_i32(d), kt_arg_f32(1e-6f)}

/* The token count is "ignore": every T maps to one key. (The upstream bug:
** a key holding NB = cdiv(T, 2048) tuned again for every new T.) */
static void keys_ignore_what_the_spec_says(void) {
  kt_runtime *rt = t_offline(1);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
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

static void alignment_classes(void) {
  kt_runtime *rt = t_offline(1);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  static const struct {
    uint64_t off;
    const char *want;
  } cases[] = {{0, "\"x\":16"}, {1, "\"x\":1"}, {2, "\"x\":2"}, {4, "\"x\":4"}, {6, "\"x\":2"},
               {8, "\"x\":8"},  {12, "\"x\":4"}, {24, "\"x\":8"}, {48, "\"x\":16"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kt_arg a[] = RMS(0x100000, 0x200000 + cases[i].off, 0, 0x300000, 4, 64, KT_BF16);
    char key[512];
    ASSERT_STATUS(kt_kernel_key(k, a, 7, key, sizeof key), KT_OK);
    ASSERT_CONTAINS(key, cases[i].want);
  }
  kt_runtime_close(rt);
}

static void pow2_buckets(void) {
  kt_runtime *rt = t_offline(1);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/add_one.json", &k), KT_OK);
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
  kt__range a[] = {{0, 100, 0, 1, -1}, {100, 200, 1, 0, -1}};
  ASSERT_EQ(kt__alias_group(a, 2), 2);
  ASSERT_TRUE(a[0].group != a[1].group);
  /* nested */
  kt__range b[] = {{0, 1000, 0, 1, -1}, {200, 300, 1, 0, -1}, {2000, 3000, 2, 0, -1}};
  ASSERT_EQ(kt__alias_group(b, 3), 2);
  ASSERT_EQ(b[0].group, b[1].group);
  ASSERT_TRUE(b[2].group != b[0].group);
  /* identical */
  kt__range c[] = {{500, 900, 0, 1, -1}, {500, 900, 1, 0, -1}};
  ASSERT_EQ(kt__alias_group(c, 2), 1);
  ASSERT_EQ(c[0].group, c[1].group);
  /* three-way chain: A overlaps B, B overlaps C, A does not touch C */
  kt__range d[] = {{200, 350, 2, 0, -1}, {0, 100, 0, 1, -1}, {50, 250, 1, 0, -1}};
  ASSERT_EQ(kt__alias_group(d, 3), 1);
  ASSERT_EQ(d[0].group, d[1].group);
  ASSERT_EQ(d[1].group, d[2].group);
  /* one byte of overlap counts */
  kt__range e[] = {{0, 101, 0, 1, -1}, {100, 200, 1, 0, -1}, {300, 300, 2, 0, -1}};
  ASSERT_EQ(kt__alias_group(e, 3), 2);
  ASSERT_EQ(e[0].group, e[1].group);
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

/* A kernel whose spec says it cannot run in place, called with an output
** overlapping its input, is refused with the two params named. */
static void overlap_refused_where_not_in_place(void) {
  kt_runtime *rt = t_offline(1);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/shift.json", &k), KT_OK);
  kt_arg a[] = {kt_arg_ptr(0x10000, KT_F32), kt_arg_ptr(0x10000, KT_F32), kt_arg_i32(100)};
  ASSERT_STATUS(kt_launch(k, NULL, a, 3), KT_ERR_ALIAS);
  ASSERT_STR_EQ(kt_errmsg(rt), "shift_left: y (written) overlaps x; this kernel cannot run in place");
  a[1].v.ptr = 0x10000 + 396; /* the last element of y is x's first */
  ASSERT_STATUS(kt_launch(k, NULL, a, 3), KT_ERR_ALIAS);
  a[1].v.ptr = 0x10000 + 400; /* adjacent: fine */
  ASSERT_STATUS(kt_launch(k, NULL, a, 3), KT_ERR_NO_DEVICE);
  kt_runtime_close(rt);
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
  kt_runtime *rt = t_offline(1);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
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
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,T=bf16", bin), 1);
  ASSERT_CONTAINS(out, "D is in the tuning key; give its value");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape D=1,T=bf16,Q=3", bin), 1);
  ASSERT_CONTAINS(out, "Q is not a param or type variable of rmsnorm_fwd");
  /* A value outside its param's type is refused, never wrapped. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=4294967552,T=bf16", bin), 1);
  ASSERT_STR_EQ(out, "ktune key: shape \"N=1,D=4294967552,T=bf16\": D=4294967552 is not an i32 (a whole number from "
                     "-2147483648 to 2147483647)\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key tests/specs/add_one.json --shape n=99999999999999999999", bin), 1);
  ASSERT_CONTAINS(out, "n=99999999999999999999 is not an i64 (a whole number that fits in 64 bits)");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=256,T=bf16,eps=1e999", bin), 1);
  ASSERT_CONTAINS(out, "eps=1e999 is not a finite f32");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=256,T=bf16,x@abc", bin), 1);
  ASSERT_CONTAINS(out, "pointer x takes =null or @BYTES (an offset below 4096)");
  ASSERT_EQ(t_sh(out, sizeof out, "%s lint tests/specs/phantom.json", bin), 1);
  ASSERT_CONTAINS(out, "phantom key field: NB is in the tuning key (\"key\": \"exact\")");
  ASSERT_CONTAINS(out, "1 problem in 1 spec\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s lint tests/specs/small.json tests/specs/add_one.json", bin), 0);
  ASSERT_STR_EQ(out, "0 problems in 2 specs\n");
}

const kt_test t_tune_tests[] = {
    {"tune: keys leave out ignored params (T, eps)", keys_ignore_what_the_spec_says},
    {"tune: pointer alignment classes in the key", alignment_classes},
    {"tune: pow2 buckets in the key", pow2_buckets},
    {"tune: alias groups: adjacent, nested, identical, chained", alias_groups},
    {"tune: comparisons with tolerance, NaN and Inf", comparisons},
    {"tune: cached configs are validated against the space", cached_configs_are_validated},
    {"tune: large outputs compare in parallel, same answer", large_outputs_compare_in_parallel},
    {"tune: overlap refused for a kernel that cannot run in place", overlap_refused_where_not_in_place},
    {"tune: single flight: 16 threads miss one key", single_flight},
    {"tune: a miss while tuning runs the default when asked", miss_runs_default_while_tuning},
    {"tune: ktune key and ktune lint", cli_key_and_lint},
    {NULL, NULL},
};
