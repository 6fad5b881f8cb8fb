/*
** The norms' per-call bodies of ktune.ops in C: the eager call, and the
** forward and backward of its autograd Function. Each does what
** ktune/ops.py's Python body does (the same allocations, the same kt_arg
** arrays, the same launches) for the common case: dense tensors on one
** device that ktune.ops has registered, row lengths and counts that fit
** an i32. Any other call goes to the Python body given to norm_setup,
** which handles or rejects it in the package's words. Why C: from Python
** each tensor attribute, list and frame costs a little, and under
** autograd the backward runs on the engine's device thread, where those
** costs grow (docs/kernels.md, tenth run: the backward's Python body took
** 42.6 us on the caller's thread and 66.5 us on the engine's).
*/
#include <stdatomic.h>
#include <string.h>

#include "_fastargs.h"
#include "_fastnorm.h"

/* The params each kernel has (layernorm_fwd, _bwd_row, _bwd, _bwd_reduce):
** pointers first, then i32s; eps (an f32) is layernorm_fwd's 12th. */
static const int k_params[K_COUNT] = {13, 13, 14, 7};
static const int k_ptrs[K_COUNT] = {8, 9, 9, 4};

/* What norm_setup gives: owned references. */
static struct {
  PyObject *codes;      /* dict: dtype -> kt_dtype code */
  PyObject *convert;    /* dtype -> code for the others (raises) */
  PyObject *empty_like; /* torch.empty_like */
  PyObject *float32;    /* torch.float32 */
  PyObject *plan;       /* (h, dy, dres, T, D, groups, weight, has_bias, has_dw) -> P, 0: one program */
  PyObject *eager_py;   /* the Python bodies, for calls that are not the common case */
  PyObject *forward_py;
  PyObject *backward_py;
  PyObject *paths; /* dict: device index -> tuple of K_COUNT Launchers */
} g;

/* Each device's Launchers, as norm_register kept them (borrowed from
** g.paths), for readers without the GIL. */
static _Atomic(Launcher **) by_dev[FC_MAXDEV];

static PyObject *s_shape, *s_is_contiguous, *s_get_device, *s_dtype, *s_new_empty, *s_saved,
    *s_kt, *s_save, *s_materialize, *s_needs, *kw_dtype;

/* What a launch needs of a tensor. */
typedef struct {
  uint64_t ptr;
  int code; /* kt_dtype */
  long long numel, last;
  Py_ssize_t ndim;
} tinfo;

/* 1 where t is a contiguous tensor on device dev (dev < 0: any, then
** stored) and *o is filled; 0 where it is not (the Python body takes
** the call); -1 with an exception. */
static int inspect(PyObject *t, long *dev, tinfo *o) {
  PyObject *shape = PyObject_GetAttr(t, s_shape);
  if (!shape) return -1;
  int ok = PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > 0;
  o->ndim = ok ? PyTuple_GET_SIZE(shape) : 0;
  o->numel = 1;
  o->last = 0;
  for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(shape); i++) {
    long long n = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (n == -1 && PyErr_Occurred()) {
      Py_DECREF(shape);
      return -1;
    }
    ok = n > 0 && n <= INT32_MAX && o->numel <= INT64_MAX / n;
    o->numel *= n;
    o->last = n;
  }
  Py_DECREF(shape);
  if (!ok) return 0;
  PyObject *r = PyObject_CallMethodNoArgs(t, s_is_contiguous);
  if (!r) return -1;
  Py_DECREF(r);
  if (r != Py_True) return 0;
  if (!(r = PyObject_CallMethodNoArgs(t, s_get_device))) return -1;
  long d = PyLong_AsLong(r);
  Py_DECREF(r);
  if (d == -1 && PyErr_Occurred()) return -1;
  if (d < 0 || (*dev >= 0 && d != *dev)) return 0;
  *dev = d;
  PyObject *dt = PyObject_GetAttr(t, s_dtype);
  if (!dt) return -1;
  int rc = fc_dtype_code(g.codes, g.convert, dt, &o->code);
  Py_DECREF(dt);
  return rc || fc_data_ptr(t, &o->ptr) ? -1 : 1;
}

/* The device's Launchers (borrowed), or NULL where none is registered. */
static Launcher **launchers(long dev) {
  PyObject *key = PyLong_FromLong(dev);
  if (!key) return NULL;
  PyObject *t = g.paths ? PyDict_GetItemWithError(g.paths, key) : NULL; /* borrowed */
  Py_DECREF(key);
  return t ? (Launcher **)&PyTuple_GET_ITEM(t, 0) : NULL;
}

/* A tensor made here as a kernel's pointer of dtype code; NULL: a null
** pointer of null_code (0 where the Python body passes None, the dtype's
** code where it passes ktune.null(dtype)). */
static int ref_t(fa_ref *r, int code, PyObject *t, int null_code) {
  r->ptr = 0;
  r->code = t ? code : null_code;
  return t ? fc_data_ptr(t, &r->ptr) : 0;
}

static fa_ref ref_in(PyObject *t, const tinfo *i) {
  fa_ref r = {0, 0};
  if (t && t != Py_None) r.ptr = i->ptr, r.code = i->code;
  return r;
}

/* like.new_empty(shape, dtype=dtype): shape (borrowed) an int or a tuple. */
static PyObject *new_empty(PyObject *like, PyObject *shape, PyObject *dtype) {
  PyObject *args[] = {like, shape, dtype};
  return PyObject_VectorcallMethod(s_new_empty, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, kw_dtype);
}

/* like.new_empty(n, dtype=dtype) */
static PyObject *new_vec(PyObject *like, long long n, PyObject *dtype) {
  PyObject *shape = PyLong_FromLongLong(n);
  PyObject *r = shape ? new_empty(like, shape, dtype) : NULL;
  Py_XDECREF(shape);
  return r;
}

static PyObject *empty_like(PyObject *t) { return PyObject_CallOneArg(g.empty_like, t); }

/* The forward's outputs (owned; NULL where not made). */
typedef struct {
  PyObject *y, *h, *mean, *rstd;
} fwd_out;

static void fwd_out_clear(fwd_out *o) {
  Py_CLEAR(o->y);
  Py_CLEAR(o->h);
  Py_CLEAR(o->mean);
  Py_CLEAR(o->rstd);
}

/* The forward's arguments: x, residual, weight, bias, groups, eps, rms,
** store; *T, *D and the flags read from them. */
typedef struct {
  PyObject *x, *res, *w, *b;
  long long T, D, groups;
  double eps;
  int rms, store;
  long dev;
  Launcher **k; /* the device's, borrowed (a registration stays) */
  tinfo xi, ri, wi, bi;
} fwd_args;

/* A tensor argument that may be None: 1 where it is None or a tensor
** like inspect's of numel elements whose last dim is last (0: any). */
static int inspect_opt(PyObject *t, long *dev, tinfo *o, long long numel, long long last) {
  if (t == Py_None) return 1;
  int rc = inspect(t, dev, o);
  return rc <= 0 ? rc : o->numel == numel && (!last || o->last == last);
}

/* 1 where a and b have the same shape, 0 where not, -1 with an exception. */
static int same_shape(PyObject *a, PyObject *b) {
  PyObject *sa = PyObject_GetAttr(a, s_shape), *sb = sa ? PyObject_GetAttr(b, s_shape) : NULL;
  int r = sb ? PyObject_RichCompareBool(sa, sb, Py_EQ) : -1;
  Py_XDECREF(sa);
  Py_XDECREF(sb);
  return r;
}

/* 1 where the call is the common case (see the file's comment). */
static int fwd_read(PyObject *const *a, fwd_args *f) {
  f->x = a[0], f->res = a[1], f->w = a[2], f->b = a[3];
  if (!PyLong_Check(a[4]) || !PyFloat_Check(a[5])) return 0;
  f->groups = PyLong_AsLongLong(a[4]);
  f->eps = PyFloat_AS_DOUBLE(a[5]);
  if ((f->groups == -1 && PyErr_Occurred()) || (f->rms = PyObject_IsTrue(a[6])) < 0 ||
      (f->store = PyObject_IsTrue(a[7])) < 0)
    return -1;
  f->dev = -1;
  int rc = inspect(f->x, &f->dev, &f->xi);
  if (rc <= 0) return rc;
  f->D = f->xi.last;
  f->T = f->xi.numel / f->D;
  if (f->T > INT32_MAX || f->groups < 1 || f->D % f->groups || f->T * f->groups > INT32_MAX) return 0;
  if ((rc = inspect_opt(f->res, &f->dev, &f->ri, f->xi.numel, f->D)) <= 0 ||
      (rc = inspect_opt(f->w, &f->dev, &f->wi, f->D, 0)) <= 0 || (rc = inspect_opt(f->b, &f->dev, &f->bi, f->D, 0)) <= 0)
    return rc;
  /* A weight or bias of D elements in another shape than one row, or a
  ** residual of x's elements in another shape than x's, wants its
  ** gradient in its own shape, which the Python body records. */
  if ((f->w != Py_None && f->wi.ndim != 1) || (f->b != Py_None && f->bi.ndim != 1)) return 0;
  if (f->res != Py_None && (rc = same_shape(f->x, f->res)) <= 0) return rc;
  return (f->k = launchers(f->dev)) ? 1 : PyErr_Occurred() ? -1 : 0;
}

/* layernorm_fwd's outputs made and the kernel launched, as
** ops._norm_fwd_impl does; stats: mean (LayerNorm) and rstd too. */
static int fwd_run(fwd_args *f, int stats, fwd_out *o) {
  memset(o, 0, sizeof *o);
  long long n = f->T * f->groups;
  if (!(o->y = empty_like(f->x)) || (f->store && !(o->h = empty_like(f->x))) ||
      (stats && !f->rms && !(o->mean = new_vec(f->x, n, g.float32))) ||
      (stats && !(o->rstd = new_vec(f->x, n, g.float32))))
    return -1;
  int x = f->xi.code, wd = f->w != Py_None ? f->wi.code : f->b != Py_None ? f->bi.code : x;
  fa_fwd v = {.x = ref_in(f->x, &f->xi), .res = ref_in(f->res, &f->ri), .w = ref_in(f->w, &f->wi),
              .b = ref_in(f->b, &f->bi), .T = f->T, .D = f->D, .groups = f->groups, .eps = f->eps, .rms = f->rms};
  /* An absent weight or bias is a null pointer of the other's dtype (as
  ** ops passes ktune.null(wd)); a present one keeps its own, so that the
  ** library refuses a bias whose dtype is not the weight's rather than
  ** read its bytes as the weight's type. */
  if (f->w == Py_None) v.w.code = wd;
  if (f->b == Py_None) v.b.code = wd;
  if (ref_t(&v.y, x, o->y, 0) || ref_t(&v.h, x, o->h, x) || ref_t(&v.mean, KT_F32, o->mean, 0) ||
      ref_t(&v.rstd, KT_F32, o->rstd, 0))
    return -1;
  kt_arg a[13];
  fa_fill_fwd(a, &v);
  return fc_run(f->k[K_FWD], a);
}

/* The Python body with the same arguments (borrowed ctx first where given). */
static PyObject *fallback(PyObject *fn, PyObject *ctx, PyObject *const *args, Py_ssize_t n) {
  PyObject *all[10];
  Py_ssize_t k = 0;
  if (ctx) all[k++] = ctx;
  for (Py_ssize_t i = 0; i < n && k < 10; i++) all[k++] = args[i];
  return PyObject_Vectorcall(fn, all, (size_t)k, NULL);
}

static PyObject *pair(PyObject *y, PyObject *h) {
  return PyTuple_Pack(2, y, h ? h : Py_None);
}

/* norm_eager(x, residual, weight, bias, groups, eps, rms, store) -> (y, h) */
static PyObject *norm_eager(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 8 || !g.eager_py) {
    PyErr_SetString(PyExc_TypeError, "norm_eager takes 8 arguments, after norm_setup");
    return NULL;
  }
  fwd_args f;
  int rc = fwd_read(args, &f);
  if (rc <= 0) return rc < 0 ? NULL : fallback(g.eager_py, NULL, args, nargs);
  fwd_out o;
  PyObject *r = fwd_run(&f, 0, &o) ? NULL : pair(o.y, o.h);
  fwd_out_clear(&o);
  return r;
}

/* norm_forward(ctx, x, residual, weight, bias, groups, eps, rms, store)
** -> (y, h): the autograd Function's forward, with _norm_setup's ctx. */
static PyObject *norm_forward(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 9 || !g.forward_py) {
    PyErr_SetString(PyExc_TypeError, "norm_forward takes 9 arguments, after norm_setup");
    return NULL;
  }
  PyObject *ctx = args[0];
  fwd_args f;
  int rc = fwd_read(args + 1, &f);
  if (rc <= 0) return rc < 0 ? NULL : fallback(g.forward_py, ctx, args + 1, nargs - 1);
  fwd_out o;
  PyObject *r = NULL;
  if (fwd_run(&f, 1, &o)) goto out;
  /* The backward reads the normalised input: h when it was stored, else x. */
  PyObject *save[] = {ctx, o.h ? o.h : f.x, f.w, o.mean ? o.mean : Py_None, o.rstd};
  PyObject *t = PyObject_VectorcallMethod(s_save, save, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
  if (!t) goto out;
  Py_DECREF(t);
  PyObject *no[] = {ctx, Py_False};
  if (!(t = PyObject_VectorcallMethod(s_materialize, no, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL))) goto out;
  Py_DECREF(t);
  PyObject *kt = Py_BuildValue("(LOOOO)", f.groups, f.rms ? Py_True : Py_False, f.b != Py_None ? Py_True : Py_False,
                               f.res != Py_None ? Py_True : Py_False, f.store ? Py_True : Py_False);
  if (!kt) goto out;
  rc = PyObject_SetAttr(ctx, s_kt, kt);
  Py_DECREF(kt);
  if (!rc) r = pair(o.y, o.h);
out:
  fwd_out_clear(&o);
  return r;
}

/* The backward's arguments, read from ctx and the gradients. */
typedef struct {
  PyObject *dy, *dres, *h, *w, *mean, *rstd;
  long long T, D, groups;
  int rms, has_bias, has_res, has_dw; /* has_bias, has_dw: db and dw summed */
  long dev;
  Launcher **k; /* the device's, borrowed (a registration stays) */
  tinfo hi, dyi, ri, wi, mi, si;
} bwd_args;

/* 1 where the call is the common case; saved is ctx.saved_tensors, kt
** ctx.kt (both borrowed). */
static int bwd_read(PyObject *saved, PyObject *kt, PyObject *dy, PyObject *dh, bwd_args *b) {
  if (!PyTuple_Check(saved) || PyTuple_GET_SIZE(saved) != 4 || !PyTuple_Check(kt) || PyTuple_GET_SIZE(kt) != 5 ||
      dy == Py_None)
    return 0;
  b->h = PyTuple_GET_ITEM(saved, 0), b->w = PyTuple_GET_ITEM(saved, 1);
  b->mean = PyTuple_GET_ITEM(saved, 2), b->rstd = PyTuple_GET_ITEM(saved, 3);
  b->groups = PyLong_AsLongLong(PyTuple_GET_ITEM(kt, 0));
  if (b->groups == -1 && PyErr_Occurred()) return -1;
  b->rms = PyTuple_GET_ITEM(kt, 1) == Py_True;
  /* ctx.kt's bias and residual: True (one row; x's shape), False (none),
  ** or a shape their gradients take, which the Python body gives them. */
  PyObject *bias = PyTuple_GET_ITEM(kt, 2), *res = PyTuple_GET_ITEM(kt, 3);
  if ((bias != Py_True && bias != Py_False) || (res != Py_True && res != Py_False)) return 0;
  b->has_bias = bias == Py_True;
  b->has_res = res == Py_True;
  b->dy = dy;
  b->dres = PyTuple_GET_ITEM(kt, 4) == Py_True && dh != Py_None ? dh : Py_None;
  b->dev = -1;
  int rc = inspect(b->h, &b->dev, &b->hi);
  if (rc <= 0) return rc;
  b->D = b->hi.last;
  b->T = b->hi.numel / b->D;
  long long n = b->hi.numel, stats = b->T * b->groups;
  if (b->groups < 1 || (rc = inspect_opt(dy, &b->dev, &b->dyi, n, b->D)) <= 0 ||
      (rc = inspect_opt(b->dres, &b->dev, &b->ri, n, b->D)) <= 0 || (rc = inspect_opt(b->w, &b->dev, &b->wi, b->D, 0)) <= 0 ||
      (rc = inspect_opt(b->mean, &b->dev, &b->mi, stats, 0)) <= 0 || b->rstd == Py_None ||
      (rc = inspect_opt(b->rstd, &b->dev, &b->si, stats, 0)) <= 0)
    return rc;
  if (b->w != Py_None && b->wi.ndim != 1) return 0; /* dw in the weight's shape: the Python body */
  return (b->k = launchers(b->dev)) ? 1 : PyErr_Occurred() ? -1 : 0;
}

/* Only the sums autograd asks for (ctx.needs_input_grad: x, residual,
** weight, bias, ...): a frozen weight is read for dx, its dw not summed.
** A ctx without it (not torch's) gets every sum. */
static void bwd_needs(PyObject *ctx, bwd_args *b) {
  PyObject *n = PyObject_GetAttr(ctx, s_needs);
  if (!n) PyErr_Clear();
  int known = n && PyTuple_Check(n) && PyTuple_GET_SIZE(n) >= 4;
  b->has_dw = b->w != Py_None && (!known || PyTuple_GET_ITEM(n, 2) == Py_True);
  b->has_bias = b->has_bias && (!known || PyTuple_GET_ITEM(n, 3) == Py_True);
  Py_XDECREF(n);
}

/* The backward's outputs (owned; NULL where not made). */
typedef struct {
  PyObject *dx, *dw, *db, *dwp, *dbp;
} bwd_out;

static void bwd_out_clear(bwd_out *o) {
  Py_CLEAR(o->dx);
  Py_CLEAR(o->dw);
  Py_CLEAR(o->db);
  Py_CLEAR(o->dwp);
  Py_CLEAR(o->dbp);
}

/* The P that ops._bwd_plan gives (0: layernorm_bwd_row), or -1. */
static long long bwd_plan(bwd_args *b) {
  PyObject *args[] = {b->h, b->dy, b->dres, NULL, NULL, NULL, b->w, b->has_bias ? Py_True : Py_False,
                      b->has_dw ? Py_True : Py_False};
  long long v[3] = {b->T, b->D, b->groups};
  for (int i = 0; i < 3; i++)
    if (!(args[3 + i] = PyLong_FromLongLong(v[i]))) goto fail;
  PyObject *r = PyObject_Vectorcall(g.plan, args, 9, NULL);
  for (int i = 0; i < 3; i++) Py_CLEAR(args[3 + i]);
  if (!r) return -1;
  long long P = PyLong_AsLongLong(r);
  Py_DECREF(r);
  if (P < 0 || P > INT32_MAX) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "ktune.ops: the backward's plan gave P = %lld", P);
    return -1;
  }
  return P;
fail:
  for (int i = 0; i < 3; i++) Py_CLEAR(args[3 + i]);
  return -1;
}

/* The weight's dtype code: the weight's, else h's (ops passes h's dtype). */
static int wd_of(const bwd_args *b) { return b->w != Py_None ? b->wi.code : b->hi.code; }

/* The inputs the two backward kernels share: dy, h, w, mean, rstd, dres. */
static fa_bwd bwd_refs(const bwd_args *b, int wd) {
  fa_bwd v = {.dy = ref_in(b->dy, &b->dyi), .h = ref_in(b->h, &b->hi), .w = ref_in(b->w, &b->wi),
              .mean = b->rms ? (fa_ref){0, 0} : ref_in(b->mean, &b->mi), .rstd = ref_in(b->rstd, &b->si),
              .dres = ref_in(b->dres, &b->ri), .T = b->T, .D = b->D, .groups = b->groups, .rms = b->rms};
  v.w.code = wd;
  return v;
}

/* dx, and dw and db where they are summed. */
static int bwd_alloc(bwd_args *b, bwd_out *o) {
  PyObject *wdt = PyObject_GetAttr(b->w != Py_None ? b->w : b->h, s_dtype);
  if (!wdt) return -1;
  int bad = !(o->dx = empty_like(b->h)) || (b->has_dw && !(o->dw = new_vec(b->h, b->D, wdt))) ||
            (b->has_bias && !(o->db = new_vec(b->h, b->D, wdt)));
  Py_DECREF(wdt);
  return bad ? -1 : 0;
}

/* The one-program backward (layernorm_bwd_row). */
static int bwd_row(bwd_args *b, bwd_out *o) {
  int wd = wd_of(b);
  fa_bwd v = bwd_refs(b, wd);
  if (ref_t(&v.dx, b->hi.code, o->dx, 0) || ref_t(&v.dw, wd, o->dw, wd) || ref_t(&v.db, wd, o->db, wd)) return -1;
  kt_arg a[13];
  fa_fill_bwd_row(a, &v);
  return fc_run(b->k[K_ROW], a);
}

/* P programs' partial rows (layernorm_bwd), then their sum into dw and db
** (layernorm_bwd_reduce) where there is a weight or a bias. */
static int bwd_programs(bwd_args *b, bwd_out *o, long long P) {
  int wd = wd_of(b);
  PyObject *pd = Py_BuildValue("(LL)", P, b->D);
  if (!pd) return -1;
  int bad = (b->has_dw && !(o->dwp = new_empty(b->h, pd, g.float32))) ||
            (b->has_bias && !(o->dbp = new_empty(b->h, pd, g.float32)));
  Py_DECREF(pd);
  fa_bwd v = bwd_refs(b, wd);
  if (bad || ref_t(&v.dx, b->hi.code, o->dx, 0) || ref_t(&v.dw, KT_F32, o->dwp, 0) ||
      ref_t(&v.db, KT_F32, o->dbp, 0))
    return -1;
  kt_arg a[14], r[7];
  fa_fill_bwd(a, &v, P);
  if (fc_run(b->k[K_BWD], a)) return -1;
  if (!o->dwp && !o->dbp) return 0;
  fa_ref dw, db;
  if (ref_t(&dw, wd, o->dw, wd) || ref_t(&db, wd, o->db, wd)) return -1;
  fa_fill_reduce(r, dw, db, v.dw, v.db, b->T, b->D, P);
  return fc_run(b->k[K_REDUCE], r);
}

/* norm_backward(ctx, dy, dh) -> the 8 gradients of norm_forward's inputs. */
static PyObject *norm_backward(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3 || !g.backward_py) {
    PyErr_SetString(PyExc_TypeError, "norm_backward takes 3 arguments, after norm_setup");
    return NULL;
  }
  PyObject *saved = PyObject_GetAttr(args[0], s_saved), *kt = saved ? PyObject_GetAttr(args[0], s_kt) : NULL;
  bwd_args b;
  int rc = kt ? bwd_read(saved, kt, args[1], args[2], &b) : -1;
  if (rc > 0) bwd_needs(args[0], &b);
  PyObject *r = NULL;
  bwd_out o;
  memset(&o, 0, sizeof o);
  long long P;
  if (rc == 0) {
    r = fallback(g.backward_py, args[0], args + 1, 2);
  } else if (rc > 0 && (P = bwd_plan(&b)) >= 0 && !bwd_alloc(&b, &o) &&
             !(P ? bwd_programs(&b, &o, P) : bwd_row(&b, &o))) {
    PyObject *n = Py_None;
    r = PyTuple_Pack(8, o.dx, b.has_res ? o.dx : n, o.dw ? o.dw : n, o.db ? o.db : n, n, n, n, n);
  }
  bwd_out_clear(&o);
  Py_XDECREF(saved);
  Py_XDECREF(kt);
  return r;
}

/* norm_setup(codes, convert, empty_like, float32, plan, eager, forward,
** backward): what the bodies call; once, before the first call. */
static PyObject *norm_setup(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  PyObject **slot[] = {&g.codes, &g.convert, &g.empty_like, &g.float32, &g.plan, &g.eager_py, &g.forward_py,
                       &g.backward_py};
  if (nargs != 8 || !PyDict_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError,
                    "norm_setup(codes, convert, empty_like, float32, plan, eager, forward, backward)");
    return NULL;
  }
  if (!g.paths && !(g.paths = PyDict_New())) return NULL;
  for (int i = 0; i < 8; i++) {
    Py_INCREF(args[i]);
    Py_XSETREF(*slot[i], args[i]);
  }
  Py_RETURN_NONE;
}

/* norm_register(device, launchers): the device's four Launchers, in
** K_FWD..K_REDUCE order; each must have its kernel's params. */
static PyObject *norm_register(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2 || !PyLong_Check(args[0]) || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != K_COUNT ||
      !g.paths) {
    PyErr_SetString(PyExc_TypeError, "norm_register(device, (fwd, row, bwd, reduce)), after norm_setup");
    return NULL;
  }
  for (int i = 0; i < K_COUNT; i++) {
    PyObject *o = PyTuple_GET_ITEM(args[1], i);
    Launcher *L = (Launcher *)o;
    int ok = Py_TYPE(o) == &fc_launcher_type && L->n == k_params[i];
    for (int j = 0; ok && j < L->n; j++)
      ok = L->kinds[j] == (j < k_ptrs[i] ? KT_ARG_PTR : (i == K_FWD && j == 11) ? KT_ARG_F32 : KT_ARG_I32);
    if (!ok) {
      PyErr_Format(PyExc_ValueError, "norm_register: launcher %d does not have the params of its kernel", i);
      return NULL;
    }
  }
  /* The first registration stays: a body may be launching through it. */
  PyObject *kept = PyDict_SetDefault(g.paths, args[0], args[1]); /* borrowed */
  if (!kept) return NULL;
  long dev = PyLong_AsLong(args[0]);
  if (dev == -1 && PyErr_Occurred()) return NULL;
  /* Published for the bodies that run without the GIL (_fastaten.c): the
  ** dict keeps the tuple, so its item array stays. */
  if (dev >= 0 && dev < FC_MAXDEV && !atomic_load_explicit(&by_dev[dev], memory_order_acquire))
    atomic_store_explicit(&by_dev[dev], (Launcher **)&PyTuple_GET_ITEM(kept, 0), memory_order_release);
  Py_RETURN_NONE;
}

Launcher **fc_norm_launchers(int dev) {
  return dev >= 0 && dev < FC_MAXDEV ? atomic_load_explicit(&by_dev[dev], memory_order_acquire) : NULL;
}

static PyMethodDef norm_methods[] = {
    {"norm_setup", (PyCFunction)(void (*)(void))norm_setup, METH_FASTCALL,
     "norm_setup(codes, convert, empty_like, float32, plan, eager, forward, backward)"},
    {"norm_register", (PyCFunction)(void (*)(void))norm_register, METH_FASTCALL,
     "norm_register(device, (fwd, row, bwd, reduce)): the device's Launchers"},
    {"norm_eager", (PyCFunction)(void (*)(void))norm_eager, METH_FASTCALL,
     "norm_eager(x, residual, weight, bias, groups, eps, rms, store) -> (y, h)"},
    {"norm_forward", (PyCFunction)(void (*)(void))norm_forward, METH_FASTCALL,
     "norm_forward(ctx, x, residual, weight, bias, groups, eps, rms, store) -> (y, h)"},
    {"norm_backward", (PyCFunction)(void (*)(void))norm_backward, METH_FASTCALL,
     "norm_backward(ctx, dy, dh) -> the gradients of norm_forward's inputs"},
    {NULL, NULL, 0, NULL},
};

int fc_norm_init(PyObject *m) {
  struct {
    PyObject **s;
    const char *name;
  } names[] = {{&s_shape, "shape"},         {&s_is_contiguous, "is_contiguous"}, {&s_get_device, "get_device"},
               {&s_dtype, "dtype"},         {&s_new_empty, "new_empty"},
               {&s_saved, "saved_tensors"}, {&s_kt, "kt"},                       {&s_save, "save_for_backward"},
               {&s_materialize, "set_materialize_grads"}, {&s_needs, "needs_input_grad"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!(*names[i].s = PyUnicode_InternFromString(names[i].name))) return -1;
  if (!(kw_dtype = Py_BuildValue("(s)", "dtype"))) return -1;
  return PyModule_AddFunctions(m, norm_methods);
}
