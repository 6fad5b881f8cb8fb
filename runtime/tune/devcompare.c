#include "tune/devcompare.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "device/nvrtc.h"

/* One kernel per dtype, named kt_cmp_<dtype>, C linkage. */
static const char source[] =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "typedef unsigned long long u64;\n"
    "__device__ double ld(const float *p, u64 i) { return p[i]; }\n"
    "__device__ double ld(const double *p, u64 i) { return p[i]; }\n"
    "__device__ double ld(const __half *p, u64 i) { return __half2float(p[i]); }\n"
    "__device__ double ld(const __nv_bfloat16 *p, u64 i) { return __bfloat162float(p[i]); }\n"
    "__device__ double ld(const int *p, u64 i) { return p[i]; }\n"
    "__device__ double ld(const unsigned char *p, u64 i) { return p[i]; }\n"
    "__device__ double ld(const signed char *p, u64 i) { return p[i]; }\n"
    "__device__ double ld(const short *p, u64 i) { return p[i]; }\n"
    "__device__ double ld(const unsigned *p, u64 i) { return p[i]; }\n"
    "template <typename T> __device__ bool same(const T *r, const T *g, u64 i, double atol, double rtol) {\n"
    "  double a = ld(r, i), b = ld(g, i);\n"
    "  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);\n"
    "  if (isinf(a) || isinf(b)) return a == b;\n"
    "  return fabs(b - a) <= atol + rtol * fabs(a);\n"
    "}\n"
    "__device__ bool same(const long long *r, const long long *g, u64 i, double, double) { return r[i] == g[i]; }\n"
    "template <typename T> __device__ void cmp(const T *r, const T *g, u64 n, double atol, double rtol, u64 *c) {\n"
    "  u64 bad = 0, first = ~0ull;\n"
    "  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)\n"
    "    if (!same(r, g, i, atol, rtol)) { bad++; if (first == ~0ull) first = i; }\n"
    "  if (bad) { atomicAdd(&c[0], bad); atomicMin(&c[1], first); }\n"
    "}\n"
    "#define KT_CMP(name, T) extern \"C\" __global__ void kt_cmp_##name(const T *r, const T *g, u64 n,"
    " double atol, double rtol, u64 *c) { cmp(r, g, n, atol, rtol, c); }\n"
    "KT_CMP(f32, float) KT_CMP(f64, double) KT_CMP(f16, __half) KT_CMP(bf16, __nv_bfloat16)\n"
    "KT_CMP(i32, int) KT_CMP(i64, long long) KT_CMP(u8, unsigned char) KT_CMP(i8, signed char)\n"
    "KT_CMP(i16, short) KT_CMP(u32, unsigned)\n";

/* The cubin is compiled once per process for the first arch asked (a
** process drives devices of one arch in practice; another arch compiles
** anew each time). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *cubin;
static char cubin_arch[16];

kt_status kt__devcmp_image(const kt__env *env, void **out, int *mine, char *err, size_t errlen) {
  char arch[64], inc[1100];
  snprintf(inc, sizeof inc, "-I%s/include", env->cuda_home);
  const char *opts[] = {arch, inc, "-std=c++17"};
  const char *expr = "kt_cmp_f32"; /* extern "C": its own lowered name */
  char *lowered = NULL;
  size_t size;
  kt_status st = KT_OK;
  *mine = 0;
  pthread_mutex_lock(&lock);
  if (!cubin || strcmp(cubin_arch, env->arch)) {
    void *c = NULL;
    st = kt__nvrtc_target(env->cuda_home, env->arch, arch, sizeof arch, err, errlen);
    if (!st) st = kt__nvrtc_compile_many(source, "kt_compare.cu", &expr, 0, opts, 3, &c, &size, &lowered, err, errlen);
    if (!st && !cubin) {
      cubin = c;
      snprintf(cubin_arch, sizeof cubin_arch, "%s", env->arch);
    } else if (!st) {
      *out = c;
      *mine = 1;
    }
  }
  if (!st && !*mine) *out = cubin;
  pthread_mutex_unlock(&lock);
  return st;
}

kt_status kt__devcmp_open(kt__devcmp *d, const kt__env *env, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  void *image = NULL;
  int mine;
  kt_status st = kt__devcmp_image(env, &image, &mine, err, errlen);
  if (!st) st = kt__dev_module_load(image, &d->module, err, errlen);
  if (mine) kt__free(image);
  for (int t = 1; !st && t <= KT_U32; t++) {
    char name[32];
    snprintf(name, sizeof name, "kt_cmp_%s", kt_dtype_name((kt_dtype)t));
    st = kt__dev_module_function(d->module, name, &d->fn[t], err, errlen);
  }
  if (!st) st = kt__dev_malloc(&d->counters, 16, err, errlen);
  if (st) kt__devcmp_close(d);
  return st;
}

kt_status kt__devcmp_run(kt__devcmp *d, const kt__env *env, kt_dtype t, kt__dptr ref, kt__dptr got, size_t n,
                         double atol, double rtol, kt_stream s, uint64_t *bad, uint64_t *first, char *err,
                         size_t errlen) {
  uint64_t c[2] = {0, 0};
  if ((int)t < 1 || t > KT_U32 || !d->fn[t]) return snprintf(err, errlen, "no comparison for that dtype"), KT_ERR_INVALID;
  kt_status st = kt__dev_memset8_async(d->counters, 0, 8, s, err, errlen);
  if (!st) st = kt__dev_memset8_async(d->counters + 8, 0xFF, 8, s, err, errlen);
  unsigned long long count = n;
  void *params[] = {&ref, &got, &count, &atol, &rtol, &d->counters};
  size_t blocks = (n + 255) / 256, most = (size_t)(env->dev.num_sms > 0 ? env->dev.num_sms : 1) * 8;
  uint32_t grid[3] = {(uint32_t)(blocks < most ? (blocks ? blocks : 1) : most), 1, 1}, block[3] = {256, 1, 1};
  int res = st ? 0 : kt__dev_launch(d->fn[t], grid, block, 0, s, params, 0);
  if (!st && res) st = kt__dev_error(res, "cuLaunchKernel (comparison)", err, errlen);
  if (!st) st = kt__dev_sync(s, err, errlen);
  if (!st) st = kt__dev_dtoh(c, d->counters, sizeof c, err, errlen);
  *bad = c[0];
  *first = c[1];
  return st;
}

void kt__devcmp_close(kt__devcmp *d) {
  kt__dev_free(d->counters);
  kt__dev_module_unload(d->module);
  memset(d, 0, sizeof *d);
}
