#include "device/nvrtc.h"

#include <dlfcn.h>
#include <limits.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#define KT__NVRTC_FUNCS(X)  \
  X(nvrtcVersion)           \
  X(nvrtcGetErrorString)    \
  X(nvrtcCreateProgram)     \
  X(nvrtcDestroyProgram)    \
  X(nvrtcAddNameExpression) \
  X(nvrtcCompileProgram)    \
  X(nvrtcGetProgramLogSize) \
  X(nvrtcGetProgramLog)     \
  X(nvrtcGetLoweredName)    \
  X(nvrtcGetCUBINSize)      \
  X(nvrtcGetCUBIN)          \
  X(nvrtcGetPTXSize)        \
  X(nvrtcGetPTX)

#define KT__FIELD(name) __typeof__(&name) name;
static struct {
  KT__NVRTC_FUNCS(KT__FIELD)
} nv;
#undef KT__FIELD

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded;  /* 1 ok, -1 failed */
static int version;
/* The archs it compiles for (ascending, as NVRTC lists them); none where
** it cannot say. */
static int archs[64], narchs;
static atomic_int newest_cap; /* tests: archs above it are not listed */
static char load_err[512];

static atomic_int absent;

void kt__nvrtc_absent(int on) { atomic_store(&absent, on); }

/* The archs of the NVRTC in h, when it lists them (since CUDA 11.2) and
** they fit. */
static void list_archs(void *h) {
  nvrtcResult (*count)(int *) = (nvrtcResult(*)(int *))dlsym(h, "nvrtcGetNumSupportedArchs");
  nvrtcResult (*list)(int *) = (nvrtcResult(*)(int *))dlsym(h, "nvrtcGetSupportedArchs");
  int n = 0;
  if (count && list && count(&n) == NVRTC_SUCCESS && n > 0 && n <= (int)(sizeof archs / sizeof *archs) &&
      list(archs) == NVRTC_SUCCESS)
    narchs = n;
}

/* Load the first of names that opens (once per process); later calls
** report the first outcome. */
static kt_status load(const char *const *names, size_t k, const char *tried, char *err, size_t errlen) {
  if (atomic_load(&absent)) {
    snprintf(err, errlen, "cannot load NVRTC (made absent for a test)");
    return KT_ERR_NO_NVRTC;
  }
  pthread_mutex_lock(&lock);
  if (!loaded) {
    void *h = NULL;
    for (size_t i = 0; i < k && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      snprintf(load_err, sizeof load_err, "cannot load NVRTC (%s): install the CUDA toolkit or set CUDA_HOME", tried);
      loaded = -1;
    } else {
      loaded = 1;
#define KT__SYM(name)                                                      \
  if (loaded == 1 && !(*(void **)&nv.name = dlsym(h, #name))) {            \
    snprintf(load_err, sizeof load_err, "NVRTC lacks %s", #name);          \
    loaded = -1;                                                           \
  }
      KT__NVRTC_FUNCS(KT__SYM)
#undef KT__SYM
      int ma = 0, mi = 0;
      if (loaded == 1 && nv.nvrtcVersion(&ma, &mi) == NVRTC_SUCCESS) version = ma * 1000 + mi * 10;
      if (loaded == 1) list_archs(h);
    }
  }
  kt_status st = loaded == 1 ? KT_OK : KT_ERR_NO_NVRTC;
  if (st) snprintf(err, errlen, "%s", load_err);
  pthread_mutex_unlock(&lock);
  return st;
}

kt_status kt__nvrtc_load(const char *cuda_home, char *err, size_t errlen) {
  char alt[PATH_MAX], tried[PATH_MAX + 64];
  int w = snprintf(alt, sizeof alt, "%s/lib64/libnvrtc.so.13", cuda_home ? cuda_home : "/usr/local/cuda");
  /* A toolkit path that does not fit is not tried cut (another file). */
  if (w < 0 || (size_t)w >= sizeof alt) snprintf(alt, sizeof alt, "libnvrtc.so.13");
  snprintf(tried, sizeof tried, "libnvrtc.so.13, also tried %s", alt);
  const char *names[] = {"libnvrtc.so.13", alt, "libnvrtc.so"};
  return load(names, 3, tried, err, errlen);
}

kt_status kt__nvrtc_load_file(const char *file, char *err, size_t errlen) {
  return load(&file, 1, file, err, errlen);
}

int kt__nvrtc_file(char *out, size_t n) {
  Dl_info info;
  pthread_mutex_lock(&lock);
  int ok = loaded == 1 && dladdr(*(void **)&nv.nvrtcVersion, &info) && info.dli_fname && info.dli_fname[0] == '/';
  pthread_mutex_unlock(&lock);
  return ok && snprintf(out, n, "%s", info.dli_fname) < (int)n ? 0 : -1;
}

int kt__nvrtc_version(void) { return version; }

int kt__nvrtc_name(char *out, size_t n) {
  int v = version;
  if (v > 0) snprintf(out, n, "NVRTC %d.%d", v / 1000, v % 1000 / 10);
  else if (n) out[0] = 0;
  return v > 0 ? 0 : -1;
}

void kt__nvrtc_cap_archs(int cc) { atomic_store(&newest_cap, cc); }

/* The archs listed (under the tests' cap) into list; their count. */
static int listed(int *list) {
  int cap = atomic_load(&newest_cap), n = 0;
  for (int i = 0; i < narchs; i++)
    if (!cap || archs[i] <= cap) list[n++] = archs[i];
  return n;
}

int kt__arch_cc(const char *arch) {
  int major = 0;
  if (strncmp(arch, "sm_", 3) || strlen(arch) < 5 || strlen(arch) > 7) return -1;
  const char *p = arch + 3;
  for (; *p >= '0' && *p <= '9'; p++) major = major * 10 + (*p - '0');
  return p < arch + 5 || (*p && ((*p != 'a' && *p != 'f') || p[1])) ? -1 : major;
}

kt_status kt__nvrtc_target(const char *cuda_home, const char *arch, char *opt, size_t optlen, char *err,
                           size_t errlen) {
  int cc = kt__arch_cc(arch);
  if (cc < 0) {
    snprintf(err, errlen, "arch \"%s\" is not of the form sm_90, sm_90a or sm_100f", arch);
    return KT_ERR_INVALID;
  }
  kt_status st = kt__nvrtc_load(cuda_home, err, errlen);
  if (st) return st;
  int list[64], n = listed(list), in = 0;
  for (int i = 0; i < n; i++) in |= list[i] == cc;
  /* Listed, or NVRTC lists none: the arch itself. */
  if (in || !n) return snprintf(opt, optlen, "--gpu-architecture=%s", arch), KT_OK;
  int newest = list[n - 1];
  /* A GPU newer than this NVRTC: PTX of its newest arch, which the driver
  ** compiles for the GPU when the module loads. */
  if (cc > newest) return snprintf(opt, optlen, "--gpu-architecture=compute_%d", newest), KT_OK;
  char name[32];
  kt__nvrtc_name(name, sizeof name);
  size_t used = (size_t)snprintf(err, errlen, "%s does not compile for %s (it compiles for", name, arch);
  for (int i = 0; i < n && used < errlen; i++)
    used += (size_t)snprintf(err + used, errlen - used, "%s sm_%d", i ? "," : "", list[i]);
  if (used < errlen) snprintf(err + used, errlen - used, ", and newer archs through PTX)");
  return KT_ERR_INVALID;
}

/* One compile of an empty kernel with the target option opt: what the
** first compile of a process pays (kt__nvrtc_warm), and whether NVRTC
** takes opt at all (kt__nvrtc_check_target). */
static kt_status compile_empty(const char *opt, char *err, size_t errlen) {
  const char *opts[] = {opt};
  void *cubin = NULL;
  size_t size = 0;
  kt_status st = kt__nvrtc_compile_many("extern \"C\" __global__ void kt_empty(int *x) { *x = 1; }", "kt_empty.cu",
                                        NULL, 0, opts, 1, &cubin, &size, NULL, err, errlen);
  kt__free(cubin);
  return st;
}

kt_status kt__nvrtc_check_target(const char *cuda_home, const char *arch, char *err, size_t errlen) {
  char opt[64], why[1024];
  kt_status st = kt__nvrtc_target(cuda_home, arch, opt, sizeof opt, err, errlen);
  size_t n = strlen(arch);
  if (st || !n || (arch[n - 1] != 'a' && arch[n - 1] != 'f')) return st;
  if ((st = compile_empty(opt, why, sizeof why)) != KT_ERR_COMPILE) return st;
  char name[32];
  kt__nvrtc_name(name, sizeof name);
  snprintf(err, errlen, "%s does not compile for %s (%s)", name, arch, why);
  return KT_ERR_INVALID;
}

/* The log's error lines joined by " | " and cut to fit; all of it when no
** line says "error" (PCH notes and warnings would bury the cause). */
static void append_log(nvrtcProgram p, char *err, size_t errlen) {
  size_t n = 0;
  if (nv.nvrtcGetProgramLogSize(p, &n) != NVRTC_SUCCESS || n <= 1) return;
  char *log = kt__malloc(n);
  if (!log) return;
  if (nv.nvrtcGetProgramLog(p, log) == NVRTC_SUCCESS) {
    int any = strstr(log, "error") != NULL;
    size_t used = strlen(err);
    for (char *save = NULL, *line = strtok_r(log, "\n", &save); line && used + 4 < errlen;
         line = strtok_r(NULL, "\n", &save)) {
      if (!*line || (any && !strstr(line, "error"))) continue;
      int w = snprintf(err + used, errlen - used, "%s%s", used > 6 ? " | " : " ", line);
      if (w < 0) break;
      used += (size_t)w;
      if (used >= errlen) used = errlen - 1;
    }
  }
  kt__free(log);
}

#define NVCHECK(call, expr)                                                 \
  do {                                                                      \
    nvrtcResult r_ = (expr);                                                \
    if (r_ != NVRTC_SUCCESS) {                                              \
      snprintf(err, errlen, "NVRTC: %s: %s", call, nv.nvrtcGetErrorString(r_)); \
      st = r_ == NVRTC_ERROR_OUT_OF_MEMORY ? KT_ERR_NOMEM : KT_ERR_COMPILE; \
      goto done;                                                            \
    }                                                                       \
  } while (0)

/* The cubin and the lowered names of a program that compiled. */
static kt_status results(nvrtcProgram p, const char *const *exprs, int n, void **cubin, size_t *size, char **lowered,
                         char *err, size_t errlen) {
  kt_status st = KT_OK;
  for (int i = 0; i < n; i++) {
    const char *low = NULL;
    NVCHECK("nvrtcGetLoweredName", nv.nvrtcGetLoweredName(p, exprs[i], &low));
    if (!(lowered[i] = kt__strdup(low))) goto nomem;
  }
  NVCHECK("nvrtcGetCUBINSize", nv.nvrtcGetCUBINSize(p, size));
  /* A compute_XY target makes PTX (text, its NUL counted), which the
  ** driver loads as it loads a cubin. */
  int ptx = *size == 0;
  if (ptx) NVCHECK("nvrtcGetPTXSize", nv.nvrtcGetPTXSize(p, size));
  if (*size <= 1) {
    snprintf(err, errlen, "NVRTC: no cubin or PTX produced");
    return KT_ERR_COMPILE;
  }
  if (!(*cubin = kt__malloc(*size))) goto nomem;
  if (ptx) NVCHECK("nvrtcGetPTX", nv.nvrtcGetPTX(p, *cubin));
  else NVCHECK("nvrtcGetCUBIN", nv.nvrtcGetCUBIN(p, *cubin));
done:
  return st;
nomem:
  snprintf(err, errlen, "out of memory");
  return KT_ERR_NOMEM;
}

kt_status kt__nvrtc_compile_many(const char *src, const char *prog_name, const char *const *exprs, int n,
                                 const char *const *opts, int nopts, void **cubin, size_t *size, char **lowered,
                                 char *err, size_t errlen) {
  *cubin = NULL;
  for (int i = 0; i < n; i++) lowered[i] = NULL;
  kt_status st = kt__nvrtc_load(NULL, err, errlen);
  if (st) return st;
  nvrtcProgram p = NULL;
  nvrtcResult r = nv.nvrtcCreateProgram(&p, src, prog_name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    snprintf(err, errlen, "NVRTC: nvrtcCreateProgram: %s", nv.nvrtcGetErrorString(r));
    return r == NVRTC_ERROR_OUT_OF_MEMORY ? KT_ERR_NOMEM : KT_ERR_COMPILE;
  }
  for (int i = 0; i < n && !st; i++) NVCHECK("nvrtcAddNameExpression", nv.nvrtcAddNameExpression(p, exprs[i]));
  r = nv.nvrtcCompileProgram(p, nopts, opts);
  if (r != NVRTC_SUCCESS) {
    snprintf(err, errlen, "NVRTC:");
    append_log(p, err, errlen);
    if (!strcmp(err, "NVRTC:")) snprintf(err, errlen, "NVRTC: %s", nv.nvrtcGetErrorString(r));
    st = KT_ERR_COMPILE;
    goto done;
  }
  st = results(p, exprs, n, cubin, size, lowered, err, errlen);
done:
  if (st) {
    kt__free(*cubin);
    *cubin = NULL;
    for (int i = 0; i < n; i++) {
      kt__free(lowered[i]);
      lowered[i] = NULL;
    }
  }
  nv.nvrtcDestroyProgram(&p);
  return st;
}

kt_status kt__nvrtc_warm(const char *arch, char *err, size_t errlen) {
  static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
  static int done;
  pthread_mutex_lock(&once);
  kt_status st = KT_OK;
  if (!done) {
    char opt[64];
    st = kt__nvrtc_target(NULL, arch, opt, sizeof opt, err, errlen);
    if (!st) st = compile_empty(opt, err, errlen);
    done = !st;
  }
  pthread_mutex_unlock(&once);
  return st;
}
