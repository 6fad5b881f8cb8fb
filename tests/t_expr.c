/* The spec expression language: precedence, floor semantics, overflow,
** short-circuit, errors with columns. */
#include <stdint.h>
#include <stdlib.h>

#include "spec/expr.h"
#include "harness.h"

static const char *names[] = {"T", "D", "X", "BLOCK", "p"};
static int64_t slots[5];

static int resolve(void *user, int kind, const char *name, size_t len, char *why, size_t wl) {
  (void)user;
  (void)why;
  (void)wl;
  for (int i = 0; i < 5; i++)
    if (strlen(names[i]) == len && !strncmp(names[i], name, len)) {
      if (kind == KT__SYM_VALUE) return i;
      return i == 4 ? (kind == KT__SYM_ALIGN ? 0 : 1) : -1;
    }
  return -1;
}

/* Evaluate text; returns the KT__EVAL code, or 100 + column on a parse error. */
static int ev(const char *text, int64_t *out) {
  kt__expr e;
  kt__expr_error err;
  int rc = kt__expr_parse(text, resolve, NULL, &e, &err);
  if (rc) return 100 + err.col;
  rc = kt__expr_eval(&e, slots, out);
  kt__expr_free(&e);
  return rc;
}

#define EV(text, want)                                  \
  do {                                                  \
    int64_t v_ = -12345;                                \
    int rc_ = ev(text, &v_);                            \
    if (rc_) {                                          \
      t_fail(__FILE__, __LINE__, "\"%s\": code %d", text, rc_); \
      return;                                           \
    }                                                   \
    if (v_ != (int64_t)(want)) {                        \
      t_fail(__FILE__, __LINE__, "\"%s\" = %lld, expected %lld", text, (long long)v_, (long long)(want)); \
      return;                                           \
    }                                                   \
  } while (0)

static void parse_err(const char *text, int *col, char *msg, size_t n) {
  kt__expr e;
  kt__expr_error err;
  int rc = kt__expr_parse(text, resolve, NULL, &e, &err);
  *col = rc ? err.col : 0;
  snprintf(msg, n, "%s", rc ? err.msg : "");
  if (!rc) kt__expr_free(&e);
}

#define PERR(text, wantcol, wantmsg)                     \
  do {                                                   \
    int c_;                                              \
    char m_[256];                                        \
    parse_err(text, &c_, m_, sizeof m_);                 \
    ASSERT_EQ(c_, wantcol);                              \
    ASSERT_STR_EQ(m_, wantmsg);                          \
  } while (0)

static void precedence(void) {
  EV("1 + 2 * 3", 7);
  EV("(1 + 2) * 3", 9);
  EV("2 * 3 % 4", 2);
  EV("10 - 4 - 3", 3);
  EV("64 / 4 / 2", 8);
  EV("1 < 2 == 1", 1);
  EV("1 || 0 && 0", 1);
  EV("!0 + 1", 2);
  EV("-2 * -3", 6);
  EV("- - 5", 5);
  EV("1 ? 2 : 3 ? 4 : 5", 2);
  EV("0 ? 2 : 0 ? 4 : 5", 5);
  EV("1 + 1 > 1 ? 10 : 20", 10);
  EV("0x10 + 1", 17);
  EV("3 >= 3 && 2 <= 1 || 4 != 4", 0);
}

static void floor_semantics(void) {
  EV("-7 / 2", -4);
  EV("-7 % 2", 1);
  EV("7 / -2", -4);
  EV("7 % -2", -1);
  EV("-7 / -2", 3);
  EV("-8 / 2", -4);
  EV("cdiv(7, 2)", 4);
  EV("cdiv(-7, 2)", -3);
  EV("cdiv(8, 2)", 4);
  EV("align_up(10, 8)", 16);
  EV("align_up(16, 8)", 16);
  EV("align_up(0, 8)", 0);
  /* Overflow is reported only when the result overflows. */
  EV("cdiv(-9223372036854775807 - 1, 2)", INT64_MIN / 2);
  EV("cdiv(-9223372036854775807 - 1, 1)", INT64_MIN);
  EV("cdiv(9223372036854775807, 2)", INT64_C(4611686018427387904));
  EV("cdiv(-9223372036854775807 - 1, -2)", INT64_C(4611686018427387904));
  EV("cdiv(7, -2)", -3);
  EV("cdiv(-7, -2)", 4);
  EV("align_up(-9223372036854775807 - 1, 1)", INT64_MIN);
  EV("align_up(-9223372036854775807 - 1, 8)", INT64_MIN);
  EV("align_up(9223372036854775800, 8)", INT64_C(9223372036854775800));
  EV("align_up(-10, 8)", -8);
}

static void functions(void) {
  EV("min(3, -2)", -2);
  EV("max(3, -2)", 3);
  EV("pow2ceil(0)", 1);
  EV("pow2ceil(5)", 8);
  EV("pow2ceil(1024)", 1024);
  EV("log2(1)", 0);
  EV("log2(1024)", 10);
  EV("log2(1025)", 10);
  slots[4] = 1;
  slots[0] = 16;
  slots[1] = 2;
  EV("align(p) * esize(p)", 32);
  EV("max(cdiv(T, 3), min(D, 9))", 6);
  int64_t v;
  ASSERT_EQ(ev("log2(0)", &v), KT__EVAL_DOMAIN);
  ASSERT_EQ(ev("log2(-4)", &v), KT__EVAL_DOMAIN);
}

static void overflow(void) {
  int64_t v;
  ASSERT_EQ(ev("9223372036854775807 + 1", &v), KT__EVAL_OVERFLOW);
  ASSERT_EQ(ev("-9223372036854775807 - 2", &v), KT__EVAL_OVERFLOW);
  slots[2] = INT64_C(4000000000);
  ASSERT_EQ(ev("X * X", &v), KT__EVAL_OVERFLOW);
  ASSERT_EQ(ev("X * 2", &v), KT__EVAL_OK);
  ASSERT_EQ(v, INT64_C(8000000000));
  ASSERT_EQ(ev("-(-9223372036854775807 - 1)", &v), KT__EVAL_OVERFLOW);
  ASSERT_EQ(ev("(-9223372036854775807 - 1) / -1", &v), KT__EVAL_OVERFLOW);
  ASSERT_EQ(ev("pow2ceil(9223372036854775807)", &v), KT__EVAL_OVERFLOW);
  ASSERT_EQ(ev("cdiv(-9223372036854775807 - 1, -1)", &v), KT__EVAL_OVERFLOW);
  ASSERT_EQ(ev("align_up(9223372036854775807, 2)", &v), KT__EVAL_OVERFLOW);
  ASSERT_EQ(ev("align_up(9223372036854775801, 8)", &v), KT__EVAL_OVERFLOW);
  ASSERT_EQ(ev("9223372036854775808", &v), 101);
  int col;
  char msg[256];
  parse_err("1 + 99999999999999999999", &col, msg, sizeof msg);
  ASSERT_EQ(col, 5);
  ASSERT_STR_EQ(msg, "number does not fit in 64 bits");
}

static void division_and_short_circuit(void) {
  int64_t v;
  slots[1] = 0;
  ASSERT_EQ(ev("10 / D", &v), KT__EVAL_DIV0);
  ASSERT_EQ(ev("10 % D", &v), KT__EVAL_DIV0);
  ASSERT_EQ(ev("cdiv(10, D)", &v), KT__EVAL_DIV0);
  EV("D != 0 && 10 / D > 1", 0);
  EV("D == 0 || 10 / D > 1", 1);
  EV("D ? 10 / D : -1", -1);
  EV("D == 0 ? -1 : 10 / D", -1);
  slots[1] = 5;
  EV("D != 0 && 10 / D > 1", 1);
  EV("D ? 10 / D : -1", 2);
  EV("7 && 9", 1);
  EV("0 || 9", 1);
}

static void errors_point_at_the_column(void) {
  PERR("T + Q", 5, "unknown name 'Q'");
  PERR("foo(1)", 1, "unknown function 'foo'");
  PERR("1 +", 4, "unexpected end of expression");
  PERR("(1 + 2", 7, "expected ')'");
  PERR("1 2", 3, "unexpected '2' after the expression");
  PERR("1.5", 2, "integers only: unexpected '.'");
  PERR("T = D", 3, "unexpected '=' after the expression");
  PERR("", 1, "empty expression");
  PERR("   ", 4, "empty expression");
  PERR("min(1)", 6, "min() takes two arguments");
  PERR("min(1, 2, 3)", 9, "too many arguments to min()");
  PERR("align(T)", 7, "not a pointer param 'T'");
  PERR("T ? 1", 6, "expected ':' in '?:'");
  PERR("T & D", 3, "unexpected '&' after the expression");
  PERR("#", 1, "unexpected '#'");
}

static void nesting_is_bounded(void) {
  char buf[512] = "";
  for (int i = 0; i < 40; i++) strcat(buf, "1+(");
  strcat(buf, "1");
  for (int i = 0; i < 40; i++) strcat(buf, ")");
  int col;
  char msg[256];
  parse_err(buf, &col, msg, sizeof msg);
  ASSERT_STR_EQ(msg, "expression needs more than 32 operands at once");
  ASSERT_TRUE(col > 1);
}

/* Nesting is bounded while parsing: text built to overflow the C stack
** (30,000 parentheses, 100,000 unary minus signs) is refused at the 65th
** level, the column pointing there. */
static void nesting_is_bounded_while_parsing(void) {
  enum { N = 100000 };
  char *buf = malloc(2 * N + 2);
  ASSERT_TRUE(buf);
  int col;
  char msg[256];
  static const char *const opens[] = {"(", "-", "!", "+", "min("};
  for (size_t k = 0; k < sizeof opens / sizeof opens[0]; k++) {
    size_t w = strlen(opens[k]), n = (2 * N) / (w + 1), u = 0;
    for (size_t i = 0; i < n; i++) u += (size_t)sprintf(buf + u, "%s", opens[k]);
    buf[u++] = '1';
    buf[u] = 0;
    parse_err(buf, &col, msg, sizeof msg);
    if (strcmp(msg, "expression nests more than 64 levels deep")) {
      free(buf);
      t_fail(__FILE__, __LINE__, "%s...: %s", opens[k], msg);
      return;
    }
    if (col <= (int)(64 * w) || col > (int)(65 * w + 1)) {
      free(buf);
      t_fail(__FILE__, __LINE__, "%s...: column %d is not at the 65th level", opens[k], col);
      return;
    }
  }
  /* 64 levels are fine. */
  size_t u = 0;
  for (int i = 0; i < 64; i++) buf[u++] = '(';
  buf[u++] = '7';
  for (int i = 0; i < 64; i++) buf[u++] = ')';
  buf[u] = 0;
  int64_t v;
  int rc = ev(buf, &v);
  free(buf);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(v, 7);
}

static void shape_of_expressions(void) {
  kt__expr e;
  kt__expr_error err;
  struct {
    const char *text;
    int is_bool, is_const;
  } cases[] = {
      {"D > 1", 1, 0},          {"D + 1", 0, 0},     {"D > 1 && D < 3", 1, 0},
      {"!D", 1, 0},             {"4", 0, 1},         {"T ? D > 1 : D < 1", 1, 0},
      {"T ? D > 1 : 7", 0, 0},  {"(D == 2)", 1, 0},  {"p != 0", 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ASSERT_EQ(kt__expr_parse(cases[i].text, resolve, NULL, &e, &err), 0);
    int b = e.is_bool, c = e.is_const;
    int uses_d = kt__expr_uses(&e, 1), uses_t = kt__expr_uses(&e, 0);
    kt__expr_free(&e);
    if (b != cases[i].is_bool || c != cases[i].is_const) {
      t_fail(__FILE__, __LINE__, "\"%s\": is_bool %d is_const %d", cases[i].text, b, c);
      return;
    }
    ASSERT_EQ(uses_d, strchr(cases[i].text, 'D') != NULL);
    ASSERT_EQ(uses_t, strchr(cases[i].text, 'T') != NULL);
  }
}

const kt_test t_expr_tests[] = {
    {"expr: precedence and associativity", precedence},
    {"expr: floor division and modulo of negatives", floor_semantics},
    {"expr: builtin functions", functions},
    {"expr: 64-bit overflow is detected", overflow},
    {"expr: division by zero and short-circuit", division_and_short_circuit},
    {"expr: errors point at the column", errors_point_at_the_column},
    {"expr: nesting depth is bounded", nesting_is_bounded},
    {"expr: nesting is bounded while parsing (30,000 parentheses)", nesting_is_bounded_while_parsing},
    {"expr: boolean and constant shape, references", shape_of_expressions},
    {NULL, NULL},
};
