/* The XLA FFI handler (tools/jax/ffi.c) without XLA or a GPU: call frames
** built here, as XLA lays them out, decoded by the handler against a kernel
** of a runtime opened without a device. What is checked is the handler's
** own work: the attributes and the layout read, each buffer compared with
** its param's extent, the traits given to XLA, every refusal named. A call
** that passes reaches kt_launch, which refuses it for want of a device.
** Needs jaxlib's C API header (KT_JAX_FFI, set by make where jax imports);
** skipped elsewhere. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

#ifdef KT_JAX_FFI
#include "tools/jax/ffi.c"

/* The fake API: an error is its message, copied; the device is 0. */
static char last_error[1024];
static XLA_FFI_Error *fake_error_create(XLA_FFI_Error_Create_Args *a) {
  snprintf(last_error, sizeof last_error, "%s", a->message);
  return (XLA_FFI_Error *)last_error;
}
static XLA_FFI_Error *fake_device(XLA_FFI_DeviceOrdinal_Get_Args *a) {
  a->device_ordinal = 0;
  return NULL;
}
static XLA_FFI_Error *fake_stream(XLA_FFI_Stream_Get_Args *a) {
  a->stream = NULL;
  return NULL;
}

/* One call of masked_softmax (y, x, mask, bias, N, L, scale): buffers of
** the given element counts (f32, u8 for the mask), attributes by name. */
typedef struct call_case {
  const char *kernel, *layout, *nulls;
  int nscalars;
  double scalars[4];
  int nin, nout;
  int64_t in_elems[4], out_elems[2];
  XLA_FFI_DataType in_types[4];
} call_case;

static const char *run_call(const call_case *c, int graph) {
  static float mem[4096];
  XLA_FFI_Api api;
  memset(&api, 0, sizeof api);
  api.XLA_FFI_Error_Create = fake_error_create;
  api.XLA_FFI_DeviceOrdinal_Get = fake_device;
  api.XLA_FFI_Stream_Get = fake_stream;
  XLA_FFI_Buffer bufs[6];
  int64_t dims[6];
  void *in[4], *out[2];
  for (int i = 0; i < c->nin + c->nout; i++) {
    int ret = i >= c->nin;
    dims[i] = ret ? c->out_elems[i - c->nin] : c->in_elems[i];
    bufs[i] = (XLA_FFI_Buffer){.struct_size = sizeof bufs[i], .dtype = ret ? XLA_FFI_DataType_F32 : c->in_types[i],
                               .data = mem, .rank = 1, .dims = &dims[i]};
    if (ret) out[i - c->nin] = &bufs[i];
    else in[i] = &bufs[i];
  }
  XLA_FFI_ByteSpan names[4] = {{"kernel", 6}, {"layout", 6}, {"nulls", 5}, {"scalars", 7}};
  XLA_FFI_ByteSpan *namep[4] = {&names[0], &names[1], &names[2], &names[3]};
  XLA_FFI_ByteSpan kernel = {c->kernel, c->kernel ? strlen(c->kernel) : 0};
  XLA_FFI_ByteSpan layout = {c->layout, strlen(c->layout)}, nulls = {c->nulls, strlen(c->nulls)};
  XLA_FFI_Array scalars = {.dtype = XLA_FFI_DataType_F64, .size = (size_t)c->nscalars, .data = (void *)c->scalars};
  void *attrv[4] = {&kernel, &layout, &nulls, &scalars};
  XLA_FFI_AttrType types[4] = {XLA_FFI_AttrType_STRING, XLA_FFI_AttrType_STRING, XLA_FFI_AttrType_STRING,
                               XLA_FFI_AttrType_ARRAY};
  int skip = c->kernel ? 0 : 1; /* no kernel attribute at all */
  XLA_FFI_CallFrame f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.api = &api;
  f.args.size = c->nin;
  f.args.args = in;
  f.rets.size = c->nout;
  f.rets.rets = out;
  f.attrs.size = 4 - skip;
  f.attrs.types = types + skip;
  f.attrs.names = namep + skip;
  f.attrs.attrs = attrv + skip;
  last_error[0] = 0;
  XLA_FFI_Error *e = graph ? ktune_jax_call_graph(&f) : ktune_jax_call(&f);
  return e ? last_error : "(no error)";
}

/* What kt_launch says of a call that passed the handler: no device here. */
#define NO_DEVICE \
  "ktune: KT_ERR_NO_DEVICE: masked_softmax: this runtime was opened without a device"
#define F32 XLA_FFI_DataType_F32

/* masked_softmax of a runtime of its own, registered for device 0: each
** test's registration replaces the last one's, whose runtime it closed. */
static kt_runtime *registered(void) {
  kt_runtime *rt = t_offline(1);
  kt_kernel *k = NULL;
  if (!rt || kt_kernel_load(rt, "kernels_src/masked_softmax.json", &k) || ktune_jax_register(0, rt, k)) {
    t_fail(__FILE__, __LINE__, "masked_softmax: %s", rt ? kt_errmsg(rt) : kt_errmsg(NULL));
    kt_runtime_close(rt);
    return NULL;
  }
  return rt;
}

static void buffers_shorter_than_the_call_are_refused(void) {
  kt_runtime *rt = registered();
  if (!rt) return;
  /* y, x; no mask; bias: 3 rows of 40 */
  call_case c = {"masked_softmax", "oinisss", "u8", 3, {3, 40, 1.0}, 2, 1, {120, 120}, {120}, {F32, F32}};
  ASSERT_STR_EQ(run_call(&c, 0), NO_DEVICE); /* past the handler's checks */
  c.in_elems[1] = 40;
  ASSERT_STR_EQ(run_call(&c, 0),
                "ktune: KT_ERR_ARGS: masked_softmax: bias holds 40 elements; the call's sizes reach 120 (N * L)");
  c.in_elems[1] = 120;
  c.scalars[0] = 4; /* N = 4: every buffer short, y named first */
  ASSERT_STR_EQ(run_call(&c, 1),
                "ktune: KT_ERR_ARGS: masked_softmax: y holds 120 elements; the call's sizes reach 160 (N * L)");
  c.scalars[0] = 0; /* no rows: nothing is short */
  ASSERT_STR_EQ(run_call(&c, 0), NO_DEVICE);
  c.scalars[0] = -1; /* below 0: the launch's own refusal */
  const char *got = run_call(&c, 0);
  ASSERT_TRUE(strstr(got, "ktune: KT_ERR_ARGS: masked_softmax: arg 0 (y): its extent, N * L, is -40 elements") == got);
  c.scalars[0] = 2e9; /* N * L past the buffers, however large */
  got = run_call(&c, 0);
  ASSERT_TRUE(strstr(got, "y holds 120 elements; the call's sizes reach 80000000000 (N * L)") != NULL);
  kt_runtime_close(rt);
}

static void odd_frames_are_refused_by_name(void) {
  kt_runtime *rt = registered();
  if (!rt) return;
  static const struct {
    call_case c;
    const char *want;
  } cases[] = {
      {{"masked_softmax", "oinisss", "u8", 3, {3, 40, 1}, 2, 1, {120, 120}, {120}, {F32, F32}}, NULL},
      {{"masked_softmax", "oinis", "u8", 3, {3, 40, 1}, 2, 1, {120, 120}, {120}, {F32, F32}},
       "ktune: masked_softmax: the layout does not have one letter per param"},
      {{"masked_softmax", "oinisxs", "u8", 3, {3, 40, 1}, 2, 1, {120, 120}, {120}, {F32, F32}},
       "ktune: masked_softmax: a layout letter is not one of i, o, a, n, s"},
      {{"masked_softmax", "oiiisss", "", 3, {3, 40, 1}, 2, 1, {120, 120}, {120}, {F32, F32}},
       "ktune: masked_softmax: fewer inputs than the layout names"},
      {{"masked_softmax", "oinnsss", "u8,f32", 3, {3, 40, 1}, 2, 1, {120, 120}, {120}, {F32, F32}},
       "ktune: masked_softmax: more buffers than the layout names"},
      {{"masked_softmax", "oooisss", "", 3, {3, 40, 1}, 2, 1, {120, 120}, {120}, {F32, F32}},
       "ktune: masked_softmax: fewer results than the layout names"},
      {{"masked_softmax", "oinisss", "u8", 2, {3, 40}, 2, 1, {120, 120}, {120}, {F32, F32}},
       "ktune: masked_softmax: fewer scalars than the layout names"},
      {{"nope", "oinisss", "u8", 3, {3, 40, 1}, 2, 1, {120, 120}, {120}, {F32, F32}},
       "ktune: kernel nope is not registered for device 0"},
      {{NULL, "oinisss", "u8", 3, {3, 40, 1}, 2, 1, {120, 120}, {120}, {F32, F32}},
       "ktune: a call needs kernel, layout (strings) and scalars (f64[])"},
      {{"masked_softmax", "oiiisss", "", 3, {3, 40, 1}, 3, 1, {120, 120, 120}, {120}, {F32, F32, F32}},
       "ktune: KT_ERR_ARGS: masked_softmax: arg 2 (mask) must be u8, got f32"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *got = run_call(&cases[i].c, (int)(i & 1));
    ASSERT_STR_EQ(got, cases[i].want ? cases[i].want : NO_DEVICE);
  }
  kt_runtime_close(rt);
}

/* XLA first asks each entry for its traits: the graph entry declares
** itself command-buffer compatible, the plain one nothing. */
static void entries_declare_their_traits(void) {
  for (int graph = 0; graph < 2; graph++) {
    XLA_FFI_Metadata md;
    memset(&md, 0, sizeof md);
    XLA_FFI_Metadata_Extension ext;
    memset(&ext, 0, sizeof ext);
    ext_head head = {sizeof ext, XLA_FFI_Extension_Metadata}; /* the base's fields, whatever its name */
    memcpy(&ext, &head, sizeof head);
    ext.metadata = &md;
    XLA_FFI_CallFrame f;
    memset(&f, 0, sizeof f);
    f.struct_size = sizeof f;
    f.extension_start = (void *)&ext;
    ASSERT_TRUE((graph ? ktune_jax_call_graph(&f) : ktune_jax_call(&f)) == NULL);
    ASSERT_EQ((int)md.api_version.major_version, XLA_FFI_API_MAJOR);
    ASSERT_EQ((int)md.api_version.minor_version, XLA_FFI_API_MINOR);
    ASSERT_EQ((int)md.traits, graph ? (int)XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE : 0);
  }
}

#else
static void skipped(void) { SKIP("jaxlib's FFI header is not here (jax does not import)"); }
#define buffers_shorter_than_the_call_are_refused skipped
#define odd_frames_are_refused_by_name skipped
#define entries_declare_their_traits skipped
#endif

const kt_test t_jaxffi_tests[] = {
    {"jax handler: buffers shorter than the call's sizes are refused by name",
     buffers_shorter_than_the_call_are_refused},
    {"jax handler: odd frames and layouts are refused by name", odd_frames_are_refused_by_name},
    {"jax handler: the graph entry declares command buffers, the plain one nothing", entries_declare_their_traits},
    {NULL, NULL},
};
