/* The bundled kernels as one XLA FFI custom call, "ktune", written in C
** against XLA's C API (xla/ffi/api/c_api.h from jaxlib) and ktune.h alone.
** A call names its kernel and says, param by param, where each value is:
**   kernel  string  the spec's name ("layernorm_fwd")
**   layout  string  one letter per param of the spec: i (the next input
**                   buffer), o (the next result buffer), a (the next result
**                   buffer, which the call aliases to the next input buffer:
**                   an output that starts from that input's contents, such
**                   as zeros), n (a null pointer), s (the next scalar)
**   nulls   string  the dtypes of the null pointers, in order ("bf16,f32")
**   scalars f64[]   the scalars, in order (each converted to its param's type)
** The handler decodes the frame into kt_args and launches on XLA's stream of
** the device XLA chose, with the kernel ktune.jax registered for that
** device (ktune_jax_register): the process's one runtime per device, shared
** with the C and PyTorch users. It never synchronizes.
**
** Two entry points run the same handler. ktune_jax_call declares no traits:
** a miss may tune (allocate scratch, synchronize), so XLA keeps it out of
** command buffers. ktune_jax_call_graph declares itself command-buffer
** compatible, so XLA may trace it into a CUDA graph and replay the graph,
** calling it again only to record it for buffers at new addresses:
** ktune.jax names it only for calls whose key it
** settled while tracing (tuned, or found in the cache), which then launch
** the same config every time. Should one miss all the same (a key the
** settling could not foresee), the runs XLA makes before it records call
** this as they call the plain entry, and a capture never tunes: XLA replays
** the config the key had when it recorded. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ktune.h"
#include "xla/ffi/api/c_api.h"

#define MAX_DEV 64
#define MAX_KERNELS 32

typedef struct entry {
  char name[KT_NAME_MAX + 1];
  kt_kernel *k;
  kt_runtime *rt;
} entry;

/* Filled by ktune.jax before any call of a kernel on a device, read without
** a lock afterwards (n is published after its entry). */
static entry table[MAX_DEV][MAX_KERNELS];
static atomic_int nentries[MAX_DEV];

/* Make kernel k of runtime rt the one calls of its name on device use: a
** kernel of that name registered before (of a runtime since closed, say)
** is replaced. 0, or -1 when the device or the table is out of range. Not
** thread-safe: register from one thread, while no call of the name runs. */
__attribute__((visibility("default"))) int ktune_jax_register(int device, kt_runtime *rt, kt_kernel *k) {
  if (device < 0 || device >= MAX_DEV || !rt || !k) return -1;
  int n = atomic_load(&nentries[device]);
  const char *name = kt_kernel_name(k);
  for (int i = 0; i < n; i++)
    if (!strcmp(table[device][i].name, name)) {
      table[device][i].k = k;
      table[device][i].rt = rt;
      return 0;
    }
  if (n == MAX_KERNELS) return -1;
  entry *e = &table[device][n];
  snprintf(e->name, sizeof e->name, "%s", name);
  e->k = k;
  e->rt = rt;
  atomic_store(&nentries[device], n + 1);
  return 0;
}

static const entry *find(int device, const char *name, size_t len) {
  if (device < 0 || device >= MAX_DEV) return NULL;
  int n = atomic_load(&nentries[device]);
  for (int i = 0; i < n; i++)
    if (strlen(table[device][i].name) == len && !memcmp(table[device][i].name, name, len)) return &table[device][i];
  return NULL;
}

static XLA_FFI_Error *fail(const XLA_FFI_Api *api, XLA_FFI_Error_Code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static XLA_FFI_Error *fail(const XLA_FFI_Api *api, XLA_FFI_Error_Code code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  XLA_FFI_Error_Create_Args a = {.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE, .message = msg, .errc = code};
  return api->XLA_FFI_Error_Create(&a);
}

static kt_dtype dtype_of(XLA_FFI_DataType t) {
  switch (t) {
  case XLA_FFI_DataType_F32: return KT_F32;
  case XLA_FFI_DataType_F16: return KT_F16;
  case XLA_FFI_DataType_BF16: return KT_BF16;
  case XLA_FFI_DataType_F64: return KT_F64;
  case XLA_FFI_DataType_S32: return KT_I32;
  case XLA_FFI_DataType_S64: return KT_I64;
  case XLA_FFI_DataType_PRED:
  case XLA_FFI_DataType_U8: return KT_U8;
  case XLA_FFI_DataType_S8: return KT_I8;
  case XLA_FFI_DataType_S16: return KT_I16;
  case XLA_FFI_DataType_U32: return KT_U32;
  default: return KT_DTYPE_NONE;
  }
}

/* The attributes of a call, found by name. */
typedef struct attrs {
  XLA_FFI_ByteSpan *kernel, *layout, *nulls;
  XLA_FFI_Array *scalars;
} attrs;

static int read_attrs(const XLA_FFI_Attrs *a, attrs *out) {
  memset(out, 0, sizeof *out);
  for (int64_t i = 0; i < a->size; i++) {
    const XLA_FFI_ByteSpan *n = a->names[i];
    int str = a->types[i] == XLA_FFI_AttrType_STRING;
#define IS(s) (n->len == sizeof(s) - 1 && !memcmp(n->ptr, s, n->len))
    if (IS("kernel") && str) out->kernel = a->attrs[i];
    else if (IS("layout") && str) out->layout = a->attrs[i];
    else if (IS("nulls") && str) out->nulls = a->attrs[i];
    else if (IS("scalars") && a->types[i] == XLA_FFI_AttrType_ARRAY) out->scalars = a->attrs[i];
#undef IS
  }
  return out->kernel && out->layout && (!out->scalars || out->scalars->dtype == XLA_FFI_DataType_F64) ? 0 : -1;
}

/* The next dtype name of "bf16,f32" at *pos. */
static kt_dtype next_null(const XLA_FFI_ByteSpan *nulls, size_t *pos) {
  char name[16];
  size_t n = 0;
  if (!nulls) return KT_DTYPE_NONE;
  while (*pos < nulls->len && nulls->ptr[*pos] != ',' && n < sizeof name - 1) name[n++] = nulls->ptr[(*pos)++];
  if (*pos < nulls->len) (*pos)++;
  name[n] = 0;
  kt_dtype t;
  return kt_dtype_parse(name, &t) ? KT_DTYPE_NONE : t;
}

static kt_arg buffer_arg(const XLA_FFI_Buffer *b) { return kt_arg_ptr((uint64_t)(uintptr_t)b->data, dtype_of(b->dtype)); }

/* The elements XLA's buffer holds: the product of its dims. */
static int64_t elements(const XLA_FFI_Buffer *b) {
  int64_t n = 1;
  for (int64_t d = 0; d < b->rank; d++) n *= b->dims[d];
  return n;
}

static kt_arg scalar_arg(kt_arg_kind kind, double v) {
  return kind == KT_ARG_F32 ? kt_arg_f32((float)v) : kind == KT_ARG_I64 ? kt_arg_i64((int64_t)v) : kt_arg_i32((int32_t)v);
}

/* The frame's buffers and attributes as k's args, and the elements each
** param's buffer holds in have (-1 for a null pointer or a scalar); NULL,
** or why not. */
static const char *build_args(kt_kernel *k, const XLA_FFI_CallFrame *f, const attrs *at, kt_arg *args,
                              int64_t *have) {
  int np = kt_kernel_nparams(k), ni = 0, no = 0, ns = 0;
  size_t npos = 0;
  if ((int)at->layout->len != np) return "the layout does not have one letter per param";
  for (int i = 0; i < np; i++) {
    kt_param_info p = {.size = sizeof p};
    if (kt_kernel_param(k, i, &p)) return "a param of the spec cannot be read";
    have[i] = -1;
    switch (at->layout->ptr[i]) {
    case 'i':
      if (ni >= f->args.size) return "fewer inputs than the layout names";
      have[i] = elements(f->args.args[ni]);
      args[i] = buffer_arg(f->args.args[ni++]);
      break;
    case 'a': /* the result is the buffer launched on; its input only fills it */
    case 'o':
      if (at->layout->ptr[i] == 'a' && ni++ >= f->args.size) return "fewer inputs than the layout names";
      if (no >= f->rets.size) return "fewer results than the layout names";
      have[i] = elements(f->rets.rets[no]);
      args[i] = buffer_arg(f->rets.rets[no++]);
      break;
    case 'n':
      args[i] = kt_arg_ptr(0, next_null(at->nulls, &npos));
      break;
    case 's':
      if (!at->scalars || (size_t)ns >= at->scalars->size) return "fewer scalars than the layout names";
      args[i] = scalar_arg(p.kind, ((const double *)at->scalars->data)[ns++]);
      break;
    default: return "a layout letter is not one of i, o, a, n, s";
    }
  }
  return ni == f->args.size && no == f->rets.size ? NULL : "more buffers than the layout names";
}

/* The first fields of every extension, whose struct (and the type field's
** enum) jaxlib's headers name differently from one version to the next
** (XLA_FFI_Extension_Base, XLA_FFI_InternalExtension): a C enum is an int. */
typedef struct ext_head {
  size_t struct_size;
  int type;
} ext_head;

/* XLA asks a handler for its API version and traits first. */
static int metadata(XLA_FFI_CallFrame *f, XLA_FFI_Handler_Traits traits) {
  const ext_head *e = (const void *)f->extension_start;
  if (!e || e->type != XLA_FFI_Extension_Metadata) return 0;
  XLA_FFI_Metadata *m = ((XLA_FFI_Metadata_Extension *)e)->metadata;
  m->api_version.major_version = XLA_FFI_API_MAJOR;
  m->api_version.minor_version = XLA_FFI_API_MINOR;
  m->traits = traits;
  return 1;
}

/* An error where a buffer holds fewer elements than its param's extent at
** the call's sizes (the kernel indexes by those sizes, not by XLA's shapes,
** so it would read or write past the buffer); NULL where none does. */
static XLA_FFI_Error *too_short(const XLA_FFI_Api *api, const entry *e, const kt_arg *args, const int64_t *have) {
  int np = kt_kernel_nparams(e->k);
  int64_t want[64];
  kt_status st = kt_kernel_extents(e->k, args, np, want);
  if (st) return fail(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "ktune: %s: %s", kt_status_name(st), kt_errmsg(e->rt));
  for (int i = 0; i < np; i++) {
    kt_param_info p = {.size = sizeof p};
    if (have[i] < 0 || have[i] >= want[i] || kt_kernel_param(e->k, i, &p)) continue;
    return fail(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                "ktune: KT_ERR_ARGS: %s: %s holds %lld elements; the call's sizes reach %lld (%s)", e->name, p.name,
                (long long)have[i], (long long)want[i], p.extent);
  }
  return NULL;
}

static XLA_FFI_Error *call(XLA_FFI_CallFrame *f, XLA_FFI_Handler_Traits traits) {
  if (metadata(f, traits)) return NULL;
  const XLA_FFI_Api *api = f->api;
  attrs at;
  if (read_attrs(&f->attrs, &at))
    return fail(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "ktune: a call needs kernel, layout (strings) and scalars (f64[])");
  XLA_FFI_DeviceOrdinal_Get_Args d = {.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE, .ctx = f->ctx};
  XLA_FFI_Stream_Get_Args s = {.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE, .ctx = f->ctx};
  XLA_FFI_Error *err = api->XLA_FFI_DeviceOrdinal_Get(&d);
  if (err || (err = api->XLA_FFI_Stream_Get(&s))) return err;
  const entry *e = find(d.device_ordinal, at.kernel->ptr, at.kernel->len);
  if (!e)
    return fail(api, XLA_FFI_Error_Code_FAILED_PRECONDITION, "ktune: kernel %.*s is not registered for device %d",
                (int)at.kernel->len, at.kernel->ptr, d.device_ordinal);
  kt_arg args[64];
  int64_t have[64];
  const char *why = kt_kernel_nparams(e->k) > 64 ? "too many params" : build_args(e->k, f, &at, args, have);
  if (why) return fail(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "ktune: %s: %s", e->name, why);
  if ((err = too_short(api, e, args, have))) return err;
  kt_status st = kt_launch(e->k, (kt_stream)s.stream, args, kt_kernel_nparams(e->k));
  if (st)
    return fail(api, st == KT_ERR_NOMEM ? XLA_FFI_Error_Code_RESOURCE_EXHAUSTED : XLA_FFI_Error_Code_INVALID_ARGUMENT,
                "ktune: %s: %s", kt_status_name(st), kt_errmsg(e->rt));
  return NULL;
}

__attribute__((visibility("default"))) XLA_FFI_Error *ktune_jax_call(XLA_FFI_CallFrame *f) { return call(f, 0); }

__attribute__((visibility("default"))) XLA_FFI_Error *ktune_jax_call_graph(XLA_FFI_CallFrame *f) {
  return call(f, XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE);
}
