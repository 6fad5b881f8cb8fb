/* A parsed kernel spec (kernels_src/NAME.json). Only spec.c reads JSON; the
** rest of the library sees this struct, whose expressions are already
** compiled against one slot layout:
**   params (scalar value, or 1/0 for a non-null/null pointer),
**   align(p) and esize(p) of each pointer param,
**   config fields, derived constants (in spec order),
**   builtins num_sms cc max_smem l2_bytes, and smem. */
#ifndef KT_SPEC_H
#define KT_SPEC_H

#include <stdint.h>

#include "spec/expr.h"
#include "spec/init.h"
#include "ktune.h"

#define KT_MAX_PARAMS 32
#define KT_MAX_TYPES 8     /* dtypes a type variable may take */
#define KT_MAX_TARGS 24    /* template arguments of the entry */
/* Config fields are template arguments, so a config has at most this many. */
#define KT_MAX_CFIELDS KT_MAX_TARGS
#define KT_MAX_CONFIGS (1 << 22) /* configs in a space: a tuning lists them all */
#define KT__ENTRY_MAX 256        /* characters of the entry's C++ name */

enum { KT__P_PTR = 1, KT__P_I32, KT__P_I64, KT__P_F32 };
enum { KT__KEY_EXACT = 0, KT__KEY_POW2, KT__KEY_IGNORE };
/* A pointer's access. CONSUMED: read, then left undefined (the kernel may
** drop its cache lines unwritten), so the runtime treats it as written
** (scratch copies when tuning, the alias rules) but never compares it. */
enum { KT__IN = 1, KT__OUT = 2, KT__INOUT = 3, KT__CONSUMED = 4 };
#define KT__READS(a) ((a) != KT__OUT)
#define KT__COMPARED(a) ((a) == KT__OUT || (a) == KT__INOUT)
enum { KT__BUILTIN_NUM_SMS, KT__BUILTIN_CC, KT__BUILTIN_MAX_SMEM,
       KT__BUILTIN_L2_BYTES, KT__NBUILTINS };

#define KT__MAX_FLAGS 10 /* NVRTC flags a spec's options may add */

typedef struct kt__param {
  char *name;
  int type;          /* KT__P_* */
  int key;           /* KT__KEY_*, scalars only */
  int specialize;    /* integer scalar compiled in as a constant */
  /* pointers */
  int access;        /* KT__IN/OUT/INOUT/CONSUMED */
  int optional;
  kt_dtype dtype;    /* fixed element type, or KT_DTYPE_NONE with tvar */
  int tvar;          /* index into types, or -1 */
  kt__expr extent;   /* elements */
  kt__expr tune_at;  /* scalars the key ignores: the value the tuner times
                        the key at (text NULL when the spec gives none) */
  char *init;        /* "init" as written, or NULL */
  kt__gen gen;       /* the same parsed: how synthetic inputs are made */
  double atol, rtol; /* validation tolerance (outputs) */
  int slot, align_slot, esize_slot;
} kt__param;

typedef struct kt__typevar {
  char *name;
  int n;
  kt_dtype types[KT_MAX_TYPES];
} kt__typevar;

typedef struct kt__cfield {
  char *name;
  int n;
  int64_t *values;
  int64_t dflt;
  int slot;
} kt__cfield;

typedef struct kt__derived {
  char *name;
  kt__expr e;
  int uses_config;   /* depends on a config field, directly or not */
  int n;             /* declared values, or 0 for a boolean */
  int64_t *values;
  int slot;
} kt__derived;

typedef struct kt__constraint {
  kt__expr e;
  int uses_config;   /* reads a config field, directly, through a derived
                        constant or through smem: else no config moves it */
} kt__constraint;

/* A template argument of the entry point: a type variable or a constant. */
typedef struct kt__targ {
  int tvar;          /* type variable index, or -1 */
  int slot;          /* constant's slot, when tvar < 0 */
} kt__targ;

typedef struct kt__spec {
  char *path;        /* as given */
  char *name;
  char *source_path; /* resolved beside the spec */
  const char *source_name; /* its last component, in source_path */
  char *source;      /* contents */
  char *source_dir;  /* its directory: where its quoted includes are */
  char *entry;
  int fast_math;
  int pdl;           /* may start during the previous kernel (sm_90+) */
  char **flags;      /* extra NVRTC options */
  int nflags;
  int inplace;       /* outputs may alias inputs */
  uint64_t source_hash; /* the source and its headers (spec/source.h) */
  uint64_t headers_hash; /* the headers alone, as they were at the load */
  int nheaders;          /* how many: 0 needs no check at a compile */
  uint64_t spec_hash;  /* what changes generated code or launch */

  kt__param params[KT_MAX_PARAMS];
  int nparams;
  kt__typevar types[KT_MAX_PARAMS];
  int ntypes;
  kt__cfield *cfields;
  int ncfields;
  kt__derived *derived;
  int nderived;
  kt__constraint *constraints;
  int nconstraints;
  kt__targ targs[KT_MAX_TARGS];
  int ntargs;
  kt__expr grid[3], block[3], smem;

  int nslots;
  int builtin_slot;  /* first of KT__NBUILTINS */
  int smem_slot;
  const char *slot_names[KT_MAX_SLOTS]; /* borrowed from the fields above */
} kt__spec;

/* One call in the spec's slot layout: bound params, then config values and
** derived constants as they are set, and each type variable's dtype. Made
** by the call layer (call/call.h), read by variants, keys and the tuner. */
typedef struct kt__call {
  int64_t slots[KT_MAX_SLOTS];
  kt_dtype tvals[KT_MAX_PARAMS];
} kt__call;

/* Load and validate a spec. On failure returns KT_ERR_SPEC, KT_ERR_IO or
** KT_ERR_NOMEM with a message "FILE: FIELD: what is wrong" in err. */
kt_status kt__spec_load(const char *path, kt__spec **out, char *err,
                        size_t errlen);
/* The same from text[0..len) already in memory; dir is where source is
** resolved. */
kt_status kt__spec_parse(const char *path, const char *text, size_t len, const char *dir, kt__spec **out, char *err,
                         size_t errlen);
void kt__spec_free(kt__spec *s);

int kt__spec_param(const kt__spec *s, const char *name);
int kt__spec_cfield(const kt__spec *s, const char *name, size_t len);
/* The index of v in config field f's values, or -1 when f has no such value. */
int kt__cfield_value(const kt__cfield *f, int64_t v);
/* Whether a derived constant may take v: one of its declared values, or
** any value where it declares none (a boolean). */
int kt__derived_allows(const kt__derived *d, int64_t v);

/* The config space in order, the last field fastest and each field's values
** as the spec lists them. idx holds one index per field, all 0 for the first
** config; _at writes the config idx names into cfg, _next steps idx and
** returns 0 past the last:
**   int idx[64] = {0};
**   do { kt__spec_config_at(s, idx, cfg); ... } while (kt__spec_config_next(s, idx)); */
void kt__spec_config_at(const kt__spec *s, const int *idx, int64_t *cfg);
int kt__spec_config_next(const kt__spec *s, int *idx);

#endif
