/* Comparing a candidate's outputs with the reference's, element by element
** in the output's dtype: |got - ref| <= atol + rtol * |ref| for finite
** values; NaN only where the reference has NaN; infinities equal. */
#ifndef KT_COMPARE_H
#define KT_COMPARE_H

#include <stddef.h>

#include "ktune.h"

/* The default tolerance of a dtype, for outputs whose spec gives none. */
void kt__default_tolerance(kt_dtype t, double *atol, double *rtol);
/* Number of elements that disagree; the first is described in why. */
size_t kt__compare(kt_dtype t, const void *ref, const void *got, size_t n, double atol,
                   double rtol, char *why, size_t whylen);

/* The same, split over the CPUs for large n; the same result. */
size_t kt__compare_parallel(kt_dtype t, const void *ref, const void *got, size_t n, double atol,
                            double rtol, char *why, size_t whylen);

#endif
