/* What the candidates measured so far say about those not yet compiled.
** A field value is judged beside each of the candidate's other values, not
** alone: the fields of a kernel interact (STAGES = 2 may lose in clusters
** and win without), so a value that lost where it was measured says
** nothing of a combination never measured. Not thread safe: the tuner
** holds its lock around every call. */
#ifndef KT_EVIDENCE_H
#define KT_EVIDENCE_H

#include <stddef.h>
#include <stdint.h>

#include "spec/spec.h"

/* Pruning: a candidate is left uncompiled when, for one of its field values
** v, the candidates measured with v number at least KT__PRUNE_MIN and, beside
** each of its other field values, at least KT__PRUNE_PAIR_MIN, and the
** fastest of each such group is at least KT__PRUNE_MARGIN times the fastest
** measured. A spec of one config field judges v alone. */
#define KT__PRUNE_MIN 6
#define KT__PRUNE_PAIR_MIN 2
#define KT__PRUNE_MARGIN 1.10

typedef struct kt__evidence kt__evidence;

/* New, empty evidence for s's config fields: the caller owns it (free with
** kt__evidence_free); NULL when out of memory. s must outlive it. */
kt__evidence *kt__evidence_new(const kt__spec *s);
void kt__evidence_free(kt__evidence *e);

/* A candidate with config cfg (one value per config field) measured at
** median_us. */
void kt__evidence_note(kt__evidence *e, const int64_t *cfg, double median_us);

/* Whether cfg is predicted to lose, by the rule above; when it is, why (at
** most n bytes, the field value and the times that decided). */
int kt__evidence_prunes(const kt__evidence *e, const int64_t *cfg, char *why, size_t n);

#endif
