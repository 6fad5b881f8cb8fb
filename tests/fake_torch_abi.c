/*
** A stand-in for the part of torch's stable C ABI that ktune._fastcall's
** torch norms use (tools/python/ktune/_fastaten.c), for testing it without
** torch or a GPU (tests/python/test_fastaten.py), and the driver's
** cuStreamIsCapturing. Tensors here are
** records with sizes, a dtype, a device, contiguity and a made-up address
** (copy_ records what it copied);
** libraries record their kernels; fake_call runs one with a stack as
** torch's boxed kernels do. Counts of live tensors, boxes and lists show
** what a call leaks. Built by make as build/libfake_torch_abi.so.
*/
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))
#define MAXDIM 16

typedef struct {
  int64_t dim, sizes[MAXDIM];
  int32_t dtype, dev;
  int contiguous, defined;
  uint64_t data;
} ftensor;

typedef struct {
  size_t n;
  uint64_t v[MAXDIM];
} flist;

typedef void (*boxed_fn)(uint64_t *, uint64_t, uint64_t);

#define MAXIMPL 16
static struct {
  void *lib;
  char name[64];
  boxed_fn fn;
} impls[MAXIMPL];

static long live_tensors, live_boxes, live_lists;
/* copy_'s calls (destination's and source's data), and whether it fails. */
#define MAXCOPY 16
static uint64_t copies[MAXCOPY][2];
static int ncopies, copy_fails;
static uint64_t next_data = 0x7E0000000000ull;
static char last_error[1024];

/* The ABI's functions: 0 is success. */
API int32_t aoti_torch_get_data_ptr(ftensor *t, void **p) {
  if (!t->defined) return 1;
  *p = (void *)(uintptr_t)t->data;
  return 0;
}
API int32_t aoti_torch_get_dim(ftensor *t, int64_t *d) {
  *d = t->dim;
  return 0;
}
API int32_t aoti_torch_get_sizes(ftensor *t, int64_t **s) {
  *s = t->sizes;
  return 0;
}
API int32_t aoti_torch_get_dtype(ftensor *t, int32_t *d) {
  *d = t->dtype;
  return 0;
}
API int32_t aoti_torch_get_device_index(ftensor *t, int32_t *d) {
  *d = t->dev;
  return 0;
}
API int32_t aoti_torch_is_contiguous(ftensor *t, bool *c) {
  *c = t->contiguous;
  return 0;
}
API int32_t aoti_torch_is_defined(ftensor *t, bool *d) {
  *d = t->defined;
  return 0;
}

static ftensor *make(int64_t dim, const int64_t *sizes, int32_t dtype, int32_t dev, int contiguous) {
  ftensor *t = calloc(1, sizeof *t);
  if (!t || dim > MAXDIM) {
    free(t);
    return NULL;
  }
  t->dim = dim;
  memcpy(t->sizes, sizes, sizeof *sizes * (size_t)dim);
  t->dtype = dtype, t->dev = dev, t->contiguous = contiguous, t->defined = 1;
  t->data = next_data;
  next_data += 0x100000;
  live_tensors++;
  return t;
}

API int32_t aoti_torch_empty_strided(int64_t dim, const int64_t *sizes, const int64_t *strides, int32_t dtype,
                                     int32_t devtype, int32_t dev, ftensor **out) {
  int64_t want = 1;
  for (int64_t i = dim - 1; i >= 0; i--) {
    if (strides[i] != want || devtype != 1) return 1; /* the callers ask for contiguous CUDA tensors */
    want *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return (*out = make(dim, sizes, dtype, dev, 1)) ? 0 : 1;
}
/* copy_ into a tensor of the same sizes, dtype and device (what the
** callers ask for); recorded. */
API int32_t aoti_torch_copy_(ftensor *self, ftensor *src, int32_t non_blocking) {
  if (copy_fails || non_blocking || self->dim != src->dim || self->dtype != src->dtype || self->dev != src->dev ||
      memcmp(self->sizes, src->sizes, sizeof *self->sizes * (size_t)self->dim) || ncopies == MAXCOPY)
    return 1;
  copies[ncopies][0] = self->data, copies[ncopies][1] = src->data;
  ncopies++;
  return 0;
}
API int32_t aoti_torch_delete_tensor_object(ftensor *t) {
  free(t);
  live_tensors--;
  return 0;
}
API int32_t aoti_torch_new_uninitialized_tensor(ftensor **out) {
  if (!(*out = calloc(1, sizeof **out))) return 1;
  live_tensors++;
  return 0;
}

API int32_t aoti_torch_library_init_impl(const char *ns, const char *k, const char *file, uint32_t line, void **out) {
  (void)file, (void)line;
  if (strcmp(ns, "aten") || strcmp(k, "CUDA")) return 1;
  return (*out = malloc(1)) ? 0 : 1;
}
API int32_t aoti_torch_library_impl(void *lib, const char *name, boxed_fn fn) {
  for (int i = 0; i < MAXIMPL; i++)
    if (!impls[i].lib) {
      impls[i].lib = lib, impls[i].fn = fn;
      snprintf(impls[i].name, sizeof impls[i].name, "%s", name);
      return 0;
    }
  return 1;
}
API int32_t aoti_torch_delete_library_object(void *lib) {
  for (int i = 0; i < MAXIMPL; i++)
    if (impls[i].lib == lib) impls[i].lib = NULL;
  free(lib);
  return 0;
}

API int32_t torch_list_size(flist *l, size_t *n) {
  *n = l->n;
  return 0;
}
API int32_t torch_list_get_item(flist *l, size_t i, uint64_t *v) {
  if (i >= l->n) return 1;
  *v = l->v[i];
  return 0;
}
API int32_t torch_delete_list(flist *l) {
  free(l);
  live_lists--;
  return 0;
}
API int32_t torch_delete_stable_ivalue(uint64_t *box) {
  free(box);
  live_boxes--;
  return 0;
}
API int32_t aoti_torch_get_current_cuda_stream(int32_t dev, void **s) {
  *s = (void *)(uintptr_t)(0x5000 + dev);
  return 0;
}
API void aoti_torch_check(bool cond, const char *func, const char *file, uint32_t line, const char *msg) {
  (void)file, (void)line;
  if (!cond) snprintf(last_error, sizeof last_error, "%s: %s", func, msg);
}
/* The driver's capture query, which ktune finds here before libcuda's. */
static int capturing;
API int cuStreamIsCapturing(void *stream, int *status) {
  (void)stream;
  *status = capturing;
  return 0;
}
API int32_t aoti_torch_dtype_float32(void) { return 6; }
API int32_t aoti_torch_dtype_float16(void) { return 5; }
API int32_t aoti_torch_dtype_bfloat16(void) { return 15; }
API int32_t aoti_torch_device_type_cuda(void) { return 1; }

/* The test's side. */
API ftensor *fake_tensor(int64_t dim, const int64_t *sizes, int32_t dtype, int32_t dev, int contiguous) {
  return make(dim, sizes, dtype, dev, contiguous);
}
API ftensor *fake_undefined(void) {
  ftensor *t = NULL;
  return aoti_torch_new_uninitialized_tensor(&t) ? NULL : t;
}
API uint64_t *fake_box(uint64_t v) {
  uint64_t *b = malloc(sizeof *b);
  if (b) *b = v, live_boxes++;
  return b;
}
API flist *fake_list(size_t n, const uint64_t *v) {
  flist *l = calloc(1, sizeof *l);
  if (!l || n > MAXDIM) {
    free(l);
    return NULL;
  }
  l->n = n;
  memcpy(l->v, v, sizeof *v * n);
  live_lists++;
  return l;
}
/* Runs the kernel registered for name: 0, or 1 where none is. */
API int fake_call(const char *name, uint64_t *stack, uint64_t nargs, uint64_t nret) {
  last_error[0] = 0;
  for (int i = 0; i < MAXIMPL; i++)
    if (impls[i].lib && !strcmp(impls[i].name, name)) {
      impls[i].fn(stack, nargs, nret);
      return 0;
    }
  return 1;
}
API int fake_registered(void) {
  int n = 0;
  for (int i = 0; i < MAXIMPL; i++) n += impls[i].lib != NULL;
  return n;
}
API void fake_set_capturing(int on) { capturing = on; }
API void fake_set_copy_fails(int on) { copy_fails = on; }
/* The copies since the last call, into pairs (destination, source): their count. */
API int fake_copies(uint64_t *pairs) {
  int n = ncopies;
  memcpy(pairs, copies, sizeof copies[0] * (size_t)n);
  ncopies = 0;
  return n;
}
API long fake_live(void) { return live_tensors + live_boxes + live_lists; }
API const char *fake_last_error(void) { return last_error; }
