/*
** torch's own norm operators run by ktune's kernels on CUDA:
** aten::_fused_rms_norm, aten::native_layer_norm and their backwards,
** registered through torch's stable C ABI (the aoti_torch_* functions,
** looked up in the libraries that torch loaded; no torch header is needed
** to build this). Why: torch's autograd nodes for these operators are C++,
** and a Python autograd.Function costs about 100 us more a forward plus
** backward (docs/kernels.md, twentieth run); a C extension cannot make a
** C++ node, but it can be the kernel under torch's.
**
** A call runs here without the GIL when it is the common case: f32, f16 or
** bf16 tensors on a device whose kernels ktune.ops registered, row lengths
** and counts that fit an i32. A strided one (a transposed input, the
** expanded gradient of y.sum()) is first copied into a contiguous tensor
** by torch's copy_, on the same stream. Any other call, and one whose
** launch fails, goes to the Python fallback given to aten_install, which
** computes it with torch's elementwise operators (never these four), or
** raises; its error is raised to the caller as torch raises its own.
*/
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "_fastargs.h"
#include "_fastaten.h"
#include "_fastnorm.h"

typedef int32_t aerr; /* AOTITorchError: 0 is success */
typedef void *ath;    /* AtenTensorHandle: owns an at::Tensor */
typedef uint64_t siv; /* StableIValue */

/* The functions of torch's stable C ABI used here, looked up by name. */
static struct {
  aerr (*data_ptr)(ath, void **);
  aerr (*dim)(ath, int64_t *);
  aerr (*sizes)(ath, int64_t **);
  aerr (*dtype)(ath, int32_t *);
  aerr (*device_index)(ath, int32_t *);
  aerr (*is_contiguous)(ath, bool *);
  aerr (*is_defined)(ath, bool *);
  aerr (*empty_strided)(int64_t, const int64_t *, const int64_t *, int32_t, int32_t, int32_t, ath *);
  aerr (*copy)(ath, ath, int32_t); /* where torch has it; else strided tensors go to the fallback */
  aerr (*delete_tensor)(ath);
  aerr (*new_undefined)(ath *);
  aerr (*lib_init_impl)(const char *, const char *, const char *, uint32_t, void **);
  aerr (*lib_impl)(void *, const char *, void (*)(siv *, uint64_t, uint64_t));
  aerr (*lib_delete)(void *);
  aerr (*list_size)(void *, size_t *);
  aerr (*list_get)(void *, size_t, siv *);
  aerr (*list_delete)(void *);
  aerr (*delete_siv)(siv *);  /* where torch has it; else cxx_delete */
  void (*cxx_delete)(void *); /* C++'s operator delete, as linked into torch */
  aerr (*stream)(int32_t, void **);
  int (*capturing)(void *, int *); /* cuStreamIsCapturing where paths export it; else libcuda's, later */
  void (*check)(bool, const char *, const char *, uint32_t, const char *);
  int32_t (*f32)(void), (*f16)(void), (*bf16)(void), (*cuda)(void);
} A;

static const struct {
  const char *name;
  size_t off;
  int optional; /* 1: one of delete_siv and cxx_delete is enough; capturing is found later where absent;
                   without copy, strided tensors go to the fallback */
} syms[] = {
    {"aoti_torch_get_data_ptr", offsetof(__typeof__(A), data_ptr), 0},
    {"aoti_torch_get_dim", offsetof(__typeof__(A), dim), 0},
    {"aoti_torch_get_sizes", offsetof(__typeof__(A), sizes), 0},
    {"aoti_torch_get_dtype", offsetof(__typeof__(A), dtype), 0},
    {"aoti_torch_get_device_index", offsetof(__typeof__(A), device_index), 0},
    {"aoti_torch_is_contiguous", offsetof(__typeof__(A), is_contiguous), 0},
    {"aoti_torch_is_defined", offsetof(__typeof__(A), is_defined), 0},
    {"aoti_torch_empty_strided", offsetof(__typeof__(A), empty_strided), 0},
    {"aoti_torch_copy_", offsetof(__typeof__(A), copy), 1},
    {"aoti_torch_delete_tensor_object", offsetof(__typeof__(A), delete_tensor), 0},
    {"aoti_torch_new_uninitialized_tensor", offsetof(__typeof__(A), new_undefined), 0},
    {"aoti_torch_library_init_impl", offsetof(__typeof__(A), lib_init_impl), 0},
    {"aoti_torch_library_impl", offsetof(__typeof__(A), lib_impl), 0},
    {"aoti_torch_delete_library_object", offsetof(__typeof__(A), lib_delete), 0},
    {"torch_list_size", offsetof(__typeof__(A), list_size), 0},
    {"torch_list_get_item", offsetof(__typeof__(A), list_get), 0},
    {"torch_delete_list", offsetof(__typeof__(A), list_delete), 0},
    {"torch_delete_stable_ivalue", offsetof(__typeof__(A), delete_siv), 1},
    {"_ZdlPv", offsetof(__typeof__(A), cxx_delete), 1},
    {"aoti_torch_get_current_cuda_stream", offsetof(__typeof__(A), stream), 0},
    {"cuStreamIsCapturing", offsetof(__typeof__(A), capturing), 1},
    {"aoti_torch_check", offsetof(__typeof__(A), check), 0},
    {"aoti_torch_dtype_float32", offsetof(__typeof__(A), f32), 0},
    {"aoti_torch_dtype_float16", offsetof(__typeof__(A), f16), 0},
    {"aoti_torch_dtype_bfloat16", offsetof(__typeof__(A), bf16), 0},
    {"aoti_torch_device_type_cuda", offsetof(__typeof__(A), cuda), 0},
};

/* The operators, in the order of their fallback's op codes. */
enum { OP_RMS, OP_RMS_BWD, OP_LN, OP_LN_BWD, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"_fused_rms_norm", "_fused_rms_norm_backward", "native_layer_norm",
                                                "native_layer_norm_backward"};

/* What aten_install gives; owned references, kept for the process. */
static struct {
  void *lib;          /* torch::Library of our impls, NULL when not installed */
  PyObject *fallback; /* (op, args) -> tuple of outputs as handle capsules or None */
  PyObject *plan;     /* (dev, T, D, esize, h, dy, w, wsize, has_dw, has_bias) -> P */
  PyObject *reg;      /* (dev) -> None: registers the device's kernels */
  int32_t dt[3];      /* torch's codes of f32, f16, bf16 */
  int32_t cuda;
} g;

#define MAXDIM 16 /* dims a tensor of the fast path may have */

/* A tensor argument as read; h NULL where the argument was None. */
typedef struct {
  ath h;
  fa_ref r; /* r.code 0: a dtype the kernels lack */
  int32_t tdt, dev;
  int64_t dim, sizes[MAXDIM];
  long long numel;
  bool dense;   /* contiguous, at most MAXDIM dims */
  bool strided; /* not contiguous, at most MAXDIM dims: densify can copy it */
} targ;

/* The arguments of one call, read off the stack (owned). */
typedef struct {
  int op;
  targ t[6]; /* by op: see read_call */
  int nt;
  int64_t shape[MAXDIM];
  size_t nshape; /* > MAXDIM: too many to keep */
  double eps;
  int has_eps;
  bool mask[3];
} call;

static void targ_read(ath h, targ *t) {
  memset(t, 0, sizeof *t);
  bool def = false;
  /* An optional given as an undefined tensor (autograd saves an absent
  ** weight so) is None. */
  if (h && (A.is_defined(h, &def) || !def)) {
    A.delete_tensor(h);
    h = NULL;
  }
  t->h = h;
  if (!h) return;
  void *p = NULL;
  int64_t *sz = NULL;
  bool c = false;
  if (A.data_ptr(h, &p) || A.dim(h, &t->dim) || A.sizes(h, &sz) || A.dtype(h, &t->tdt) ||
      A.device_index(h, &t->dev) || A.is_contiguous(h, &c))
    return;
  t->r.ptr = (uint64_t)(uintptr_t)p;
  for (int i = 0; i < 3; i++)
    if (t->tdt == g.dt[i]) t->r.code = i == 0 ? KT_F32 : i == 1 ? KT_F16 : KT_BF16;
  t->numel = 1;
  bool over = false; /* sizes whose product overflows (a dim of 0 among huge ones): not taken */
  for (int64_t i = 0; i < t->dim && i < MAXDIM; i++)
    over |= __builtin_mul_overflow(t->numel, (long long)(t->sizes[i] = sz[i]), &t->numel);
  t->dense = c && t->dim <= MAXDIM && !over;
  t->strided = !c && t->dim <= MAXDIM && !over;
}

/* An optional's box: torch 2.11 makes it with C++'s `new StableIValue`
** and frees it with `delete` (later versions export a function for it). */
static void free_box(siv *box) {
  if (A.delete_siv)
    A.delete_siv(box);
  else
    A.cxx_delete(box);
}

/* An optional argument's value into *out, its box freed: 0 for None. */
static int unbox(siv v, siv *out) {
  if (!v) return 0;
  siv *box = (siv *)(uintptr_t)v;
  *out = *box;
  free_box(box);
  return 1;
}

/* An optional argument's tensor: NULL for None. */
static ath opt_tensor(siv v) {
  siv h = 0;
  return unbox(v, &h) ? (ath)(uintptr_t)h : NULL;
}

/* A list of ints (or of bools into mask), the list freed. */
static void read_list(siv v, call *c, bool is_mask) {
  void *l = (void *)(uintptr_t)v;
  size_t n = 0;
  A.list_size(l, &n);
  for (size_t i = 0; i < n; i++) {
    siv e = 0;
    A.list_get(l, i, &e);
    if (is_mask && i < 3) c->mask[i] = (e & 0xff) != 0;
    if (!is_mask && i < MAXDIM) c->shape[i] = (int64_t)e;
  }
  if (!is_mask) c->nshape = n;
  A.list_delete(l);
}

/* The stack into c, by op (the schemas' order):
**   rms:     input shape weight? eps?             t = input weight
**   rms_bwd: dy input shape rstd weight? mask[2]  t = dy input rstd weight
**   ln:      input shape weight? bias? eps        t = input weight bias
**   ln_bwd:  dy input shape mean rstd weight? bias? mask[3]
**                                                 t = dy input mean rstd weight bias */
static void read_call(int op, siv *s, call *c) {
  memset(c, 0, sizeof *c);
  c->op = op;
  ath t[6] = {0};
  switch (op) {
  case OP_RMS:
    t[0] = (ath)(uintptr_t)s[0], t[1] = opt_tensor(s[2]);
    read_list(s[1], c, false);
    siv eps;
    if ((c->has_eps = unbox(s[3], &eps))) memcpy(&c->eps, &eps, sizeof c->eps);
    c->nt = 2;
    break;
  case OP_RMS_BWD:
    t[0] = (ath)(uintptr_t)s[0], t[1] = (ath)(uintptr_t)s[1], t[2] = (ath)(uintptr_t)s[3], t[3] = opt_tensor(s[4]);
    read_list(s[2], c, false);
    read_list(s[5], c, true);
    c->nt = 4;
    break;
  case OP_LN:
    t[0] = (ath)(uintptr_t)s[0], t[1] = opt_tensor(s[2]), t[2] = opt_tensor(s[3]);
    read_list(s[1], c, false);
    memcpy(&c->eps, &s[4], sizeof c->eps);
    c->has_eps = 1;
    c->nt = 3;
    break;
  default:
    t[0] = (ath)(uintptr_t)s[0], t[1] = (ath)(uintptr_t)s[1], t[2] = (ath)(uintptr_t)s[3];
    t[3] = (ath)(uintptr_t)s[4], t[4] = opt_tensor(s[5]), t[5] = opt_tensor(s[6]);
    read_list(s[2], c, false);
    read_list(s[7], c, true);
    c->nt = 6;
    break;
  }
  for (int i = 0; i < c->nt; i++) targ_read(t[i], &c->t[i]);
}

static void call_free(call *c) {
  for (int i = 0; i < c->nt; i++)
    if (c->t[i].h) A.delete_tensor(c->t[i].h), c->t[i].h = NULL;
}

/* The device's kernels; the first call on a device registers them (with
** the GIL, once). NULL where they cannot be had. */
static Launcher **kernels(int dev) {
  Launcher **k = fc_norm_launchers(dev);
  if (k || !Py_IsInitialized()) return k;
  PyGILState_STATE st = PyGILState_Ensure();
  PyObject *r = PyObject_CallFunction(g.reg, "i", dev);
  if (!r) PyErr_Clear(); /* the fallback then takes the call, and says why if it fails */
  Py_XDECREF(r);
  PyGILState_Release(st);
  return fc_norm_launchers(dev);
}

/* x as the norm's rows: *M rows of *D, D the product of the normalized
** shape that x's sizes end with. 0 where the fast path does not take it. */
static int rows_of(const call *c, const targ *x, long long *M, long long *D) {
  if (!x->h || !x->dense || !x->r.code || c->nshape < 1 || (int64_t)c->nshape > x->dim) return 0;
  long long d = 1;
  for (size_t i = 0; i < c->nshape; i++) {
    int64_t n = c->shape[i];
    if (x->sizes[x->dim - (int64_t)c->nshape + (int64_t)i] != n || n < 1 || n > INT32_MAX / d) return 0;
    d *= n;
  }
  if (x->numel < 1 || x->numel / d > INT32_MAX) return 0;
  *D = d;
  *M = x->numel / d;
  return 1;
}

/* A weight, bias or saved statistic the kernels can read beside x: dense,
** a kernel dtype (f32 where want is KT_F32), n elements on x's device. */
static int beside(const targ *t, const targ *x, long long n, int want) {
  return t->h && t->dense && t->r.code && (!want || t->r.code == want) && t->numel == n && t->dev == x->dev;
}

/* A contiguous tensor of dim sizes; NULL where torch could not make it. */
static ath alloc(const int64_t *sizes, int64_t dim, int32_t tdt, int32_t dev) {
  int64_t st[MAXDIM], n = 1;
  for (int64_t i = dim - 1; i >= 0; i--) {
    st[i] = n;
    n *= sizes[i] > 1 ? sizes[i] : 1;
  }
  ath h = NULL;
  return A.empty_strided(dim, sizes, st, tdt, g.cuda, dev, &h) ? NULL : h;
}

/* The statistics' shape: x's outer sizes, then a 1 for each normalized dim. */
static ath alloc_stats(const call *c, const targ *x) {
  int64_t s[MAXDIM];
  int64_t outer = x->dim - (int64_t)c->nshape;
  for (int64_t i = 0; i < x->dim; i++) s[i] = i < outer ? x->sizes[i] : 1;
  return alloc(s, x->dim, g.dt[0], x->dev);
}

static fa_ref ref(ath h, int code) {
  void *p = NULL;
  fa_ref r = {0, code};
  if (h && !A.data_ptr(h, &p)) r.ptr = (uint64_t)(uintptr_t)p;
  return r;
}

/* t, where strided, replaced by a contiguous copy made on the current
** stream (torch's copy_ runs there, as the kernels will): one pass over it,
** where the fallback's elementwise operators take many. Left as it is
** where torch cannot copy it; the fallback then takes the call. */
static void densify(targ *t) {
  if (!t->h || !t->strided || !t->r.code || !A.copy) return;
  ath d = alloc(t->sizes, t->dim, t->tdt, t->dev);
  if (!d || A.copy(d, t->h, 0)) {
    if (d) A.delete_tensor(d);
    return;
  }
  A.delete_tensor(t->h);
  t->h = d;
  t->r = ref(d, t->r.code);
  t->dense = true, t->strided = false;
}

/* The call's input x: t[0] forward, t[1] backward. */
static const targ *input_of(const call *c) { return &c->t[c->op == OP_RMS || c->op == OP_LN ? 0 : 1]; }

/* The kernels of the call's device, where x has a dtype they take; else
** NULL. */
static Launcher **kernels_for(const call *c) {
  const targ *x = input_of(c);
  return x->h && x->r.code && x->dev >= 0 ? kernels(x->dev) : NULL;
}

/* The call's strided tensors on x's device densified. */
static void densify_call(call *c) {
  int32_t dev = input_of(c)->dev;
  for (int i = 0; i < c->nt; i++)
    if (c->t[i].dev == dev) densify(&c->t[i]);
}

static void drop(ath *h, int n) {
  for (int i = 0; i < n; i++)
    if (h[i]) A.delete_tensor(h[i]), h[i] = NULL;
}

/* a[] launched on stream: 0, or the runtime's status. */
static int run(Launcher *k, void *stream, const kt_arg *a) {
  return (int)k->launch(k->kernel, (kt_stream)(uintptr_t)stream, a, k->n);
}

/* The forward (rms: t = x w; ln: t = x w b) on the fast path: its outputs
** onto out (y rstd, or y mean rstd). 1 where it ran; 0 where it did not,
** with nothing made. */
static int fwd_fast(call *c, Launcher **k, siv *out) {
  int ln = c->op == OP_LN;
  targ *x = &c->t[0], *w = &c->t[1], *b = ln ? &c->t[2] : NULL;
  long long M, D;
  if (!rows_of(c, x, &M, &D) || (w->h && !beside(w, x, D, 0)) || (b && b->h && !beside(b, x, D, 0))) return 0;
  int wd = w->h ? w->r.code : b && b->h ? b->r.code : x->r.code;
  /* A weight or bias of another dtype goes to the fallback (which refuses
  ** it for LayerNorm, as torch does). */
  if (wd != x->r.code || (b && b->h && b->r.code != wd)) return 0;
  void *stream = NULL;
  if (A.stream(x->dev, &stream)) return 0;
  ath o[3] = {alloc(x->sizes, x->dim, x->tdt, x->dev), ln ? alloc_stats(c, x) : NULL, alloc_stats(c, x)};
  if (!o[0] || (ln && !o[1]) || !o[2]) {
    drop(o, 3);
    return 0;
  }
  fa_fwd v = {.y = ref(o[0], x->r.code), .x = x->r, .h = {0, x->r.code}, .w = {w->h ? w->r.ptr : 0, wd},
              .b = {b && b->h ? b->r.ptr : 0, wd}, .mean = ln ? ref(o[1], KT_F32) : (fa_ref){0, 0},
              .rstd = ref(o[2], KT_F32), .T = M, .D = D, .groups = 1,
              /* torch's default: the float epsilon, which the kernels compute in */
              .eps = c->has_eps ? c->eps : 1.1920928955078125e-07, .rms = !ln};
  kt_arg a[13];
  fa_fill_fwd(a, &v);
  if (run(k[K_FWD], stream, a)) {
    drop(o, 3);
    return 0;
  }
  out[0] = (siv)(uintptr_t)o[0];
  if (ln) out[1] = (siv)(uintptr_t)o[1];
  out[ln ? 2 : 1] = (siv)(uintptr_t)o[2];
  return 1;
}

/* The backward's plans kept per device. Where the stream is not capturing
** and the rows are 16-byte aligned, the package's plan (ops._aten_plan) is
** a function of the rows, the row length, x's and the weight's element
** sizes, and whether there are a weight, a dw to sum and a db: it then runs
** once a key, not with the GIL every call. Two
** atomics an entry: a reader takes P where the key reads the same before
** and after it (a writer refilling the entry for that key stores the
** same P). */
#define PLANS 64
static struct {
  _Atomic uint64_t key;
  _Atomic long long P;
} plans[FC_MAXDEV][PLANS];

typedef int (*is_capturing_fn)(void *stream, int *status); /* cuStreamIsCapturing */
static _Atomic(is_capturing_fn) is_capturing;

/* 1 where stream is certainly not capturing (the driver says so). */
static int not_capturing(void *stream) {
  is_capturing_fn f = A.capturing ? A.capturing : atomic_load(&is_capturing);
  if (!f) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); /* torch loaded it for the tensors */
    void *sym = h ? dlsym(h, "cuStreamIsCapturing") : NULL;
    if (!sym) return 0;
    memcpy(&f, &sym, sizeof f);
    atomic_store(&is_capturing, f);
  }
  int status = -1;
  return f(stream, &status) == 0 && status == 0;
}

/* The plan's key, or 0 where it is not kept (see plans). */
static uint64_t plan_key(const targ *x, const targ *dy, const targ *w, int has_dw, int has_bias, long long M,
                         long long D, void *stream) {
  if (x->dev < 0 || x->dev >= FC_MAXDEV || D >= (1 << 24) || ((x->r.ptr | dy->r.ptr | w->r.ptr) & 15) ||
      !not_capturing(stream))
    return 0;
  return 1ull << 63 | (uint64_t)M | (uint64_t)D << 31 | (uint64_t)(x->r.code == KT_F32) << 55 |
         (uint64_t)(w->h != NULL) << 56 | (uint64_t)(has_bias != 0) << 57 | (uint64_t)(w->r.code == KT_F32) << 58 |
         (uint64_t)(has_dw != 0) << 59;
}

/* The backward's programs P (0: layernorm_bwd_row) from the package's
** plan, with the GIL; -1 where it failed. */
static long long plan_py(const targ *x, const targ *dy, const targ *w, int has_dw, int has_bias, long long M,
                         long long D) {
  if (!Py_IsInitialized()) return -1;
  PyGILState_STATE st = PyGILState_Ensure();
  size_t es = x->r.code == KT_F32 ? 4 : 2, ws = w->h && w->r.code == KT_F32 ? 4 : 2;
  PyObject *r = PyObject_CallFunction(g.plan, "iLLnKKKnii", (int)x->dev, M, D, (Py_ssize_t)es,
                                      (unsigned long long)x->r.ptr, (unsigned long long)dy->r.ptr,
                                      (unsigned long long)(w->h ? w->r.ptr : 0), (Py_ssize_t)ws, has_dw, has_bias);
  long long P = r ? PyLong_AsLongLong(r) : -1;
  if (PyErr_Occurred()) PyErr_Clear(), P = -1;
  Py_XDECREF(r);
  PyGILState_Release(st);
  return P >= 0 && P <= INT32_MAX ? P : -1;
}

/* plan_py's P, kept where plan_key allows. */
static long long plan(const targ *x, const targ *dy, const targ *w, int has_dw, int has_bias, long long M,
                      long long D, void *stream) {
  uint64_t key = plan_key(x, dy, w, has_dw, has_bias, M, D, stream);
  size_t slot = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 58) % PLANS;
  if (key && atomic_load(&plans[x->dev][slot].key) == key) {
    long long P = atomic_load(&plans[x->dev][slot].P);
    if (atomic_load(&plans[x->dev][slot].key) == key) return P;
  }
  long long P = plan_py(x, dy, w, has_dw, has_bias, M, D);
  if (key && P >= 0) {
    atomic_store(&plans[x->dev][slot].key, 0);
    atomic_store(&plans[x->dev][slot].P, P);
    atomic_store(&plans[x->dev][slot].key, key);
  }
  return P;
}

/* The backward's tensors, by op: dy x mean rstd w b (mean and b NULL for
** RMSNorm). */
typedef struct {
  targ *dy, *x, *mean, *rstd, *w, *b;
  int ln;
} bwd_in;

static bwd_in bwd_of(call *c) {
  bwd_in i = {&c->t[0], &c->t[1], NULL, NULL, NULL, NULL, c->op == OP_LN_BWD};
  if (i.ln)
    i.mean = &c->t[2], i.rstd = &c->t[3], i.w = &c->t[4], i.b = c->t[5].h ? &c->t[5] : NULL;
  else
    i.rstd = &c->t[2], i.w = &c->t[3];
  return i;
}

/* Whether the fast path takes the backward: *M rows of *D. */
static int bwd_ok(call *c, const bwd_in *i, long long *M, long long *D) {
  if (!rows_of(c, i->x, M, D) || !beside(i->dy, i->x, i->x->numel, i->x->r.code) ||
      !beside(i->rstd, i->x, *M, KT_F32) || (i->ln && !beside(i->mean, i->x, *M, KT_F32)) ||
      (i->w->h && !beside(i->w, i->x, *D, 0)))
    return 0;
  /* dw and db come in the weight's dtype, or x's without a weight. */
  int wd = i->w->h ? i->w->r.code : i->x->r.code;
  return !i->b || beside(i->b, i->x, *D, wd);
}

/* An undefined tensor's handle (an output the mask did not ask for). */
static ath undefined(void) {
  ath h = NULL;
  return A.new_undefined(&h) ? NULL : h;
}

enum { O_DX, O_DW, O_DB, O_DWP, O_DBP, O_N };

/* The backward's launches into o: one program, or P and the reduce. */
static int bwd_launch(const bwd_in *i, Launcher **k, void *stream, ath *o, long long M, long long D, long long P) {
  int x = i->x->r.code, wd = i->w->h ? i->w->r.code : x;
  fa_bwd v = {.dx = ref(o[O_DX], x), .dy = i->dy->r, .h = i->x->r, .w = {i->w->h ? i->w->r.ptr : 0, wd},
              .mean = i->ln ? i->mean->r : (fa_ref){0, 0}, .rstd = i->rstd->r, .T = M, .D = D, .groups = 1,
              .rms = !i->ln};
  fa_ref dw = ref(o[O_DW], wd), db = ref(o[O_DB], wd);
  if (!P) {
    kt_arg a[13];
    v.dw = dw, v.db = db;
    fa_fill_bwd_row(a, &v);
    return run(k[K_ROW], stream, a);
  }
  kt_arg a[14], r[7];
  v.dw = o[O_DWP] ? ref(o[O_DWP], KT_F32) : (fa_ref){0, 0};
  v.db = o[O_DBP] ? ref(o[O_DBP], KT_F32) : (fa_ref){0, 0};
  fa_fill_bwd(a, &v, P);
  int rc = run(k[K_BWD], stream, a);
  if (rc || (!o[O_DWP] && !o[O_DBP])) return rc;
  fa_fill_reduce(r, dw, db, v.dw, v.db, M, D, P);
  return run(k[K_REDUCE], stream, r);
}

/* The backward on the fast path: (dx, dw) or (dx, dw, db) onto out, an
** undefined tensor where the mask asked for none. 1 where it ran; 0 where
** it did not, with nothing made. */
static int bwd_fast(call *c, Launcher **k, siv *out) {
  bwd_in i = bwd_of(c);
  long long M, D, P;
  if (!bwd_ok(c, &i, &M, &D)) return 0;
  /* Only the sums the mask asks for (a frozen weight: none): the kernels
  ** read w for dx either way. */
  int has_dw = i.w->h && c->mask[1], has_b = i.ln && i.b && c->mask[2];
  void *stream = NULL;
  if (A.stream(i.x->dev, &stream) || (P = plan(i.x, i.dy, i.w, has_dw, has_b, M, D, stream)) < 0) return 0;
  int64_t pd[2] = {P, D};
  ath o[O_N] = {alloc(i.x->sizes, i.x->dim, i.x->tdt, i.x->dev),
                has_dw ? alloc(i.w->sizes, i.w->dim, i.w->tdt, i.x->dev) : NULL,
                has_b ? alloc(i.b->sizes, i.b->dim, i.b->tdt, i.x->dev) : NULL,
                P && has_dw ? alloc(pd, 2, g.dt[0], i.x->dev) : NULL,
                P && has_b ? alloc(pd, 2, g.dt[0], i.x->dev) : NULL};
  int bad = !o[O_DX] || (has_dw && !o[O_DW]) || (has_b && !o[O_DB]) || (P && has_dw && !o[O_DWP]) ||
            (P && has_b && !o[O_DBP]);
  if (bad || bwd_launch(&i, k, stream, o, M, D, P)) {
    drop(o, O_N);
    return 0;
  }
  drop(o + O_DWP, 2); /* the stream's later work may reuse them: torch's allocator orders it */
  int n = i.ln ? 3 : 2;
  for (int j = 0; j < n; j++) {
    if (!o[j] || !c->mask[j]) {
      drop(o + j, 1);
      if (!(o[j] = undefined())) {
        drop(o, n);
        return 0; /* the fallback recomputes it */
      }
    }
  }
  for (int j = 0; j < n; j++) out[j] = (siv)(uintptr_t)o[j];
  return 1;
}

/* The call's tensors as capsules for the fallback, which steals their
** handles (torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs). */
static PyObject *tensors_out(call *c) {
  PyObject *t = PyTuple_New(c->nt);
  for (int i = 0; t && i < c->nt; i++) {
    PyObject *o = c->t[i].h ? PyCapsule_New(c->t[i].h, NULL, NULL) : Py_NewRef(Py_None);
    if (!o) {
      Py_CLEAR(t);
      break;
    }
    if (c->t[i].h) c->t[i].h = NULL; /* handed over */
    PyTuple_SET_ITEM(t, i, o);
  }
  return t;
}

/* The fallback's result (nret capsules or None, or a message) onto out. */
static int results_in(PyObject *r, siv *out, int nret, char *msg, size_t cap) {
  if (PyUnicode_Check(r)) {
    snprintf(msg, cap, "%s", PyUnicode_AsUTF8(r) ? PyUnicode_AsUTF8(r) : "ktune: the fallback failed");
    return -1;
  }
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != nret) {
    snprintf(msg, cap, "ktune: the norm fallback returned no %d outputs", nret);
    return -1;
  }
  for (int i = 0; i < nret; i++) {
    PyObject *o = PyTuple_GET_ITEM(r, i);
    ath h = o == Py_None ? undefined() : PyCapsule_GetPointer(o, NULL);
    if (!h) {
      for (int j = 0; j < i; j++) A.delete_tensor((ath)(uintptr_t)out[j]);
      snprintf(msg, cap, "ktune: the norm fallback's output %d is not a tensor", i);
      return -1;
    }
    out[i] = (siv)(uintptr_t)h;
  }
  return 0;
}

/* The Python fallback, with the GIL: fallback(op, tensors, shape, eps,
** mask). 0 with out written, or -1 with msg. (Nothing of Python is called
** once the interpreter is gone: a norm run by C++ at exit.) */
static int fallback(call *c, siv *out, int nret, char *msg, size_t cap) {
  if (!Py_IsInitialized()) {
    snprintf(msg, cap, "ktune: %s after Python's shutdown, where its kernels did not take it", op_names[c->op]);
    return -1;
  }
  PyGILState_STATE st = PyGILState_Ensure();
  int rc = -1;
  size_t ns = c->nshape < MAXDIM ? c->nshape : MAXDIM;
  PyObject *ts = tensors_out(c), *shape = PyList_New((Py_ssize_t)ns), *r = NULL;
  int filled = shape != NULL;
  for (size_t i = 0; filled && i < ns; i++) {
    PyObject *v = PyLong_FromLongLong(c->shape[i]);
    if (!v) filled = 0;
    else PyList_SET_ITEM(shape, i, v);
  }
  if (ts && filled && c->nshape <= MAXDIM) {
    PyObject *eps = c->has_eps ? PyFloat_FromDouble(c->eps) : Py_NewRef(Py_None);
    PyObject *m[3];
    for (int i = 0; i < 3; i++) m[i] = c->mask[i] ? Py_True : Py_False;
    r = eps ? PyObject_CallFunction(g.fallback, "iOOO(OOO)", c->op, ts, shape, eps, m[0], m[1], m[2]) : NULL;
    Py_XDECREF(eps);
  }
  if (r)
    rc = results_in(r, out, nret, msg, cap);
  else
    snprintf(msg, cap, "ktune: %s: the norm fallback could not be called (%s)", op_names[c->op],
             c->nshape > MAXDIM ? "more than 16 normalized dims" : "out of memory");
  PyErr_Clear();
  Py_XDECREF(r);
  Py_XDECREF(ts);
  Py_XDECREF(shape);
  PyGILState_Release(st);
  return rc;
}

/* One call of op: the fast path, else the fallback, else torch's error. */
static void run_op(int op, siv *s, uint64_t nret) {
  call c;
  read_call(op, s, &c);
  int fwd = op == OP_RMS || op == OP_LN;
  char msg[1024] = "";
  Launcher **k = kernels_for(&c);
  if (k) densify_call(&c);
  int ok = k && (fwd ? fwd_fast(&c, k, s) : bwd_fast(&c, k, s));
  if (!ok) ok = !fallback(&c, s, (int)nret, msg, sizeof msg);
  call_free(&c);
  if (!ok) A.check(false, op_names[op], __FILE__, __LINE__, msg); /* throws into torch's caller */
}

/* The boxed kernels: torch passes them no user data, so one function an op. */
#define ENTRY(fn, op)                                                                                              \
  static void fn(siv *s, uint64_t nargs, uint64_t nret) {                                                          \
    (void)nargs;                                                                                                   \
    run_op(op, s, nret);                                                                                           \
  }
ENTRY(k_rms, OP_RMS)
ENTRY(k_rms_bwd, OP_RMS_BWD)
ENTRY(k_ln, OP_LN)
ENTRY(k_ln_bwd, OP_LN_BWD)
static void (*const op_fns[OP_COUNT])(siv *, uint64_t, uint64_t) = {k_rms, k_rms_bwd, k_ln, k_ln_bwd};

/* Each of syms looked up in the libraries at paths (a tuple of str), each
** already loaded by torch. 0, or -1 with an exception naming what lacks. */
static int load_syms(PyObject *paths) {
  void *h[4] = {0};
  Py_ssize_t n = PyTuple_GET_SIZE(paths);
  for (Py_ssize_t i = 0; i < n && i < 4; i++) {
    const char *p = PyUnicode_AsUTF8(PyTuple_GET_ITEM(paths, i));
    if (!p) return -1;
    if (!(h[i] = dlopen(p, RTLD_NOW | RTLD_NOLOAD))) {
      PyErr_Format(PyExc_ValueError, "aten_install: %s is not loaded (import torch first)", p);
      return -1;
    }
  }
  for (size_t s = 0; s < sizeof syms / sizeof syms[0]; s++) {
    void *f = NULL;
    for (Py_ssize_t i = 0; !f && i < n && i < 4; i++) f = dlsym(h[i], syms[s].name);
    if (!f && !syms[s].optional) {
      PyErr_Format(PyExc_ValueError, "aten_install: torch's libraries lack %s (its stable C ABI)", syms[s].name);
      return -1;
    }
    memcpy((char *)&A + syms[s].off, &f, sizeof f);
  }
  if (!A.delete_siv && !A.cxx_delete) {
    PyErr_SetString(PyExc_ValueError, "aten_install: torch's libraries lack a way to free an optional's box");
    return -1;
  }
  return 0;
}

/* aten_install(paths, fallback, plan, register): the four operators' CUDA
** kernels replaced by this file's; once (again: nothing). */
static PyObject *aten_install(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 4 || !PyTuple_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "aten_install(paths, fallback, plan, register)");
    return NULL;
  }
  if (g.lib) Py_RETURN_NONE;
  if (load_syms(args[0])) return NULL;
  PyObject **slot[] = {&g.fallback, &g.plan, &g.reg};
  for (int i = 0; i < 3; i++) Py_XSETREF(*slot[i], Py_NewRef(args[1 + i]));
  g.dt[0] = A.f32(), g.dt[1] = A.f16(), g.dt[2] = A.bf16(), g.cuda = A.cuda();
  void *lib = NULL;
  if (A.lib_init_impl("aten", "CUDA", __FILE__, __LINE__, &lib) || !lib) {
    PyErr_SetString(PyExc_RuntimeError, "aten_install: torch refused a library of aten impls for CUDA");
    return NULL;
  }
  for (int i = 0; i < OP_COUNT; i++)
    if (A.lib_impl(lib, op_names[i], op_fns[i])) {
      A.lib_delete(lib);
      PyErr_Format(PyExc_RuntimeError, "aten_install: torch refused a CUDA kernel for aten::%s", op_names[i]);
      return NULL;
    }
  g.lib = lib;
  Py_RETURN_NONE;
}

/* aten_uninstall(): torch's own kernels back (deleting the library drops
** its registrations). Call it while none of the four runs. */
static PyObject *aten_uninstall(PyObject *mod, PyObject *unused) {
  (void)mod, (void)unused;
  if (g.lib && A.lib_delete(g.lib)) {
    PyErr_SetString(PyExc_RuntimeError, "aten_uninstall: torch refused to drop the library");
    return NULL;
  }
  g.lib = NULL;
  Py_RETURN_NONE;
}

static PyObject *aten_installed(PyObject *mod, PyObject *unused) {
  (void)mod, (void)unused;
  return PyBool_FromLong(g.lib != NULL);
}

static PyMethodDef aten_methods[] = {
    {"aten_install", (PyCFunction)(void (*)(void))aten_install, METH_FASTCALL,
     "aten_install(paths, fallback, plan, register): torch's norm ops on CUDA run by ktune's kernels"},
    {"aten_uninstall", aten_uninstall, METH_NOARGS, "aten_uninstall(): torch's own kernels back"},
    {"aten_installed", aten_installed, METH_NOARGS, "aten_installed() -> bool"},
    {NULL, NULL, 0, NULL},
};

int fc_aten_init(PyObject *m) { return PyModule_AddFunctions(m, aten_methods); }
