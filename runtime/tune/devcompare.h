/* Comparing a candidate's outputs with the reference's on the device, so
** that a trial moves two counters to the host instead of its outputs (a
** 4096 x 3072 bf16 output is 24 MB per trial). The same rule as
** tune/compare.h, in double precision: |got - ref| <= atol + rtol |ref|
** for finite values, NaN only where the reference has NaN, infinities
** equal, 64-bit integers exactly. The kernels are compiled once per
** process and architecture; each tuning loads them as a module of its
** own. */
#ifndef KT_DEVCOMPARE_H
#define KT_DEVCOMPARE_H

#include "device/env.h"

typedef struct kt__devcmp {
  void *module;
  void *fn[16];          /* by kt_dtype */
  kt__dptr counters;     /* bad count, first bad index */
} kt__devcmp;

/* The comparison kernels' cubin for env's arch: the process's (*mine 0)
** or one made for this call (*mine 1: the caller frees it). */
kt_status kt__devcmp_image(const kt__env *env, void **image, int *mine, char *err, size_t errlen);
/* Ready d for env's device; on failure (no NVRTC, a compile error) the
** caller compares on the host. */
kt_status kt__devcmp_open(kt__devcmp *d, const kt__env *env, char *err, size_t errlen);
/* Compare n elements of dtype t at ref and got on stream s (then waited
** for): *bad of them disagree, the first at *first. */
kt_status kt__devcmp_run(kt__devcmp *d, const kt__env *env, kt_dtype t, kt__dptr ref, kt__dptr got, size_t n,
                         double atol, double rtol, kt_stream s, uint64_t *bad, uint64_t *first, char *err,
                         size_t errlen);
/* Accepts a d that never opened. */
void kt__devcmp_close(kt__devcmp *d);

#endif
