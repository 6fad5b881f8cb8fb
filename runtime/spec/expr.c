#include "spec/expr.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

enum {
  OP_LIT, OP_LOAD, OP_NEG, OP_NOT, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD,
  OP_LT, OP_LE, OP_GT, OP_GE, OP_EQ, OP_NE, OP_BOOL,
  OP_CDIV, OP_MIN, OP_MAX, OP_POW2CEIL, OP_LOG2, OP_ALIGNUP,
  OP_JZ,    /* pop; jump if zero */
  OP_JMP,
  OP_ANDJ,  /* top==0: keep 0 and jump; else pop */
  OP_ORJ    /* top!=0: replace by 1 and jump; else pop */
};

typedef struct parser {
  const char *s;
  size_t pos;
  kt__resolve_fn resolve;
  void *user;
  kt__op *code;
  int n, cap;
  int depth, max_depth;
  int nest;       /* recursion depth of the parse itself */
  int last_bool;  /* the last complete sub-expression yields 0/1 */
  uint64_t refs[KT_MAX_SLOTS / 64];
  kt__expr_error *err;
  int failed;     /* -1 syntax, -2 memory */
} parser;

static int fail(parser *p, size_t at, const char *fmt, const char *arg) {
  if (!p->failed) {
    p->failed = -1;
    p->err->col = (int)at + 1;
    snprintf(p->err->msg, sizeof p->err->msg, fmt, arg ? arg : "");
  }
  return -1;
}

static void skip(parser *p) {
  while (p->s[p->pos] && isspace((unsigned char)p->s[p->pos])) p->pos++;
}

static int emit(parser *p, int op, int32_t arg, int64_t imm, int push) {
  if (p->failed) return -1;
  if (p->n == p->cap) {
    int cap = p->cap ? p->cap * 2 : 16;
    kt__op *c = kt__realloc(p->code, (size_t)cap * sizeof *c);
    if (!c) {
      p->failed = -2;
      return -1;
    }
    p->code = c;
    p->cap = cap;
  }
  p->code[p->n].op = (uint8_t)op;
  p->code[p->n].arg = arg;
  p->code[p->n].imm = imm;
  p->n++;
  p->depth += push;
  if (p->depth > p->max_depth) p->max_depth = p->depth;
  if (p->max_depth > KT_EXPR_MAX_DEPTH)
    return fail(p, p->pos, "expression needs more than %s operands at once", KT__STR(KT_EXPR_MAX_DEPTH));
  return 0;
}

static int accept(parser *p, const char *tok) {
  skip(p);
  size_t n = strlen(tok);
  if (strncmp(p->s + p->pos, tok, n) != 0) return 0;
  /* "<" must not match "<=", "=" must not match "==", and so on. */
  if (n == 1 && strchr("<>!", tok[0]) && p->s[p->pos + 1] == '=') return 0;
  if (n == 1 && (tok[0] == '&' || tok[0] == '|')) return 0;
  p->pos += n;
  return 1;
}

static int ternary(parser *p);

/* fn one level deeper. Parentheses and unary operators recurse; without
** this bound, a spec of 30,000 nested parentheses would overflow the C
** stack. */
static int nested(parser *p, int (*fn)(parser *)) {
  if (p->nest == KT_EXPR_MAX_NEST)
    return fail(p, p->pos, "expression nests more than %s levels deep", KT__STR(KT_EXPR_MAX_NEST));
  p->nest++;
  int rc = fn(p);
  p->nest--;
  return rc;
}

static const struct {
  const char *name;
  int op;
  int nargs;
  int is_bool;
} funcs[] = {
    {"cdiv", OP_CDIV, 2, 0},         {"min", OP_MIN, 2, 0},
    {"max", OP_MAX, 2, 0},           {"pow2ceil", OP_POW2CEIL, 1, 0},
    {"log2", OP_LOG2, 1, 0},         {"align_up", OP_ALIGNUP, 2, 0},
};

static int load(parser *p, int kind, const char *name, size_t len, size_t at) {
  char why[200] = "";
  int slot = p->resolve(p->user, kind, name, len, why, sizeof why);
  char nm[128];
  snprintf(nm, sizeof nm, "%.*s", (int)(len < 100 ? len : 100), name);
  if (slot == -2) return fail(p, at, "%s", why[0] ? why : nm);
  if (slot < 0 || slot >= KT_MAX_SLOTS) {
    char m[200];
    snprintf(m, sizeof m, "%s '%s'",
             kind == KT__SYM_VALUE ? "unknown name" : "not a pointer param",
             nm);
    return fail(p, at, "%s", m);
  }
  p->refs[slot / 64] |= (uint64_t)1 << (slot % 64);
  p->last_bool = 0;
  return emit(p, OP_LOAD, slot, 0, 1);
}

static int call(parser *p, const char *name, size_t len, size_t at) {
  if ((len == 5 && !strncmp(name, "align", 5)) ||
      (len == 5 && !strncmp(name, "esize", 5))) {
    skip(p);
    size_t a = p->pos;
    while (isalnum((unsigned char)p->s[p->pos]) || p->s[p->pos] == '_')
      p->pos++;
    if (p->pos == a) return fail(p, a, "%s() takes a pointer param name",
                                 name[0] == 'a' ? "align" : "esize");
    if (load(p, name[0] == 'a' ? KT__SYM_ALIGN : KT__SYM_ESIZE, p->s + a,
             p->pos - a, a))
      return -1;
    if (!accept(p, ")")) return fail(p, p->pos, "expected ')'%s", NULL);
    return 0;
  }
  for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++) {
    if (strlen(funcs[i].name) != len || strncmp(funcs[i].name, name, len))
      continue;
    for (int k = 0; k < funcs[i].nargs; k++) {
      if (k && !accept(p, ","))
        return fail(p, p->pos, "%s() takes two arguments", funcs[i].name);
      if (nested(p, ternary)) return -1;
    }
    if (!accept(p, ")")) {
      skip(p);
      return fail(p, p->pos,
                  p->s[p->pos] == ',' ? "too many arguments to %s()"
                                      : "expected ')' after the arguments of %s()",
                  funcs[i].name);
    }
    p->last_bool = 0;
    return emit(p, funcs[i].op, 0, 0, 1 - funcs[i].nargs);
  }
  char nm[128];
  snprintf(nm, sizeof nm, "%.*s", (int)(len < 100 ? len : 100), name);
  return fail(p, at, "unknown function '%s'", nm);
}

static int primary(parser *p) {
  skip(p);
  size_t at = p->pos;
  char c = p->s[p->pos];
  if (isdigit((unsigned char)c)) {
    int64_t v = 0;
    int base = 10;
    if (c == '0' && (p->s[p->pos + 1] == 'x' || p->s[p->pos + 1] == 'X')) {
      base = 16;
      p->pos += 2;
      if (!isxdigit((unsigned char)p->s[p->pos]))
        return fail(p, at, "bad hexadecimal number%s", NULL);
    }
    while (isxdigit((unsigned char)p->s[p->pos])) {
      char d = p->s[p->pos];
      int dv = isdigit((unsigned char)d) ? d - '0' : (tolower(d) - 'a' + 10);
      if (dv >= base) break;
      if (__builtin_mul_overflow(v, base, &v) ||
          __builtin_add_overflow(v, dv, &v))
        return fail(p, at, "number does not fit in 64 bits%s", NULL);
      p->pos++;
    }
    if (isalnum((unsigned char)p->s[p->pos]) || p->s[p->pos] == '_' ||
        p->s[p->pos] == '.')
      return fail(p, p->pos, "integers only: unexpected '%s'",
                  (char[]){p->s[p->pos], 0});
    p->last_bool = 0;
    return emit(p, OP_LIT, 0, v, 1);
  }
  if (isalpha((unsigned char)c) || c == '_') {
    while (isalnum((unsigned char)p->s[p->pos]) || p->s[p->pos] == '_')
      p->pos++;
    size_t len = p->pos - at;
    if (accept(p, "(")) return call(p, p->s + at, len, at);
    return load(p, KT__SYM_VALUE, p->s + at, len, at);
  }
  if (accept(p, "(")) {
    if (nested(p, ternary)) return -1;
    if (!accept(p, ")")) return fail(p, p->pos, "expected ')'%s", NULL);
    return 0;
  }
  if (!c) return fail(p, at, "unexpected end of expression%s", NULL);
  return fail(p, at, "unexpected '%s'", (char[]){c, 0});
}

static int unary(parser *p) {
  if (accept(p, "-")) {
    if (nested(p, unary)) return -1;
    p->last_bool = 0;
    return emit(p, OP_NEG, 0, 0, 0);
  }
  if (accept(p, "+")) return nested(p, unary);
  if (accept(p, "!")) {
    if (nested(p, unary)) return -1;
    p->last_bool = 1;
    return emit(p, OP_NOT, 0, 0, 0);
  }
  return primary(p);
}

typedef struct {
  const char *tok;
  int op;
} binop;

/* One precedence level of left-associative binary operators. */
static int level(parser *p, int (*next)(parser *), const binop *ops, int nops,
                 int yields_bool) {
  if (next(p)) return -1;
  for (;;) {
    int found = -1;
    for (int i = 0; i < nops && found < 0; i++)
      if (accept(p, ops[i].tok)) found = i;
    if (found < 0) return 0;
    if (next(p)) return -1;
    if (emit(p, ops[found].op, 0, 0, -1)) return -1;
    p->last_bool = yields_bool;
  }
}

static int mul(parser *p) {
  static const binop o[] = {{"*", OP_MUL}, {"/", OP_DIV}, {"%", OP_MOD}};
  return level(p, unary, o, 3, 0);
}
static int add(parser *p) {
  static const binop o[] = {{"+", OP_ADD}, {"-", OP_SUB}};
  return level(p, mul, o, 2, 0);
}
static int rel(parser *p) {
  static const binop o[] = {
      {"<=", OP_LE}, {">=", OP_GE}, {"<", OP_LT}, {">", OP_GT}};
  return level(p, add, o, 4, 1);
}
static int eq(parser *p) {
  static const binop o[] = {{"==", OP_EQ}, {"!=", OP_NE}};
  return level(p, rel, o, 2, 1);
}

/* && and || short-circuit, so "D > 0 && T / D > 2" never divides by 0. */
static int logic(parser *p, int (*next)(parser *), const char *tok, int op) {
  if (next(p)) return -1;
  while (accept(p, tok)) {
    int j = p->n;
    if (emit(p, op, 0, 0, -1)) return -1;
    if (next(p)) return -1;
    if (emit(p, OP_BOOL, 0, 0, 0)) return -1;
    p->code[j].arg = p->n; /* both paths leave one value */
    p->last_bool = 1;
  }
  return 0;
}
static int land(parser *p) { return logic(p, eq, "&&", OP_ANDJ); }
static int lor(parser *p) { return logic(p, land, "||", OP_ORJ); }

static int ternary(parser *p) {
  if (lor(p)) return -1;
  if (!accept(p, "?")) return 0;
  int jz = p->n;
  if (emit(p, OP_JZ, 0, 0, -1) || nested(p, ternary)) return -1;
  int b1 = p->last_bool;
  int jmp = p->n;
  if (emit(p, OP_JMP, 0, 0, 0)) return -1;
  if (!accept(p, ":")) return fail(p, p->pos, "expected ':' in '?:'%s", NULL);
  p->code[jz].arg = p->n;
  p->depth--; /* the else branch starts where the then branch started */
  if (nested(p, ternary)) return -1;
  p->code[jmp].arg = p->n;
  p->last_bool = b1 && p->last_bool;
  return 0;
}

int kt__expr_parse(const char *text, kt__resolve_fn resolve, void *user,
                   kt__expr *e, kt__expr_error *err) {
  parser p;
  memset(&p, 0, sizeof p);
  memset(e, 0, sizeof *e);
  p.s = text ? text : "";
  p.resolve = resolve;
  p.user = user;
  p.err = err;
  err->col = 0;
  err->msg[0] = 0;
  skip(&p);
  if (!p.s[p.pos]) {
    fail(&p, p.pos, "empty expression%s", NULL);
  } else if (ternary(&p) == 0) {
    skip(&p);
    if (p.s[p.pos])
      fail(&p, p.pos, "unexpected '%s' after the expression",
           (char[]){p.s[p.pos], 0});
  }
  if (!p.failed && !(e->text = kt__strdup(p.s))) p.failed = -2;
  if (p.failed) {
    kt__free(p.code);
    if (p.failed == -2) snprintf(err->msg, sizeof err->msg, "out of memory");
    return p.failed;
  }
  e->code = p.code;
  e->n = p.n;
  e->depth = p.max_depth;
  e->is_bool = p.last_bool;
  memcpy(e->refs, p.refs, sizeof e->refs);
  e->is_const = 1;
  for (size_t i = 0; i < sizeof e->refs / sizeof e->refs[0]; i++)
    if (e->refs[i]) e->is_const = 0;
  return 0;
}

void kt__expr_free(kt__expr *e) {
  if (!e) return;
  kt__free(e->code);
  kt__free(e->text);
  memset(e, 0, sizeof *e);
}

static int floordiv(int64_t a, int64_t b, int64_t *q) {
  if (b == 0) return KT__EVAL_DIV0;
  if (a == INT64_MIN && b == -1) return KT__EVAL_OVERFLOW;
  int64_t d = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) d--;
  *q = d;
  return 0;
}

/* ceil(a / b), overflowing only where the result does (INT64_MIN / -1). */
static int ceildiv(int64_t a, int64_t b, int64_t *q) {
  if (b == 0) return KT__EVAL_DIV0;
  if (a == INT64_MIN && b == -1) return KT__EVAL_OVERFLOW;
  int64_t d = a / b;
  if (a % b != 0 && ((a < 0) == (b < 0))) d++;
  *q = d;
  return 0;
}

static int floormod(int64_t a, int64_t b, int64_t *r) {
  if (b == 0) return KT__EVAL_DIV0;
  if (b == -1) {
    *r = 0;
    return 0;
  }
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  *r = m;
  return 0;
}

int kt__expr_eval(const kt__expr *e, const int64_t *slots, int64_t *out) {
  int64_t st[KT_EXPR_MAX_DEPTH + 1];
  int sp = 0;
  for (int pc = 0; pc < e->n; pc++) {
    const kt__op *o = &e->code[pc];
    int64_t a, b, r = 0;
    int rc = 0;
    switch (o->op) {
      case OP_LIT: st[sp++] = o->imm; continue;
      case OP_LOAD: st[sp++] = slots[o->arg]; continue;
      case OP_NEG:
        if (st[sp - 1] == INT64_MIN) return KT__EVAL_OVERFLOW;
        st[sp - 1] = -st[sp - 1];
        continue;
      case OP_NOT: st[sp - 1] = !st[sp - 1]; continue;
      case OP_BOOL: st[sp - 1] = st[sp - 1] != 0; continue;
      case OP_POW2CEIL:
        a = st[sp - 1];
        r = 1;
        while (r < a) {
          if (r > INT64_MAX / 2) return KT__EVAL_OVERFLOW;
          r <<= 1;
        }
        st[sp - 1] = r;
        continue;
      case OP_LOG2:
        a = st[sp - 1];
        if (a <= 0) return KT__EVAL_DOMAIN;
        st[sp - 1] = 63 - __builtin_clzll((unsigned long long)a);
        continue;
      case OP_JZ:
        if (!st[--sp]) pc = o->arg - 1;
        continue;
      case OP_JMP: pc = o->arg - 1; continue;
      case OP_ANDJ:
        if (!st[sp - 1]) {
          st[sp - 1] = 0;
          pc = o->arg - 1;
        } else {
          sp--;
        }
        continue;
      case OP_ORJ:
        if (st[sp - 1]) {
          st[sp - 1] = 1;
          pc = o->arg - 1;
        } else {
          sp--;
        }
        continue;
      default: break;
    }
    b = st[--sp];
    a = st[sp - 1];
    switch (o->op) {
      case OP_ADD: rc = __builtin_add_overflow(a, b, &r) ? KT__EVAL_OVERFLOW : 0; break;
      case OP_SUB: rc = __builtin_sub_overflow(a, b, &r) ? KT__EVAL_OVERFLOW : 0; break;
      case OP_MUL: rc = __builtin_mul_overflow(a, b, &r) ? KT__EVAL_OVERFLOW : 0; break;
      case OP_DIV: rc = floordiv(a, b, &r); break;
      case OP_MOD: rc = floormod(a, b, &r); break;
      case OP_LT: r = a < b; break;
      case OP_LE: r = a <= b; break;
      case OP_GT: r = a > b; break;
      case OP_GE: r = a >= b; break;
      case OP_EQ: r = a == b; break;
      case OP_NE: r = a != b; break;
      case OP_MIN: r = a < b ? a : b; break;
      case OP_MAX: r = a > b ? a : b; break;
      case OP_CDIV: rc = ceildiv(a, b, &r); break;
      case OP_ALIGNUP:
        rc = ceildiv(a, b, &r);
        if (!rc && __builtin_mul_overflow(r, b, &r)) rc = KT__EVAL_OVERFLOW;
        break;
      default: return KT__EVAL_DOMAIN;
    }
    if (rc) return rc;
    st[sp - 1] = r;
  }
  *out = sp > 0 ? st[sp - 1] : 0;
  return KT__EVAL_OK;
}

const char *kt__eval_strerror(int code) {
  switch (code) {
    case KT__EVAL_OK: return "ok";
    case KT__EVAL_DIV0: return "division by zero";
    case KT__EVAL_OVERFLOW: return "64-bit overflow";
    case KT__EVAL_DOMAIN: return "log2 of a value that is not positive";
  }
  return "evaluation error";
}
