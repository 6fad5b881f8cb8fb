/*
** The module ktune._fastcall: the Launcher (_fastcall.c), the norms'
** bodies that launch through it (_fastnorm.c), and torch's norm operators
** run by the same kernels (_fastaten.c).
*/
#include "_fastcall.h"
#include "_fastaten.h"
#include "_fastnorm.h"

static struct PyModuleDef fc_module = {
    PyModuleDef_HEAD_INIT, .m_name = "ktune._fastcall", .m_doc = "ktune's launch path in C", .m_size = -1,
};

PyMODINIT_FUNC PyInit__fastcall(void) {
  PyObject *m = PyModule_Create(&fc_module);
  if (!m) return NULL;
  if (fc_launcher_init(m) < 0 || fc_norm_init(m) < 0 || fc_aten_init(m) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
