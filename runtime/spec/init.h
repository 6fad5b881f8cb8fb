/* The "init" of a param: how synthetic inputs are made for it (ktune tune,
** ktune bench, and the tuner when it checks a rejection on inputs of its
** own): randn, uniform(a,b), ones, zeros, arange, permutation(n) (n a
** number or a scalar param), mask(p), or a number. */
#ifndef KT_INIT_H
#define KT_INIT_H

typedef enum kt__genkind {
  KT__G_NONE = 0, /* no init: randn for floats, 0 for integers */
  KT__G_RANDN,
  KT__G_UNIFORM,
  KT__G_ONES,
  KT__G_ZEROS,
  KT__G_ARANGE,
  KT__G_PERMUTATION,
  KT__G_MASK,
  KT__G_NUMBER
} kt__genkind;

typedef struct kt__gen {
  kt__genkind kind;
  double a, b;     /* uniform's bounds, mask's probability, the number */
  char arg[64];    /* permutation's size: a number or a param's name */
} kt__gen;

/* Parse text; 0, or -1 when it is none of the forms above. */
int kt__gen_parse(const char *text, kt__gen *g);

#endif
