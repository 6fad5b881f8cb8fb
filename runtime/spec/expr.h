/* Integer expressions of kernel specs: parsed once when a spec loads into a
** flat program over 64-bit slots, evaluated per call without allocation.
**
** Grammar, loosest first:  c ? a : b,  ||,  &&,  == !=,  < <= > >=,  + -,
** * / % (floor semantics, as in Python),  unary - + !,  numbers, names,
** calls: cdiv min max pow2ceil log2 align_up (integers) and align(p) esize(p)
** (alignment class and element size of pointer param p). */
#ifndef KT_EXPR_H
#define KT_EXPR_H

#include <stddef.h>
#include <stdint.h>

/* Deepest operand stack an expression may need; deeper ones are rejected at
** parse time, so evaluation can use a fixed array on the C stack. */
#define KT_EXPR_MAX_DEPTH 32
/* Deepest nesting of parentheses, calls, ?: and unary operators; deeper
** text is refused while it is parsed. */
#define KT_EXPR_MAX_NEST 64
#define KT__STR_(x) #x
#define KT__STR(x) KT__STR_(x)
/* Slots an environment may have; references are kept as a bitmap. */
#define KT_MAX_SLOTS 128

enum { KT__SYM_VALUE = 0, KT__SYM_ALIGN = 1, KT__SYM_ESIZE = 2 };

/* Resolve a name (not NUL-terminated) to a slot index, or -1 when unknown;
** -2 when the name exists but may not be used this way (the resolver writes
** why into why[0..whylen)). kind is one of KT__SYM_*. */
typedef int (*kt__resolve_fn)(void *user, int kind, const char *name,
                              size_t len, char *why, size_t whylen);

typedef struct kt__op {
  uint8_t op;
  int32_t arg;   /* slot or jump target */
  int64_t imm;   /* literal */
} kt__op;

typedef struct kt__expr {
  kt__op *code;
  int n;
  int depth;
  int is_bool;    /* the value is always 0 or 1 (comparison, logic, !) */
  int is_const;   /* no slot referenced */
  uint64_t refs[KT_MAX_SLOTS / 64];
  char *text;
} kt__expr;

typedef struct kt__expr_error {
  int col;          /* 1-based column in the text */
  char msg[256];
} kt__expr_error;

/* Parse text. Returns 0 and fills e (free with kt__expr_free), -1 with err
** filled on a syntax or name error, -2 when out of memory. */
int kt__expr_parse(const char *text, kt__resolve_fn resolve, void *user,
                   kt__expr *e, kt__expr_error *err);
void kt__expr_free(kt__expr *e);

enum {
  KT__EVAL_OK = 0,
  KT__EVAL_DIV0 = 1,
  KT__EVAL_OVERFLOW = 2,
  KT__EVAL_DOMAIN = 3
};
/* Evaluate over slots. Returns a KT__EVAL_* code; no allocation, no lock. */
int kt__expr_eval(const kt__expr *e, const int64_t *slots, int64_t *out);
const char *kt__eval_strerror(int code);

static inline int kt__expr_uses(const kt__expr *e, int slot) {
  return (int)((e->refs[slot / 64] >> (slot % 64)) & 1);
}

#endif
