/* Which pointer args share bytes, and which sharing a call may have. Two
** reads may share anything; a written arg may share bytes only with an
** identical range that is only read, and only when the spec runs in place
** (an element-wise kernel reading x[i] before writing y[i]); a consumed
** arg (left undefined) with nothing. Anything
** partial (one element, one row, one range nested in another) makes the
** result depend on the order programs run, so it is refused, or staged.
** The tuner gives every group of overlapping ranges that holds a written
** arg one scratch allocation that mirrors the group's layout, so an
** in-place call is benchmarked in place. */
#ifndef KT_ALIAS_H
#define KT_ALIAS_H

#include <stdint.h>

#include "call/call.h"

typedef struct kt__range {
  uint64_t start, end;  /* bytes [start, end) */
  int param;
  int written;
  int group;            /* set by kt__alias_group */
  int consumed;         /* left undefined by the kernel: it shares bytes with nothing */
} kt__range;

/* KT_ERR_ARGS naming arg i when its extent, ext elements, is below 0: it
** describes no buffer. KT_OK otherwise. */
kt_status kt__extent_check(const kt__prog *p, int i, int64_t ext);
/* Byte ranges of the non-null pointer args of a bound call (extent times
** element size); *n of them. KT_ERR_EVAL names an extent that fails,
** KT_ERR_ARGS one below 0 or one that runs past the address space. */
kt_status kt__call_ranges(kt__prog *p, const kt__call *c, const kt_arg *args, kt__range *r, int *n);
/* Index into r of a range that written range r[i] may not share bytes
** with, or -1 (always -1 when r[i] is only read). */
int kt__alias_partner(const kt__range *r, int n, int i, int inplace);
/* KT_ERR_ALIAS naming the first pair the rules refuse, both params and the
** bytes they share; KT_OK when there is none. */
kt_status kt__alias_refuse(kt__prog *p, const kt__range *r, int n);
/* kt__call_ranges, then kt__alias_refuse: r and *n are the ranges either
** way once the extents evaluate. */
kt_status kt__call_alias(kt__prog *p, const kt__call *c, const kt_arg *args, kt__range *r, int *n);

/* Assign group ids (0..n_groups-1) so that ranges that overlap, directly or
** through others, share one; ranges that merely touch do not. Empty ranges
** are alone. Returns the number of groups. O(n log n). */
int kt__alias_group(kt__range *r, int n);

#endif
