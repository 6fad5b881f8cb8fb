/* The CUDA driver, loaded at run time. This is the only part of ktune that
** calls the driver: libcuda.so.1 is dlopen()ed once, cuGetProcAddress is the
** only symbol taken with dlsym(), and every other entry point is resolved
** through it at a pinned ABI version. Without a driver every call returns
** KT_ERR_NO_DRIVER with a message saying what is missing.
**
** Error messages name the driver call: "cuModuleLoadData:
** CUDA_ERROR_INVALID_PTX: a PTX JIT compilation failed". */
#ifndef KT_DEVICE_H
#define KT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ktune.h"

typedef uint64_t kt__dptr;

typedef struct kt__devinfo {
  int ordinal;
  char name[256];
  int cc_major, cc_minor;
  int num_sms;
  int smem_per_block;        /* default limit */
  int smem_per_block_optin;  /* with the attribute raised */
  int smem_per_sm;
  int l2_bytes;
  int max_threads_per_block;
  int driver_version;        /* e.g. 13000 */
} kt__devinfo;

/* Load the driver and cuInit once per process. Thread-safe. */
kt_status kt__dev_load(char *err, size_t errlen);
kt_status kt__dev_count(int *n, char *err, size_t errlen);

/* Retain the primary context of a device, read its properties. */
kt_status kt__dev_open(int ordinal, kt__devinfo *info, void **ctx, char *err,
                       size_t errlen);
void kt__dev_close(int ordinal);
/* Make ctx current in this thread if it is not already. */
kt_status kt__dev_use(void *ctx, char *err, size_t errlen);

kt_status kt__dev_module_load(const void *image, void **mod, char *err,
                              size_t errlen);
void kt__dev_module_unload(void *mod);
kt_status kt__dev_module_function(void *mod, const char *name, void **fn,
                                  char *err, size_t errlen);

typedef struct kt__funcattrs {
  int regs, local_bytes, static_smem, max_threads;
} kt__funcattrs;
kt_status kt__dev_func_attrs(void *fn, kt__funcattrs *a, char *err,
                             size_t errlen);
/* Allow dynamic shared memory above the default 48 KiB limit. */
kt_status kt__dev_func_set_max_smem(void *fn, int bytes, char *err,
                                    size_t errlen);
kt_status kt__dev_occupancy(void *fn, int block, size_t smem, int *blocks,
                            char *err, size_t errlen);

/* The launch of the hot path: returns the raw CUresult (0 on success) so
** that the caller decides when to spend time on a message. early: launch
** with programmatic stream serialization (sm_90+), so that the kernel's
** blocks start during the previous kernel's tail; the kernel itself must
** wait (griddepcontrol.wait) before it touches global memory. */
int kt__dev_launch(void *fn, const uint32_t grid[3], const uint32_t block[3],
                   uint32_t smem, kt_stream stream, void **params, int early);
/* Bench hook: nonzero makes kt__dev_launch return success without calling
** the driver. */
void kt__dev_launch_dry(int on);
/* "cuLaunchKernel: CUDA_ERROR_INVALID_VALUE: invalid argument" */
kt_status kt__dev_error(int res, const char *call, char *err, size_t errlen);
/* Whether a CUresult leaves the context unusable (illegal address, ...). */
int kt__dev_is_sticky(int res);

kt_status kt__dev_malloc(kt__dptr *p, size_t bytes, char *err, size_t errlen);
void kt__dev_free(kt__dptr p);
/* Stream-ordered allocation, for temporaries of one launch. */
kt_status kt__dev_malloc_async(kt__dptr *p, size_t bytes, kt_stream s, char *err, size_t errlen);
kt_status kt__dev_free_async(kt__dptr p, kt_stream s, char *err, size_t errlen);
kt_status kt__dev_htod(kt__dptr dst, const void *src, size_t bytes, char *err,
                       size_t errlen);
kt_status kt__dev_dtoh(void *dst, kt__dptr src, size_t bytes, char *err,
                       size_t errlen);
kt_status kt__dev_dtod_async(kt__dptr dst, kt__dptr src, size_t bytes,
                             kt_stream s, char *err, size_t errlen);
kt_status kt__dev_memset8_async(kt__dptr dst, uint8_t v, size_t bytes,
                                kt_stream s, char *err, size_t errlen);
kt_status kt__dev_sync(kt_stream s, char *err, size_t errlen);
kt_status kt__dev_ctx_sync(char *err, size_t errlen);
kt_status kt__dev_stream_create(kt_stream *s, char *err, size_t errlen);
void kt__dev_stream_destroy(kt_stream s);
/* Whether s is capturing into a graph. */
kt_status kt__dev_is_capturing(kt_stream s, int *capturing, char *err,
                               size_t errlen);
/* This thread's calls neither fail nor are refused because another thread
** is capturing a graph (a background tuner's thread). */
kt_status kt__dev_capture_relaxed(char *err, size_t errlen);
kt_status kt__dev_event_create(void **ev, char *err, size_t errlen);
void kt__dev_event_destroy(void *ev);
kt_status kt__dev_event_record(void *ev, kt_stream s, char *err,
                               size_t errlen);
kt_status kt__dev_wait_event(kt_stream s, void *ev, char *err, size_t errlen);
kt_status kt__dev_event_sync(void *ev, char *err, size_t errlen);
kt_status kt__dev_elapsed(float *ms, void *a, void *b, char *err,
                          size_t errlen);
/* Start and size of the allocation that holds p, or KT_ERR_NOT_FOUND. */
kt_status kt__dev_range(kt__dptr p, kt__dptr *base, size_t *size, char *err,
                        size_t errlen);

/* For tests and benchmarks: capture s into a graph (in global capture
** mode, PyTorch's default, or relaxed), then end the capture, replay the
** graph `replays` times and wait. */
kt_status kt__dev_capture_begin(kt_stream s, int global, char *err, size_t errlen);
kt_status kt__dev_capture_end_and_run(kt_stream s, int replays, char *err, size_t errlen);

#endif
