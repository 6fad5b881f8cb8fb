#include "tune/confirm.h"

#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "tune/inputs.h"
#include "tune/scratch.h"

static int needs_confirming(const kt__cand *cd) {
  return !cd->prior && (cd->status == KT_TRIAL_MISMATCH || cd->status == KT_TRIAL_OOB_WRITE);
}

/* The reference config on the synthetic scratch, kept to compare with. */
static kt_status reference(kt__prog *p, kt__scratch *sc, const kt__call *base, const int64_t *cfg) {
  kt__call ref = *base;
  int ok;
  char why[600];
  kt_status st = kt__call_config(p, &ref, cfg);
  if (!st) st = kt__scratch_run(sc, &ref);
  if (!st) st = kt__scratch_keep_reference(sc);
  if (!st) st = kt__scratch_guards(sc, &ok, why, sizeof why);
  return st ? st : ok ? KT_OK : KT_ERR_CONSTRAINT;
}

/* One candidate again: 1 when it is rejected on these inputs too. */
static kt_status rerun(kt__scratch *sc, kt__cand *cd, int *rejected) {
  char why[600];
  int ok;
  kt_status st = kt__scratch_run(sc, &cd->c);
  if (!st) st = kt__scratch_guards(sc, &ok, why, sizeof why);
  if (!st && ok) st = kt__scratch_compare(sc, &ok, why, sizeof why);
  *rejected = !st && !ok;
  return st;
}

kt_status kt__confirm_rejections(kt__prog *p, const kt__call *base, const kt_arg *args, const int64_t *cfg,
                                 kt_stream caller, const char *key, kt__cand *cand, int n, int *faulted) {
  int need = 0;
  *faulted = -1;
  for (int i = 0; i < n; i++) need += needs_confirming(&cand[i]);
  if (!need) return KT_OK;
  kt__inputs in;
  kt__scratch sc;
  memset(&sc, 0, sizeof sc);
  char what[1100];
  snprintf(what, sizeof what, "%s: checking rejections on synthetic inputs", key);
  kt_status st = kt__inputs_make(p, base, args, XXH3_64bits(key, strlen(key)), &in);
  if (!st) st = kt__scratch_make(&sc, p, base, in.args, caller, what);
  if (!st) st = reference(p, &sc, base, cfg);
  for (int i = 0; i < n; i++) {
    kt__cand *cd = &cand[i];
    if (!needs_confirming(cd)) continue;
    int rejected = 0;
    kt_status rs = st ? st : rerun(&sc, cd, &rejected);
    if (rs == KT_ERR_DEVICE_FAULT && !st) {
      snprintf(cd->detail, sizeof cd->detail, "%s", sc.err);
      *faulted = i;
      st = rs;
      break;
    }
    cd->unconfirmed = !rejected;
  }
  kt__scratch_free(&sc);
  kt__inputs_free(&in);
  return *faulted >= 0 ? KT_ERR_DEVICE_FAULT : KT_OK;
}
