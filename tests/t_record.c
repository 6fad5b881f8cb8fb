/* Recording missed keys (kt_options.record_path, $KTUNE_RECORD): one
** --shapes line per key the cache does not have, once per process, that
** the CLI's reader turns back into a call of the same key. */
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tools/shape.h"
#include "harness.h"
#include "ktune.h"

#define GB (1ull << 30)
/* layernorm_fwd: y x res res_out w b mean rstd N D G eps rms */
#define LN(x, res, w, b, mean, n, d, eps)                                                                            \
  {kt_arg_ptr(1 * GB, KT_BF16), kt_arg_ptr(x, KT_BF16), kt_arg_ptr(res, KT_BF16), kt_arg_ptr(res ? 4 * GB : 0, KT_BF16), \
   kt_arg_ptr(w, KT_F32), kt_arg_ptr(b, KT_F32), kt_arg_ptr(mean, KT_F32), kt_arg_ptr(mean ? 7 * GB : 0, KT_F32),  \
   kt_arg_i32(n), kt_arg_i32(d), kt_arg_i32(1), kt_arg_f32(eps), kt_arg_i32(0)}

static kt_runtime *recording(const char *path) {
  kt_options o;
  t_offline_options(&o);
  o.no_cache = 1;
  o.record_path = path;
  return t_open(&o);
}

/* Three keys missed (one twice, one through two runtimes of the process):
** three lines, in the CLI's words, and each read back by the --shapes
** reader into a call with the key of the call recorded. */
static void missed_keys_are_recorded_once_and_read_back(void) {
  char path[512], text[4096];
  snprintf(path, sizeof path, "%s/calls.jsonl", t_tmpdir());
  kt_runtime *rt = recording(path), *rt2 = recording(path);
  ASSERT_TRUE(rt && rt2);
  kt_kernel *k, *k2;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", &k), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt2, "kernels_src/layernorm_fwd.json", &k2), KT_OK);
  kt_arg calls[3][13] = {LN(2 * GB, 0, 5 * GB, 6 * GB, 0, 4096, 2048, 1e-5f),
                         LN(2 * GB + 2, 3 * GB, 5 * GB, 0, 6 * GB, 77, 1000, 0.1f),
                         LN(2 * GB + 16, 0, 0, 0, 0, 1, 96, 1e-6f)};
  char cfg[128];
  for (int i = 0; i < 3; i++) ASSERT_STATUS(kt_kernel_config_for(k, calls[i], 13, cfg, sizeof cfg), KT_OK);
  calls[0][8] = kt_arg_i32(8192); /* N is not in the key: no new line */
  ASSERT_STATUS(kt_kernel_config_for(k, calls[0], 13, cfg, sizeof cfg), KT_OK);
  ASSERT_STATUS(kt_kernel_config_for(k2, calls[1], 13, cfg, sizeof cfg), KT_OK);
  kt_runtime_close(rt2);
  FILE *f = fopen(path, "r");
  ASSERT_TRUE(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  ASSERT_STR_EQ(text,
                "{\"kernel\":\"layernorm_fwd\",\"T\":\"bf16\",\"res\":null,\"res_out\":null,\"W\":\"f32\",\"mean\":null,"
                "\"rstd\":null,\"N\":4096,\"D\":2048,\"G\":1,\"eps\":1e-05,\"rms\":0}\n"
                "{\"kernel\":\"layernorm_fwd\",\"T\":\"bf16\",\"x@\":2,\"W\":\"f32\",\"b\":null,\"N\":77,\"D\":1000,"
                "\"G\":1,\"eps\":0.1,\"rms\":0}\n"
                "{\"kernel\":\"layernorm_fwd\",\"T\":\"bf16\",\"x@\":16,\"res\":null,\"res_out\":null,\"W\":\"f32\","
                "\"w\":null,\"b\":null,\"mean\":null,\"rstd\":null,\"N\":1,\"D\":96,\"G\":1,\"eps\":1e-06,"
                "\"rms\":0}\n");
  char *line = text;
  for (int i = 0; i < 3; i++) {
    char *nl = strchr(line, '\n'), shape[1024], kernel[64], err[512], want[512], got[512];
    *nl = 0;
    kt_arg back[13];
    ASSERT_EQ(shape_from_json(line, shape, sizeof shape, kernel, sizeof kernel, err, sizeof err), 0);
    ASSERT_STR_EQ(kernel, "layernorm_fwd");
    ASSERT_EQ(shape_args(k, shape, back, err, sizeof err), 0);
    ASSERT_STATUS(kt_kernel_key(k, calls[i], 13, want, sizeof want), KT_OK);
    ASSERT_STATUS(kt_kernel_key(k, back, 13, got, sizeof got), KT_OK);
    ASSERT_STR_EQ(got, want);
    ASSERT_EQ(back[11].v.f32 == calls[i][11].v.f32, 1);
    line = nl + 1;
  }
  /* An item too long is refused, not cut into another; a param's name of
  ** 64 characters (the most a spec gives) is taken. */
  static char big[600];
  char shape[1024], kernel[64], err[512];
  snprintf(big, sizeof big, "{\"kernel\":\"k\",\"T\":\"bf16%0400d\"}", 0);
  ASSERT_EQ(shape_from_json(big, shape, sizeof shape, kernel, sizeof kernel, err, sizeof err), -1);
  ASSERT_STR_EQ(err, "\"T...\": too long for a shape's item");
  snprintf(big, sizeof big, "{\"%064d\":1}", 0);
  ASSERT_EQ(shape_from_json(big, shape, sizeof shape, kernel, sizeof kernel, err, sizeof err), 0);
  snprintf(big, sizeof big, "%064d=1", 0);
  ASSERT_STR_EQ(shape, big);
  /* What a shape cannot hold is refused, never spliced into other items:
  ** a value or a name with a comma, '=' or '@', a byte offset out of range;
  ** numbers out of 64 bits are written so that shape_args refuses them. */
  static const struct {
    const char *line, *says;
  } bad[] = {
      {"{\"T\":\"bf16,N=5\"}", "\"T\": \"bf16,N=5\" is not a dtype name"},
      {"{\"T\":\"\"}", "\"T\": \"\" is not a dtype name"},
      {"{\"a,b\":1}", "\"a,b\": not a param name"},
      {"{\"N=4\":1}", "\"N=4\": not a param name"},
      {"{\"\":1}", "\"\": not a param name"},
      {"{\"@\":1}", "\"@\": not a param name"},
      {"{\"x@y\":1}", "\"x@y\": not a param name"},
      {"{\"x@\":1e300}", "\"x@\" must be a byte offset (a whole number from 0 to 4095)"},
      {"{\"x@\":-1}", "\"x@\" must be a byte offset (a whole number from 0 to 4095)"},
      {"{\"x@\":0.5}", "\"x@\" must be a byte offset (a whole number from 0 to 4095)"},
      {"{\"N\":4} {\"N\":5}", "expected a JSON object per line"},
      {"{\"kernel\":\"k123456789\"}", "\"kernel\" must be a string of at most 9 characters"},
  };
  char small[10];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    ASSERT_EQ(shape_from_json(bad[i].line, shape, sizeof shape, small, sizeof small, err, sizeof err), -1);
    ASSERT_STR_EQ(err, bad[i].says);
  }
  ASSERT_EQ(shape_from_json("{\"N\":1e300,\"D\":-9223372036854775808,\"G\":9223372036854775807}\n", shape,
                            sizeof shape, kernel, sizeof kernel, err, sizeof err),
            0);
  ASSERT_STR_EQ(shape, "N=1.0000000000000001e+300,D=-9223372036854775808,G=9.2233720368547758e+18");
  kt_arg a[13];
  ASSERT_EQ(shape_args(k, "N=1.0000000000000001e+300,D=64,G=1,T=bf16,W=f32,eps=0.1,rms=0", a, err, sizeof err), -1);
  ASSERT_STR_EQ(err, "N=1.0000000000000001e+300 is not an i32 (a whole number from -2147483648 to 2147483647)");
  kt_runtime_close(rt);
}

static char logged[1024];
/* A relative record path names the file in the working directory of the
** runtime's open: a process that changes directory after it records into
** the same file, never into one beside its new directory. */
static void a_relative_record_path_stays_where_it_was_opened(void) {
  char cwd[PATH_MAX], dir[600], path[700], text[1024];
  const char *d = t_tmpdir();
  ASSERT_TRUE(d && getcwd(cwd, sizeof cwd));
  snprintf(dir, sizeof dir, "%s", d);
  ASSERT_EQ(chdir(dir), 0);
  kt_runtime *rt = recording("calls.jsonl");
  ASSERT_EQ(chdir(cwd), 0);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", &k), KT_OK);
  kt_arg call[13] = LN(2 * GB, 0, 0, 0, 0, 64, 512, 1e-5f);
  char cfg[128];
  ASSERT_STATUS(kt_kernel_config_for(k, call, 13, cfg, sizeof cfg), KT_OK);
  kt_runtime_close(rt);
  ASSERT_EQ(access("calls.jsonl", F_OK), -1);
  snprintf(path, sizeof path, "%s/calls.jsonl", dir);
  FILE *f = fopen(path, "r");
  ASSERT_TRUE(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  ASSERT_CONTAINS(text, "\"N\":64,\"D\":512,");
  ASSERT_EQ(strchr(text, '\n') - text + 1, (long)n);
}

static void log_into(void *user, kt_log_level level, const char *msg) {
  (void)user;
  (void)level;
  snprintf(logged, sizeof logged, "%s", msg);
}

/* A record file that cannot be written is a warning, not a failed call. */
static void an_unwritable_record_is_a_warning(void) {
  kt_options o;
  t_offline_options(&o);
  o.no_cache = 1;
  o.record_path = "/nonexistent-dir/calls.jsonl";
  o.log_level = KT_LOG_WARN;
  o.log = log_into;
  kt_runtime *rt;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", &k), KT_OK);
  kt_arg a[13] = LN(2 * GB, 0, 5 * GB, 6 * GB, 0, 4096, 4096, 1e-5f);
  char cfg[128];
  ASSERT_STATUS(kt_kernel_config_for(k, a, 13, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(logged, "KTUNE_RECORD /nonexistent-dir/calls.jsonl: a missed key of layernorm_fwd is not recorded: "
                        "No such file or directory");
  kt_runtime_close(rt);
  /* A FIFO nothing reads: the call goes on (opening it to write would wait
  ** for a reader, for ever). */
  char fifo[800], out[256];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  snprintf(fifo, sizeof fifo, "%s/calls.fifo", dir);
  ASSERT_EQ(mkfifo(fifo, 0600), 0);
  o.record_path = fifo;
  logged[0] = 0;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", &k), KT_OK);
  ASSERT_STATUS(kt_kernel_config_for(k, a, 13, cfg, sizeof cfg), KT_OK);
  ASSERT_CONTAINS(logged, "calls.fifo: a missed key of layernorm_fwd is not recorded: No such device or address");
  kt_runtime_close(rt);
  /* The cache itself, or its -wal: lines appended there would damage it.
  ** Said once at the open; nothing is recorded, and the cache is whole. */
  char db[800], want[1024];
  snprintf(db, sizeof db, "%s/c.db", dir);
  o.no_cache = 0;
  o.cache_path = db;
  for (int i = 0; i < 2; i++) {
    snprintf(fifo, sizeof fifo, "%s%s", db, i ? "-wal" : "");
    o.record_path = fifo;
    logged[0] = 0;
    ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
    snprintf(want, sizeof want, "KTUNE_RECORD %s: it is a cache file; missed keys are not recorded", fifo);
    ASSERT_STR_EQ(logged, want);
    ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", &k), KT_OK);
    ASSERT_STATUS(kt_kernel_config_for(k, a, 13, cfg, sizeof cfg), KT_OK);
    ASSERT_STR_EQ(logged, want);
    kt_runtime_close(rt);
  }
  t_db_text(db, "PRAGMA integrity_check", out, sizeof out);
  ASSERT_STR_EQ(out, "ok\n");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

const kt_test t_record_tests[] = {
    {"record_missed_keys_are_recorded_once_and_read_back", missed_keys_are_recorded_once_and_read_back},
    {"record_an_unwritable_record_is_a_warning", an_unwritable_record_is_a_warning},
    {"record: a relative record path stays where the runtime was opened", a_relative_record_path_stays_where_it_was_opened},
    {NULL, NULL},
};
