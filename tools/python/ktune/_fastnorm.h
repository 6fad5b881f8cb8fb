/*
** The norms' per-call bodies of ktune.ops in C (_fastnorm.c).
*/
#ifndef KTUNE_FASTNORM_H
#define KTUNE_FASTNORM_H

#include "_fastcall.h"

/* Adds norm_setup, norm_register, norm_eager, norm_forward and
** norm_backward to the module. 0, or -1 with an exception. */
int fc_norm_init(PyObject *module);

#endif
