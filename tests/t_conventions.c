/* The conventions of a library people already use, each driven as a user
** would: options as getopt_long reads them, one exit-code rule, messages
** in the user's words, --json written with cJSON, the environment table,
** progress and warnings, make check/install/uninstall, the Python package
** installed with pip, and docs whose every flag, variable and column
** exists. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "ktune.h"

/* Whether out is one valid JSON document (python3's json module says). */
static int valid_json(const char *dir, const char *out) {
  char path[800], res[256];
  if (t_write_file(dir, "out.json", out, path, sizeof path)) return 0;
  return t_sh(res, sizeof res, "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' %s", path) == 0;
}

/* --name=value, -oVALUE, `--` and `-` for standard input work everywhere. */
static void options_as_getopt_reads_them(void) {
  char out[16384], db[700];
  const char *dir = t_tmpdir();
  snprintf(db, sizeof db, "%s/c.db", dir);
  ASSERT_EQ(t_empty_cache(db, out, sizeof out), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s gc --cache=%s/c.db", t_bin(), dir), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s export --cache=%s/c.db -o%s/e.json", t_bin(), dir, dir), 0);
  /* - is standard input for import, as it is standard output for export. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s export --cache %s/c.db -o - | %s import - --cache=%s/d.db", t_bin(), dir, t_bin(), dir),
            0);
  ASSERT_STR_EQ(out, "0 added, 0 kept, 0 replaced, 0 binaries added\n");
  ASSERT_EQ(t_sh(out, sizeof out, "echo '{\"format\": 1}' | %s import --cache %s/d.db -", t_bin(), dir), 1);
  ASSERT_STR_EQ(out, "ktune import: standard input: not a ktune cache export (expected \"format\": \"ktune-cache\", "
                     "\"version\": 1)\n");
  /* After --, an argument that starts with - is a positional one. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=8,T=f32 -- -odd", t_bin()), 2);
  ASSERT_CONTAINS(out, "ktune key: unexpected argument '-odd'");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --cache", t_bin()), 2);
  ASSERT_STR_EQ(out, "ktune list: option '--cache' needs a value\nTry 'ktune list --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list -q", t_bin()), 2);
  ASSERT_STR_EQ(out, "ktune list: unknown option '-q'\nTry 'ktune list --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list -h", t_bin()), 0);
  ASSERT_CONTAINS(out, "usage: ktune list");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* 0 success, 1 failed, 2 usage, for every command; messages without the
** library's function names; a bad dtype lists the good ones. */
static void one_exit_code_rule(void) {
  char out[16384];
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/rmsnorm.json --shape N=1,D=8,T=bf17", t_bin()), 2);
  ASSERT_STR_EQ(out, "ktune key: --shape N=1,D=8,T=bf17: T=bf17: bf17 is not a dtype (f32, f16, bf16, f64, i32, i64, "
                     "u8, i8, i16, u32)\nTry 'ktune key --help'.\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s tune kernels_src/rmsnorm.json --shape N=1,D=8,T=bf17", t_bin()), 2);
  ASSERT_CONTAINS(out, "T=bf17: bf17 is not a dtype");
  ASSERT_EQ(t_sh(out, sizeof out, "%s lint tests/specs/nope.json tests/specs/add_one.json", t_bin()), 1);
  ASSERT_CONTAINS(out, "ktune lint: tests/specs/nope.json: cannot read: No such file or directory\n");
  ASSERT_CONTAINS(out, "0 problems in 1 spec; 1 spec did not load\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm9 kernels_src/rmsnorm.json", t_bin()), 1);
  ASSERT_STR_EQ(out, "ktune compile: arch \"sm9\" is not of the form sm_90, sm_90a or sm_100f\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key kernels_src/nope.json --shape N=1", t_bin()), 1);
  ASSERT_EQ(t_sh(out, sizeof out, "%s info --cache /nonexistent/x.db 2>&1 | grep -c 'kt_[a-z_]*: '", t_bin()), 1);
  ASSERT_STR_EQ(out, "0\n");
}

/* --json on the commands scripts read, valid JSON, null for what is not
** known. */
static void json_everywhere(void) {
  char out[16384];
  const char *dir = t_tmpdir();
  ASSERT_EQ(t_sh(out, sizeof out, "%s info --json --cache %s/none.db 2>/dev/null", t_bin(), dir), 1);
  ASSERT_TRUE(valid_json(dir, out));
  ASSERT_CONTAINS(out, "\"path\":null");
  ASSERT_CONTAINS(out, "\"configs\":null");
  ASSERT_EQ(t_sh(out, sizeof out, "%s key --json kernels_src/rmsnorm.json --shape N=1,D=8,T=f32", t_bin()), 0);
  ASSERT_TRUE(valid_json(dir, out));
  ASSERT_EQ(t_sh(out, sizeof out, "%s lint --json tests/specs/phantom.json tests/specs/nope.json 2>/dev/null", t_bin()), 1);
  ASSERT_TRUE(valid_json(dir, out));
  ASSERT_CONTAINS(out, "\"not_loaded\":1");
  char db[700];
  snprintf(db, sizeof db, "%s/c.db", dir);
  ASSERT_EQ(t_empty_cache(db, out, sizeof out), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s gc --json --cache %s", t_bin(), db), 0);
  ASSERT_STR_EQ(out, "{\"configs_removed\":0,\"binaries_removed\":0}\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s export --cache %s/c.db | %s import --json - --cache %s/c.db", t_bin(), dir, t_bin(),
                 dir),
            0);
  ASSERT_STR_EQ(out, "{\"added\":0,\"kept\":0,\"replaced\":0,\"binaries_added\":0,\"binaries_left_out\":0}\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s list --json --cache %s/c.db", t_bin(), dir), 0);
  ASSERT_STR_EQ(out, "[]\n");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* The environment's table in --help and docs/cli.md; unknown values warn. */
static void environment(void) {
  char out[16384];
  ASSERT_EQ(t_sh(out, sizeof out, "%s --help", t_bin()), 0);
  ASSERT_CONTAINS(out, "environment:\n  KTUNE_CACHE ");
  ASSERT_CONTAINS(out, "  KTUNE_MODE           what a miss does: tune, async, cache-only or off");
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_MODE=cacheonly %s key kernels_src/rmsnorm.json --shape N=1,D=8,T=f32", t_bin()),
            0);
  ASSERT_CONTAINS(out, "ktune: warn: KTUNE_MODE=cacheonly is not a mode (tune, cache-only, off, async): tune is used\n");
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_LOG=verbose %s key kernels_src/rmsnorm.json --shape N=1,D=8,T=f32", t_bin()), 0);
  ASSERT_CONTAINS(out, "ktune: warn: KTUNE_LOG=verbose is not a level (error, warn, info, debug): warn is used\n");
}

/* Long offline work says what it is up against: compile gives the count
** up front; lint reports a space that mostly does not compile, and notes
** one it cannot compile whole. */
static void progress_and_large_spaces(void) {
  char out[16384], path[800];
  const char *dir = t_tmpdir();
  ASSERT_EQ(t_write_file(dir, "m.cu",
                         "template <int A>\n__global__ void m(float *y) {\n  static_assert(A == 1, \"one\");\n"
                         "  y[0] = A;\n}\n",
                         path, sizeof path),
            0);
  ASSERT_EQ(t_write_file(dir, "m.json",
                         "{\"name\": \"m\", \"source\": \"m.cu\", \"entry\": \"m\", \"template\": [\"A\"],\n"
                         " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\","
                         " \"extent\": \"1\"}],\n"
                         " \"config\": {\"A\": [1, 2, 3, 4]}, \"default\": {\"A\": 1}, \"grid\": 1, \"block\": 32}\n",
                         path, sizeof path),
            0);
  ASSERT_EQ(t_sh(out, sizeof out, "%s compile --arch sm_90 --cache %s/c.db %s", t_bin(), dir, path), 1);
  ASSERT_CONTAINS(out, "m: 4 variants to compile\n");
  ASSERT_CONTAINS(out, "1 variants compiled for sm_90, 3 failed\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s lint %s", t_bin(), path), 1);
  ASSERT_CONTAINS(out, ": most of the space does not compile: 3 of 4 variants fail;");
  ASSERT_CONTAINS(out, "4 problems in 1 spec\n");
  /* A space compile refuses (millions of variants; a specialized param):
  ** lint compiles none, says so in a note, and its other checks stand. */
  ASSERT_EQ(t_sh(out, sizeof out, "%s lint kernels_src/layernorm_bwd.json tests/specs/chunk_state_fwd_n.json", t_bin()),
            0);
  ASSERT_STR_EQ(out,
                "kernels_src/layernorm_bwd.json: note: no variant was compiled: layernorm_bwd: the space holds more "
                "than 65536 variants (every type, config and constant value); compile those of given shapes\n"
                "tests/specs/chunk_state_fwd_n.json: note: no variant was compiled: chunk_state_fwd_n: param N is "
                "specialized: its variants follow the values calls pass; compile them for given shapes\n"
                "0 problems in 2 specs, 2 notes\n");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* make check, make install LIBDIR=..., make uninstall, and a .pc whose Libs
** carry an rpath: a program linked through it runs without
** LD_LIBRARY_PATH. */
static void build_conventions(void) {
  char out[16384];
  const char *dir = t_tmpdir();
  ASSERT_EQ(t_sh(out, sizeof out, "make -n check >/dev/null && echo ok"), 0);
  ASSERT_STR_EQ(out, "ok\n");
  ASSERT_EQ(t_sh(out, sizeof out, "make -s install PREFIX=%s/p LIBDIR=%s/p/lib64 >/dev/null 2>&1", dir, dir), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "PKG_CONFIG_PATH=%s/p/lib64/pkgconfig pkg-config --libs ktune", dir), 0);
  char want[1000];
  snprintf(want, sizeof want, "-L%s/p/lib64 -Wl,-rpath,%s/p/lib64 -lktune", dir, dir);
  ASSERT_CONTAINS(out, want);
  ASSERT_EQ(t_sh(out, sizeof out,
                 "cd %s && printf '#include <ktune.h>\\n#include <stdio.h>\\nint main(void) { puts(kt_libversion()); "
                 "return 0; }\\n' > v.c && cc v.c $(PKG_CONFIG_PATH=%s/p/lib64/pkgconfig pkg-config --cflags --libs ktune) "
                 "-o v && env -u LD_LIBRARY_PATH ./v",
                 dir, dir),
            0);
  ASSERT_STR_EQ(out, KT_VERSION_STRING "\n");
  ASSERT_EQ(t_sh(out, sizeof out, "make -s uninstall PREFIX=%s/p LIBDIR=%s/p/lib64 >/dev/null 2>&1 && find %s/p -type f",
                 dir, dir, dir),
            0);
  ASSERT_STR_EQ(out, "");
  t_sh(out, sizeof out, "make -s >/dev/null 2>&1; rm -rf '%s'", dir); /* ktune.pc back to the default prefix */
}

/* pip install into a fresh virtual environment, then the version, the
** read-only CLI through the library, and an error that names every place
** the library was looked for. */
static void python_package_installs_with_pip(void) {
  char out[16384];
  const char *dir = t_tmpdir();
  if (t_sh(out, sizeof out, "python3 -m venv %s/v", dir)) SKIP("python3 -m venv is not available here");
  ASSERT_EQ(t_sh(out, sizeof out, "%s/v/bin/python -m pip install -q --no-index ./tools/python", dir), 0);
  ASSERT_EQ(t_sh(out, sizeof out, "cd / && %s/v/bin/python -c 'import ktune; print(ktune.__version__)'", dir), 0);
  ASSERT_STR_EQ(out, KT_VERSION_STRING "\n");
  ASSERT_EQ(t_sh(out, sizeof out, "cd / && KTUNE_LIB=%s/build/libktune.so %s/v/bin/python -m ktune version",
                 getenv("PWD"), dir),
            0);
  ASSERT_STR_EQ(out, "ktune " KT_VERSION_STRING " (library " KT_VERSION_STRING ")\n");
  ASSERT_EQ(t_sh(out, sizeof out, "cd / && KTUNE_LIB=/nonexistent/libktune.so %s/v/bin/python -c 'import ktune; ktune.lib()'",
                 dir),
            1);
  ASSERT_CONTAINS(out, "libktune not found; tried: $KTUNE_LIB (/nonexistent/libktune.so: no such file); the package (");
  ASSERT_CONTAINS(out, "set KTUNE_LIB to its path.");
  ASSERT_EQ(t_sh(out, sizeof out, "cd / && %s/v/bin/python -c 'import ktune; print(ktune.kernels_dir())'", dir), 0);
  ASSERT_CONTAINS(out, "/site-packages/ktune/kernels\n");
  /* A wheel that carries the library carries its NVRTC helper, executable. */
  ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_WHEEL_LIB=%s/build/libktune.so %s/v/bin/python -m pip install -q --no-index "
                 "--force-reinstall ./tools/python && cd / && %s/v/bin/python -c 'import ktune, os; "
                 "p = os.path.join(os.path.dirname(ktune.__file__), \"lib\", \"ktune-nvrtc\"); "
                 "print(os.access(p, os.X_OK), os.path.isfile(p.replace(\"ktune-nvrtc\", \"libktune.so.0\")))'",
                 getenv("PWD"), dir, dir),
            0);
  ASSERT_STR_EQ(out, "True True\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s/v/bin/python -m pip install -q --no-index -e ./tools/python && cd / && "
                 "%s/v/bin/python -c 'import ktune; print(ktune.__file__)'", dir, dir),
            0);
  ASSERT_CONTAINS(out, "/tools/python/ktune/__init__.py\n");
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* Every flag, variable and column the docs name exists; every public op of
** ktune.ops is in its __all__; the package's version is the library's. */
static void docs_and_package_claims(void) {
  char out[16384];
  ASSERT_EQ(t_sh(out, sizeof out, "python3 tests/docs_check.py %s", t_bin()), 0);
  ASSERT_STR_EQ(out, "0 claims that do not hold\n");
  ASSERT_EQ(t_sh(out, sizeof out,
                 "python3 -c 'import ast; m = ast.parse(open(\"tools/python/ktune/ops.py\").read()); "
                 "defs = {f.name for f in m.body if isinstance(f, ast.FunctionDef) and not f.name.startswith(\"_\")}; "
                 "alls = [n for n in m.body if isinstance(n, ast.Assign) and n.targets[0].id == \"__all__\"]; "
                 "names = set(ast.literal_eval(alls[0].value)); print(sorted(defs ^ names))'"),
            0);
  ASSERT_STR_EQ(out, "[]\n");
  ASSERT_EQ(t_sh(out, sizeof out, "sed -n 's/^__version__ = \"\\(.*\\)\"/\\1/p' tools/python/ktune/_version.py"), 0);
  ASSERT_STR_EQ(out, KT_VERSION_STRING "\n");
}

/* kt_options_init writes its own version's sizeof(kt_options) bytes: the
** Python package, whose declaration was 8 bytes shorter, had it write past
** the end of its ctypes struct at every runtime it opened (Python's debug
** allocator stopped on it: "bad trailing pad byte"). The package's
** declaration is the header's whole, and it fills its struct from a scratch
** buffer, so a declaration shorter than the library's (an older package) is
** never written past either; under the debug allocator nothing is. */
static void the_package_never_writes_past_its_options(void) {
  char out[4096];
  int rc = t_sh(out, sizeof out,
                "PYTHONMALLOC=debug KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 -c '"
                "import ctypes, gc, ktune\n"
                "from ktune import _capi\n"
                "L = ktune.lib()\n"
                "o = _capi.options(L)\n"
                "print(o.size, ctypes.sizeof(o), o.log_level, o.cache_required, _capi.knows(o, \"cache_required\"))\n"
                "class Short(ctypes.Structure): _fields_ = _capi.Options._fields_[:-2]\n"
                "s = _capi.options(L, Short)\n"
                "print(s.size, ctypes.sizeof(s), s.log_level)\n"
                "del o, s\n"
                "gc.collect()\n"
                "' 2>&1");
  char want[128];
  snprintf(want, sizeof want, "%zu %zu -1 0 True\n%zu %zu -1\n", sizeof(kt_options), sizeof(kt_options),
           sizeof(kt_options) - 2 * sizeof(int), sizeof(kt_options) - 2 * sizeof(int));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_EQ(out, want);
  /* python -m ktune opens its runtime the same way. */
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  rc = t_sh(out, sizeof out,
            "PYTHONMALLOC=debug KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 -m ktune list --cache "
            "%s/none.db 2>&1",
            dir);
  ASSERT_EQ(rc, 1);
  ASSERT_CONTAINS(out, "/none.db: no cache there (nothing was created)");
  ASSERT_TRUE(!strstr(out, "Fatal Python error"));
}

/* The test programs take a filter and --part=K/N, the K-th of every N
** tests the filter leaves (make gpu-test runs its C tests as two lanes so);
** the parts together are the whole, and a bad part or a second filter is
** refused with exit status 2. */
static void test_programs_run_a_part(void) {
  char all[4096], part[4096], out[512], self[600];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_TRUE(n > 0);
  self[n] = 0;
  for (int k = 1; k <= 3; k++) {
    ASSERT_EQ(t_sh(all, sizeof all, "KT_TEST_FILTER= %s 'expr: ' | grep '^  expr: ' | awk 'NR %% 3 == %d'", self, k % 3),
              0);
    ASSERT_EQ(t_sh(part, sizeof part, "KT_TEST_FILTER= %s 'expr: ' --part=%d/3 | grep '^  expr: '", self, k), 0);
    ASSERT_TRUE(strlen(part) > 10);
    ASSERT_STR_EQ(part, all);
  }
  ASSERT_EQ(t_sh(out, sizeof out, "%s --part=3/2", self), 2);
  ASSERT_CONTAINS(out, ": --part=3/2: give --part=K/N with 1 <= K <= N\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s --part=+1/2", self), 2);
  ASSERT_CONTAINS(out, ": --part=+1/2: give --part=K/N with 1 <= K <= N\n");
  ASSERT_EQ(t_sh(out, sizeof out, "%s expr spec", self), 2);
  ASSERT_CONTAINS(out, ": spec: one filter only (expr is the first)\n");
}

const kt_test t_convention_tests[] = {
    {"conventions: options as getopt_long reads them; - is standard input", options_as_getopt_reads_them},
    {"conventions: one exit-code rule, messages in the user's words", one_exit_code_rule},
    {"conventions: --json everywhere, valid, null for the unknown", json_everywhere},
    {"conventions: the environment table; unknown values warn", environment},
    {"conventions: compile says the count up front; lint a mostly broken space", progress_and_large_spaces},
    {"conventions: make check, install LIBDIR, uninstall, rpath in ktune.pc", build_conventions},
    {"conventions: pip install into a fresh venv; python -m ktune; library search", python_package_installs_with_pip},
    {"conventions: the Python package never writes past its kt_options", the_package_never_writes_past_its_options},
    {"conventions: docs name only flags, variables and columns that exist", docs_and_package_claims},
    {"conventions: the test programs run a filter's K-th of every N tests", test_programs_run_a_part},
    {NULL, NULL},
};
