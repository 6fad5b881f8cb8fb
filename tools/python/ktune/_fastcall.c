/*
** ktune._fastcall: the per-call path of ktune.Kernel.launch in C. It packs
** the Python values into kt_arg structs and calls kt_launch, where the
** ctypes path runs a Python loop, struct.pack_into and ctypes' argument
** conversion. Optional: the package uses the ctypes path where this module
** was not built (no Python headers) or KTUNE_FASTCALL=0.
**
** It links nothing: kt_launch comes as an address from the library that
** ctypes loaded, so both paths use one library and one runtime.
*/
#include <string.h>

#include "_fastcall.h"

static PyObject *s_dtype, *s_data_ptr;

static int fc_traverse(Launcher *self, visitproc visit, void *arg) {
  for (int i = 0; i < O_COUNT; i++) Py_VISIT(self->obj[i]);
  return 0;
}

static int fc_clear(Launcher *self) {
  for (int i = 0; i < O_COUNT; i++) Py_CLEAR(self->obj[i]);
  return 0;
}

static void fc_dealloc(Launcher *self) {
  PyObject_GC_UnTrack(self);
  fc_clear(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Launcher(launch_addr, kernel_addr, kinds, codes, null_type, dtype_code,
**          stream, on_error, slow) */
static int fc_init(Launcher *self, PyObject *args, PyObject *kw) {
  unsigned long long launch, kernel;
  const char *kinds;
  Py_ssize_t n;
  PyObject *o[O_COUNT];
  if (kw && PyDict_Size(kw)) {
    PyErr_SetString(PyExc_TypeError, "Launcher takes no keyword arguments");
    return -1;
  }
  if (!PyArg_ParseTuple(args, "KKy#O!OOOOO", &launch, &kernel, &kinds, &n, &PyDict_Type, &o[O_CODES],
                        &o[O_NULL_TYPE], &o[O_DTYPE_CODE], &o[O_STREAM], &o[O_ON_ERROR], &o[O_SLOW]))
    return -1;
  if (!launch || !kernel || n > FC_MAXP) {
    PyErr_Format(PyExc_ValueError, "Launcher: a null address or %zd params (at most %d)", n, FC_MAXP);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (kinds[i] < KT_ARG_PTR || kinds[i] > KT_ARG_F32) {
      PyErr_Format(PyExc_ValueError, "Launcher: param %zd has kind %d", i, kinds[i]);
      return -1;
    }
  fc_clear(self);
  self->launch = (launch_fn)(uintptr_t)launch;
  self->kernel = (kt_kernel *)(uintptr_t)kernel;
  self->n = (int)n;
  memcpy(self->kinds, kinds, (size_t)n);
  for (int i = 0; i < O_COUNT; i++) {
    Py_INCREF(o[i]);
    self->obj[i] = o[i];
  }
  return 0;
}

/* A dtype object's code: the dict first, then the package's converter
** (which raises for a dtype with no ktune equivalent). */
int fc_dtype_code(PyObject *codes, PyObject *convert, PyObject *dt, int *code) {
  PyObject *c = PyDict_GetItemWithError(codes, dt); /* borrowed */
  long r = -1;
  if (c) {
    r = PyLong_AsLong(c);
  } else if (!PyErr_Occurred() && (c = PyObject_CallOneArg(convert, dt))) {
    r = PyLong_AsLong(c);
    Py_DECREF(c);
  }
  if (r == -1 && PyErr_Occurred()) return -1;
  *code = (int)r;
  return 0;
}

int fc_data_ptr(PyObject *t, uint64_t *ptr) {
  PyObject *p = PyObject_CallMethodNoArgs(t, s_data_ptr);
  if (!p) return -1;
  *ptr = PyLong_AsUnsignedLongLong(p);
  Py_DECREF(p);
  return *ptr == UINT64_MAX && PyErr_Occurred() ? -1 : 0;
}

static int dtype_of(Launcher *self, PyObject *v, int *code) {
  PyObject *dt = PyObject_GetAttr(v, s_dtype);
  if (!dt) return -1;
  int rc = fc_dtype_code(self->obj[O_CODES], self->obj[O_DTYPE_CODE], dt, code);
  Py_DECREF(dt);
  return rc;
}

static int pack_ptr(Launcher *self, PyObject *v, kt_arg *a) {
  a->kind = KT_ARG_PTR;
  a->dtype = 0;
  a->v.ptr = 0;
  if (v == Py_None) return 0;
  int code;
  if (dtype_of(self, v, &code)) return -1;
  a->dtype = (kt_dtype)code;
  if (Py_TYPE(v) == (PyTypeObject *)self->obj[O_NULL_TYPE]) return 0;
  return fc_data_ptr(v, &a->v.ptr);
}

static int pack_int(PyObject *v, kt_arg *a, int kind, int i) {
  /* An int, or what stands for one (numpy's integers, a 0-d integer
  ** tensor: __index__), as the ctypes path's struct packing takes them. */
  PyObject *n = PyLong_Check(v) ? Py_NewRef(v) : PyNumber_Index(v);
  if (!n) {
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "param %d: an int is required, not %s", i, Py_TYPE(v)->tp_name);
    }
    return -1;
  }
  int over = 0;
  long long x = PyLong_AsLongLongAndOverflow(n, &over);
  Py_DECREF(n);
  if (x == -1 && PyErr_Occurred()) return -1;
  if (over || (kind == KT_ARG_I32 && (x < INT32_MIN || x > INT32_MAX))) {
    PyErr_Format(PyExc_OverflowError, "param %d: %S does not fit a %s", i, v, kind == KT_ARG_I32 ? "i32" : "i64");
    return -1;
  }
  a->kind = (kt_arg_kind)kind;
  a->dtype = 0;
  a->v.i64 = 0;
  if (kind == KT_ARG_I32)
    a->v.i32 = (int32_t)x;
  else
    a->v.i64 = x;
  return 0;
}

/* values (a list or tuple, one per param) into a[]. */
static int pack(Launcher *self, PyObject *values, kt_arg *a) {
  PyObject *seq = PySequence_Fast(values, "values must be a list or tuple");
  if (!seq) return -1;
  int rc = 0;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n != self->n) {
    PyErr_Format(PyExc_ValueError, "%zd args given, the spec has %d params", n, self->n);
    rc = -1;
  }
  PyObject **items = PySequence_Fast_ITEMS(seq);
  for (int i = 0; !rc && i < self->n; i++) {
    PyObject *v = items[i];
    switch (self->kinds[i]) {
    case KT_ARG_PTR: rc = pack_ptr(self, v, &a[i]); break;
    case KT_ARG_F32: {
      double d = PyFloat_AsDouble(v);
      if (d == -1.0 && PyErr_Occurred()) {
        rc = -1;
        break;
      }
      a[i].kind = KT_ARG_F32;
      a[i].dtype = 0;
      a[i].v.i64 = 0;
      a[i].v.f32 = (float)d;
      break;
    }
    default: rc = pack_int(v, &a[i], self->kinds[i], i); break;
    }
  }
  Py_DECREF(seq);
  return rc;
}

/* a[] launched on stream (an int handle). 0, or -1 with the runtime's
** error raised (on_error raises it as a KtuneError). */
static int run_on(Launcher *self, PyObject *stream, const kt_arg *a) {
  unsigned long long h = PyLong_AsUnsignedLongLong(stream);
  if (h == (unsigned long long)-1 && PyErr_Occurred()) return -1;
  kt_status st;
  Py_INCREF(self); /* a caller's reference may be borrowed: held while the GIL is let go */
  Py_BEGIN_ALLOW_THREADS /* a miss may tune for seconds */
  st = self->launch(self->kernel, (kt_stream)(uintptr_t)h, a, self->n);
  Py_END_ALLOW_THREADS
  Py_DECREF(self);
  if (!st) return 0;
  PyObject *code = PyLong_FromLong((long)st);
  PyObject *r = code ? PyObject_CallOneArg(self->obj[O_ON_ERROR], code) : NULL;
  Py_XDECREF(code);
  Py_XDECREF(r);
  if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "kt_launch failed with status %d", (int)st);
  return -1;
}

int fc_run(Launcher *self, const kt_arg *a) {
  PyObject *s = PyObject_CallNoArgs(self->obj[O_STREAM]);
  if (!s) return -1;
  int rc = run_on(self, s, a);
  Py_DECREF(s);
  return rc;
}

/* launch(values, stream=None, config=None): kt_launch on the stream given,
** else on the current stream; a config goes to the ctypes path. */
static PyObject *fc_launch(Launcher *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *names[] = {"values", "stream", "config"};
  PyObject *got[3] = {NULL, Py_None, Py_None};
  Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs < 1 || nargs > 3) {
    PyErr_SetString(PyExc_TypeError, "launch(values, stream=None, config=None)");
    return NULL;
  }
  for (Py_ssize_t i = 0; i < nargs; i++) got[i] = args[i];
  for (Py_ssize_t i = 0; i < nk; i++) {
    PyObject *k = PyTuple_GET_ITEM(kwnames, i);
    int at = -1;
    for (int j = 1; j < 3; j++)
      if (PyUnicode_CompareWithASCIIString(k, names[j]) == 0) at = j;
    if (at < 0 || at < nargs) {
      PyErr_Format(PyExc_TypeError, "launch: unexpected or repeated argument %S", k);
      return NULL;
    }
    got[at] = args[nargs + i];
  }
  PyObject *values = got[0], *stream = got[1], *config = got[2];
  /* A config, or a count the spec does not have: the ctypes path (which
  ** says so in the package's words). */
  if (config != Py_None || PyObject_Length(values) != self->n) {
    PyErr_Clear();
    return PyObject_CallFunctionObjArgs(self->obj[O_SLOW], values, stream, config, NULL);
  }
  kt_arg a[FC_MAXP];
  if (pack(self, values, a)) return NULL;
  if (stream == Py_None ? fc_run(self, a) : run_on(self, stream, a)) return NULL;
  Py_RETURN_NONE;
}

/* pack(values) -> bytes: the kt_arg array a launch would pass (for tests). */
static PyObject *fc_pack(Launcher *self, PyObject *values) {
  kt_arg a[FC_MAXP];
  memset(a, 0, sizeof a);
  if (pack(self, values, a)) return NULL;
  return PyBytes_FromStringAndSize((const char *)a, (Py_ssize_t)(sizeof a[0] * (size_t)self->n));
}

static PyMethodDef fc_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))fc_launch, METH_FASTCALL | METH_KEYWORDS,
     "launch(values, stream=None, config=None): queue the kernel"},
    {"pack", (PyCFunction)fc_pack, METH_O, "pack(values) -> bytes: the kt_arg array of a launch"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject fc_launcher_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ktune._fastcall.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One kernel's launches packed in C",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fc_init,
    .tp_dealloc = (destructor)fc_dealloc,
    .tp_traverse = (traverseproc)fc_traverse,
    .tp_clear = (inquiry)fc_clear,
    .tp_methods = fc_methods,
};

int fc_launcher_init(PyObject *m) {
  if (PyType_Ready(&fc_launcher_type) < 0) return -1;
  if (!(s_dtype = PyUnicode_InternFromString("dtype")) || !(s_data_ptr = PyUnicode_InternFromString("data_ptr")))
    return -1;
  Py_INCREF(&fc_launcher_type);
  if (PyModule_AddObject(m, "Launcher", (PyObject *)&fc_launcher_type) < 0) {
    Py_DECREF(&fc_launcher_type);
    return -1;
  }
  if (PyModule_AddIntConstant(m, "MAX_PARAMS", FC_MAXP) < 0 ||
      PyModule_AddIntConstant(m, "ARG_SIZE", (long)sizeof(kt_arg)) < 0)
    return -1;
  return 0;
}
