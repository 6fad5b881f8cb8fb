/* The ktune CLI's offline commands, run as a user would ($KTUNE_BIN). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../tools/shape.h"
#include "../tools/tunejob.h"
#include "harness.h"
#include "ktune.h"

static void help_and_version(void) {
  char out[8192];
  ASSERT_EQ(t_sh(out, sizeof out, "%s --help", t_bin()), 0);
  ASSERT_CONTAINS(out, "usage: ktune COMMAND");
  ASSERT_CONTAINS(out, "compile SPEC...");
  ASSERT_EQ(t_sh(out, sizeof out, "%s --version", t_bin()), 0);
  ASSERT_STR_EQ(out, "ktune " KT_VERSION_STRING "\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --help", t_bin()), 0);
  ASSERT_CONTAINS(out, "usage: ktune compile SPEC...");
  ASSERT_EQ(t_sh(out, sizeof out, "%s", t_bin()), 2);
  ASSERT_CONTAINS(out, "usage: ktune COMMAND");
}

static void usage_errors(void) {
  char out[8192];
  ASSERT_EQ(t_sh(out, sizeof out, "%s frobnicate", t_bin()), 2);
  ASSERT_STR_EQ(out, "ktune: unknown command 'frobnicate'\nTry 'ktune --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile", t_bin()), 2);
  ASSERT_STR_EQ(out, "ktune compile: no spec given\nTry 'ktune compile --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile kernels_src/rmsnorm.json --arch", t_bin()), 2);
  ASSERT_STR_EQ(out, "ktune compile: option '--arch' needs a value\nTry 'ktune compile --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache ''", t_bin()), 2);
  ASSERT_STR_EQ(out, "ktune list: option '--cache' needs a value; it is empty\nTry 'ktune list --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s export -o '' --cache=", t_bin()), 2);
  ASSERT_STR_EQ(out, "ktune export: option '--output' needs a value; it is empty\nTry 'ktune export --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --frob x.json", t_bin()), 2);
  ASSERT_CONTAINS(out, "unknown option '--frob'");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm9 kernels_src/rmsnorm.json", t_bin()), 1);
  ASSERT_CONTAINS(out, "arch \"sm9\" is not of the form sm_90, sm_90a or sm_100f");
  /* An arch NVRTC does not compile for: one line, not one a variant. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_35 kernels_src/rmsnorm.json --cache /nonexistent/x.db", t_bin()),
            1);
  ASSERT_TRUE(!strncmp(out, "ktune compile: NVRTC 13.", 24));
  ASSERT_CONTAINS(out, " does not compile for sm_35 (it compiles for sm_75, ");
  ASSERT_TRUE(strchr(out, '\n') == out + strlen(out) - 1);
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_90 tests/specs/nope.json", t_bin()), 1);
  ASSERT_CONTAINS(out, "tests/specs/nope.json: cannot read: No such file or directory");
  /* Specs none of which loads leave no cache where none was; one that does
  ** not load beside one that does is said once. */
  const char *dir = t_tmpdir();
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_90 tests/specs/nope.json README.md --cache %s/none.db 2>&1",
                 t_bin(), dir),
            1);
  ASSERT_STR_EQ(out, "ktune compile: tests/specs/nope.json: cannot read: No such file or directory\n"
                     "ktune compile: README.md: line 1, column 1: expected a JSON value\n"
                     "0 variants compiled for sm_90, 0 failed, 2 not started (the errors above)\n");
  ASSERT_EQ(t_sh(out, sizeof out, "ls %s/none.db*", dir), 2);
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_90 README.md tests/specs/small.json --cache %s/one.db 2>&1 "
                 "| grep -c README.md", t_bin(), dir),
            0);
  ASSERT_STR_EQ(out, "1\n");
  char one[700];
  snprintf(one, sizeof one, "%s/one.db", dir);
  ASSERT_EQ(t_db_int(one, "SELECT count(*) FROM binaries"), 8);
  /* Without -o the cache is all compile makes: one it cannot write fails
  ** it before anything compiles; with -o it warns and writes the files. */
  ASSERT_EQ(t_sh(out, sizeof out, "mkdir %s/dir.db && %s compile --arch sm_90 tests/specs/small.json --cache %s/dir.db",
                 dir, t_bin(), dir),
            1);
  char want[1024];
  snprintf(want, sizeof want, "ktune compile: %s/dir.db: is a directory, not a cache file\n", dir);
  ASSERT_STR_EQ(out, want);
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_90 tests/specs/small.json --cache %s/dir.db -o %s/files 2>&1",
                 t_bin(), dir, dir),
            0);
  ASSERT_CONTAINS(out, "ktune: warn: running without a config cache: ");
  ASSERT_CONTAINS(out, "8 variants compiled for sm_90, 0 failed\n");
  ASSERT_EQ(t_sh(out, sizeof out, "ls %s/files | grep -c cubin", dir), 0);
  ASSERT_STR_EQ(out, "8\n");
  /* A shape too long to keep whole is refused, never tuned cut. */
  static char shape[4200];
  snprintf(shape, sizeof shape, "N=%04100d", 1);
  setenv("KT_TEST_SHAPE", shape, 1);
  ASSERT_EQ(t_sh(out, sizeof out, "%s tune tests/specs/small.json --shape \"$KT_TEST_SHAPE\" --cache /nonexistent/x.db",
                 t_bin()),
            2);
  unsetenv("KT_TEST_SHAPE");
  ASSERT_STR_EQ(out, "ktune tune: --shape N=00000000000000000000000000000000000000...: longer than 4095 characters\n"
                     "Try 'ktune tune --help'.\n");
}

static void compile_writes_cubins(void) {
  char out[8192];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_90 -o %s/cubins tests/specs/small.json", t_bin(), dir), 0);
  ASSERT_CONTAINS(out, "ok    rmsnorm_small.T=bf16.BLOCK=128.ROWS=1.VEC=1.HAS_RES=0  ");
  ASSERT_CONTAINS(out, "8 variants compiled for sm_90, 0 failed\n");
  char path[1024];
  struct stat sb;
  snprintf(path, sizeof path, "%s/cubins/rmsnorm_small.T=bf16.BLOCK=128.ROWS=1.VEC=8.HAS_RES=1.cubin", dir);
  ASSERT_EQ(stat(path, &sb), 0);
  /* An arch newer than every one NVRTC lists: PTX of its newest, said
  ** once, which a GPU of that arch loads as it loads a cubin. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_999 -o %s/ptx --cache %s/p.db tests/specs/small.json 2>&1",
                 t_bin(), dir, dir),
            0);
  ASSERT_CONTAINS(out, "ktune: warn: NVRTC 13.");
  ASSERT_CONTAINS(out, " does not compile for sm_999: kernels are compiled to PTX (compute_");
  ASSERT_CONTAINS(out, "8 variants compiled for sm_999, 0 failed\n");
  t_sh(out, sizeof out, "grep -c '^\\.target sm_' '%s/ptx/rmsnorm_small.T=bf16.BLOCK=128.ROWS=1.VEC=8.HAS_RES=1.cubin'",
       dir);
  ASSERT_STR_EQ(out, "1\n");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* Which headers a variant is built from does not hang on the directory
** ktune runs in: a quoted name that is not beside the source is not looked
** for in the working directory (it would be compiled in, unhashed, and its
** cubin served to every other process). A header of a subdirectory that
** names one of the source's directory gets that one, as the hash does. */
static void compile_ignores_the_working_directory(void) {
  char out[8192], abs[1024], exe[PATH_MAX];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir && realpath(t_bin(), exe));
  t_sh(out, sizeof out, "mkdir -p '%s/src/sub' '%s/cwd' && printf '#define V 7\\n' > '%s/cwd/v.cuh' && "
       "printf '#include \"sub/s.cuh\"\\n#include \"v.cuh\"\\ntemplate <int B> __global__ void k(float *y) "
       "{ *y = V + W; }\\n' > '%s/src/k.cu' && printf '#include \"w.cuh\"\\n' > '%s/src/sub/s.cuh' && "
       "printf '#define W 1\\n' > '%s/src/w.cuh'", dir, dir, dir, dir, dir, dir);
  ASSERT_TRUE(t_write_file(dir, "src/k.json",
                           "{\"name\": \"k\", \"source\": \"k.cu\", \"entry\": \"k\", \"template\": [\"B\"],\n"
                           " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": "
                           "\"out\", \"extent\": \"1\"}],\n \"config\": {\"B\": [32]}, \"default\": {\"B\": 32}, "
                           "\"grid\": 1, \"block\": \"B\"}\n",
                           abs, sizeof abs) == 0);
  ASSERT_EQ(t_sh(out, sizeof out, "cd '%s/cwd' && '%s' compile --arch sm_90 --cache '%s/c.db' ../src/k.json 2>&1", dir,
                 exe, dir),
            1);
  ASSERT_CONTAINS(out, "/src/k.cu(2): catastrophic error: cannot open source file \"v.cuh\"");
  t_sh(out, sizeof out, "mv '%s/cwd/v.cuh' '%s/src/v.cuh'", dir, dir);
  ASSERT_EQ(t_sh(out, sizeof out, "cd '%s/cwd' && '%s' compile --arch sm_90 --cache '%s/c.db' ../src/k.json 2>&1", dir,
                 exe, dir),
            0);
  ASSERT_CONTAINS(out, "1 variants compiled for sm_90, 0 failed\n");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* An export's cubins run on the GPU as they are: import adds them only
** when --binaries says the export is trusted; otherwise it counts them. */
static void import_adds_cubins_only_when_asked(void) {
  char out[8192];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_90 --cache %s/a.db tests/specs/small.json", t_bin(), dir), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s export --binaries -o %s/a.json --cache %s/a.db", t_bin(), dir, dir), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s import %s/a.json --cache %s/b.db", t_bin(), dir, dir), 0);
  ASSERT_STR_EQ(out,
                "0 added, 0 kept, 0 replaced, 0 binaries added, 8 left out (--binaries adds an export's cubins)\n");
  char db[1024];
  snprintf(db, sizeof db, "%s/b.db", dir);
  ASSERT_EQ(t_db_int(db, "SELECT count(*) FROM binaries"), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s import --binaries --json %s/a.json --cache %s/b.db", t_bin(), dir, dir), 0);
  ASSERT_STR_EQ(out, "{\"added\":0,\"kept\":0,\"replaced\":0,\"binaries_added\":8,\"binaries_left_out\":0}\n");
  ASSERT_EQ(t_db_int(db, "SELECT count(*) FROM binaries"), 8);
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

static void gpu_commands_without_a_gpu(void) {
  if (t_have_driver()) SKIP("a CUDA driver is present; this checks the behaviour without one");
  char out[8192];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  ASSERT_EQ(t_sh(out, sizeof out, "%s info --cache %s/info.db", t_bin(), dir), 1);
  ASSERT_CONTAINS(out, "ktune      " KT_VERSION_STRING "\n");
  ASSERT_CONTAINS(out, "nvrtc      13.");
  ASSERT_CONTAINS(out, "driver     missing: cannot load the CUDA driver (libcuda.so.1)");
  ASSERT_CONTAINS(out, "/info.db: no cache there (nothing was created)\n");
  /* Once there is one, info describes it. */
  char db[700];
  snprintf(db, sizeof db, "%s/info.db", dir);
  ASSERT_EQ(t_empty_cache(db, out, sizeof out), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s info --cache %s/info.db", t_bin(), dir), 1);
  ASSERT_CONTAINS(out, "/info.db  (");
  ASSERT_CONTAINS(out, " KiB: 0 configs, 0 trials, 0 binaries, 0 quarantined)\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile kernels_src/rmsnorm.json", t_bin()), 1);
  ASSERT_CONTAINS(out, "cannot load the CUDA driver (libcuda.so.1)");
  ASSERT_CONTAINS(out, "(give --arch to compile without a GPU)");
  ASSERT_EQ(t_sh(out, sizeof out, "%s demo", t_bin()), 1);
  ASSERT_CONTAINS(out, "ktune demo: needs a GPU: cannot load the CUDA driver");
}

/* dir/in.json, an export to import, opened for writing; its path into
** json. */
static FILE *in_json(const char *dir, char *json, size_t n) {
  snprintf(json, n, "%s/in.json", dir);
  return fopen(json, "w");
}

/* The cache commands on a cache filled through an import, as an engineer
** moving results between machines would. */
static void cache_commands(void) {
  char out[16384];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  char json[700];
  FILE *f = in_json(dir, json, sizeof json);
  ASSERT_TRUE(f);
  fputs("{\"format\": \"ktune-cache\", \"version\": 1, \"configs\": [\n"
        " {\"kernel\": \"rmsnorm_fwd\", \"spec_hash\": \"0000000000000001\", \"device\": \"NVIDIA H100 80GB HBM3/sm_90/132\",\n"
        "  \"key\": {\"D\":256}, \"config\": {\"BLOCK\":128,\"ROWS\":4,\"VEC\":8}, \"time_us\": 4.25, \"candidates\": 40, \"rejected\": 3},\n"
        " {\"kernel\": \"rmsnorm_fwd\", \"spec_hash\": \"0000000000000001\", \"device\": \"NVIDIA H100 80GB HBM3/sm_90/132\",\n"
        "  \"key\": {\"D\":4096}, \"config\": {\"BLOCK\":512,\"ROWS\":1,\"VEC\":8}, \"time_us\": 30.5}]}\n", f);
  fclose(f);
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache %s/c.db", t_bin(), dir), 1);
  ASSERT_CONTAINS(out, "/c.db: no cache there (nothing was created)");
  /* Nothing to collect where there is nothing; and gc makes nothing. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s gc --cache %s/c.db", t_bin(), dir), 1);
  ASSERT_CONTAINS(out, "ktune gc: ");
  ASSERT_CONTAINS(out, "/c.db: no cache there (nothing was created)\n");
  char db[700];
  struct stat sb;
  snprintf(db, sizeof db, "%s/c.db", dir);
  ASSERT_EQ(stat(db, &sb), -1);
  ASSERT_EQ(t_empty_cache(db, out, sizeof out), 0);
  ASSERT_STR_EQ(out, "0 added, 0 kept, 0 replaced, 0 binaries added\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache %s/c.db", t_bin(), dir), 0);
  ASSERT_CONTAINS(out, "no configs cached in ");
  ASSERT_EQ(t_sh(out, sizeof out, "%s import %s --cache %s/c.db", t_bin(), json, dir), 0);
  ASSERT_STR_EQ(out, "2 added, 0 kept, 0 replaced, 0 binaries added\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s import %s --cache %s/c.db", t_bin(), json, dir), 0);
  ASSERT_STR_EQ(out, "0 added, 2 kept, 0 replaced, 0 binaries added\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache %s/c.db", t_bin(), dir), 0);
  /* Columns as wide as their widest cell, the time right-aligned. */
  ASSERT_CONTAINS(out, "kernel       device                           key         config                          "
                       "time_us  age  source\n");
  ASSERT_CONTAINS(out, "  {\"D\":256}   {\"BLOCK\":128,\"ROWS\":4,\"VEC\":8}     4.25  ");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list rmsnorm_fwd --json --cache %s/c.db", t_bin(), dir), 0);
  ASSERT_CONTAINS(out, "\"key\":{\"D\":256},\"config\":{\"BLOCK\":128,\"ROWS\":4,\"VEC\":8},\"time_us\":4.25,"
                       "\"candidates\":40,\"rejected\":3");
  ASSERT_EQ(t_sh(out, sizeof out, "%s show rmsnorm_fwd --cache %s/c.db", t_bin(), dir), 0);
  ASSERT_CONTAINS(out, "40 candidates, 3 rejected");
  ASSERT_EQ(t_sh(out, sizeof out, "%s export -o %s/out.json --cache %s/c.db", t_bin(), dir, dir), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s import %s/out.json --cache %s/d.db", t_bin(), dir, dir), 0);
  ASSERT_STR_EQ(out, "2 added, 0 kept, 0 replaced, 0 binaries added\n");
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_CACHE=%s/d.db %s export", dir, t_bin()), 0);
  ASSERT_CONTAINS(out, "{\"format\": \"ktune-cache\", \"version\": 1,");
  ASSERT_CONTAINS(out, "\"time_us\":30.5,");
  /* A write that fails names the file and why. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s export -o /dev/full --cache %s/d.db", t_bin(), dir), 1);
  ASSERT_STR_EQ(out, "ktune export: /dev/full: cannot write: No space left on device\n");
  ASSERT_EQ(t_sh(out, sizeof out, "{ %s export --cache %s/d.db > /dev/full; } 2>&1", t_bin(), dir), 1);
  ASSERT_STR_EQ(out, "ktune export: standard output: cannot write: No space left on device\n");
  /* The bundled spec's hash is not 0000000000000001: both rows are stale. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s gc kernels_src/rmsnorm.json --cache %s/c.db", t_bin(), dir), 0);
  ASSERT_STR_EQ(out, "2 stale configs removed, 0 unreferenced binaries removed\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s import %s/nope.json --cache %s/c.db", t_bin(), dir, dir), 1);
  ASSERT_CONTAINS(out, "nope.json: cannot read: No such file or directory");
  /* An import that cannot read its file leaves no cache where none was. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s import %s/nope.json --cache %s/new.db", t_bin(), dir, dir), 1);
  char want[700];
  snprintf(want, sizeof want, "ktune import: %s/nope.json: cannot read: No such file or directory\n", dir);
  ASSERT_STR_EQ(out, want);
  ASSERT_EQ(t_sh(out, sizeof out, "%s import %s --cache %s/new.db", t_bin(), dir, dir), 1);
  ASSERT_CONTAINS(out, ": cannot read: not a regular file\n");
  /* A FIFO with no writer is refused at once, not waited on. */
  ASSERT_EQ(t_sh(out, sizeof out, "mkfifo %s/fifo && %s import %s/fifo --cache %s/new.db", dir, t_bin(), dir, dir), 1);
  snprintf(want, sizeof want, "ktune import: %s/fifo: cannot read: not a regular file\n", dir);
  ASSERT_STR_EQ(out, want);
  ASSERT_EQ(t_sh(out, sizeof out, "ls %s/new.db*", dir), 2);
  /* Nor does a file that is not a whole export: it goes into a scratch
  ** cache first, which is removed; not in a folder not there yet, not
  ** from standard input. */
  static const char not_export[] =
      ": not a ktune cache export (expected \"format\": \"ktune-cache\", \"version\": 1)\n";
  ASSERT_EQ(t_sh(out, sizeof out, "mkdir %s/tmp && TMPDIR=%s/tmp %s import kernels_src/rmsnorm.json --cache %s/new/c.db",
                 dir, dir, t_bin(), dir),
            1);
  snprintf(want, sizeof want, "ktune import: kernels_src/rmsnorm.json%s", not_export);
  ASSERT_STR_EQ(out, want);
  ASSERT_EQ(t_sh(out, sizeof out, "TMPDIR=%s/tmp %s import - --cache %s/new.db < kernels_src/rmsnorm.json", dir, t_bin(),
                 dir),
            1);
  snprintf(want, sizeof want, "ktune import: standard input%s", not_export);
  ASSERT_STR_EQ(out, want);
  ASSERT_EQ(t_sh(out, sizeof out, "ls -A %s/tmp", dir), 0);
  ASSERT_STR_EQ(out, "");
  ASSERT_EQ(t_sh(out, sizeof out, "ls -d %s/new %s/new.db*", dir, dir), 2);
  /* A whole one from standard input makes the cache, the rows as they
  ** were exported. */
  ASSERT_EQ(t_sh(out, sizeof out, "TMPDIR=%s/tmp %s import - --cache %s/e.db < %s/out.json", dir, t_bin(), dir, dir), 0);
  ASSERT_STR_EQ(out, "2 added, 0 kept, 0 replaced, 0 binaries added\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s export --cache %s/e.db | cmp - %s/out.json && ls -A %s/tmp", t_bin(), dir, dir, dir),
            0);
  ASSERT_STR_EQ(out, "");
  /* Where no scratch cache can be made, straight into the new one. */
  ASSERT_EQ(t_sh(out, sizeof out, "TMPDIR=%s/nope %s import %s/out.json --cache %s/f.db", dir, t_bin(), dir, dir), 0);
  ASSERT_STR_EQ(out, "2 added, 0 kept, 0 replaced, 0 binaries added\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s import kernels_src/rmsnorm.json --cache %s/c.db", t_bin(), dir), 1);
  ASSERT_CONTAINS(out, "not a ktune cache export");
  ASSERT_EQ(t_sh(out, sizeof out, "%s show --cache %s/c.db", t_bin(), dir), 2);
  ASSERT_CONTAINS(out, "ktune show: no kernel given");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache", t_bin()), 2);
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache %s", t_bin(), dir), 1);
  ASSERT_CONTAINS(out, ": is a directory, not a cache file");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* The bundled kernels compile for given shapes without a GPU; a derived
** constant outside its declared values and a specialized param without
** shapes are refused with a message. */
static void compile_for_shapes(void) {
  char out[16384];
  const char *dir = t_tmpdir();
  ASSERT_EQ(t_sh(out, sizeof out,
                 "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 kernels_src/masked_softmax.json "
                 "--shape 'N=7,L=1001,T=bf16,x@2'",
                 dir, t_bin()),
            0);
  /* L=1001 is odd and x is offset: every variant is the guarded path. */
  ASSERT_CONTAINS(out, "ALIGNED=0");
  ASSERT_TRUE(!strstr(out, "ALIGNED=1"));
  ASSERT_CONTAINS(out, " variants compiled for sm_90, 0 failed");
  ASSERT_EQ(t_sh(out, sizeof out,
                 "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 tests/specs/chunk_state_fwd_n.json "
                 "--shape 'BH=2,N=3,C=32,DK=64,DV=32,T=bf16'",
                 dir, t_bin()),
            0);
  ASSERT_CONTAINS(out, ".NT=128.N=3 ");
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 tests/specs/chunk_state_fwd_n.json",
                 dir, t_bin()),
            1);
  ASSERT_CONTAINS(out, "param N is specialized");
  ASSERT_CONTAINS(out, "\n0 variants compiled for sm_90, 0 failed, 1 not started (the error above)\n");
  /* The norms' spaces hold millions of variants: refused at once. */
  ASSERT_EQ(t_sh(out, sizeof out,
                 "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 kernels_src/layernorm_bwd.json kernels_src/layernorm_fwd.json",
                 dir, t_bin()),
            1);
  ASSERT_STR_EQ(out,
                "ktune compile: layernorm_bwd: the space holds more than 65536 variants (every type, config and "
                "constant value); compile those of given shapes\n"
                "ktune compile: layernorm_fwd: the space holds more than 65536 variants (every type, config and "
                "constant value); compile those of given shapes\n"
                "0 variants compiled for sm_90, 0 failed, 2 not started (the errors above)\n");
  ASSERT_EQ(t_sh(out, sizeof out,
                 "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 kernels_src/chunk_state_fwd.json "
                 "--shape 'BH=2,N=3,C=48,DK=64,DV=64,T=bf16'",
                 dir, t_bin()),
            1);
  ASSERT_CONTAINS(out, "derived.CC = 48 (\"C\") is not one of its declared values 16, 32, 64, 128");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* The norm backward's pipeline (STAGES > 0) is compiled only where it can
** run: on sm_80 and later, with 16-byte vectors; its programs of clusters
** (CL > 1) only on sm_90 and later, with whole vectors in a block's share of
** the row; and a partial-row buffer that is not 8-byte aligned leaves only
** scalar configs (VEC = 1). A tile is read again from its slot (REREAD = 1)
** only in the pipeline, by threads of 16 values or more. Programs of blocks
** that split the rows (MG > 1) only on sm_90, in the pipeline, with the sums
** in registers, not beside CL > 1, and only where there are sums: none for
** a frozen weight (read, its dw not summed: HAS_DW = 0). A dw to sum
** without a weight is refused. */
static void compile_norm_pipeline_where_it_runs(void) {
  static char out[32768];
  const char *dir = t_tmpdir();
  const char *shape = "N=64,D=256,G=1,P=8,T=bf16,W=bf16,rms=1,mean=null,db_part=null,dres=null";
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 kernels_src/layernorm_bwd.json --shape '%s'",
                 dir, t_bin(), shape),
            0);
  ASSERT_CONTAINS(out, ".VEC=8.ITEMS=1.STAGES=3.");
  ASSERT_TRUE(!strstr(out, ".VEC=4.ITEMS=2.STAGES=3.")); /* 8-byte vectors */
  ASSERT_CONTAINS(out, "BLOCK=32.ROWS=1.VEC=2.ITEMS=1.STAGES=0.ACC=0.CL=4."); /* 4 x 64 columns */
  ASSERT_CONTAINS(out, "BLOCK=32.ROWS=1.VEC=4.ITEMS=1.STAGES=0.ACC=0.CL=2.");
  ASSERT_CONTAINS(out, "BLOCK=64.ROWS=2.VEC=4.ITEMS=1.STAGES=0.ACC=0.CL=2."); /* a tile of 2 rows */
  ASSERT_TRUE(!strstr(out, "BLOCK=64.ROWS=1.VEC=4.ITEMS=1.STAGES=0.ACC=0.CL=2.")); /* 256 threads' vectors */
  ASSERT_CONTAINS(out, "BLOCK=32.ROWS=1.VEC=8.ITEMS=1.STAGES=3.ACC=0.CL=1.MG=2.");
  ASSERT_CONTAINS(out, "BLOCK=64.ROWS=2.VEC=8.ITEMS=1.STAGES=2.ACC=0.CL=1.MG=4.");
  ASSERT_TRUE(!strstr(out, ".STAGES=0.ACC=0.CL=1.MG=2.") && !strstr(out, ".STAGES=0.ACC=0.CL=1.MG=4."));
  ASSERT_TRUE(!strstr(out, ".ACC=1.CL=1.MG=2.") && !strstr(out, ".CL=2.MG=2.") && !strstr(out, ".CL=4.MG=2."));
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 kernels_src/layernorm_bwd.json --shape '%s'",
                 dir, t_bin(), "N=64,D=1000,G=1,P=8,T=bf16,W=bf16,rms=1,mean=null,db_part=null,dres=null"),
            0);
  ASSERT_CONTAINS(out, ".VEC=2.ITEMS=4.STAGES=0.ACC=0.CL=4."); /* 4 x 250 columns */
  ASSERT_TRUE(!strstr(out, ".VEC=4.ITEMS=2.STAGES=0.ACC=0.CL=4.")); /* 250 is not whole vectors of 4 */
  /* A tile read again from its slot: pipelined, 16 or more values a thread. */
  ASSERT_CONTAINS(out, "BLOCK=64.ROWS=1.VEC=8.ITEMS=2.STAGES=2.ACC=0.CL=1.MG=1.REREAD=1.");
  ASSERT_TRUE(!strstr(out, "BLOCK=64.ROWS=1.VEC=8.ITEMS=2.STAGES=0.ACC=0.CL=1.MG=1.REREAD=1."));
  ASSERT_TRUE(!strstr(out, "BLOCK=128.ROWS=1.VEC=8.ITEMS=1.STAGES=2.ACC=0.CL=1.MG=1.REREAD=1.")); /* 8 values */
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 kernels_src/layernorm_bwd.json --shape '%s'",
                 dir, t_bin(), "N=64,D=256,G=1,P=8,T=bf16,W=bf16,rms=1,mean=null,w=null,dw_part=null,db_part=null,dres=null"),
            0);
  ASSERT_CONTAINS(out, ".VEC=8.ITEMS=1.STAGES=3.ACC=0.CL=1.MG=1.");
  ASSERT_TRUE(!strstr(out, ".MG=2.") && !strstr(out, ".MG=4.")); /* no sums to merge */
  /* A frozen weight: read for dx (HAS_WEIGHT), no dw summed (HAS_DW = 0), so
  ** nothing to merge or keep in shared memory either. */
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 kernels_src/layernorm_bwd.json --shape '%s'",
                 dir, t_bin(), "N=64,D=256,G=1,P=8,T=bf16,W=bf16,rms=1,mean=null,dw_part=null,db_part=null,dres=null"),
            0);
  ASSERT_CONTAINS(out, ".HAS_WEIGHT=1.HAS_DW=0.HAS_BIAS=0.");
  ASSERT_TRUE(!strstr(out, ".HAS_DW=1.") && !strstr(out, ".MG=2.") && !strstr(out, ".MG=4.") && !strstr(out, ".ACC=1."));
  /* dw summed without a weight to read is no call the kernel takes. */
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 kernels_src/layernorm_bwd.json --shape '%s'",
                 dir, t_bin(), "N=64,D=256,G=1,P=8,T=bf16,W=bf16,rms=1,mean=null,w=null,db_part=null,dres=null"),
            1);
  ASSERT_CONTAINS(out, "layernorm_bwd: no config satisfies the constraints for this call");
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_CACHE=%s/c.db %s compile --arch sm_75 kernels_src/layernorm_bwd.json --shape '%s'",
                 dir, t_bin(), shape),
            0);
  ASSERT_CONTAINS(out, ".VEC=8.ITEMS=1.STAGES=0.");
  ASSERT_TRUE(!strstr(out, "STAGES=2") && !strstr(out, "STAGES=3") && !strstr(out, "STAGES=4"));
  ASSERT_TRUE(!strstr(out, ".CL=2.") && !strstr(out, ".CL=4.")); /* clusters need sm_90 */
  ASSERT_TRUE(!strstr(out, ".MG=2.") && !strstr(out, ".MG=4."));
  ASSERT_EQ(t_sh(out, sizeof out,
                 "KTUNE_CACHE=%s/c.db %s compile --arch sm_90 kernels_src/layernorm_bwd.json --shape '%s,dw_part@4'",
                 dir, t_bin(), shape),
            0);
  ASSERT_CONTAINS(out, ".VEC=1.");
  ASSERT_TRUE(!strstr(out, ".VEC=2.") && !strstr(out, ".VEC=4.") && !strstr(out, ".VEC=8."));
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* layernorm_bwd_row spreads several rows over a block's segments (ROWS) and,
** on sm_90, over a cluster of blocks (MG, up to 8, only where there are
** sums to merge), ROWS * MG at most N's power-of-two bucket; one row gets
** neither, and a cluster that splits the columns (CL) has one segment. */
static void compile_norm_row_spreads_rows(void) {
  static char out[32768];
  const char *dir = t_tmpdir();
  const char *cmd = "KTUNE_CACHE=%s/c.db %s compile --arch %s kernels_src/layernorm_bwd_row.json --shape '%s'";
  const char *rows = "G=1,D=64,T=bf16,W=bf16,rms=1,mean=null,db=null,dres=null";
  char shape[256];
  snprintf(shape, sizeof shape, "N=7,%s", rows);
  ASSERT_EQ(t_sh(out, sizeof out, cmd, dir, t_bin(), "sm_90", shape), 0);
  ASSERT_CONTAINS(out, "BLOCK=256.ROWS=8.VEC=2.ITEMS=1.STAGES=0.CL=1.MG=1.");
  ASSERT_CONTAINS(out, "BLOCK=128.ROWS=4.VEC=2.ITEMS=1.STAGES=0.CL=1.MG=2.");
  ASSERT_CONTAINS(out, "BLOCK=32.ROWS=1.VEC=2.ITEMS=1.STAGES=0.CL=1.MG=8.");
  ASSERT_TRUE(!strstr(out, "BLOCK=128.ROWS=4.VEC=2.ITEMS=1.STAGES=0.CL=1.MG=4.")); /* 16 segments > 8 */
  ASSERT_CONTAINS(out, "BLOCK=32.ROWS=1.VEC=1.ITEMS=1.STAGES=0.CL=2.MG=1.");
  ASSERT_TRUE(!strstr(out, ".CL=2.MG=2.") && !strstr(out, "ROWS=2.VEC=1.ITEMS=1.STAGES=0.CL=2."));
  ASSERT_EQ(t_sh(out, sizeof out, cmd, dir, t_bin(), "sm_75", shape), 0);
  ASSERT_CONTAINS(out, "BLOCK=256.ROWS=8.VEC=2.ITEMS=1.STAGES=0.CL=1.MG=1.");
  ASSERT_TRUE(!strstr(out, ".MG=2.") && !strstr(out, ".MG=8.") && !strstr(out, ".CL=2."));
  snprintf(shape, sizeof shape, "N=8,%s,w=null,dw=null", rows);
  ASSERT_EQ(t_sh(out, sizeof out, cmd, dir, t_bin(), "sm_90", shape), 0);
  ASSERT_CONTAINS(out, "BLOCK=256.ROWS=8.VEC=2.ITEMS=1.STAGES=0.CL=1.MG=1.");
  ASSERT_TRUE(!strstr(out, ".MG=2.") && !strstr(out, ".MG=4.") && !strstr(out, ".MG=8.")); /* no sums */
  snprintf(shape, sizeof shape, "N=1,%s", rows);
  ASSERT_EQ(t_sh(out, sizeof out, cmd, dir, t_bin(), "sm_90", shape), 0);
  ASSERT_CONTAINS(out, "BLOCK=64.ROWS=1.VEC=1.ITEMS=1.STAGES=0.CL=1.MG=1.");
  ASSERT_TRUE(!strstr(out, ".ROWS=2.") && !strstr(out, ".ROWS=8.") && !strstr(out, ".MG=2."));
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* docs/embedding.md's C program compiles as printed, and without a GPU says
** what is missing and exits 2 (with one, it runs and prints its sums). */
static void embedding_example_compiles(void) {
  char out[16384];
  const char *dir = t_tmpdir();
  ASSERT_EQ(t_sh(out, sizeof out,
                 "awk '/^## A complete C program/{f=1} f&&/^```c$/{p=1;next} p&&/^```$/{exit} p' docs/embedding.md "
                 "> %s/example.c && test -s %s/example.c",
                 dir, dir),
            0);
  ASSERT_EQ(t_sh(out, sizeof out,
                 "cc -std=c11 -Wall -Wextra -Werror -Iruntime -o %s/example %s/example.c build/libktune.a "
                 "$(pkg-config --libs sqlite3 libcjson 2>/dev/null || echo -lsqlite3 -lcjson) -ldl -lpthread -lm",
                 dir, dir),
            0);
  int rc = t_sh(out, sizeof out, "KTUNE_CACHE=%s/e.db %s/example", dir, dir);
  if (t_have_driver()) {
    ASSERT_TRUE(rc == 0 || rc == 2);
  } else {
    ASSERT_EQ(rc, 2);
    ASSERT_CONTAINS(out, "ktune: ");
  }
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* ktune tune and bench check their arguments and shapes before any GPU
** work, with messages that name the problem; without a GPU they say what
** is missing and exit 1. */
static void tune_arguments(void) {
  char out[16384];
  const char *dir = t_tmpdir();
  ASSERT_EQ(t_sh(out, sizeof out, "%s tune", t_bin()), 2);
  ASSERT_CONTAINS(out, "ktune tune: no spec given");
  ASSERT_EQ(t_sh(out, sizeof out, "%s tune kernels_src/masked_softmax.json", t_bin()), 2);
  ASSERT_CONTAINS(out, "no shape given: use --shape or --shapes");
  ASSERT_EQ(t_sh(out, sizeof out, "%s tune kernels_src/masked_softmax.json --shape 'N=1,L=5,T=bf16' --strategy best", t_bin()), 2);
  ASSERT_CONTAINS(out, "--strategy must be exhaustive, random or local");
  ASSERT_EQ(t_sh(out, sizeof out, "%s tune kernels_src/masked_softmax.json --shape 'N=1,L=5,T=bf16' --budget -1", t_bin()), 2);
  ASSERT_CONTAINS(out, "--budget needs a number of seconds > 0");
  ASSERT_EQ(t_sh(out, sizeof out, "%s tune kernels_src/masked_softmax.json --shape 'N=1,L=5,T=bf16' --devices 0,x", t_bin()), 2);
  ASSERT_CONTAINS(out, "--devices takes a list such as 0,1 or all");
  ASSERT_EQ(t_sh(out, sizeof out, "%s tune kernels_src/masked_softmax.json --shape 'N=1,T=bf16'", t_bin()), 2);
  ASSERT_CONTAINS(out, "L is in the tuning key; give its value");
  ASSERT_EQ(t_sh(out, sizeof out, "%s tune kernels_src/masked_softmax.json --shape 'N=1,L=5,T=bf16' --json --plain", t_bin()), 2);
  ASSERT_CONTAINS(out, "--json and --plain exclude each other");
  /* A shapes file: errors name the file and line. */
  ASSERT_EQ(t_sh(out, sizeof out,
                 "printf '# calls\n{\"kernel\": \"masked_softmax\", \"N\": 4, \"L\": 9, \"T\": \"bf16\"}\n"
                 "{\"N\": [1]}\nnot json\n{\"kernel\": \"nope\", \"N\": 1}\n' > %s/s.jsonl && "
                 "%s tune kernels_src/masked_softmax.json --shapes %s/s.jsonl",
                 dir, t_bin(), dir),
            2);
  ASSERT_CONTAINS(out, "s.jsonl:3: \"N\": expected a number, a dtype string or null");
  ASSERT_CONTAINS(out, "s.jsonl:4: expected a JSON object per line");
  ASSERT_CONTAINS(out, "s.jsonl:5: kernel \"nope\" is none of the specs given");
  /* A line too long or holding a NUL byte is refused whole, as one line. */
  ASSERT_EQ(t_sh(out, sizeof out,
                 "{ printf '{\"N\": 4, \"L\": 9, \"T\": \"'; head -c 20000 /dev/zero | tr '\\0' x; "
                 "printf '\"}\\n{\"N\": 1, \"T\": \"bf1\\0006\"}\\n{\"N\": [1]}\\n'; } > %s/l.jsonl && "
                 "%s tune kernels_src/masked_softmax.json --shapes %s/l.jsonl",
                 dir, t_bin(), dir),
            2);
  ASSERT_CONTAINS(out, "l.jsonl:1: longer than 16384 bytes\n");
  ASSERT_CONTAINS(out, "l.jsonl:2: a NUL byte in the line\n");
  ASSERT_CONTAINS(out, "l.jsonl:3: \"N\": expected a number, a dtype string or null\n");
  /* Zeros without a line end are no text: read no further than a line's
  ** bound (not the 1 GiB a file may hold), and the lines after are not
  ** read. A NUL byte past the bound of a long line counts too. */
  ASSERT_EQ(t_sh(out, sizeof out,
                 "k=$(realpath %s); s=$PWD/kernels_src/masked_softmax.json; cd %s && "
                 "{ printf '{\"N\": [2]}\\n'; head -c 20000 /dev/zero; printf '\\n{\"N\": [3]}\\n'; } > z.jsonl && "
                 "{ head -c 16384 /dev/zero | tr '\\0' x; head -c 10 /dev/zero; printf '\\n{\"N\": [3]}\\n'; } > y.jsonl"
                 " && { $k tune $s --shapes z.jsonl; $k tune $s --shapes y.jsonl; } 2>&1",
                 t_bin(), dir),
            2);
  ASSERT_STR_EQ(out, "ktune tune: z.jsonl:1: \"N\": expected a number, a dtype string or null\n"
                     "ktune tune: z.jsonl:2: a NUL byte and no line end in 16384 bytes: not a text file; the rest is "
                     "not read\n"
                     "ktune tune: y.jsonl:1: a NUL byte and no line end in 16384 bytes: not a text file; the rest is "
                     "not read\n");
  ASSERT_EQ(t_sh(out, sizeof out, "timeout 10 %s tune kernels_src/masked_softmax.json --shapes /dev/zero", t_bin()), 2);
  ASSERT_STR_EQ(out, "ktune tune: /dev/zero:1: a NUL byte and no line end in 16384 bytes: not a text file; the rest "
                     "is not read\n");
  /* A file that is no shapes file says its first 20 bad lines, not all. */
  ASSERT_EQ(t_sh(out, sizeof out,
                 "k=$(realpath %s); s=$PWD/kernels_src/masked_softmax.json; cd %s && seq 1 30 > n.jsonl && "
                 "$k tune $s --shapes n.jsonl 2>&1 | grep -c 'expected a JSON object per line'; "
                 "$k tune $s --shapes n.jsonl 2>&1 | tail -n 2",
                 t_bin(), dir),
            0);
  ASSERT_STR_EQ(out, "20\nktune tune: n.jsonl:20: expected a JSON object per line\n"
                     "ktune tune: n.jsonl: 20 lines with errors; the lines after line 20 are not read\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s tune kernels_src/masked_softmax.json --shapes %s/none.jsonl", t_bin(), dir), 2);
  ASSERT_CONTAINS(out, "none.jsonl: No such file or directory");
  ASSERT_EQ(t_sh(out, sizeof out, "%s bench kernels_src/masked_softmax.json", t_bin()), 2);
  ASSERT_CONTAINS(out, "no --shape given");
  if (!t_have_driver()) {
    ASSERT_EQ(t_sh(out, sizeof out,
                   "%s tune kernels_src/masked_softmax.json --shape 'N=1,L=5,T=bf16' --cache %s/c.db", t_bin(), dir),
              1);
    ASSERT_CONTAINS(out, "cannot load the CUDA driver");
    ASSERT_EQ(t_sh(out, sizeof out, "%s bench kernels_src/masked_softmax.json --shape 'N=1,L=5,T=bf16'", t_bin()), 1);
    ASSERT_CONTAINS(out, "cannot load the CUDA driver");
  }
  /* The bundled shapes file fits the bundled specs: all of it is checked
  ** (and keys computed) before the GPU is looked for. So is one written
  ** with CRLF ends and a byte-order mark, blank lines and comments among
  ** its calls. */
  if (!t_have_driver()) {
    ASSERT_EQ(t_sh(out, sizeof out,
                   "printf '\\357\\273\\277{\"N\": 4, \"L\": 9, \"T\": \"bf16\"}\\r\\n\\r\\n  \\r\\n"
                   "# calls\\r\\n{\"N\": 8, \"L\": 9, \"T\": \"bf16\"}\\r\\n' > %s/crlf.jsonl && "
                   "%s tune kernels_src/masked_softmax.json --shapes %s/crlf.jsonl --cache %s/c.db",
                   dir, t_bin(), dir, dir),
              1);
    ASSERT_CONTAINS(out, "cannot load the CUDA driver");
    ASSERT_EQ(t_sh(out, sizeof out, "%s tune kernels_src/*.json --shapes tests/fixtures/shapes.jsonl --cache %s/c.db",
                   t_bin(), dir),
              1);
    ASSERT_CONTAINS(out, "cannot load the CUDA driver");
  }
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* The host conversions every GPU test, the demo and the synthetic inputs
** use: exact bit patterns, ties to even, overflow, subnormals, NaN. */
static void host_dtype_conversions(void) {
  uint16_t h[8];
  static const struct { double v; uint16_t f16, bf16; } cases[] = {
      {1.0, 0x3c00, 0x3f80},
      {-2.5, 0xc100, 0xc020},
      {65504.0, 0x7bff, 0x4780},          /* bf16: rounds up to 65536 */
      {65520.0, 0x7c00, 0x4780},          /* f16: rounds past the largest finite */
      {5.960464477539063e-08, 0x0001, 0x3380}, /* 2^-24: the smallest f16 subnormal */
      {1.0 + 1.0 / 1024 / 2, 0x3c00, 0x3f80}, /* f16 tie: to even */
      {1.0 + 3.0 / 1024 / 2, 0x3c02, 0x3f80}, /* f16 tie: to even, upwards */
      {1.0 + 1.0 / 256, 0x3c04, 0x3f80},  /* bf16 tie: to even */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kt_dtype_store(KT_F16, h, 0, cases[i].v);
    kt_dtype_store(KT_BF16, h, 1, cases[i].v);
    if (h[0] != cases[i].f16 || h[1] != cases[i].bf16)
      t_fail(__FILE__, __LINE__, "%.17g: f16 0x%04x (want 0x%04x), bf16 0x%04x (want 0x%04x)", cases[i].v, h[0],
             cases[i].f16, h[1], cases[i].bf16);
  }
  kt_dtype_store(KT_F16, h, 2, 0.0 / 0.0 * -1);
  ASSERT_TRUE(isnan(kt_dtype_load(KT_F16, h, 2)));
  h[3] = 0x0001;
  ASSERT_TRUE(kt_dtype_load(KT_F16, h, 3) == 5.960464477539063e-08);
  h[4] = 0xfc00;
  ASSERT_TRUE(isinf(kt_dtype_load(KT_F16, h, 4)) && kt_dtype_load(KT_F16, h, 4) < 0);
  h[5] = 0x3f81;
  ASSERT_TRUE(kt_dtype_load(KT_BF16, h, 5) == 1.0 + 1.0 / 128);
  int32_t i32[1];
  kt_dtype_store(KT_I32, i32, 0, -7.9);
  ASSERT_EQ(i32[0], -7);
  ASSERT_TRUE(kt_dtype_load(KT_I32, i32, 0) == -7.0);
}

/* A worker's result line carries every field of a job's result back to the
** parent as it was, an empty field as empty, and a message's tabs and
** newlines as spaces; a line that does not parse is a job error. */
static void tune_worker_result_line(void) {
  static job a, b, c;
  a.status = JOB_TUNED;
  snprintf(a.config, sizeof a.config, "{\"BLOCK\":128}");
  snprintf(a.dflt, sizeof a.dflt, "{\"BLOCK\":64}");
  a.time_us = 9.75, a.default_us = 11.5, a.secs = 3.25;
  a.tried = 50, a.rejected = 2;
  snprintf(a.timed_at, sizeof a.timed_at, "N=16384 (the call's N=4096)");
  snprintf(a.message, sizeof a.message, "one\ttwo\nthree");
  char line[4096];
  int len = tunejob_encode(&a, line, sizeof line);
  ASSERT_STR_EQ(line, "R tuned\t{\"BLOCK\":128}\t{\"BLOCK\":64}\t9.7500\t11.5000\t50\t2\t3.250\t-\t"
                      "N=16384 (the call's N=4096)\tone two three\n");
  ASSERT_EQ(len, (int)strlen(line));
  line[len - 1] = 0; /* the parent reads it without its newline */
  tunejob_decode(&b, line + 2);
  ASSERT_EQ(b.status, JOB_TUNED);
  ASSERT_STR_EQ(b.config, a.config);
  ASSERT_STR_EQ(b.dflt, a.dflt);
  ASSERT_TRUE(b.time_us == 9.75 && b.default_us == 11.5 && b.secs == 3.25);
  ASSERT_EQ(b.tried, 50);
  ASSERT_EQ(b.rejected, 2);
  ASSERT_STR_EQ(b.fault, "");
  ASSERT_STR_EQ(b.timed_at, "N=16384 (the call's N=4096)");
  ASSERT_STR_EQ(b.message, "one two three");
  /* No timed_at, a fault, no message. */
  a.status = JOB_FAULT;
  a.timed_at[0] = a.message[0] = 0;
  snprintf(a.fault, sizeof a.fault, "{\"BLOCK\":1024}");
  len = tunejob_encode(&a, line, sizeof line);
  line[len - 1] = 0;
  tunejob_decode(&b, line + 2);
  ASSERT_EQ(b.status, JOB_FAULT);
  ASSERT_STR_EQ(b.fault, "{\"BLOCK\":1024}");
  ASSERT_STR_EQ(b.timed_at, "");
  ASSERT_STR_EQ(b.message, "");
  /* A line of the protocol before timed_at (ten fields) is malformed. */
  tunejob_decode(&c, "tuned\t{}\t{}\t1\t1\t1\t0\t1\t-\tmsg");
  ASSERT_EQ(c.status, JOB_ERROR);
  ASSERT_STR_EQ(c.message, "worker sent a malformed result");
  /* A line too long for the buffer is cut, and still one line. */
  char small[64];
  len = tunejob_encode(&a, small, sizeof small);
  ASSERT_EQ(len, 63);
  ASSERT_TRUE(small[62] == '\n' && !memchr(small, '\n', 62));
}

/* A shape's made-up addresses leave a long call's params apart: its key is
** looked up (ktune tune's "cached") without the alias rules seeing the
** buffers overlap, up to 2^30 rows of 4096 (8 TiB a buffer). */
static void shape_addresses_apart(void) {
  kt_runtime *rt;
  kt_kernel *k = t_offline_kernel("kernels_src/layernorm_fwd.json", &rt);
  if (!k) return;
  static const char *shapes[] = {"N=262144,D=4096,G=1,T=bf16,W=bf16,rms=0",
                                 "N=1073741824,D=4096,G=1,T=bf16,W=bf16,rms=0,res=null,res_out=null"};
  for (int i = 0; i < 2; i++) {
    kt_arg a[16];
    char err[256];
    ASSERT_EQ(shape_args(k, shapes[i], a, err, sizeof err), 0);
    kt_tune_report *r = NULL;
    kt_status st = kt_kernel_lookup(k, a, kt_kernel_nparams(k), &r);
    if (st) t_fail(__FILE__, __LINE__, "%s: %s", shapes[i], kt_errmsg(rt));
    ASSERT_TRUE(r != NULL && r->outcome == KT_TUNE_NOT_TUNED);
    kt_tune_report_free(r);
  }
  kt_runtime_close(rt);
}

/* An export is written whole or not at all: one that fails (a file size
** limit) leaves the file that was there, with its mode, and nothing beside
** it; one through a link writes the file linked to; one into the cache's
** own file is refused, and the cache serves on. */
static void export_whole_or_not_at_all(void) {
  char out[4096], json[800];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  FILE *f = in_json(dir, json, sizeof json);
  ASSERT_TRUE(f);
  fputs("{\"format\": \"ktune-cache\", \"version\": 1, \"configs\": [\n", f);
  for (int i = 0; i < 2000; i++)
    fprintf(f, "%s {\"kernel\": \"rmsnorm_fwd\", \"spec_hash\": \"0000000000000001\", \"device\": \"d/sm_90/132\","
               " \"key\": {\"D\":%d}, \"config\": {\"BLOCK\":128,\"ROWS\":4,\"VEC\":8}, \"time_us\": 4.25}\n",
            i ? "," : "", i + 1);
  fputs("]}\n", f);
  fclose(f);
  ASSERT_EQ(t_sh(out, sizeof out, "%s import %s --cache %s/c.db", t_bin(), json, dir), 0);
  ASSERT_STR_EQ(out, "2000 added, 0 kept, 0 replaced, 0 binaries added\n");
  ASSERT_EQ(t_sh(out, sizeof out, "cd '%s' && echo old > out.json && chmod 640 out.json", dir), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "trap '' XFSZ; ulimit -f 128; %s export -o %s/out.json --cache %s/c.db", t_bin(), dir,
                 dir),
            1);
  char want[1200];
  snprintf(want, sizeof want, "ktune export: %s/out.json: cannot write: File too large\n", dir);
  ASSERT_STR_EQ(out, want);
  ASSERT_EQ(t_sh(out, sizeof out, "cd '%s' && cat out.json && stat -c %%a out.json && ls | grep -v '^c\\.db'", dir), 0);
  ASSERT_STR_EQ(out, "old\n640\nin.json\nout.json\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s export -o %s/out.json --cache %s/c.db", t_bin(), dir, dir), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "cd '%s' && head -c 36 out.json && stat -c ' %%a' out.json", dir), 0);
  ASSERT_STR_EQ(out, "{\"format\": \"ktune-cache\", \"version\": 640\n");
  ASSERT_EQ(t_sh(out, sizeof out, "cd '%s' && echo old > real.json && ln -s real.json link.json", dir), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s export -o %s/link.json --cache %s/c.db", t_bin(), dir, dir), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "cd '%s' && test -L link.json && head -c 10 real.json", dir), 0);
  ASSERT_STR_EQ(out, "{\"format\":");
  ASSERT_EQ(t_sh(out, sizeof out, "%s export -o %s/c.db --cache %s/c.db", t_bin(), dir, dir), 1);
  snprintf(want, sizeof want, "ktune export: %s/c.db: cannot export into the cache itself\n", dir);
  ASSERT_STR_EQ(out, want);
  ASSERT_EQ(t_sh(out, sizeof out, "ln -s c.db %s/alias.db && %s export -o %s/alias.db --cache %s/c.db", dir, t_bin(), dir,
                 dir),
            1);
  snprintf(want, sizeof want, "ktune export: %s/alias.db: cannot export into the cache itself\n", dir);
  ASSERT_STR_EQ(out, want);
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --json --cache %s/c.db | grep -o '\"kernel\"' | wc -l", t_bin(), dir), 0);
  ASSERT_STR_EQ(out, "2000\n");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* The commands that only read leave a cache's bytes as they were. What a
** reader of a WAL database leaves beside it (an empty -wal, the -shm) is
** gone once a writer has closed it (docs/cli.md). */
static void read_commands_leave_the_cache_as_it_is(void) {
  char out[4096], json[800];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  FILE *f = in_json(dir, json, sizeof json);
  ASSERT_TRUE(f);
  fputs("{\"format\": \"ktune-cache\", \"version\": 1, \"configs\": [\n {\"kernel\": \"rmsnorm_fwd\", \"spec_hash\": "
        "\"0000000000000001\", \"device\": \"d/sm_90/132\", \"key\": {\"D\":256}, \"config\": {\"BLOCK\":128}, "
        "\"time_us\": 4.25}]}\n",
        f);
  fclose(f);
  ASSERT_EQ(t_sh(out, sizeof out, "%s import %s --cache %s/c.db && cd '%s' && ls && md5sum c.db > sum", t_bin(), json,
                 dir, dir),
            0);
  ASSERT_STR_EQ(out, "1 added, 0 kept, 0 replaced, 0 binaries added\nc.db\nin.json\n");
  ASSERT_EQ(t_sh(out, sizeof out,
                 "K='%s' C='%s/c.db' && $K list --cache $C && $K show rmsnorm_fwd --cache $C && "
                 "$K export --cache $C && { $K info --cache $C; true; }",
                 t_bin(), dir),
            0);
  ASSERT_CONTAINS(out, "{\"BLOCK\":128}");
  ASSERT_EQ(t_sh(out, sizeof out, "cd '%s' && md5sum -c --quiet sum && test ! -s c.db-wal && echo same", dir), 0);
  ASSERT_STR_EQ(out, "same\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s import %s --cache %s/c.db && ls '%s'", t_bin(), json, dir, dir), 0);
  ASSERT_STR_EQ(out, "0 added, 1 kept, 0 replaced, 0 binaries added\nc.db\nin.json\nsum\n");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* Text a cache file holds (a device, a kernel, a path) reaches the terminal
** with its control bytes written \xNN: a hostile row can neither forge a
** line of the table nor send the terminal escape sequences. Bytes that are
** not UTF-8 are written \xNN too, so --json stays JSON; the same through
** python -m ktune list. */
static void text_from_files_is_printed_escaped(void) {
  char out[16384], db[700], cmd[800];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  snprintf(db, sizeof db, "%s/esc.db", dir);
  ASSERT_EQ(t_empty_cache(db, out, sizeof out), 0);
  /* Rows stamped a day ahead are 0s old however slowly the test runs. */
  ASSERT_EQ(t_db_exec(db, "INSERT INTO configs (kernel, spec_hash, device, key, config, time_us, created_at,"
                          " updated_at) VALUES ('k' || char(7), 'h',"
                          " 'GPU' || char(27) || '[31mRED' || char(10) || 'fake' || char(155) || '2Jrow',"
                          " '{\"D\":1}', '{\"B\":1}', 1.5, 1, strftime('%s', 'now') + 86400)"), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache %s", t_bin(), db), 0);
  ASSERT_STR_EQ(out, "kernel  device                               key      config   time_us  age  source\n"
                     "k\\x07   GPU\\x1b[31mRED\\x0afake\\xc2\\x9b2Jrow  {\"D\":1}  {\"B\":1}     1.50  0s   user\n");
  snprintf(cmd, sizeof cmd, "%s show 'k\a' --cache %s", t_bin(), db);
  ASSERT_EQ(t_sh(out, sizeof out, "%s", cmd), 0);
  ASSERT_CONTAINS(out, "k\\x07  GPU\\x1b[31mRED\\x0afake\\xc2\\x9b2Jrow  {\"D\":1}\n  config {\"B\":1}: 1.50 us\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache '%s/no\033[2Jpe'", t_bin(), dir), 1);
  snprintf(cmd, sizeof cmd, "ktune list: %s/no\\x1b[2Jpe: no cache there (nothing was created)\n", dir);
  ASSERT_STR_EQ(out, cmd);
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_SYSTEM_CACHE='%s/sys\nline' %s list --cache %s", dir, t_bin(), db), 0);
  snprintf(cmd, sizeof cmd, "ktune: warn: %s/sys\\x0aline: system cache not used: %s/sys\\x0aline: %s\n", dir, dir,
           strerror(ENOENT));
  ASSERT_CONTAINS(out, cmd);
  /* Bytes that are not UTF-8, and a key with text after its JSON: written
  ** \xNN by the library; --json stays JSON and keeps the key's text. */
  ASSERT_EQ(t_db_exec(db, "INSERT INTO configs (kernel, spec_hash, device, key, config, time_us, created_at,"
                          " updated_at) VALUES (CAST(X'6dff' AS TEXT), 'h', CAST(X'475055c3a9c3' AS TEXT),"
                          " CAST(X'7b2244223a317dfe' AS TEXT), '{\"B\":1}', 1.5, 1, strftime('%s', 'now') + 86400)"),
            0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache %s", t_bin(), db), 0);
  ASSERT_STR_EQ(out, "kernel  device                               key          config   time_us  age  source\n"
                     "k\\x07   GPU\\x1b[31mRED\\x0afake\\xc2\\x9b2Jrow  {\"D\":1}      {\"B\":1}     1.50  0s   user\n"
                     "m\\xff   GPU\xc3\xa9\\xc3                             {\"D\":1}\\xfe  {\"B\":1}     1.50  0s   user\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --json --cache %s | python3 -c 'import json, sys; "
                                  "print([(r[\"kernel\"], r[\"device\"], r[\"key\"]) for r in json.load(sys.stdin)])'",
                 t_bin(), db),
            0);
  ASSERT_STR_EQ(out, "[('k\\x07', 'GPU\\x1b[31mRED\\nfake\\x9b2Jrow', {'D': 1}), "
                     "('m\\\\xff', 'GPU\xc3\xa9\\\\xc3', '{\"D\":1}\\\\xfe')]\n");
  /* python -m ktune list shows the same, and refuses what it does not know. */
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 -m ktune list "
                                  "--cache %s", db),
            0);
  ASSERT_STR_EQ(out, "kernel  device                               key          config   time_us\n"
                     "k\\x07   GPU\\x1b[31mRED\\x0afake\\xc2\\x9b2Jrow  {\"D\":1}      {\"B\":1}  1.50\n"
                     "m\\xff   GPU\xc3\xa9\\xc3                             {\"D\":1}\\xfe  {\"B\":1}  1.50\n");
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 -m ktune list "
                                  "--json --cache=%s | python3 -c 'import json, sys; "
                                  "print([r[\"key\"] for r in json.load(sys.stdin)])'", db),
            0);
  ASSERT_STR_EQ(out, "[{'D': 1}, '{\"D\":1}\\\\xfe']\n");
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 -m ktune list "
                                  "--cached %s 2>&1", db),
            2);
  ASSERT_CONTAINS(out, "python -m ktune list: error: unrecognized arguments: --cached");
  /* A cache path that is not UTF-8, or holds an escape: info shows it
  ** escaped, --json stays JSON, and python -m ktune info does not fail. */
  ASSERT_EQ(t_sh(out, sizeof out, "mkdir \"$(printf '%s/p\\377\\033[2J')\" && cp %s \"$(printf '%s/p\\377\\033[2J/c.db')\"",
                 dir, db, dir),
            0);
  char env[1024];
  snprintf(env, sizeof env,
           "KTUNE_CACHE=\"$(printf '%s/p\\377\\033[2J/c.db')\" KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python", dir);
  ASSERT_EQ(t_sh(out, sizeof out, "%s %s info | grep '^cache'", env, t_bin()), 0);
  ASSERT_CONTAINS(out, "/p\\xff\\x1b[2J/c.db  (");
  ASSERT_EQ(t_sh(out, sizeof out, "%s python3 -m ktune info | grep '^cache'", env), 0);
  ASSERT_CONTAINS(out, "/p\\xff\\x1b[2J/c.db (2 configs");
  ASSERT_EQ(t_sh(out, sizeof out, "%s %s info --json | python3 -c 'import json, sys; "
                                  "print(json.loads(sys.stdin.buffer.read().decode())[\"cache\"][\"path\"][-15:])'",
                 env, t_bin()),
            0);
  ASSERT_STR_EQ(out, "/p\\xff\x1b[2J/c.db\n");
  /* A right-to-left override in a name would show the rest reversed. */
  ASSERT_EQ(t_db_exec(db, "INSERT INTO configs (kernel, spec_hash, device, key, config, time_us, created_at,"
                          " updated_at) VALUES (CAST(X'72e280ae78' AS TEXT), 'h', 'GPU', '{}', '{}', 1, 1, 1)"),
            0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s list \"$(printf 'r\\342\\200\\256x')\" --cache %s", t_bin(), db), 0);
  ASSERT_CONTAINS(out, "\nr\\xe2\\x80\\xaex  GPU ");
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 -m ktune list "
                                  "\"$(printf 'r\\342\\200\\256x')\" --cache %s", db),
            0);
  ASSERT_CONTAINS(out, "\nr\\xe2\\x80\\xaex  GPU ");
}

/* An empty cache NAME in a fresh directory, its path into db: 0, or -1. */
static int empty_cache(const char *name, char *db, size_t n) {
  char out[4096];
  const char *dir = t_tmpdir();
  if (!dir) return -1;
  snprintf(db, n, "%s/%s", dir, name);
  return t_empty_cache(db, out, sizeof out);
}

/* A configs row whose time is no time (text, which SQLite reads as 0; a
** negative number) is listed with "-" (null in JSON), never as a time of
** 0.00 that no tuning could beat; by ktune and by python -m ktune. */
static void rows_without_a_time_show_none(void) {
  char out[4096], db[700];
  ASSERT_EQ(empty_cache("notime.db", db, sizeof db), 0);
  ASSERT_EQ(t_db_exec(db, "INSERT INTO configs (kernel, spec_hash, device, key, config, time_us, created_at,"
                          " updated_at) VALUES ('k', 'h', 'GPU', '{\"D\":1}', '{}', 'fast', 1, strftime('%s', 'now')),"
                          " ('k', 'h', 'GPU', '{\"D\":2}', '{}', -3, 1, strftime('%s', 'now')),"
                          " ('k', 'h', 'GPU', '{\"D\":3}', '{}', 2.5, 1, strftime('%s', 'now'))"),
            0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache %s", t_bin(), db), 0);
  ASSERT_STR_EQ(out, "kernel  device  key      config  time_us  age  source\n"
                     "k       GPU     {\"D\":1}  {}            -  0s   user\n"
                     "k       GPU     {\"D\":2}  {}            -  0s   user\n"
                     "k       GPU     {\"D\":3}  {}         2.50  0s   user\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --json --cache %s | grep -o '\"time_us\":[^,]*'", t_bin(), db), 0);
  ASSERT_STR_EQ(out, "\"time_us\":null\n\"time_us\":null\n\"time_us\":2.5\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s show k --cache %s | grep '  config'", t_bin(), db), 0);
  ASSERT_STR_EQ(out, "  config {}: - us\n  config {}: - us\n  config {}: 2.50 us\n");
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 -m ktune list --cache %s",
                 db),
            0);
  ASSERT_STR_EQ(out, "kernel  device  key      config  time_us\n"
                     "k       GPU     {\"D\":1}  {}      -\n"
                     "k       GPU     {\"D\":2}  {}      -\n"
                     "k       GPU     {\"D\":3}  {}      2.50\n");
}

/* ktune show --json gives a trial's resources where the candidate was
** compiled, and null for one that did not compile (its row holds 0s). */
static void show_leaves_no_resources_for_compile_errors(void) {
  char out[4096], db[700];
  ASSERT_EQ(empty_cache("show.db", db, sizeof db), 0);
  ASSERT_EQ(t_db_exec(db, "INSERT INTO configs (kernel, spec_hash, device, key, config, time_us, created_at,"
                          " updated_at) VALUES ('k', 'h', 'GPU', '{}', '{\"B\":1}', 1, 1, 1);"
                          "INSERT INTO trials (kernel, spec_hash, device, key, config, status, median_us, spread_us,"
                          " registers, smem_bytes, spill_bytes, detail, measured_at) VALUES"
                          " ('k', 'h', 'GPU', '{}', '{\"B\":1}', 'ok', 1, 0.5, 32, 1024, 0, '', 1),"
                          " ('k', 'h', 'GPU', '{}', '{\"B\":2}', 'compile_error', NULL, NULL, 0, 0, 0, 'no', 1)"),
            0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s show k --json --cache %s", t_bin(), db), 0);
  ASSERT_CONTAINS(out, "{\"config\":{\"B\":1},\"status\":\"ok\",\"median_us\":1,\"spread_us\":0.5,\"registers\":32,"
                       "\"smem_bytes\":1024,\"spill_bytes\":0,\"detail\":\"\"}");
  ASSERT_CONTAINS(out, "{\"config\":{\"B\":2},\"status\":\"compile_error\",\"median_us\":null,\"spread_us\":null,"
                       "\"registers\":null,\"smem_bytes\":null,\"spill_bytes\":null,\"detail\":\"no\"}");
}

/* A row from the future (a writer whose clock runs ahead; or this
** machine's coarse clock a tick behind SQLite's at a second's turn) is 0s
** old, never -1s. */
static void rows_from_the_future_are_0s_old(void) {
  char out[4096], db[700];
  ASSERT_EQ(empty_cache("future.db", db, sizeof db), 0);
  ASSERT_EQ(t_db_exec(db, "INSERT INTO configs (kernel, spec_hash, device, key, config, time_us, created_at,"
                          " updated_at) VALUES ('k', 'h', 'GPU', '{}', '{}', 1, 1, strftime('%s', 'now') + 3600)"),
            0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache %s", t_bin(), db), 0);
  ASSERT_STR_EQ(out, "kernel  device  key  config  time_us  age  source\n"
                     "k       GPU     {}   {}         1.00  0s   user\n");
}

/* Commands that write the cache and cannot do without it fail on one that
** cannot open, or would open only to be read, in one line, before any
** work: an import, a gc, and a tune (which would tune for minutes and keep
** nothing, and starts no worker). */
static void writing_commands_refuse_a_cache_they_cannot_open(void) {
  char out[8192], db[700], want[900];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  ASSERT_EQ(t_write_file(dir, "app.db", "", db, sizeof db), 0); /* SQLite's empty database */
  ASSERT_EQ(t_db_exec(db, "CREATE TABLE people (name TEXT)"), 0);
  char newer[700];
  snprintf(newer, sizeof newer, "%s/newer.db", dir);
  ASSERT_EQ(t_empty_cache(newer, out, sizeof out), 0);
  ASSERT_EQ(t_db_exec(newer, "UPDATE meta SET value = '99' WHERE name = 'schema_version'"), 0);
  static const char *const cmds[] = {"import tests/fixtures/shapes.jsonl", "gc",
                                     "tune kernels_src/rmsnorm.json --shape N=8,D=256,T=bf16 --isolate",
                                     "tune kernels_src/rmsnorm.json --shape N=8,D=256,T=bf16 --devices 0,1"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    const char *name = cmds[i], *sp = strchr(name, ' ');
    int len = sp ? (int)(sp - name) : (int)strlen(name);
    snprintf(want, sizeof want,
             "ktune %.*s: %s: not a ktune cache (it holds tables of another application); it is left as it is\n", len,
             name, db);
    ASSERT_EQ(t_sh(out, sizeof out, "%s %s --cache %s", t_bin(), name, db), 1);
    ASSERT_STR_EQ(out, want);
    snprintf(want, sizeof want, "ktune %.*s: %s: is a directory, not a cache file\n", len, name, dir);
    ASSERT_EQ(t_sh(out, sizeof out, "%s %s --cache %s", t_bin(), name, dir), 1);
    ASSERT_STR_EQ(out, want);
    snprintf(want, sizeof want,
             "ktune %.*s: %s: written by a newer ktune (schema 99, this one knows 4): the cache would be read-only, and "
             "it is to be written\n",
             len, name, newer);
    ASSERT_EQ(t_sh(out, sizeof out, "%s %s --cache %s", t_bin(), name, newer), 1);
    ASSERT_STR_EQ(out, want);
  }
  ASSERT_EQ(t_db_int(newer, "SELECT value FROM meta WHERE name = 'schema_version'"), 99);
  ASSERT_EQ(t_db_int(db, "SELECT count(*) FROM sqlite_master"), 1);
}

const kt_test t_cli_tests[] = {
    {"cli: cache commands: list, show, export, import, gc", cache_commands},
    {"cli: an export is written whole or not at all, and never into the cache", export_whole_or_not_at_all},
    {"cli: the commands that only read leave the cache's bytes as they were", read_commands_leave_the_cache_as_it_is},
    {"cli: --help and --version", help_and_version},
    {"cli: text from a cache file is printed with control and non-UTF-8 bytes escaped", text_from_files_is_printed_escaped},
    {"cli: a row from the future is 0s old", rows_from_the_future_are_0s_old},
    {"cli: show gives no resources for a trial that did not compile", show_leaves_no_resources_for_compile_errors},
    {"cli: a row whose time is no time is listed with -, never 0.00", rows_without_a_time_show_none},
    {"cli: usage errors exit 2 with a message", usage_errors},
    {"cli: compile writes one cubin per variant, PTX past NVRTC's newest arch", compile_writes_cubins},
    {"cli: compile ignores the working directory's headers", compile_ignores_the_working_directory},
    {"cli: import adds an export's cubins only with --binaries", import_adds_cubins_only_when_asked},
    {"cli: GPU commands say what is missing", gpu_commands_without_a_gpu},
    {"cli: compile --shape: the variants calls can use", compile_for_shapes},
    {"cli: compile --shape: the norm pipeline only where it runs", compile_norm_pipeline_where_it_runs},
    {"cli: compile --shape: the one-program backward's rows over segments and clusters", compile_norm_row_spreads_rows},
    {"cli: tune and bench: argument and shapes-file errors", tune_arguments},
    {"cli: import, gc and tune refuse a cache they cannot open, before any work",
     writing_commands_refuse_a_cache_they_cannot_open},
    {"cli: tune: a worker's result line round-trips, timed_at included", tune_worker_result_line},
    {"cli: a shape's made-up addresses leave a long call's params apart", shape_addresses_apart},
    {"tools: host dtype conversions (f16, bf16, i32)", host_dtype_conversions},
    {"docs: the embedding example compiles and runs", embedding_example_compiles},
    {NULL, NULL},
};
