/* Whether a rejection is a property of the key. A candidate rejected on the
** caller's data (a mismatch, a write out of bounds) is run again on inputs
** the tuner makes itself (tune/inputs.h), beside the reference config; only
** a rejection that happens there too may be stored. One that does not is
** the call's own (its data, a value the kernel treats specially) and stays
** in this tuning's report. */
#ifndef KT_CONFIRM_H
#define KT_CONFIRM_H

#include "call/call.h"
#include "tune/search.h"

/* For each candidate of cand[0..n) rejected as mismatch or oob_write in this
** tuning (not prior), set unconfirmed when the rejection does not happen on
** synthetic inputs for base's call (args: the caller's, for placement and
** scalars). Candidates stay rejected either way. When the synthetic
** reference cannot be run, every such rejection is unconfirmed. Returns
** KT_OK, or KT_ERR_DEVICE_FAULT with *faulted the index of the candidate
** whose run lost the context (its error in its detail). */
kt_status kt__confirm_rejections(kt__prog *p, const kt__call *base, const kt_arg *args, const int64_t *reference,
                                 kt_stream caller, const char *key, kt__cand *cand, int n, int *faulted);

#endif
