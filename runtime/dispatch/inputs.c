/* Synthetic inputs for a call (kt_inputs_make): the tune layer's inputs
** behind an opaque handle. */
#include "dispatch/handles.h"
#include "tune/inputs.h"

#include "base/alloc.h"

struct kt_inputs {
  kt__inputs in;
};

kt_status kt_inputs_make(kt_kernel *k, const kt_arg *args, int nargs, uint64_t seed, kt_inputs **out) {
  if (!k || !out || (!args && nargs))
    return kt__misuse(kt__rt_of(k), "kt_inputs_make", !k ? "k is NULL" : !out ? "out is NULL" : "args is NULL");
  *out = NULL;
  if (!k->rt->env.have_device)
    return kt__err(k->rt->env.id, KT_ERR_NO_DEVICE, "kt_inputs_make: this runtime was opened without a device");
  kt__call c;
  kt_status st = kt__call_bind(&k->p, args, nargs, &c);
  if (st) return st;
  char err[KT_ERRMAX];
  if ((st = kt__dev_use(k->rt->env.ctx, err, sizeof err))) return kt__err(k->rt->env.id, st, "kt_inputs_make: %s", err);
  kt_inputs *in = kt__calloc(1, sizeof *in);
  if (!in) return kt__err(k->rt->env.id, KT_ERR_NOMEM, "kt_inputs_make: out of memory");
  if ((st = kt__inputs_make(&k->p, &c, args, seed, &in->in))) {
    kt__inputs_free(&in->in);
    kt__free(in);
    return st;
  }
  *out = in;
  return KT_OK;
}

const kt_arg *kt_inputs_args(const kt_inputs *in) { return in ? in->in.args : NULL; }

void kt_inputs_free(kt_inputs *in) {
  if (!in) return;
  kt__inputs_free(&in->in);
  kt__free(in);
}
