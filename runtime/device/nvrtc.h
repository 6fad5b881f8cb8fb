/* NVRTC, loaded at run time (libnvrtc.so.13 from the loader path, else from
** the toolkit), so that commands that never compile run where it is absent.
** Thread-safe: NVRTC programs are independent. */
#ifndef KT_RTC_H
#define KT_RTC_H

#include <stddef.h>

#include "ktune.h"

/* The NVRTC ABI this build loads (the soname's major version). */
#define KT_NVRTC_ABI 13

kt_status kt__nvrtc_load(const char *cuda_home, char *err, size_t errlen);
/* Load that very file (a helper process loads what its parent did). */
kt_status kt__nvrtc_load_file(const char *file, char *err, size_t errlen);
/* The path of the NVRTC loaded into out; -1 when none is, or it is unknown. */
int kt__nvrtc_file(char *out, size_t n);
/* Tests: act as if NVRTC were not installed (on != 0), as on a machine that
** serves only from the cache. */
void kt__nvrtc_absent(int on);
/* e.g. 13000 for 13.0; 0 when not loaded. */
int kt__nvrtc_version(void);
/* "NVRTC 13.0", the loaded NVRTC as messages and stored verdicts name it,
** into out; "" and -1 when none is loaded. */
int kt__nvrtc_name(char *out, size_t n);

/* The compute capability of an arch of the form sm_90, sm_90a or sm_100f
** ("sm_90a": sm_90 with its arch-specific instructions; "sm_100f": code
** for sm_100's family, with its family's instructions); -1 for any other
** text. */
int kt__arch_cc(const char *arch);

/* The NVRTC option that targets arch ("sm_90", "sm_90a") with the NVRTC
** loaded from cuda_home (as kt__nvrtc_load), into opt:
** "--gpu-architecture=sm_90" where NVRTC lists the arch (or lists none);
** "--gpu-architecture=compute_121" for an arch newer than every one it
** lists (a GPU newer than the toolkit: PTX, compiled by the driver at
** load); else KT_ERR_INVALID and "NVRTC 13.0 does not compile for sm_35
** (it compiles for sm_75, sm_80, ..., and newer archs through PTX)";
** KT_ERR_INVALID for an arch not of kt__arch_cc's form. NVRTC's load
** error where it does not load. */
kt_status kt__nvrtc_target(const char *cuda_home, const char *arch, char *opt, size_t optlen, char *err,
                           size_t errlen);
/* kt__nvrtc_target, and for an arch with a suffix ("sm_90a", "sm_100f"),
** which NVRTC lists only by number, one compile of an empty kernel: NVRTC
** takes no suffix for some numbers (sm_90f), and every variant would fail
** alike. KT_ERR_INVALID and "NVRTC 13.0 does not compile for sm_90f
** (NVRTC: ...)" where it does not. */
kt_status kt__nvrtc_check_target(const char *cuda_home, const char *arch, char *err, size_t errlen);
/* Tests: NVRTC lists no arch above cc (0: all it lists), as an older
** toolkit would. */
void kt__nvrtc_cap_archs(int cc);

/* Compile src and instantiate exprs[0..n) (template instances) in one
** program: one cubin holding them all (several per program cost less than
** one each: the headers are parsed once). On success *cubin (caller frees
** with kt__free; PTX text for a compute_XY target), *size and
** lowered[0..n) (the mangled names, caller frees each with kt__free). A
** failure fails them all; its message carries the compile log:
** "NVRTC: rmsnorm.cu(12): error: identifier "x" is undefined". */
kt_status kt__nvrtc_compile_many(const char *src, const char *prog_name, const char *const *exprs, int n,
                                 const char *const *opts, int nopts, void **cubin, size_t *size, char **lowered,
                                 char *err, size_t errlen);

/* One tiny compile in this process, until one succeeds (later calls do
** nothing). NVRTC registers its exit-time teardown with the C
** library at its first compile; a thread still compiling when that
** teardown runs crashes the exit. An exit hook registered after this call
** runs before the teardown (handlers run last registered first), so it
** can stop such threads in time. arch: the device's, as "sm_90". */
kt_status kt__nvrtc_warm(const char *arch, char *err, size_t errlen);

#endif
