/*
** torch's norm operators on CUDA run by ktune's kernels (_fastaten.c).
*/
#ifndef KTUNE_FASTATEN_H
#define KTUNE_FASTATEN_H

#include "_fastcall.h"

/* Adds aten_install, aten_uninstall and aten_installed to the module. 0,
** or -1 with an exception. */
int fc_aten_init(PyObject *module);

#endif
