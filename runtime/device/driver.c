#include "device/driver.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <threads.h>

/* Each entry point with the ABI version its PFN typedef names. */
#define KT__DRIVER_FUNCS(X)                                 \
  X(cuInit, 2000, 1)                                        \
  X(cuDriverGetVersion, 2020, 1)                            \
  X(cuDeviceGetCount, 2000, 1)                              \
  X(cuDeviceGet, 2000, 1)                                   \
  X(cuDeviceGetName, 2000, 1)                               \
  X(cuDeviceGetAttribute, 2000, 1)                          \
  X(cuDevicePrimaryCtxRetain, 7000, 1)                      \
  X(cuDevicePrimaryCtxRelease, 11000, 1)                    \
  X(cuCtxSetCurrent, 4000, 1)                               \
  X(cuCtxGetCurrent, 4000, 1)                               \
  X(cuCtxSynchronize, 2000, 1)                              \
  X(cuModuleLoadData, 2000, 1)                              \
  X(cuModuleUnload, 2000, 1)                                \
  X(cuModuleGetFunction, 2000, 1)                           \
  X(cuFuncGetAttribute, 2020, 1)                            \
  X(cuFuncSetAttribute, 9000, 1)                            \
  X(cuLaunchKernel, 4000, 1)                                \
  X(cuLaunchKernelEx, 11060, 1)                             \
  X(cuMemAlloc, 3020, 1)                                    \
  X(cuMemFree, 3020, 1)                                     \
  X(cuMemcpyHtoD, 3020, 1)                                  \
  X(cuMemcpyDtoH, 3020, 1)                                  \
  X(cuMemcpyDtoDAsync, 3020, 1)                             \
  X(cuMemsetD8Async, 3020, 1)                               \
  X(cuStreamCreate, 2000, 1)                                \
  X(cuStreamDestroy, 4000, 1)                               \
  X(cuStreamSynchronize, 2000, 1)                           \
  X(cuStreamIsCapturing, 10000, 1)                          \
  X(cuThreadExchangeStreamCaptureMode, 10010, 1)            \
  X(cuStreamWaitEvent, 3020, 1)                             \
  X(cuEventCreate, 2000, 1)                                 \
  X(cuEventRecord, 2000, 1)                                 \
  X(cuEventSynchronize, 2000, 1)                            \
  X(cuEventElapsedTime, 2000, 1)                            \
  X(cuEventDestroy, 4000, 1)                                \
  X(cuGetErrorName, 6000, 1)                                \
  X(cuGetErrorString, 6000, 1)                              \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, 1)   \
  X(cuMemGetAddressRange, 3020, 1)                         \
  X(cuStreamBeginCapture, 10010, 1)                         \
  X(cuStreamEndCapture, 10000, 1)                           \
  X(cuGraphInstantiateWithFlags, 11040, 1)                  \
  X(cuGraphLaunch, 10000, 1)                                \
  X(cuGraphExecDestroy, 10000, 1)                           \
  X(cuGraphDestroy, 10000, 1)                               \
  X(cuMemAllocAsync, 11020, 1)                              \
  X(cuMemFreeAsync, 11020, 1)

#define KT__PFN(name, ver, req) PFN_##name##_v##ver name;
static struct {
  KT__DRIVER_FUNCS(KT__PFN)
} drv;
#undef KT__PFN

static once_flag load_once = ONCE_FLAG_INIT;
static kt_status load_status;
static char load_err[512];

static void load_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(load_err, sizeof load_err,
             "cannot load the CUDA driver (libcuda.so.1): %s; is an NVIDIA "
             "driver installed?",
             e ? e : "not found");
    load_status = KT_ERR_NO_DRIVER;
    return;
  }
  PFN_cuGetProcAddress_v12000 gpa =
      (PFN_cuGetProcAddress_v12000)dlsym(h, "cuGetProcAddress_v2");
  if (!gpa) {
    snprintf(load_err, sizeof load_err,
             "libcuda.so.1 has no cuGetProcAddress_v2: the driver is older than "
             "CUDA 12");
    load_status = KT_ERR_NO_DRIVER;
    return;
  }
  CUdriverProcAddressQueryResult q;
#define KT__RESOLVE(name, ver, req)                                          \
  if (gpa(#name, (void **)&drv.name, ver, CU_GET_PROC_ADDRESS_DEFAULT, &q) != \
          CUDA_SUCCESS ||                                                    \
      !drv.name) {                                                           \
    snprintf(load_err, sizeof load_err,                                      \
             "the CUDA driver lacks %s (ABI version %d)", #name, ver);       \
    load_status = KT_ERR_NO_DRIVER;                                          \
    return;                                                                  \
  }
  KT__DRIVER_FUNCS(KT__RESOLVE)
#undef KT__RESOLVE
  CUresult r = drv.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *n = NULL, *s = NULL;
    drv.cuGetErrorName(r, &n);
    drv.cuGetErrorString(r, &s);
    snprintf(load_err, sizeof load_err, "cuInit: %s: %s", n ? n : "?",
             s ? s : "unknown error");
    load_status = r == CUDA_ERROR_NO_DEVICE ? KT_ERR_NO_DEVICE : KT_ERR_CUDA;
    return;
  }
  load_status = KT_OK;
}

kt_status kt__dev_load(char *err, size_t errlen) {
  call_once(&load_once, load_driver);
  if (load_status) snprintf(err, errlen, "%s", load_err);
  return load_status;
}

kt_status kt__dev_error(int res, const char *call, char *err, size_t errlen) {
  const char *n = NULL, *s = NULL;
  if (drv.cuGetErrorName) drv.cuGetErrorName((CUresult)res, &n);
  if (drv.cuGetErrorString) drv.cuGetErrorString((CUresult)res, &s);
  if (err)
    snprintf(err, errlen, "%s: %s: %s", call, n ? n : "CUDA_ERROR_UNKNOWN",
             s ? s : "unknown error");
  if (kt__dev_is_sticky(res)) return KT_ERR_DEVICE_FAULT;
  if (res == CUDA_ERROR_OUT_OF_MEMORY) return KT_ERR_NOMEM;
  return KT_ERR_CUDA;
}

int kt__dev_is_sticky(int res) {
  switch (res) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
      return 1;
  }
  return 0;
}

#define CHECK(call, expr)                                                  \
  do {                                                                     \
    CUresult r_ = (expr);                                                  \
    if (r_ != CUDA_SUCCESS) return kt__dev_error((int)r_, call, err, errlen); \
  } while (0)

kt_status kt__dev_count(int *n, char *err, size_t errlen) {
  kt_status st = kt__dev_load(err, errlen);
  if (st == KT_ERR_NO_DEVICE) {
    *n = 0;
    return KT_OK;
  }
  if (st) return st;
  CHECK("cuDeviceGetCount", drv.cuDeviceGetCount(n));
  return KT_OK;
}

static kt_status attr(int *out, CUdevice_attribute a, CUdevice d, char *err,
                      size_t errlen) {
  CHECK("cuDeviceGetAttribute", drv.cuDeviceGetAttribute(out, a, d));
  return KT_OK;
}

kt_status kt__dev_open(int ordinal, kt__devinfo *info, void **ctx, char *err,
                       size_t errlen) {
  kt_status st = kt__dev_load(err, errlen);
  if (st) return st;
  int n = 0;
  CHECK("cuDeviceGetCount", drv.cuDeviceGetCount(&n));
  if (ordinal < 0 || ordinal >= n) {
    snprintf(err, errlen, "device %d requested, but %d CUDA device%s present",
             ordinal, n, n == 1 ? " is" : "s are");
    return KT_ERR_NO_DEVICE;
  }
  CUdevice d;
  CHECK("cuDeviceGet", drv.cuDeviceGet(&d, ordinal));
  memset(info, 0, sizeof *info);
  info->ordinal = ordinal;
  CHECK("cuDeviceGetName", drv.cuDeviceGetName(info->name, sizeof info->name - 1, d));
  CHECK("cuDriverGetVersion", drv.cuDriverGetVersion(&info->driver_version));
  struct {
    int *out;
    CUdevice_attribute a;
  } attrs[] = {
      {&info->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
      {&info->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
      {&info->num_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      {&info->smem_per_block, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK},
      {&info->smem_per_block_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
      {&info->smem_per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR},
      {&info->l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE},
      {&info->max_threads_per_block, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
  };
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++)
    if ((st = attr(attrs[i].out, attrs[i].a, d, err, errlen))) return st;
  CUcontext c;
  CHECK("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(&c, d));
  *ctx = c;
  return KT_OK;
}

void kt__dev_close(int ordinal) {
  CUdevice d;
  if (drv.cuDeviceGet && drv.cuDeviceGet(&d, ordinal) == CUDA_SUCCESS)
    drv.cuDevicePrimaryCtxRelease(d);
}

kt_status kt__dev_use(void *ctx, char *err, size_t errlen) {
  CUcontext cur = NULL;
  CHECK("cuCtxGetCurrent", drv.cuCtxGetCurrent(&cur));
  if (cur != (CUcontext)ctx) CHECK("cuCtxSetCurrent", drv.cuCtxSetCurrent((CUcontext)ctx));
  return KT_OK;
}

kt_status kt__dev_module_load(const void *image, void **mod, char *err,
                              size_t errlen) {
  CUmodule m;
  CHECK("cuModuleLoadData", drv.cuModuleLoadData(&m, image));
  *mod = m;
  return KT_OK;
}

void kt__dev_module_unload(void *mod) {
  if (mod && drv.cuModuleUnload) drv.cuModuleUnload((CUmodule)mod);
}

kt_status kt__dev_module_function(void *mod, const char *name, void **fn,
                                  char *err, size_t errlen) {
  CUfunction f;
  CHECK("cuModuleGetFunction", drv.cuModuleGetFunction(&f, (CUmodule)mod, name));
  *fn = f;
  return KT_OK;
}

kt_status kt__dev_func_attrs(void *fn, kt__funcattrs *a, char *err,
                             size_t errlen) {
  CUfunction f = fn;
  CHECK("cuFuncGetAttribute", drv.cuFuncGetAttribute(&a->regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
  CHECK("cuFuncGetAttribute", drv.cuFuncGetAttribute(&a->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f));
  CHECK("cuFuncGetAttribute", drv.cuFuncGetAttribute(&a->static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
  CHECK("cuFuncGetAttribute", drv.cuFuncGetAttribute(&a->max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
  return KT_OK;
}

kt_status kt__dev_func_set_max_smem(void *fn, int bytes, char *err,
                                    size_t errlen) {
  CHECK("cuFuncSetAttribute",
        drv.cuFuncSetAttribute((CUfunction)fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
  return KT_OK;
}

kt_status kt__dev_occupancy(void *fn, int block, size_t smem, int *blocks,
                            char *err, size_t errlen) {
  CHECK("cuOccupancyMaxActiveBlocksPerMultiprocessor",
        drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, (CUfunction)fn, block, smem));
  return KT_OK;
}

/* For make bench: everything a launch does but the driver call, to show
** ktune's own share of a launch. */
static int dry_run;
void kt__dev_launch_dry(int on) { dry_run = on; }

int kt__dev_launch(void *fn, const uint32_t grid[3], const uint32_t block[3],
                   uint32_t smem, kt_stream stream, void **params, int early) {
  if (dry_run) return 0;
  if (!early)
    return (int)drv.cuLaunchKernel((CUfunction)fn, grid[0], grid[1], grid[2],
                                   block[0], block[1], block[2], smem,
                                   (CUstream)stream, params, NULL);
  CUlaunchAttribute at = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                          .value.programmaticStreamSerializationAllowed = 1};
  CUlaunchConfig c = {.gridDimX = grid[0], .gridDimY = grid[1], .gridDimZ = grid[2],
                      .blockDimX = block[0], .blockDimY = block[1], .blockDimZ = block[2],
                      .sharedMemBytes = smem, .hStream = (CUstream)stream,
                      .attrs = &at, .numAttrs = 1};
  return (int)drv.cuLaunchKernelEx(&c, (CUfunction)fn, params, NULL);
}

kt_status kt__dev_malloc(kt__dptr *p, size_t bytes, char *err, size_t errlen) {
  CUdeviceptr d;
  CHECK("cuMemAlloc", drv.cuMemAlloc(&d, bytes ? bytes : 1));
  *p = d;
  return KT_OK;
}

void kt__dev_free(kt__dptr p) {
  if (p && drv.cuMemFree) drv.cuMemFree((CUdeviceptr)p);
}

kt_status kt__dev_htod(kt__dptr dst, const void *src, size_t bytes, char *err,
                       size_t errlen) {
  CHECK("cuMemcpyHtoD", drv.cuMemcpyHtoD((CUdeviceptr)dst, src, bytes));
  return KT_OK;
}

kt_status kt__dev_dtoh(void *dst, kt__dptr src, size_t bytes, char *err,
                       size_t errlen) {
  CHECK("cuMemcpyDtoH", drv.cuMemcpyDtoH(dst, (CUdeviceptr)src, bytes));
  return KT_OK;
}

kt_status kt__dev_dtod_async(kt__dptr dst, kt__dptr src, size_t bytes,
                             kt_stream s, char *err, size_t errlen) {
  CHECK("cuMemcpyDtoDAsync",
        drv.cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes, (CUstream)s));
  return KT_OK;
}

kt_status kt__dev_memset8_async(kt__dptr dst, uint8_t v, size_t bytes,
                                kt_stream s, char *err, size_t errlen) {
  CHECK("cuMemsetD8Async", drv.cuMemsetD8Async((CUdeviceptr)dst, v, bytes, (CUstream)s));
  return KT_OK;
}

kt_status kt__dev_sync(kt_stream s, char *err, size_t errlen) {
  CHECK("cuStreamSynchronize", drv.cuStreamSynchronize((CUstream)s));
  return KT_OK;
}

kt_status kt__dev_ctx_sync(char *err, size_t errlen) {
  CHECK("cuCtxSynchronize", drv.cuCtxSynchronize());
  return KT_OK;
}

kt_status kt__dev_stream_create(kt_stream *s, char *err, size_t errlen) {
  CUstream st;
  CHECK("cuStreamCreate", drv.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  *s = st;
  return KT_OK;
}

void kt__dev_stream_destroy(kt_stream s) {
  if (s && drv.cuStreamDestroy) drv.cuStreamDestroy((CUstream)s);
}

kt_status kt__dev_is_capturing(kt_stream s, int *capturing, char *err,
                               size_t errlen) {
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  CHECK("cuStreamIsCapturing", drv.cuStreamIsCapturing((CUstream)s, &cs));
  *capturing = cs != CU_STREAM_CAPTURE_STATUS_NONE;
  return KT_OK;
}

kt_status kt__dev_capture_relaxed(char *err, size_t errlen) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CHECK("cuThreadExchangeStreamCaptureMode", drv.cuThreadExchangeStreamCaptureMode(&mode));
  return KT_OK;
}

kt_status kt__dev_event_create(void **ev, char *err, size_t errlen) {
  CUevent e;
  CHECK("cuEventCreate", drv.cuEventCreate(&e, CU_EVENT_DEFAULT));
  *ev = e;
  return KT_OK;
}

void kt__dev_event_destroy(void *ev) {
  if (ev && drv.cuEventDestroy) drv.cuEventDestroy((CUevent)ev);
}

kt_status kt__dev_event_record(void *ev, kt_stream s, char *err,
                               size_t errlen) {
  CHECK("cuEventRecord", drv.cuEventRecord((CUevent)ev, (CUstream)s));
  return KT_OK;
}

kt_status kt__dev_wait_event(kt_stream s, void *ev, char *err, size_t errlen) {
  CHECK("cuStreamWaitEvent", drv.cuStreamWaitEvent((CUstream)s, (CUevent)ev, 0));
  return KT_OK;
}

kt_status kt__dev_event_sync(void *ev, char *err, size_t errlen) {
  CHECK("cuEventSynchronize", drv.cuEventSynchronize((CUevent)ev));
  return KT_OK;
}

kt_status kt__dev_elapsed(float *ms, void *a, void *b, char *err,
                          size_t errlen) {
  CHECK("cuEventElapsedTime", drv.cuEventElapsedTime(ms, (CUevent)a, (CUevent)b));
  return KT_OK;
}

kt_status kt__dev_range(kt__dptr p, kt__dptr *base, size_t *size, char *err,
                        size_t errlen) {
  CUdeviceptr b;
  size_t n;
  CUresult r = drv.cuMemGetAddressRange(&b, &n, (CUdeviceptr)p);
  if (r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE) {
    snprintf(err, errlen, "cuMemGetAddressRange: 0x%llx is not device memory",
             (unsigned long long)p);
    return KT_ERR_NOT_FOUND;
  }
  if (r != CUDA_SUCCESS) return kt__dev_error((int)r, "cuMemGetAddressRange", err, errlen);
  *base = b;
  *size = n;
  return KT_OK;
}

kt_status kt__dev_capture_begin(kt_stream s, int global, char *err, size_t errlen) {
  CHECK("cuStreamBeginCapture",
        drv.cuStreamBeginCapture((CUstream)s, global ? CU_STREAM_CAPTURE_MODE_GLOBAL : CU_STREAM_CAPTURE_MODE_RELAXED));
  return KT_OK;
}

kt_status kt__dev_capture_end_and_run(kt_stream s, int replays, char *err, size_t errlen) {
  CUgraph g = NULL;
  CUgraphExec x = NULL;
  CHECK("cuStreamEndCapture", drv.cuStreamEndCapture((CUstream)s, &g));
  CUresult r = drv.cuGraphInstantiateWithFlags(&x, g, 0);
  for (int i = 0; r == CUDA_SUCCESS && i < replays; i++) r = drv.cuGraphLaunch(x, (CUstream)s);
  if (r == CUDA_SUCCESS) r = drv.cuStreamSynchronize((CUstream)s);
  if (x) drv.cuGraphExecDestroy(x);
  drv.cuGraphDestroy(g);
  if (r != CUDA_SUCCESS) return kt__dev_error((int)r, "graph replay", err, errlen);
  return KT_OK;
}

kt_status kt__dev_malloc_async(kt__dptr *p, size_t bytes, kt_stream s, char *err, size_t errlen) {
  CUdeviceptr d;
  CHECK("cuMemAllocAsync", drv.cuMemAllocAsync(&d, bytes ? bytes : 1, (CUstream)s));
  *p = d;
  return KT_OK;
}

kt_status kt__dev_free_async(kt__dptr p, kt_stream s, char *err, size_t errlen) {
  CHECK("cuMemFreeAsync", drv.cuMemFreeAsync((CUdeviceptr)p, (CUstream)s));
  return KT_OK;
}
