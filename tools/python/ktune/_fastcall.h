/*
** The Launcher of ktune._fastcall (_fastcall.c): one kernel's launches
** packed in C, for the module's other files to launch through.
*/
#ifndef KTUNE_FASTCALL_H
#define KTUNE_FASTCALL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ktune.h"

/* Params a kernel may have here; the package falls back to ctypes above. */
#define FC_MAXP 64

typedef kt_status (*launch_fn)(kt_kernel *, kt_stream, const kt_arg *, int);

/* The Python objects a Launcher holds. */
enum {
  O_CODES,      /* dict: dtype object -> kt_dtype code */
  O_NULL_TYPE,  /* ktune._Null: a null pointer that names a dtype */
  O_DTYPE_CODE, /* dtype -> code for dtypes missing from codes (raises) */
  O_STREAM,     /* () -> the current stream's handle */
  O_ON_ERROR,   /* status -> raises the runtime's error */
  O_SLOW,       /* (values, stream, config) -> the ctypes path */
  O_COUNT
};

typedef struct {
  PyObject_HEAD
  launch_fn launch;
  kt_kernel *kernel;
  int n;
  unsigned char kinds[FC_MAXP];
  PyObject *obj[O_COUNT]; /* owned references, in the constructor's order */
} Launcher;

extern PyTypeObject fc_launcher_type;

/* A dtype object's kt_dtype code through codes (a dict), then convert
** (which raises for a dtype ktune lacks). 0, or -1 with an exception. */
int fc_dtype_code(PyObject *codes, PyObject *convert, PyObject *dtype, int *code);

/* t.data_ptr() into *ptr. 0, or -1 with an exception. */
int fc_data_ptr(PyObject *t, uint64_t *ptr);

/* a[0..self->n) launched on the current stream. 0, or -1 with the
** runtime's error raised. */
int fc_run(Launcher *self, const kt_arg *a);

/* Readies the Launcher type and adds it, MAX_PARAMS and ARG_SIZE to the
** module. 0, or -1 with an exception. */
int fc_launcher_init(PyObject *module);

#endif
