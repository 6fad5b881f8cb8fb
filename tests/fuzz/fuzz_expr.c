/* The expression parser and evaluator: the first 64 bytes are the values
** of slots a..h, the rest an expression over them. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spec/expr.h"

static int resolve(void *user, int kind, const char *name, size_t len, char *why, size_t wl) {
  (void)user, (void)why, (void)wl;
  if (len != 1 || name[0] < 'a' || name[0] > 'h') return -1;
  return kind == KT__SYM_VALUE ? name[0] - 'a' : kind == KT__SYM_ALIGN ? 8 : 9;
}

int kt_fuzz_expr(const uint8_t *data, size_t size) {
  int64_t slots[KT_MAX_SLOTS] = {0};
  size_t head = size < 64 ? size : 64;
  memcpy(slots, data, head);
  char *text = malloc(size - head + 1);
  if (!text) return 0;
  memcpy(text, data + head, size - head);
  text[size - head] = 0;
  kt__expr e;
  kt__expr_error err;
  if (kt__expr_parse(text, resolve, NULL, &e, &err) == 0) {
    int64_t v;
    kt__expr_eval(&e, slots, &v);
    kt__expr_free(&e);
  }
  free(text);
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_expr)
