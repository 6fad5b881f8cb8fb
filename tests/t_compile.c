/* NVRTC compilation to cubin, which needs no GPU. */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "device/nvrtc.h"
#include "device/pchdir.h"
#include "device/rcompile.h"
#include "dispatch/handles.h"
#include "tune/devcompare.h"
#include "harness.h"
#include "ktune.h"

typedef struct seen {
  int ok, failed;
  char names[512][160];
  size_t min_bytes;
  char first_err[2048];
} seen;

static void on_variant(void *user, const char *name, kt_status st, size_t bytes, double ms,
                       const char *err) {
  seen *s = user;
  (void)ms;
  if (st) {
    if (!s->failed++) snprintf(s->first_err, sizeof s->first_err, "%s: %s", name, err);
    return;
  }
  if (s->ok < 512) snprintf(s->names[s->ok], sizeof s->names[0], "%s", name);
  s->ok++;
  if (!s->min_bytes || bytes < s->min_bytes) s->min_bytes = bytes;
}


static int cmp_names(const void *a, const void *b) { return strcmp(a, b); }

/* Every variant of the bundled spec compiles to an sm_90 cubin, and no two
** share a name: a variant is its full tuple of compile-time constants. */
static void every_bundled_variant_compiles(void) {
  kt_runtime *rt = t_offline(0);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  static seen s;
  memset(&s, 0, sizeof s);
  kt_status st = kt_kernel_compile_all(k, NULL, on_variant, &s);
  if (st) t_fail(__FILE__, __LINE__, "%s", s.first_err);
  ASSERT_STATUS(st, KT_OK);
  /* 15 (BLOCK, ROWS) pairs with whole warps per row, VEC 1-4 for f32 and
  ** 1-8 for bf16 and f16 (16-byte vectors at most), with and without res. */
  ASSERT_EQ(s.ok, 15 * (3 + 4 + 4) * 2);
  ASSERT_EQ(s.failed, 0);
  ASSERT_TRUE(s.min_bytes > 1000);
  qsort(s.names, (size_t)s.ok, sizeof s.names[0], cmp_names);
  for (int i = 1; i < s.ok; i++) ASSERT_TRUE(strcmp(s.names[i - 1], s.names[i]) != 0);
  ASSERT_STR_EQ(s.names[0], "rmsnorm_fwd.T=bf16.BLOCK=1024.ROWS=1.VEC=1.HAS_RES=0");
  /* A second pass finds every variant compiled already. */
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  memset(&s, 0, sizeof s);
  ASSERT_STATUS(kt_kernel_compile_all(k, NULL, on_variant, &s), KT_OK);
  clock_gettime(CLOCK_MONOTONIC, &b);
  ASSERT_EQ(s.ok, 330);
  ASSERT_TRUE((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < 1000);
  kt_runtime_close(rt);
}

static void cubins_are_written(void) {
  kt_runtime *rt = t_offline(0);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/small.json", &k), KT_OK);
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  static seen s;
  memset(&s, 0, sizeof s);
  ASSERT_STATUS(kt_kernel_compile_all(k, dir, on_variant, &s), KT_OK);
  ASSERT_EQ(s.ok, 2 * 2 * 2);
  char path[1024];
  struct stat sb;
  snprintf(path, sizeof path, "%s/rmsnorm_small.T=bf16.BLOCK=128.ROWS=4.VEC=8.HAS_RES=1.cubin", dir);
  ASSERT_EQ(stat(path, &sb), 0);
  ASSERT_TRUE(sb.st_size > 1000);
  FILE *f = fopen(path, "rb");
  ASSERT_TRUE(f);
  unsigned char magic[4] = {0};
  size_t r = fread(magic, 1, 4, f);
  fclose(f);
  ASSERT_EQ(r, 4);
  ASSERT_TRUE(magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F');
  /* A path too long for the buffer is refused, never written cut. */
  static char deep[4200];
  snprintf(deep, sizeof deep, "%s/%04090d", dir, 0);
  memset(&s, 0, sizeof s);
  ASSERT_STATUS(kt_kernel_compile_all(k, deep, on_variant, &s), KT_ERR_IO);
  ASSERT_EQ(s.failed, 8);
  ASSERT_CONTAINS(s.first_err, "000... is longer than 4095 bytes");
  ASSERT_CONTAINS(s.first_err, ": rmsnorm_small.T=bf16.BLOCK=128.ROWS=1.VEC=1.HAS_RES=0.cubin: its path in /");
  char out[256];
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
  kt_runtime_close(rt);
}

/* NAME.cu and NAME.json written in a fresh directory, loaded in a runtime
** without a device, and every variant compiled into s (zeroed first):
** kt_kernel_compile_all's status, or KT_ERR_IO / the load's status. The
** runtime (*rt, NULL where none opened) and the directory (dir) are the
** caller's to close and remove. */
static kt_status compile_written(const char *name, const char *cu, const char *json, char *dir, size_t dirlen,
                                 kt_runtime **rt, seen *s) {
  char path[1024], file[64];
  const char *tmp = t_tmpdir();
  *rt = NULL;
  if (!tmp) return KT_ERR_IO;
  snprintf(dir, dirlen, "%s", tmp);
  snprintf(file, sizeof file, "%s.cu", name);
  if (t_write_file(dir, file, cu, path, sizeof path)) return KT_ERR_IO;
  snprintf(file, sizeof file, "%s.json", name);
  if (t_write_file(dir, file, json, path, sizeof path)) return KT_ERR_IO;
  if (!(*rt = t_offline(0))) return KT_ERR_IO;
  kt_kernel *k;
  kt_status st = kt_kernel_load(*rt, path, &k);
  memset(s, 0, sizeof *s);
  return st ? st : kt_kernel_compile_all(k, NULL, on_variant, s);
}

/* A compile error names the kernel and its constants and carries the log. */
static void compile_errors_carry_the_log(void) {
  char dir[700], out[800];
  kt_runtime *rt;
  static seen s;
  kt_status st = compile_written(
      "broken", "template <int BLOCK>\n__global__ void broken(float *y) {\n  y[0] = undefined_thing;\n}\n",
      "{\"name\": \"broken\", \"source\": \"broken.cu\", \"entry\": \"broken\",\n"
      " \"template\": [\"BLOCK\"], \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\",\n"
      " \"access\": \"out\", \"extent\": \"1\"}], \"config\": {\"BLOCK\": [128]},\n"
      " \"default\": {\"BLOCK\": 128}, \"grid\": 1, \"block\": \"BLOCK\"}\n",
      dir, sizeof dir, &rt, &s);
  ASSERT_STATUS(st, KT_ERR_COMPILE);
  ASSERT_EQ(s.failed, 1);
  /* NVRTC names the source by its absolute path: the place it searches
  ** for the source's quoted includes. */
  char real[PATH_MAX], want[PATH_MAX + 200];
  ASSERT_TRUE(realpath(dir, real) != NULL);
  snprintf(want, sizeof want, "broken BLOCK=128: NVRTC: %s/broken.cu(3): error: identifier \"undefined_thing\" "
           "is undefined", real);
  ASSERT_CONTAINS(kt_errmsg(rt), want);
  kt_runtime_close(rt);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* A header edited after its spec loaded is not compiled from: NVRTC reads
** headers from disk, and a cubin of the edited text stored under the
** loaded spec's hash would be served once the edit is undone. Every
** variant fails and names the change; nothing is stored. Loaded again,
** the spec compiles. */
static void header_edited_after_the_load(void) {
  char dir[700], path[1024], out[800], db[800];
  const char *tmp = t_tmpdir();
  ASSERT_TRUE(tmp != NULL);
  if (!tmp) return;
  snprintf(dir, sizeof dir, "%s", tmp);
  snprintf(db, sizeof db, "%s/c.db", dir);
  ASSERT_EQ(t_write_file(dir, "v.cuh", "#define V 1\n", path, sizeof path), 0);
  ASSERT_EQ(t_write_file(dir, "e.cu", "#include \"v.cuh\"\ntemplate <int B> __global__ void e(float *y) { *y = V; }\n",
                         path, sizeof path), 0);
  ASSERT_EQ(t_write_file(dir, "e.json",
                         "{\"name\": \"e\", \"source\": \"e.cu\", \"entry\": \"e\", \"template\": [\"B\"],\n"
                         " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": "
                         "\"out\", \"extent\": \"1\"}],\n \"config\": {\"B\": [32, 64]}, \"default\": {\"B\": 32}, "
                         "\"grid\": 1, \"block\": \"B\"}\n", path, sizeof path), 0);
  kt_options o;
  t_offline_options(&o);
  o.cache_path = db;
  kt_runtime *rt = t_open(&o);
  kt_kernel *k, *again;
  ASSERT_TRUE(rt != NULL);
  if (!rt) return;
  ASSERT_STATUS(kt_kernel_load(rt, path, &k), KT_OK);
  ASSERT_EQ(t_write_file(dir, "v.cuh", "#define V 2\n", out, sizeof out), 0);
  static seen s;
  memset(&s, 0, sizeof s);
  ASSERT_STATUS(kt_kernel_compile_all(k, NULL, on_variant, &s), KT_ERR_COMPILE);
  ASSERT_EQ(s.failed, 2);
  char want[2048];
  snprintf(want, sizeof want, "the headers %s/e.cu includes changed on disk after %s loaded: load the spec again to "
           "compile from them", dir, path);
  ASSERT_CONTAINS(s.first_err, want);
  ASSERT_EQ(t_db_int(db, "SELECT count(*) FROM binaries"), 0);
  /* Not the source's fault: a tuner keeps no compile_error trial of it. */
  kt__call c;
  kt_arg arg = kt_arg_ptr(0x1000, KT_F32);
  int64_t b32 = 32;
  ASSERT_STATUS(kt__call_bind(&k->p, &arg, 1, &c), KT_OK);
  ASSERT_STATUS(kt__call_config(&k->p, &c, &b32), KT_OK);
  ASSERT_EQ(kt__variant_refused(&k->p, &c), 0);
  ASSERT_STATUS(kt_kernel_load(rt, path, &again), KT_OK);
  memset(&s, 0, sizeof s);
  ASSERT_STATUS(kt_kernel_compile_all(again, NULL, on_variant, &s), KT_OK);
  ASSERT_EQ(s.ok, 2);
  ASSERT_EQ(t_db_int(db, "SELECT count(*) FROM binaries"), 2);
  kt_runtime_close(rt);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* A header edited, and its spec loaded again in the same process, compiles
** from the new text. NVRTC's precompiled headers (the compile helper asks
** for them) are reused for a source whose includes and options match,
** without reading the headers again: the second load compiled the old
** header, and its cubins went into the cache under the new spec's hash. */
static void header_edited_and_loaded_again(void) {
  char dir[700], path[1024], out[800];
  const char *tmp = t_tmpdir();
  ASSERT_TRUE(tmp != NULL);
  if (!tmp) return;
  snprintf(dir, sizeof dir, "%s", tmp);
  ASSERT_EQ(t_write_file(dir, "v.cuh", "#define V 1\n", path, sizeof path), 0);
  ASSERT_EQ(t_write_file(dir, "s.cu", "#include \"v.cuh\"\nstatic_assert(V == 1, \"V is not 1\");\n"
                         "template <int B> __global__ void s(float *y) { *y = V; }\n", path, sizeof path), 0);
  ASSERT_EQ(t_write_file(dir, "s.json",
                         "{\"name\": \"s\", \"source\": \"s.cu\", \"entry\": \"s\", \"template\": [\"B\"],\n"
                         " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": "
                         "\"out\", \"extent\": \"1\"}],\n \"config\": {\"B\": [32, 64]}, \"default\": {\"B\": 32}, "
                         "\"grid\": 1, \"block\": \"B\"}\n", path, sizeof path), 0);
  kt_runtime *rt = t_offline(1);
  kt_kernel *k;
  static seen sn;
  ASSERT_TRUE(rt != NULL);
  if (!rt) return;
  ASSERT_STATUS(kt_kernel_load(rt, path, &k), KT_OK);
  memset(&sn, 0, sizeof sn);
  ASSERT_STATUS(kt_kernel_compile_all(k, NULL, on_variant, &sn), KT_OK);
  ASSERT_EQ(sn.ok, 2);
  ASSERT_EQ(t_write_file(dir, "v.cuh", "#define V 2\n", out, sizeof out), 0);
  ASSERT_STATUS(kt_kernel_load(rt, path, &k), KT_OK);
  memset(&sn, 0, sizeof sn);
  ASSERT_STATUS(kt_kernel_compile_all(k, NULL, on_variant, &sn), KT_ERR_COMPILE);
  ASSERT_EQ(sn.failed, 2);
  ASSERT_CONTAINS(sn.first_err, "static assertion failed with \"V is not 1\"");
  kt_runtime_close(rt);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* A spec may add 10 flags to fast math and the runtime's own options; one
** more is refused. (The options' array held 16: the last flag was written
** past it.) */
static void the_most_flags_compile(void) {
  char dir[700], path[1024], out[800];
  static const char *const json =
      "{\"name\": \"f\", \"source\": \"f.cu\", \"entry\": \"f\", \"template\": [\"B\"],\n"
      " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\", "
      "\"extent\": \"1\"}],\n \"config\": {\"B\": [32]}, \"default\": {\"B\": 32}, \"grid\": 1, \"block\": \"B\",\n"
      " \"options\": {\"fast_math\": true, \"flags\": [\"-lineinfo\", \"-DX1=1\", \"-DX2=2\", \"-DX3=3\", "
      "\"-DX4=4\", \"-DX5=5\", \"-DX6=6\", \"-DX7=7\", \"-DX8=8\", \"-DX9=9\"%s]}}\n";
  for (int extra = 0; extra < 2; extra++) {
    const char *tmp = t_tmpdir();
    ASSERT_TRUE(tmp != NULL);
    if (!tmp) return;
    snprintf(dir, sizeof dir, "%s", tmp);
    char text[2048];
    snprintf(text, sizeof text, json, extra ? ", \"-DX10=10\"" : "");
    ASSERT_EQ(t_write_file(dir, "f.cu", "template <int B> __global__ void f(float *y) { *y = X1 + X9; }\n", path,
                           sizeof path), 0);
    ASSERT_EQ(t_write_file(dir, "f.json", text, path, sizeof path), 0);
    kt_runtime *rt = t_offline(1);
    kt_kernel *k;
    static seen sn;
    memset(&sn, 0, sizeof sn);
    kt_status st = rt ? kt_kernel_load(rt, path, &k) : KT_ERR_IO;
    if (!extra) {
      ASSERT_STATUS(st, KT_OK);
      if (!st) ASSERT_STATUS(kt_kernel_compile_all(k, NULL, on_variant, &sn), KT_OK);
      ASSERT_EQ(sn.ok, 1);
    } else {
      ASSERT_STATUS(st, KT_ERR_SPEC);
      ASSERT_CONTAINS(kt_errmsg(rt), "f.json: options.flags: at most 10 flags");
    }
    kt_runtime_close(rt);
    t_sh(out, sizeof out, "rm -rf '%s'", dir);
  }
}

/* Every variant a spec's space allows: a constraint on a derived constant
** taken over its declared values and a config field (BK <= KD) drops the
** variants no call can use, and a derived constant computed from another
** drops those whose value its list does not hold. (chunk_state_fwd's
** space was 10176 variants, 5820 of them failing the kernel's
** static_assert that the tiles divide the state; it is now 4356.) */
static void compile_all_keeps_what_calls_can_use(void) {
  char dir[700], out[800];
  kt_runtime *rt;
  static seen s;
  kt_status st = compile_written(
      "t", "template <int KD, int BK, int HALF>\n__global__ void t(float *y) {\n"
      "  static_assert(BK <= KD && HALF * 2 == KD, \"tiles\");\n  y[0] = KD + BK;\n}\n",
      "{\"name\": \"t\", \"source\": \"t.cu\", \"entry\": \"t\", \"template\": [\"KD\", \"BK\", \"HALF\"],\n"
      " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\", \"extent\": \"1\"},"
      " {\"name\": \"DK\", \"type\": \"i32\"}],\n"
      " \"derived\": {\"KD\": {\"expr\": \"DK\", \"values\": [16, 32, 64]},"
      " \"HALF\": {\"expr\": \"KD / 2\", \"values\": [8, 16]}},\n"
      " \"config\": {\"BK\": [16, 32, 64]}, \"default\": {\"BK\": 16},"
      " \"constraints\": [\"BK <= KD\"], \"grid\": 1, \"block\": 32}\n",
      dir, sizeof dir, &rt, &s);
  if (st) t_fail(__FILE__, __LINE__, "%s", s.first_err);
  ASSERT_STATUS(st, KT_OK);
  ASSERT_EQ(s.failed, 0);
  ASSERT_EQ(s.ok, 3); /* KD = 16 with BK = 16; KD = 32 with BK = 16 and 32 (KD = 64 has no HALF) */
  qsort(s.names, (size_t)s.ok, sizeof s.names[0], cmp_names);
  ASSERT_STR_EQ(s.names[0], "t.KD=16.BK=16.HALF=8");
  ASSERT_STR_EQ(s.names[2], "t.KD=32.BK=32.HALF=16");
  kt_runtime_close(rt);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* A space too large to compile (3 fields of 41 values: 68921 variants) is
** refused at once, naming the kernel and the way out, before any NVRTC
** work; the variants of one call are capped alike. (The norm specs walk
** millions of variants: listing them all had run out of memory.) */
static void compile_refuses_a_space_too_large(void) {
  char dir[700], out[800], vals[200];
  kt_runtime *rt;
  static seen s;
  t_ints(vals, sizeof vals, 0, 41);
  char json[1200];
  snprintf(json, sizeof json,
           "{\"name\": \"big\", \"source\": \"big.cu\", \"entry\": \"big\", \"template\": [\"A\", \"B\", \"C\"],\n"
           " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\","
           " \"extent\": \"1\"}],\n"
           " \"config\": {\"A\": [%s], \"B\": [%s], \"C\": [%s]}, \"default\": {\"A\": 0, \"B\": 0, \"C\": 0},"
           " \"grid\": 1, \"block\": 32}\n",
           vals, vals, vals);
  kt_status st = compile_written(
      "big", "template <int A, int B, int C>\n__global__ void big(float *y) { y[0] = A + B + C; }\n", json, dir,
      sizeof dir, &rt, &s);
  ASSERT_STATUS(st, KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt),
                "big: the space holds more than 65536 variants (every type, config and constant value); "
                "compile those of given shapes");
  ASSERT_EQ(s.ok + s.failed, 0);
  kt_kernel *k;
  char path[1024];
  snprintf(path, sizeof path, "%s/big.json", dir);
  ASSERT_STATUS(kt_kernel_load(rt, path, &k), KT_OK);
  kt_arg y = kt_arg_ptr(0x10000, KT_F32);
  ASSERT_STATUS(kt_kernel_compile_for(k, &y, 1, NULL, on_variant, &s), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "big: more than 65536 variants to compile");
  ASSERT_EQ(s.ok + s.failed, 0);
  kt_runtime_close(rt);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* Listing a space (rmsnorm's 330 variants, the list and its index grown
** several times) with each allocation failing in turn: KT_ERR_NOMEM, or
** the whole list; nothing leaks (ASan). */
static void listing_survives_every_allocation_failure(void) {
  kt_runtime *rt = t_offline(0);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/rmsnorm.json", &k), KT_OK);
  long failed = 0;
  for (long n = 1;; n++) {
    kt__alloc_fail_after(n);
    kt__vlist *l = kt__vlist_new();
    kt_status st = l ? kt__vlist_add_all(&k->p, l) : KT_ERR_NOMEM;
    long used = kt__alloc_fail_after(0);
    if (st) {
      ASSERT_STATUS(st, KT_ERR_NOMEM);
      failed++;
    } else {
      ASSERT_EQ(kt__vlist_count(l), 330);
    }
    kt__vlist_free(l);
    if (used < n) break;
  }
  ASSERT_TRUE(failed >= 6); /* the list, and the calls and index grown from 64 to 512 */
  kt_runtime_close(rt);
}

/* A spec of three config fields of 64 values each and two constants over
** 64 values that a param sets: 2^30 variants before constraints. */
static kt_status five_slots(const char *constraints, char *dir, size_t dirlen, kt_runtime **rt, seen *s) {
  char vals[400], json[3000];
  t_ints(vals, sizeof vals, 1, 64);
  snprintf(json, sizeof json,
           "{\"name\": \"five\", \"source\": \"five.cu\", \"entry\": \"five\",\n"
           " \"template\": [\"A\", \"B\", \"C\", \"X\", \"Y\"],\n"
           " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\","
           " \"extent\": \"1\"}, {\"name\": \"n\", \"type\": \"i32\"}],\n"
           " \"derived\": {\"X\": {\"expr\": \"n\", \"values\": [%s]}, \"Y\": {\"expr\": \"n\", \"values\": [%s]}},\n"
           " \"config\": {\"A\": [%s], \"B\": [%s], \"C\": [%s]},\n"
           " \"default\": {\"A\": 1, \"B\": 1, \"C\": 1},\n"
           " \"constraints\": [%s], \"grid\": 1, \"block\": 32}\n",
           vals, vals, vals, vals, vals, constraints);
  return compile_written("five",
                         "template <int A, int B, int C, int X, int Y>\n"
                         "__global__ void five(float *y) { y[0] = A + B + C + X + Y; }\n",
                         json, dir, dirlen, rt, s);
}

/* The walk over a space checks each constraint once the fields and
** constants it reads are set, so constraints on each cut 2^30 variants to
** a few; one that only the last constant settles, keeping few of them all,
** is refused after 2^27 values set (seconds), not walked for hours. */
static void compile_walk_is_pruned_and_bounded(void) {
  char dir[700], out[800];
  kt_runtime *rt;
  static seen s;
  kt_status st = five_slots("\"A <= 2\", \"B <= A\", \"C == 1\", \"X == 1\", \"Y <= A\"", dir, sizeof dir, &rt, &s);
  if (st) t_fail(__FILE__, __LINE__, "%s", kt_errmsg(rt));
  ASSERT_STATUS(st, KT_OK);
  ASSERT_EQ(s.ok, 5); /* A = 1: B = Y = 1; A = 2: B and Y in 1..2 */
  ASSERT_EQ(s.failed, 0);
  kt_runtime_close(rt);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
  st = five_slots("\"A + B + C + X + Y == 7\"", dir, sizeof dir, &rt, &s);
  ASSERT_STATUS(st, KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt),
                "five: the space is too large to walk (more than 134217728 values of config fields and constants "
                "set, across every type); compile those of given shapes");
  ASSERT_EQ(s.ok + s.failed, 0);
  kt_runtime_close(rt);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* An arch is read whole: sm_90a is sm_90 to a spec's builtins (cc,
** max_smem), where it once read as cc 0 and lost every variant that asks
** for sm_80 or sm_90. One that NVRTC does not compile for is refused when
** the runtime opens, with the archs it does, not once a variant. */
static void an_arch_is_read_whole_and_checked(void) {
  kt_options o;
  t_offline_options(&o);
  o.no_cache = 1;
  o.arch = "sm_35";
  kt_runtime *rt = NULL;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  ASSERT_TRUE(!strncmp(kt_errmsg(rt), "kt_runtime_open: NVRTC 13.", 26));
  ASSERT_CONTAINS(kt_errmsg(rt), " does not compile for sm_35 (it compiles for sm_75, sm_80, ");
  ASSERT_CONTAINS(kt_errmsg(rt), ", sm_90, ");
  ASSERT_TRUE(kt_errmsg(rt)[strlen(kt_errmsg(rt)) - 1] == ')');
  kt_runtime_close(rt);
  char err[KT_ERRMAX], opt[64];
  ASSERT_STATUS(kt__nvrtc_target(NULL, "sm_90a", opt, sizeof opt, err, sizeof err), KT_OK);
  ASSERT_STR_EQ(opt, "--gpu-architecture=sm_90a");
  ASSERT_STATUS(kt__nvrtc_target(NULL, "sm_70", opt, sizeof opt, err, sizeof err), KT_ERR_INVALID);
  ASSERT_CONTAINS(err, " does not compile for sm_70 (it compiles for sm_75, ");
  ASSERT_CONTAINS(err, ", and newer archs through PTX)");
  /* An arch newer than every one NVRTC lists (a GPU newer than the
  ** toolkit) is compiled to PTX of the newest. */
  kt__nvrtc_cap_archs(89);
  ASSERT_STATUS(kt__nvrtc_target(NULL, "sm_90", opt, sizeof opt, err, sizeof err), KT_OK);
  ASSERT_STR_EQ(opt, "--gpu-architecture=compute_89");
  ASSERT_STATUS(kt__nvrtc_target(NULL, "sm_89", opt, sizeof opt, err, sizeof err), KT_OK);
  ASSERT_STR_EQ(opt, "--gpu-architecture=sm_89");
  kt__nvrtc_cap_archs(0);
  /* One reading of an arch, the runtime's and NVRTC's target's. */
  static const struct {
    const char *arch;
    int cc;
  } arch_forms[] = {{"sm_90", 90},  {"sm_90a", 90}, {"sm_100f", 100},  {"sm_121a", 121}, {"sm_9", -1},
                    {"sm90", -1},   {"sm_", -1},    {"sm_90x", -1},    {"sm_90af", -1},  {"sm_10000", -1},
                    {"sm_a90", -1}, {"", -1},       {"compute_90", -1}};
  for (size_t i = 0; i < sizeof arch_forms / sizeof arch_forms[0]; i++)
    ASSERT_EQ(kt__arch_cc(arch_forms[i].arch), arch_forms[i].cc);
  ASSERT_STATUS(kt__nvrtc_target(NULL, "90", opt, sizeof opt, err, sizeof err), KT_ERR_INVALID);
  ASSERT_STR_EQ(err, "arch \"90\" is not of the form sm_90, sm_90a or sm_100f");

  char dir[700], path[1024], out[800];
  snprintf(dir, sizeof dir, "%s", t_tmpdir());
  ASSERT_EQ(t_write_file(dir, "arch.cu", "template <int A>\n__global__ void arch(float *y) { y[0] = A; }\n", path,
                         sizeof path), 0);
  ASSERT_EQ(t_write_file(dir, "arch.json",
                         "{\"name\": \"arch\", \"source\": \"arch.cu\", \"entry\": \"arch\", \"template\": [\"A\"],\n"
                         " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\","
                         " \"extent\": \"1\"}],\n \"config\": {\"A\": [1, 2, 3]}, \"default\": {\"A\": 1},\n"
                         " \"constraints\": [\"A != 2 || cc == 90\", \"A != 3 || max_smem == 232448\"],"
                         " \"grid\": 1, \"block\": 32}\n",
                         path, sizeof path),
            0);
  /* sm_90a is cc 90 to the spec; sm_100f (code for sm_100's family,
  ** NVRTC's own family target) is cc 100, where A = 2 asks for 90. */
  ASSERT_STATUS(kt__nvrtc_target(NULL, "sm_100f", opt, sizeof opt, err, sizeof err), KT_OK);
  ASSERT_STR_EQ(opt, "--gpu-architecture=sm_100f");
  static const struct {
    const char *arch;
    int ok;
  } forms[] = {{"sm_90a", 3}, {"sm_100f", 2}};
  kt_kernel *k = NULL;
  static seen s;
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    o.arch = forms[i].arch;
    ASSERT_TRUE((rt = t_open(&o)));
    ASSERT_STATUS(kt_kernel_load(rt, path, &k), KT_OK);
    memset(&s, 0, sizeof s);
    ASSERT_STATUS(kt_kernel_compile_all(k, NULL, on_variant, &s), KT_OK);
    ASSERT_EQ(s.ok, forms[i].ok);
    ASSERT_EQ(s.failed, 0);
    ASSERT_STR_EQ(kt_runtime_arch(rt), forms[i].arch);
    kt_runtime_close(rt);
  }
  /* sm_90 where NVRTC lists nothing past sm_89: PTX files, which the
  ** driver loads as it loads cubins. */
  kt__nvrtc_cap_archs(89);
  o.arch = "sm_90";
  rt = t_open(&o);
  kt__nvrtc_cap_archs(rt ? 89 : 0);
  ASSERT_TRUE(rt);
  ASSERT_STATUS(kt_kernel_load(rt, path, &k), KT_OK);
  memset(&s, 0, sizeof s);
  snprintf(path, sizeof path, "%s/out", dir);
  t_sh(out, sizeof out, "mkdir '%s'", path);
  kt_status st = kt_kernel_compile_all(k, path, on_variant, &s);
  kt__nvrtc_cap_archs(0);
  if (st) t_fail(__FILE__, __LINE__, "%s", s.first_err);
  ASSERT_STATUS(st, KT_OK);
  ASSERT_EQ(s.ok, 3);
  kt_runtime_close(rt);
  t_sh(out, sizeof out, "grep -c -e '^\\.target sm_89$' -e '^\\.version ' '%s/out/arch.A=3.cubin'", dir);
  ASSERT_STR_EQ(out, "2\n");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* The spec g (A in 1..4, B in 1..2; A=3 fails a static_assert) in a
** fresh directory, a runtime without a device with its cache in db, and
** g loaded; dir gets the directory. */
static kt_kernel *g_spec(char *dir, size_t dirlen, char *db, size_t dblen, kt_runtime **rt) {
  char path[1024];
  snprintf(dir, dirlen, "%s", t_tmpdir());
  if (t_write_file(dir, "g.cu",
                   "template <int A, int B>\n__global__ void g(float *y) {\n  static_assert(A != 3, \"three\");\n"
                   "  y[0] = A + B;\n}\n",
                   path, sizeof path) ||
      t_write_file(dir, "g.json",
                   "{\"name\": \"g\", \"source\": \"g.cu\", \"entry\": \"g\", \"template\": [\"A\", \"B\"],\n"
                   " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\","
                   " \"extent\": \"1\"}],\n"
                   " \"config\": {\"A\": [1, 2, 3, 4], \"B\": [1, 2]}, \"default\": {\"A\": 1, \"B\": 1}, \"grid\": 1,"
                   " \"block\": 32}\n",
                   path, sizeof path))
    return NULL;
  snprintf(db, dblen, "%s/g.db", dir);
  kt_options o;
  t_offline_options(&o);
  o.cache_path = db;
  kt_kernel *k;
  if (kt_runtime_open(rt, &o) || kt_kernel_load(*rt, path, &k)) return NULL;
  return k;
}

/* g loaded (g_spec), and calls[i] of it with A = vals[i] / 10 and
** B = vals[i] % 10; NULL when the spec could not be loaded. */
typedef struct gfix {
  char dir[700], db[800];
  kt_runtime *rt;
} gfix;

static kt_kernel *g_calls(gfix *f, const int *vals, int n, kt__call *calls) {
  kt_kernel *k = g_spec(f->dir, sizeof f->dir, f->db, sizeof f->db, &f->rt);
  kt_arg a[] = {kt_arg_ptr(0x1000, KT_F32)};
  for (int i = 0; k && i < n; i++) {
    int64_t cfg[2] = {vals[i] / 10, vals[i] % 10};
    if (kt__call_bind(&k->p, a, 1, &calls[i]) || kt__call_config(&k->p, &calls[i], cfg)) return NULL;
  }
  return k;
}

/* Building many variants at once: several per NVRTC program, each then
** found built with its own cubin (holding its function); a group with one
** variant that does not compile is compiled again one by one, so only that
** variant fails, with its own name. The cache gets every good cubin. */
static void variants_build_in_groups(void) {
  static const int vals[8] = {11, 12, 21, 22, 31, 32, 41, 42};
  gfix f = {.rt = NULL};
  kt__call calls[8];
  kt_kernel *k = g_calls(&f, vals, 8, calls);
  kt_runtime *rt = f.rt;
  char out[256];
  ASSERT_TRUE(k);
  kt__variant_build_all(&k->p, calls, 8, 2); /* groups of 4 */
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(rt, &st);
  ASSERT_EQ(st.compiles, 6); /* a group of 4, then the failed group one by one: 2 good */
  for (int i = 0; i < 8; i++) {
    void *fn;
    const void *cubin;
    size_t size;
    double ms;
    kt_status vs = kt__variant_info(&k->p, &calls[i], &fn, NULL);
    if (i / 2 == 2) {
      ASSERT_STATUS(vs, KT_ERR_COMPILE);
      char want[64];
      snprintf(want, sizeof want, "g A=3 B=%d: NVRTC: /", 1 + i % 2);
      ASSERT_CONTAINS(kt_errmsg(rt), want);
      ASSERT_CONTAINS(kt_errmsg(rt), "/g.cu(3): error: static assertion failed");
    } else {
      ASSERT_STATUS(vs, KT_OK);
      ASSERT_EQ(kt__variant_cubin(&k->p, &calls[i], &cubin, &size, &ms), 0);
      ASSERT_TRUE(size > 0);
    }
  }
  kt_runtime_close(rt);
  ASSERT_EQ(t_db_int(f.db, "SELECT count(*) FROM binaries"), 6);
  t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
}

typedef struct skipper {
  atomic_int asked;
} skipper;

static int skip_b2(void *user, int i) {
  skipper *sk = user;
  atomic_fetch_add(&sk->asked, 1);
  return i % 2; /* the calls with B=2 */
}

/* A build in the background: each variant is claimed up front and asked
** about (skip) just before it compiles; one given back is not compiled,
** nobody waits for it, and the next thread that wants it builds it. */
static void background_build_gives_back_what_skip_refuses(void) {
  static const int vals[6] = {11, 12, 21, 22, 41, 42};
  gfix f = {.rt = NULL};
  kt__call calls[6];
  kt_kernel *k = g_calls(&f, vals, 6, calls);
  kt_runtime *rt = f.rt;
  char out[256];
  ASSERT_TRUE(k);
  skipper sk;
  atomic_init(&sk.asked, 0);
  kt__buildopts o = {.lead = 1, .skip = skip_b2, .user = &sk};
  kt__build *b = kt__variant_build_start(&k->p, calls, 6, 2, &o);
  ASSERT_TRUE(b);
  kt__variant_build_wait(b);
  ASSERT_EQ(atomic_load(&sk.asked), 6);
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(rt, &st);
  ASSERT_EQ(st.compiles, 3);
  const void *cubin;
  size_t size;
  double ms;
  for (int i = 0; i < 6; i++) {
    ASSERT_EQ(kt__variant_settled(&k->p, &calls[i]), i % 2 == 0);
    ASSERT_EQ(kt__variant_cubin(&k->p, &calls[i], &cubin, &size, &ms), i % 2 ? -1 : 0);
  }
  void *fn;
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[1], &fn, NULL), KT_OK);
  ASSERT_EQ(kt__variant_settled(&k->p, &calls[1]), 1);
  ASSERT_EQ(kt__variant_cubin(&k->p, &calls[1], &cubin, &size, &ms), 0);
  /* A second build claims what is still unbuilt, and only that. */
  o.skip = NULL;
  kt__variant_build_wait(kt__variant_build_start(&k->p, calls, 6, 2, &o));
  kt_runtime_stats(rt, &st);
  ASSERT_EQ(st.compiles, 6);
  for (int i = 0; i < 6; i++) ASSERT_EQ(kt__variant_settled(&k->p, &calls[i]), 1);
  kt_runtime_close(rt);
  ASSERT_EQ(t_db_int(f.db, "SELECT count(*) FROM binaries"), 6);
  t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
}

/* The cubins of the calls' variants, concatenated into out (at most n
** bytes); their total size, or 0 when one is missing. */
static size_t cubins_of(kt_kernel *k, kt__call *calls, int m, unsigned char *out, size_t n) {
  size_t used = 0;
  for (int i = 0; i < m; i++) {
    const void *cubin;
    size_t size;
    double ms;
    if (kt__variant_cubin(&k->p, &calls[i], &cubin, &size, &ms) || used + size > n) return 0;
    memcpy(out + used, cubin, size);
    used += size;
  }
  return used;
}

/* A build's groups go to ktune-nvrtc processes (found beside the test
** program), whose cubins are byte for byte those NVRTC makes in this
** process; KTUNE_NVRTC_HELPER=off keeps NVRTC here. */
static void builds_compile_in_helper_processes(void) {
  static const int vals[6] = {11, 12, 21, 22, 41, 42};
  static unsigned char there[1 << 20], here[1 << 20];
  char where[1200], out[256];
  unsigned s0, s1, s2;
  kt__rc_reset(0);
  s0 = kt__rc_started();
  kt__rc_describe(where, sizeof where);
  ASSERT_CONTAINS(where, "helper processes (");
  ASSERT_CONTAINS(where, "/ktune-nvrtc)");
  gfix f = {.rt = NULL}, g = {.rt = NULL};
  kt__call calls[6];
  kt_kernel *k = g_calls(&f, vals, 6, calls);
  ASSERT_TRUE(k);
  kt__variant_build_all(&k->p, calls, 6, 2);
  s1 = kt__rc_started();
  ASSERT_TRUE(s1 > s0 && s1 <= s0 + 2); /* one per compiling thread at most */
  size_t a = cubins_of(k, calls, 6, there, sizeof there);
  ASSERT_TRUE(a > 0);
  setenv("KTUNE_NVRTC_HELPER", "off", 1);
  kt__rc_reset(0);
  kt__rc_describe(where, sizeof where);
  ASSERT_STR_EQ(where, "this process (KTUNE_NVRTC_HELPER=off)");
  kt_kernel *k2 = g_calls(&g, vals, 6, calls);
  ASSERT_TRUE(k2);
  kt__variant_build_all(&k2->p, calls, 6, 2);
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(g.rt, &st);
  ASSERT_EQ(st.compiles, 6);
  s2 = kt__rc_started();
  ASSERT_EQ(s2, s1);
  ASSERT_EQ(cubins_of(k2, calls, 6, here, sizeof here), a);
  ASSERT_TRUE(!memcmp(here, there, a));
  unsetenv("KTUNE_NVRTC_HELPER");
  kt_runtime_close(g.rt);
  kt_runtime_close(f.rt);
  t_sh(out, sizeof out, "rm -rf '%s' '%s'", f.dir, g.dir);
}

/* KTUNE_NVRTC_HELPER as a script in dir: it says hello as a helper does,
** then runs body once a request comes ("" : it never says hello). */
static void fake_helper(const char *dir, const char *body, int greets) {
  char path[1024];
  snprintf(path, sizeof path, "%s/helper.sh", dir);
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "#!/bin/sh\n%s%s\n", greets ? "printf 'KTH1\\000\\000\\000\\000\\000\\000\\000\\000' >&3\n"
                                            "head -c 1 <&3 >/dev/null\n" : "", body);
  fclose(f);
  chmod(path, 0755);
  setenv("KTUNE_NVRTC_HELPER", path, 1);
  kt__rc_reset(0);
}

/* What a build of g A=1 B=1 and A=1 B=2 leaves: *ok good variants, and
** the error of the last bad one in err. */
static void build_two(kt_runtime *rt, kt_kernel *k, kt__call *calls, int *ok, char *err, size_t n) {
  kt__variant_build_all(&k->p, calls, 2, 2);
  *ok = 0;
  for (int i = 0; i < 2; i++) {
    void *fn;
    if (!kt__variant_info(&k->p, &calls[i], &fn, NULL)) ++*ok;
    else snprintf(err, n, "%s", kt_errmsg(rt));
  }
}

/* A helper that crashes fails the variants it was compiling, with the
** signal, and NVRTC is never tried in this process for them (it would crash
** too); one that exits at once is taken for an idle one that timed out,
** once; one that cannot start, or never greets, leaves NVRTC in this
** process. */
static void helper_failures(void) {
  static const int vals[2] = {11, 12};
  char err[KT_ERRMAX] = "", where[1200], out[256], want[1200];
  int ok;
  const char *bodies[] = {"kill -SEGV $$", "exit 0", "exit 7"};
  const char *says[] = {"g A=1 B=2: NVRTC's helper process died: signal 11 (Segmentation fault)",
                        "g A=1 B=2: NVRTC's helper process exited with status 0 while compiling",
                        "g A=1 B=2: NVRTC's helper process exited with status 7 while compiling"};
  for (int i = 0; i < 3; i++) {
    gfix f = {.rt = NULL};
    kt__call calls[2];
    kt_kernel *k = g_calls(&f, vals, 2, calls);
    ASSERT_TRUE(k);
    fake_helper(f.dir, bodies[i], 1);
    build_two(f.rt, k, calls, &ok, err, sizeof err);
    ASSERT_EQ(ok, 0);
    ASSERT_CONTAINS(err, says[i]);
    kt_runtime_close(f.rt);
    ASSERT_EQ(t_db_int(f.db, "SELECT count(*) FROM binaries"), 0);
    t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
  }
  /* A helper that does not answer, one that is not there, and a directory
  ** (which access(X_OK) alone takes for a program). */
  for (int i = 0; i < 3; i++) {
    gfix f = {.rt = NULL};
    kt__call calls[2];
    kt_kernel *k = g_calls(&f, vals, 2, calls);
    ASSERT_TRUE(k);
    fake_helper(f.dir, "exit 0", 0);
    if (i) setenv("KTUNE_NVRTC_HELPER", i == 1 ? "/nonexistent/ktune-nvrtc" : f.dir, 1);
    kt__rc_reset(0);
    build_two(f.rt, k, calls, &ok, err, sizeof err);
    ASSERT_EQ(ok, 2);
    kt__rc_describe(where, sizeof where);
    if (i) snprintf(want, sizeof want, "this process (KTUNE_NVRTC_HELPER=%s is not an executable file)",
                    i == 1 ? "/nonexistent/ktune-nvrtc" : f.dir);
    else snprintf(want, sizeof want, "this process (%s/helper.sh did not answer)", f.dir);
    ASSERT_STR_EQ(where, want);
    kt_runtime_close(f.rt);
    t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
  }
  unsetenv("KTUNE_NVRTC_HELPER");
  kt__rc_reset(0);
}

/* Only NVRTC's own answer that a source does not compile is a verdict the
** tuner may keep in the cache (a compile_error trial settles that config
** for good): the same text fails again. A helper that died, NVRTC missing
** and a header edited after the load are causes of this process, and
** their failures are measured again by a later tuning. Both where NVRTC
** runs in a helper and where it runs in this process. */
static void only_nvrtc_refusals_are_verdicts(void) {
  static const int vals[3] = {31, 11, 21};
  char out[256];
  for (int here = 0; here < 2; here++) {
    gfix f = {.rt = NULL};
    kt__call calls[3];
    char where[1200];
    if (here) setenv("KTUNE_NVRTC_HELPER", "off", 1);
    kt__rc_reset(0);
    kt__rc_describe(where, sizeof where);
    ASSERT_CONTAINS(where, here ? "this process (" : "helper processes (");
    kt_kernel *k = g_calls(&f, vals, 3, calls);
    ASSERT_TRUE(k);
    if (!k) break;
    kt__variant_build_all(&k->p, calls, 2, 1);
    void *fn;
    ASSERT_STATUS(kt__variant_info(&k->p, &calls[0], &fn, NULL), KT_ERR_COMPILE);
    ASSERT_CONTAINS(kt_errmsg(f.rt), "static assertion failed with \"three\"");
    ASSERT_EQ(kt__variant_refused(&k->p, &calls[0]), 1);
    ASSERT_EQ(kt__variant_refused(&k->p, &calls[1]), 0); /* built */
    ASSERT_EQ(kt__variant_refused(&k->p, &calls[2]), 0); /* not built */
    /* NVRTC gone (a machine that serves from the cache alone). */
    kt__nvrtc_absent(1);
    ASSERT_STATUS(kt__variant_info(&k->p, &calls[2], &fn, NULL), KT_ERR_NO_NVRTC);
    kt__nvrtc_absent(0);
    ASSERT_EQ(kt__variant_refused(&k->p, &calls[2]), 0);
    kt_runtime_close(f.rt);
    t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
  }
  /* A helper that crashes on the very variant that NVRTC refuses. */
  gfix f = {.rt = NULL};
  kt__call calls[2];
  static const int bad[2] = {31, 32};
  kt_kernel *k = g_calls(&f, bad, 2, calls);
  ASSERT_TRUE(k);
  if (k) {
    int ok;
    char err[KT_ERRMAX] = "";
    fake_helper(f.dir, "kill -SEGV $$", 1);
    build_two(f.rt, k, calls, &ok, err, sizeof err);
    ASSERT_EQ(ok, 0);
    ASSERT_CONTAINS(err, "g A=3 B=2: NVRTC's helper process died: signal 11 (Segmentation fault)");
    ASSERT_EQ(kt__variant_refused(&k->p, &calls[0]) + kt__variant_refused(&k->p, &calls[1]), 0);
    kt_runtime_close(f.rt);
    t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
  }
  unsetenv("KTUNE_NVRTC_HELPER");
  kt__rc_reset(0);
}

/* The number of lines in dir/runs: how often a counting helper ran. */
static int runs_in(const char *dir) {
  char out[64];
  if (t_sh(out, sizeof out, "cat '%s/runs' 2>/dev/null | wc -l", dir)) return -1;
  return atoi(out);
}

/* A build that failed for a cause of the moment (here NVRTC not loaded;
** out of memory is the other) is not final: the failure is returned at
** once, without a build, until a pause has passed (1 s, then 2 s after the
** second failure), and the next call then builds the variant again. A
** failed compile is final: NVRTC's refusal, and a helper that crashed on
** the source (a crash that would take the process down were it compiled
** there). */
static void failures_of_the_moment_are_built_again(void) {
  static const int vals[3] = {11, 31, 12};
  char body[1200], out[256];
  gfix f = {.rt = NULL};
  kt__call calls[3];
  kt_kernel *k = g_calls(&f, vals, 3, calls);
  ASSERT_TRUE(k);
  if (!k) return;
  void *fn;
  kt__nvrtc_absent(1);
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[0], &fn, NULL), KT_ERR_NO_NVRTC);
  ASSERT_STR_EQ(kt_errmsg(f.rt), "g A=1 B=1: cannot load NVRTC (made absent for a test)");
  usleep(1100 * 1000);
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[0], &fn, NULL), KT_ERR_NO_NVRTC); /* built again: failed */
  kt__nvrtc_absent(0);
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[0], &fn, NULL), KT_ERR_NO_NVRTC); /* within its pause */
  usleep(1100 * 1000);
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[0], &fn, NULL), KT_ERR_NO_NVRTC); /* the pause is 2 s now */
  ASSERT_STR_EQ(kt_errmsg(f.rt), "g A=1 B=1: cannot load NVRTC (made absent for a test)");
  ASSERT_EQ(kt__variant_refused(&k->p, &calls[0]), 0);
  usleep(1000 * 1000);
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[0], &fn, NULL), KT_OK);
  ASSERT_EQ(t_db_int(f.db, "SELECT count(*) FROM binaries"), 1);
  /* NVRTC's refusal, and a helper's crash, stay however long ago. */
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[1], &fn, NULL), KT_ERR_COMPILE);
  ASSERT_CONTAINS(kt_errmsg(f.rt), "static assertion failed with \"three\"");
  snprintf(body, sizeof body, "echo run >> '%s/runs'\nkill -SEGV $$", f.dir);
  fake_helper(f.dir, body, 1);
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[2], &fn, NULL), KT_ERR_COMPILE);
  ASSERT_STR_EQ(kt_errmsg(f.rt), "g A=1 B=2: NVRTC's helper process died: signal 11 (Segmentation fault)");
  ASSERT_EQ(runs_in(f.dir), 1);
  unsetenv("KTUNE_NVRTC_HELPER");
  kt__rc_reset(0);
  usleep(1100 * 1000);
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[1], &fn, NULL), KT_ERR_COMPILE);
  ASSERT_CONTAINS(kt_errmsg(f.rt), "static assertion failed with \"three\"");
  ASSERT_EQ(kt__variant_refused(&k->p, &calls[1]), 1);
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[2], &fn, NULL), KT_ERR_COMPILE);
  ASSERT_STR_EQ(kt_errmsg(f.rt), "g A=1 B=2: NVRTC's helper process died: signal 11 (Segmentation fault)");
  ASSERT_EQ(runs_in(f.dir), 1);
  ASSERT_EQ(t_db_int(f.db, "SELECT count(*) FROM binaries"), 1);
  kt_runtime_close(f.rt);
  t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
}

/* A thread that asks for one variant until told to stop, counting what
** it got. */
typedef struct asker {
  kt_kernel *k;
  const kt__call *c;
  atomic_int *stop;
  int failed, built, other;
  pthread_t t;
} asker;

static void *ask_until_stopped(void *user) {
  asker *a = user;
  void *fn;
  while (!atomic_load(a->stop)) {
    kt_status st = kt__variant_info(&a->k->p, a->c, &fn, NULL);
    if (st == KT_ERR_NO_NVRTC) a->failed++;
    else if (st == KT_OK) a->built++; /* no device: built, with no function */
    else a->other++;
  }
  return NULL;
}

/* Threads that ask for a variant while another builds its failure again
** (twice here: failing, then built): each sees the failure or the built
** variant, never a half-built one, and the last build stands. */
static void threads_read_a_failure_built_again(void) {
  static const int vals[1] = {21};
  char out[256];
  gfix f = {.rt = NULL};
  kt__call calls[1];
  kt_kernel *k = g_calls(&f, vals, 1, calls);
  ASSERT_TRUE(k);
  if (!k) return;
  void *fn;
  kt__nvrtc_absent(1);
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[0], &fn, NULL), KT_ERR_NO_NVRTC);
  atomic_int stop;
  atomic_init(&stop, 0);
  asker a[6];
  int started = 0;
  for (int i = 0; i < 6; i++) {
    a[i] = (asker){.k = k, .c = &calls[0], .stop = &stop};
    started += !pthread_create(&a[i].t, NULL, ask_until_stopped, &a[i]);
  }
  ASSERT_EQ(started, 6);
  usleep(1200 * 1000); /* built again at 1 s, failing */
  kt__nvrtc_absent(0);
  usleep(2300 * 1000); /* built again at 3 s, and built */
  atomic_store(&stop, 1);
  int failed = 0, built = 0, other = 0;
  for (int i = 0; i < started; i++) {
    pthread_join(a[i].t, NULL);
    failed += a[i].failed, built += a[i].built, other += a[i].other;
  }
  ASSERT_TRUE(failed > 0);
  ASSERT_TRUE(built > 0);
  ASSERT_EQ(other, 0);
  ASSERT_STATUS(kt__variant_info(&k->p, &calls[0], &fn, NULL), KT_OK);
  ASSERT_EQ(t_db_int(f.db, "SELECT count(*) FROM binaries"), 1);
  kt_runtime_close(f.rt);
  t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
}

/* A helper $KTUNE_NVRTC_HELPER names that cannot be run is a mistake the
** user is told of (a warning, not a debug line); the build goes on with
** NVRTC in the process itself. */
static void a_named_helper_that_cannot_run_is_a_warning(void) {
  char out[4096], want[1024];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  ASSERT_EQ(t_sh(out, sizeof out,
                 "KTUNE_CACHE=%s/c.db KTUNE_NVRTC_HELPER=%s/none build/ktune compile tests/specs/small.json "
                 "--arch sm_90 2>&1 >/dev/null | grep warn",
                 dir, dir),
            0);
  snprintf(want, sizeof want, "ktune: warn: NVRTC runs in this process: KTUNE_NVRTC_HELPER=%s/none is not an "
                              "executable file\n", dir);
  ASSERT_STR_EQ(out, want);
}

/* Helpers end after their idle time; the next build finds them gone and
** starts another. With SIGCHLD ignored (the kernel reaps children), the
** same. */
static void idle_helpers_end_with(int ignore_sigchld) {
  static const int vals[6] = {11, 12, 21, 22, 41, 42};
  gfix f = {.rt = NULL};
  kt__call calls[6];
  kt_kernel *k = g_calls(&f, vals, 6, calls);
  char out[256];
  ASSERT_TRUE(k);
  struct sigaction ign = {.sa_handler = SIG_IGN}, old;
  if (ignore_sigchld) sigaction(SIGCHLD, &ign, &old);
  kt__rc_reset(700);
  unsigned s0 = kt__rc_started();
  kt__variant_build_all(&k->p, calls, 4, 2); /* two groups, on one or two helpers */
  unsigned s1 = kt__rc_started();
  ASSERT_TRUE(s1 == s0 + 1 || s1 == s0 + 2);
  kt__variant_build_all(&k->p, calls + 4, 1, 1); /* one of them, still there */
  ASSERT_EQ(kt__rc_started(), s1);
  usleep(1200 * 1000);
  kt__variant_build_all(&k->p, calls + 5, 1, 1); /* they have gone */
  ASSERT_EQ(kt__rc_started(), s1 + 1);
  for (int i = 0; i < 6; i++) ASSERT_EQ(kt__variant_settled(&k->p, &calls[i]), 1);
  void *fn;
  for (int i = 0; i < 6; i++) ASSERT_STATUS(kt__variant_info(&k->p, &calls[i], &fn, NULL), KT_OK);
  kt_runtime_close(f.rt);
  if (ignore_sigchld) sigaction(SIGCHLD, &old, NULL);
  ASSERT_EQ(t_db_int(f.db, "SELECT count(*) FROM binaries"), 6);
  t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
}

static void idle_helpers_end(void) { idle_helpers_end_with(0); }
static void idle_helpers_end_sigchld_ignored(void) { idle_helpers_end_with(1); }

/* Helpers and NVRTC's precompiled headers (device/pchdir.h): TMPDIR as a
** fresh directory for the helpers this test starts; the old value back
** with tmp_back. */
static char old_tmp[1024];
static int had_tmp;

static void tmp_to(const char *dir) {
  const char *t = getenv("TMPDIR");
  had_tmp = t != NULL;
  snprintf(old_tmp, sizeof old_tmp, "%s", t ? t : "");
  setenv("TMPDIR", dir, 1);
  kt__rc_reset(0);
}

static void tmp_back(void) {
  kt__rc_reset(0);
  if (had_tmp) setenv("TMPDIR", old_tmp, 1);
  else unsetenv("TMPDIR");
}

/* The entries of dir, sorted, one per line, "name/" for a directory and
** "name/inner" for each entry one level down ("" when empty). */
static void listing(const char *dir, char *out, size_t n) {
  t_sh(out, n, "cd '%s' && find . -mindepth 1 -maxdepth 2 | sed 's|^\\./||' | sort", dir);
}

/* The pid in the name of the one helper directory under dir, or -1. */
static long helper_pid(const char *dir) {
  char out[1024];
  t_sh(out, sizeof out, "ls '%s' | sed -n 's/^ktune-nvrtc\\.\\([0-9]*\\)\\..*/\\1/p'", dir);
  return strchr(out, '\n') == strrchr(out, '\n') && out[0] ? atol(out) : -1;
}

/* Each helper keeps NVRTC's precompiled headers in a directory of its own
** under TMPDIR, "ktune-nvrtc.PID.XXXXXX", and removes it when it ends; a
** compile in this process leaves nothing there (it asks for none). */
static void helpers_keep_precompiled_headers_to_themselves(void) {
  static const int vals[2] = {11, 12};
  gfix f = {.rt = NULL}, g = {.rt = NULL};
  kt__call calls[2];
  char tmp[800], out[2048], want[256];
  kt__call calls2[2];
  kt_kernel *k = g_calls(&f, vals, 2, calls), *k2 = g_calls(&g, vals, 2, calls2);
  ASSERT_TRUE(k && k2);
  snprintf(tmp, sizeof tmp, "%s/tmp", f.dir);
  mkdir(tmp, 0700);
  tmp_to(tmp);
  kt__variant_build_all(&k->p, calls, 2, 1);
  long pid = helper_pid(tmp);
  ASSERT_TRUE(pid > 0);
  t_sh(out, sizeof out, "cd '%s' && ls -d ktune-nvrtc.*/__nvrtc_auto_pch_* | sed 's/\\.[A-Za-z0-9]*\\//\\//'", tmp);
  snprintf(want, sizeof want, "ktune-nvrtc.%ld/__nvrtc_auto_pch_%ld_0\n", pid, pid);
  ASSERT_STR_EQ(out, want);
  for (int i = 0; i < 2; i++) ASSERT_EQ(kt__variant_settled(&k->p, &calls[i]), 1);
  kt__rc_reset(0); /* the helper reads the end of its socket, and ends */
  listing(tmp, out, sizeof out);
  ASSERT_STR_EQ(out, "");
  setenv("KTUNE_NVRTC_HELPER", "off", 1);
  kt__rc_reset(0);
  kt__variant_build_all(&k2->p, calls2, 2, 1);
  void *fn;
  ASSERT_STATUS(kt__variant_info(&k2->p, &calls2[0], &fn, NULL), KT_OK);
  listing(tmp, out, sizeof out);
  ASSERT_STR_EQ(out, "");
  unsetenv("KTUNE_NVRTC_HELPER");
  tmp_back();
  kt_runtime_close(g.rt);
  kt_runtime_close(f.rt);
  t_sh(out, sizeof out, "rm -rf '%s' '%s'", f.dir, g.dir);
}

/* A helper starting removes what helpers that died left (a directory of
** theirs unchanged for a minute, whose lock nothing holds), and nothing
** else: not a young one, a locked one, a link or what it points to, a
** file, another name. */
static void helpers_remove_what_dead_helpers_left(void) {
  static const int vals[1] = {11};
  gfix f = {.rt = NULL};
  kt__call calls[1];
  char tmp[800], out[2048], path[1024];
  kt_kernel *k = g_calls(&f, vals, 1, calls);
  ASSERT_TRUE(k);
  snprintf(tmp, sizeof tmp, "%s/tmp", f.dir);
  ASSERT_EQ(t_sh(out, sizeof out,
                 "mkdir -p '%1$s/ktune-nvrtc.dead.aaaaaa/__nvrtc_auto_pch_1_0' '%1$s/ktune-nvrtc.young.bbbbbb' "
                 "'%1$s/ktune-nvrtc.locked.cccccc' '%1$s/victim' '%1$s/other.4' && "
                 "echo x > '%1$s/ktune-nvrtc.dead.aaaaaa/__nvrtc_auto_pch_1_0/g_0.pch' && echo x > '%1$s/victim/f' && "
                 "echo x > '%1$s/ktune-nvrtc.file.eeeeee' && ln -s victim '%1$s/ktune-nvrtc.link.dddddd' && "
                 "touch -h -d '-2 minutes' '%1$s'/ktune-nvrtc.dead.aaaaaa '%1$s'/ktune-nvrtc.locked.cccccc '%1$s'/victim "
                 "'%1$s'/other.4 '%1$s'/ktune-nvrtc.link.dddddd '%1$s'/ktune-nvrtc.file.eeeeee",
                 tmp),
            0);
  snprintf(path, sizeof path, "%s/ktune-nvrtc.locked.cccccc", tmp);
  int held = open(path, O_RDONLY | O_DIRECTORY);
  ASSERT_TRUE(held >= 0 && !flock(held, LOCK_EX));
  tmp_to(tmp);
  kt__variant_build_all(&k->p, calls, 1, 1);
  long pid = helper_pid(tmp);
  snprintf(path, sizeof path, "ktune-nvrtc.%ld.", pid);
  ASSERT_TRUE(pid > 1);
  t_sh(out, sizeof out, "cd '%s' && ls | grep -v '^%s'", tmp, path);
  ASSERT_STR_EQ(out, "ktune-nvrtc.file.eeeeee\nktune-nvrtc.link.dddddd\nktune-nvrtc.locked.cccccc\n"
                     "ktune-nvrtc.young.bbbbbb\nother.4\nvictim\n");
  ASSERT_EQ(kt__pchdir_sweep(tmp, 0), 1); /* the young one, at no age */
  close(held);
  ASSERT_EQ(kt__pchdir_sweep(tmp, 0), 1); /* the lock let go: not the live helper's */
  listing(tmp, out, sizeof out);
  ASSERT_CONTAINS(out, path);
  t_sh(out, sizeof out, "cd '%s' && ls | grep -v '^%s'; cat victim/f", tmp, path);
  ASSERT_STR_EQ(out, "ktune-nvrtc.file.eeeeee\nktune-nvrtc.link.dddddd\nother.4\nvictim\nx\n");
  tmp_back();
  listing(tmp, out, sizeof out);
  ASSERT_STR_EQ(out, "ktune-nvrtc.file.eeeeee\nktune-nvrtc.link.dddddd\nother.4\nvictim\nvictim/f\n");
  kt_runtime_close(f.rt);
  t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
}

/* A helper lives through a terminal's SIGINT, SIGQUIT and SIGHUP (they end
** it through its parent) and serves on; SIGTERM ends it, its directory
** removed. */
static void helpers_and_signals(void) {
  static const int vals[3] = {11, 12, 21};
  gfix f = {.rt = NULL};
  kt__call calls[3];
  char tmp[800], out[2048];
  kt_kernel *k = g_calls(&f, vals, 3, calls);
  ASSERT_TRUE(k);
  snprintf(tmp, sizeof tmp, "%s/tmp", f.dir);
  mkdir(tmp, 0700);
  tmp_to(tmp);
  kt__variant_build_all(&k->p, calls, 1, 1);
  unsigned s0 = kt__rc_started();
  long pid = helper_pid(tmp);
  ASSERT_TRUE(pid > 0);
  ASSERT_EQ(kill((pid_t)pid, SIGINT) | kill((pid_t)pid, SIGQUIT) | kill((pid_t)pid, SIGHUP), 0);
  usleep(100 * 1000);
  kt__variant_build_all(&k->p, calls + 1, 1, 1);
  ASSERT_EQ(kt__rc_started(), s0);
  ASSERT_EQ(helper_pid(tmp), pid);
  ASSERT_EQ(kill((pid_t)pid, SIGTERM), 0);
  for (int i = 0; i < 500 && helper_pid(tmp) == pid; i++) usleep(10 * 1000);
  listing(tmp, out, sizeof out);
  ASSERT_STR_EQ(out, "");
  kt__variant_build_all(&k->p, calls + 2, 1, 1);
  ASSERT_EQ(kt__rc_started(), s0 + 1);
  void *fn;
  for (int i = 0; i < 3; i++) ASSERT_STATUS(kt__variant_info(&k->p, &calls[i], &fn, NULL), KT_OK);
  tmp_back();
  kt_runtime_close(f.rt);
  t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
}

/* A helper ended from outside while it compiles (SIGTERM, SIGKILL) hands
** its group to a fresh helper: here a script that dies so on its first
** request, and is the real helper after. */
static void killed_helpers_hand_on_their_group(void) {
  static const int vals[1] = {11};
  const char *sigs[] = {"TERM", "KILL"};
  char where[1200], real[1200], script[2048], path[1024], out[256];
  kt__rc_reset(0);
  kt__rc_describe(where, sizeof where);
  ASSERT_TRUE(sscanf(where, "helper processes (%1199[^)])", real) == 1);
  for (int i = 0; i < 2; i++) {
    gfix f = {.rt = NULL};
    kt__call calls[1];
    kt_kernel *k = g_calls(&f, vals, 1, calls);
    ASSERT_TRUE(k);
    snprintf(script, sizeof script,
             "#!/bin/sh\nif [ -e '%1$s/once' ]; then exec '%2$s' \"$@\"; fi\ntouch '%1$s/once'\n"
             "printf 'KTH1\\000\\000\\000\\000\\000\\000\\000\\000' >&3\nhead -c 1 <&3 >/dev/null\nkill -%3$s $$\n",
             f.dir, real, sigs[i]);
    ASSERT_EQ(t_write_file(f.dir, "helper.sh", script, path, sizeof path), 0);
    chmod(path, 0755);
    setenv("KTUNE_NVRTC_HELPER", path, 1);
    kt__rc_reset(0);
    unsigned s0 = kt__rc_started();
    kt__variant_build_all(&k->p, calls, 1, 1); /* a group of one: not compiled again alone */
    ASSERT_EQ(kt__rc_started(), s0 + 2);
    void *fn;
    ASSERT_STATUS(kt__variant_info(&k->p, &calls[0], &fn, NULL), KT_OK);
    unsetenv("KTUNE_NVRTC_HELPER");
    kt__rc_reset(0);
    kt_runtime_close(f.rt);
    t_sh(out, sizeof out, "rm -rf '%s'", f.dir);
  }
}

/* ktune-test --exit-while-compiling W: threads compile in this process
** until an exit hook stops them, and the process exits while they do, as
** async mode's background tuner may at a process's exit. With W = 1,
** kt__nvrtc_warm runs before the hook is registered, as the tuner's start
** does: NVRTC's exit-time teardown then runs after the hook, not under the
** compiling threads. */
static atomic_int compiling_stop;
static pthread_t compiling[3];

static void *compile_until_stopped(void *user) {
  (void)user;
  const char *src = "template <int N> __global__ void k(float *x) {\n"
                    "  for (int i = 0; i < N; i++) x[threadIdx.x + i] = sinf(x[i]) * expf(x[i + 1]);\n"
                    "}\n";
  const char *expr[] = {"k<16>"}, *opts[] = {"--gpu-architecture=sm_90", "-std=c++17", "--pch"};
  while (!atomic_load(&compiling_stop)) {
    void *cubin = NULL;
    size_t size = 0;
    char *lowered[1] = {NULL}, err[512];
    if (kt__nvrtc_compile_many(src, "exit.cu", expr, 1, opts, 3, &cubin, &size, lowered, err, sizeof err))
      fprintf(stderr, "%s\n", err);
    kt__free(cubin);
    kt__free(lowered[0]);
  }
  return NULL;
}

static void stop_compiling(void) {
  atomic_store(&compiling_stop, 1);
  for (int i = 0; i < 3; i++) pthread_join(compiling[i], NULL);
  printf("the compiling threads stopped\n");
  fflush(stdout);
}

int exit_while_compiling(int warm) {
  char err[512];
  if (warm && kt__nvrtc_warm("sm_90", err, sizeof err)) {
    printf("warm: %s\n", err);
    return 3;
  }
  if (atexit(stop_compiling)) return 4;
  for (int i = 0; i < 3; i++)
    if (pthread_create(&compiling[i], NULL, compile_until_stopped, NULL)) return 5;
  usleep(300 * 1000);
  exit(0);
}

static void exit_while_compiling_is_clean(void) {
  char out[1024], self[1024];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_TRUE(n > 0);
  self[n] = 0;
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(t_sh(out, sizeof out, "'%s' --exit-while-compiling 1 2>&1", self), 0);
    ASSERT_STR_EQ(out, "the compiling threads stopped\n");
  }
}

/* The kernels that compare outputs on the device compile for sm_90, one
** per dtype, and the process keeps their cubin. */
static void comparison_kernels_compile(void) {
  kt_runtime *rt = t_offline(1);
  ASSERT_TRUE(rt);
  void *image = NULL, *again = NULL;
  int mine = 1;
  char err[KT_ERRMAX];
  ASSERT_STATUS(kt__devcmp_image(&rt->env, &image, &mine, err, sizeof err), KT_OK);
  ASSERT_EQ(mine, 0);
  ASSERT_STATUS(kt__devcmp_image(&rt->env, &again, &mine, err, sizeof err), KT_OK);
  ASSERT_TRUE(image == again);
  const unsigned char *e = image;
  ASSERT_TRUE(e && e[0] == 0x7f && e[1] == 'E' && e[2] == 'L' && e[3] == 'F');
  /* Every dtype's kernel is in it by name (ELF string table). */
  uint64_t shoff;
  uint16_t shnum;
  memcpy(&shoff, e + 0x28, 8);
  memcpy(&shnum, e + 0x3c, 2);
  size_t size = shoff + (size_t)shnum * 64;
  for (int t = KT_F32; t <= KT_U32; t++) {
    char name[32];
    snprintf(name, sizeof name, "kt_cmp_%s", kt_dtype_name((kt_dtype)t));
    int found = 0;
    for (size_t i = 0; i + strlen(name) < size && !found; i++) found = !memcmp(e + i, name, strlen(name) + 1);
    ASSERT_TRUE(found);
  }
  kt_runtime_close(rt);
}

const kt_test t_compile_tests[] = {
    {"compile: the device comparison kernels compile", comparison_kernels_compile},
    {"compile: a process that exits while threads compile here exits cleanly", exit_while_compiling_is_clean},
    {"compile: variants build in groups; a bad one fails alone", variants_build_in_groups},
    {"compile: a background build gives back what skip refuses, built later on demand",
     background_build_gives_back_what_skip_refuses},
    {"compile: builds run NVRTC in helper processes, with the cubins it makes here", builds_compile_in_helper_processes},
    {"compile: a helper that dies fails its variants; one that cannot start leaves NVRTC here", helper_failures},
    {"compile: only NVRTC's refusal of a source is a verdict, not a helper's death or NVRTC missing",
     only_nvrtc_refusals_are_verdicts},
    {"compile: a helper KTUNE_NVRTC_HELPER names that cannot run is a warning", a_named_helper_that_cannot_run_is_a_warning},
    {"compile: idle helpers end; the next build starts another", idle_helpers_end},
    {"compile: the same with SIGCHLD ignored (children reaped by the kernel)", idle_helpers_end_sigchld_ignored},
    {"compile: helpers keep NVRTC's precompiled headers in a directory of their own, gone when they end",
     helpers_keep_precompiled_headers_to_themselves},
    {"compile: a helper starting removes what dead helpers left, and nothing else",
     helpers_remove_what_dead_helpers_left},
    {"compile: helpers live through SIGINT, SIGQUIT and SIGHUP; SIGTERM ends one, its directory removed",
     helpers_and_signals},
    {"compile: a helper killed from outside hands its group to a fresh one", killed_helpers_hand_on_their_group},
    {"compile: every variant of the bundled spec, sm_90, no GPU", every_bundled_variant_compiles},
    {"compile: every variant of a space is one some call can use", compile_all_keeps_what_calls_can_use},
    {"compile: a space of more than KT_COMPILE_MAX_VARIANTS is refused before compiling", compile_refuses_a_space_too_large},
    {"compile: the walk over a space checks constraints early and is bounded", compile_walk_is_pruned_and_bounded},
    {"compile: an arch is read whole, and one NVRTC cannot compile for is refused at open",
     an_arch_is_read_whole_and_checked},
    {"compile: listing a space survives each allocation failing in turn", listing_survives_every_allocation_failure},
    {"compile: cubins are written as ELF files", cubins_are_written},
    {"compile: errors carry the NVRTC log", compile_errors_carry_the_log},
    {"compile: a failure of the moment is built again after a pause", failures_of_the_moment_are_built_again},
    {"compile: threads read a failure while another builds it again", threads_read_a_failure_built_again},
    {"compile: a header edited after the load is not compiled from", header_edited_after_the_load},
    {"compile: a header edited and its spec loaded again compiles from the new text", header_edited_and_loaded_again},
    {"compile: fast math and the most flags a spec may add", the_most_flags_compile},
    {NULL, NULL},
};
