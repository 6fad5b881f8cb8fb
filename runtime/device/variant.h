/* A loaded spec ready to compile ("program"), and its variants: one module
** per tuple of template-argument values, compiled by NVRTC on first use (or
** read from the cache's binaries), found without a lock afterwards. */
#ifndef KT_VARIANT_H
#define KT_VARIANT_H

#include <pthread.h>

#include "base/lfmap.h"
#include "device/env.h"
#include "spec/key.h"
#include "spec/spec.h"

/* Compiled variants of one program, found without a lock on the launch path. */
typedef struct kt__vtable {
  kt__lfmap map;
  pthread_mutex_t lock;   /* inserts and compile completion */
  pthread_cond_t done;
} kt__vtable;

/* 0, or -1 when out of memory. _free accepts a table that failed to init. */
int kt__vtable_init(kt__vtable *vt);
void kt__vtable_free(kt__vtable *vt);

/* NVRTC options a program has beside its spec's flags: two include paths,
** --no-cache, the arch, the language, --pch, the headers' hash and
** --use_fast_math. */
#define KT__FIXED_OPTS 8

typedef struct kt__prog {
  kt__env *env;
  kt__spec *spec;
  kt__vtable vt;
  kt__keydef keydef;
  int64_t builtins[KT__NBUILTINS];
  uint64_t variant_seed;  /* hash of spec, arch and compile options */
  int pdl;                /* launched with programmatic stream serialization */
  char spec_hash[17];
  const char *opts[KT__FIXED_OPTS + KT__MAX_FLAGS]; /* NVRTC options, borrowed from optbuf/spec */
  int nopts;
  char optbuf[3][1100];
  char headers_opt[40];   /* -DKT__HEADERS=0x...: see program.c */
  char prog_name[1400];   /* the source's absolute path: NVRTC looks for its
                             quoted includes beside it, never in the
                             working directory */
} kt__prog;

/* Load the spec at path for env and prepare to compile it: NVRTC options,
** the key layout, builtins. no_pdl turns early launch off. On failure p
** holds nothing to free and kt_errmsg() of env says why. */
kt_status kt__prog_load(kt__prog *p, kt__env *env, const char *path, int no_pdl);
void kt__prog_free(kt__prog *p);

/* The function of c's variant (compiling it on first use), and its
** resource use when attrs is not NULL. Thread-safe; waits while another
** thread compiles the same variant. A failure is final, except out of
** memory (host, or device at a module load) and NVRTC not loaded: those are
** built again by a call after a pause (1 s, doubled at each failure, at
** most a minute), and until then returned at once. */
kt_status kt__variant_get(kt__prog *p, const kt__call *c, void **fn);
kt_status kt__variant_info(kt__prog *p, const kt__call *c, void **fn, kt__funcattrs *attrs);
/* Build the variants of calls[0..n) that are not built or being built, on
** up to threads threads: those the cache has are loaded, the others
** compiled several instances per NVRTC program (a program costs far more
** than an instance in it): as many as spread them over the threads, at
** most 4, or $KTUNE_COMPILE_GROUP (1 to KT__GROUP_MAX). Results stay with the variants:
** kt__variant_info then returns each at once, with its own error. */
#define KT__GROUP_MAX 8
void kt__variant_build_all(kt__prog *p, const kt__call *calls, int n, int threads);

/* The same in the background, so that the caller can use each variant as
** soon as it is built. The variants are claimed (and those the cache has
** loaded) before kt__variant_build_start returns, so kt__variant_info on
** one of them waits for this build instead of compiling it again. */
typedef struct kt__build kt__build;
/* Asked by a compiling thread just before it compiles calls[i]: nonzero
** gives the variant back unbuilt (the next kt__variant_info builds it). */
typedef int (*kt__skip_fn)(void *user, int i);
typedef struct kt__buildopts {
  int lead;               /* the first lead variants one per NVRTC program,
                             so that the first is ready soonest */
  kt__skip_fn skip;       /* or NULL */
  void *user;             /* passed to skip */
} kt__buildopts;
/* o may be NULL. Returns NULL when out of memory (each variant is then
** built when first used). Caller owns the build; end it with
** kt__variant_build_wait(), which waits for every claimed variant to be
** built or given back, then frees it (NULL is fine). */
kt__build *kt__variant_build_start(kt__prog *p, const kt__call *calls, int n, int threads, const kt__buildopts *o);
void kt__variant_build_wait(kt__build *b);
/* Wait while c's variant is being built, without building it: 1 when it
** is built (ready, or failed), 0 when nobody has built it (absent, or
** given back unbuilt). */
int kt__variant_settled(kt__prog *p, const kt__call *c);
/* Whether c's variant failed because NVRTC refused its source, a verdict
** that holds for every later compile of the same text: 1, or 0 when it is
** built, not built, or failed for another reason (a header changed on
** disk, a helper died, NVRTC missing, out of memory, a module load).
** Waits as kt__variant_settled. */
int kt__variant_refused(kt__prog *p, const kt__call *c);
/* The template values of c, in the spec's order (KT_MAX_TARGS of them,
** zero past ntargs). */
void kt__variant_vals(const kt__prog *p, const kt__call *c, int64_t *vals);
/* "rmsnorm_fwd T=bf16 BLOCK=256 VEC=4" (sep ' ') or with '.' for files;
** KT__VARIANT_NAME_MAX bytes hold any (each template argument a separator,
** a name, '=' and an int64 or a dtype name). */
#define KT__VARIANT_NAME_MAX (KT__NAME_MAX + KT_MAX_TARGS * (KT__NAME_MAX + 22) + 1)
void kt__variant_name(const kt__prog *p, const kt__call *c, char sep, char *out, size_t n);

/* The cubin, its size and the compile time of c's variant once built; 0,
** or -1 when it is not built (or failed). Borrowed; valid until the program
** is freed. */
int kt__variant_cubin(kt__prog *p, const kt__call *c, const void **cubin, size_t *size, double *ms);

/* The same with the entry's mangled name, for sending the variant to
** another rank; -1 also when either is unknown. Borrowed likewise. */
int kt__variant_binary(const kt__prog *p, const kt__call *c, const void **cubin, size_t *size, const char **lowered);
/* Make c's variant from a cubin and its entry name that another rank sent,
** unless it is built or being built here already. A cubin that does not
** load is dropped with a warning and the variant built as usual. KT_OK, or
** KT_ERR_NOMEM. Never stored in the cache: only what this process compiled
** or the cache checked is. */
kt_status kt__variant_adopt(kt__prog *p, const kt__call *c, const void *cubin, size_t size, const char *lowered);

/* A list of distinct variants to compile ahead of use (ktune compile). */
typedef struct kt__vlist kt__vlist;
kt__vlist *kt__vlist_new(void);
void kt__vlist_free(kt__vlist *l);
/* The number of variants listed. */
int kt__vlist_count(const kt__vlist *l);
/* c's variant, unless the list has it; the caller has checked c against
** the constraints. KT_OK, KT_ERR_NOMEM, or KT_ERR_INVALID when the list
** holds KT_COMPILE_MAX_VARIANTS already. */
kt_status kt__vlist_add(kt__prog *p, kt__vlist *l, const kt__call *c);
/* Every variant the spec's space allows (every type, config and
** derived-constant value, less those a constraint on these alone
** excludes); KT_ERR_INVALID past KT_COMPILE_MAX_VARIANTS, or when the walk
** is too long. */
kt_status kt__vlist_add_all(kt__prog *p, kt__vlist *l);
/* Compile the listed variants in parallel, write each cubin to out_dir
** when given, report each to fn; frees l. progress (or NULL) hears
** (kernel, "compiling", done, total) first with 0 done, then after each
** variant, from the compiling threads. KT_OK when all compiled, else the
** first failure's status (its message in kt_errmsg). */
kt_status kt__vlist_compile(kt__prog *p, kt__vlist *l, const char *out_dir, kt_variant_fn fn, void *user,
                            kt_progress_fn progress, void *progress_user);

#endif
