#include "spec/init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  kt__genkind kind;
  int args; /* 0: none, 1: a name or number, 2: two numbers */
} gens[] = {
    {"randn", KT__G_RANDN, 0},  {"uniform", KT__G_UNIFORM, 2}, {"ones", KT__G_ONES, 0}, {"zeros", KT__G_ZEROS, 0},
    {"arange", KT__G_ARANGE, 0}, {"permutation", KT__G_PERMUTATION, 1}, {"mask", KT__G_MASK, 1},
};

static int number(const char *s, double *v) {
  char *end;
  *v = strtod(s, &end);
  return end != s && !*end && isfinite(*v);
}

static int word(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9'))) return 0;
  return 1;
}

/* The arguments between the parentheses of a generator that takes some. */
static int parse_args(kt__gen *g, int args, const char *open) {
  size_t n = strlen(open + 1);
  if (!n || open[n] != ')' || n - 1 >= sizeof g->arg) return -1;
  memcpy(g->arg, open + 1, n - 1);
  g->arg[n - 1] = 0;
  char *comma = strchr(g->arg, ',');
  if (args == 2) {
    if (!comma) return -1;
    *comma = 0;
    return number(g->arg, &g->a) && number(comma + 1, &g->b) && g->a <= g->b ? 0 : -1;
  }
  if (g->kind == KT__G_MASK) return number(g->arg, &g->a) && g->a >= 0 && g->a <= 1 ? 0 : -1;
  return word(g->arg) ? 0 : -1;
}

int kt__gen_parse(const char *text, kt__gen *g) {
  memset(g, 0, sizeof *g);
  if (number(text, &g->a)) return g->kind = KT__G_NUMBER, 0;
  const char *open = strchr(text, '(');
  size_t n = open ? (size_t)(open - text) : strlen(text);
  for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++) {
    if (strlen(gens[i].name) != n || strncmp(gens[i].name, text, n)) continue;
    g->kind = gens[i].kind;
    if (!gens[i].args) return open ? -1 : 0;
    return open ? parse_args(g, gens[i].args, open) : -1;
  }
  return -1;
}
