/*
** The norms' per-call bodies of ktune.ops in C (_fastnorm.c).
*/
#ifndef KTUNE_FASTNORM_H
#define KTUNE_FASTNORM_H

#include "_fastcall.h"

/* Adds norm_setup, norm_register, norm_eager, norm_forward and
** norm_backward to the module. 0, or -1 with an exception. */
int fc_norm_init(PyObject *module);

/* Devices whose kernels norm_register can keep for fc_norm_launchers. */
#define FC_MAXDEV 64

/* Device dev's K_COUNT Launchers (_fastargs.h's order) as norm_register
** kept them, or NULL where none was registered. Needs no GIL: a
** registration stays for the process. */
Launcher **fc_norm_launchers(int dev);

#endif
