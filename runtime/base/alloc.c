#include "base/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long fail_after;  /* 0: never fail */
static atomic_long count;

int kt__alloc_should_fail(void) {
  long n = atomic_fetch_add(&count, 1) + 1;
  long f = atomic_load(&fail_after);
  return f > 0 && n >= f;
}

long kt__alloc_fail_after(long n) {
  long c = atomic_exchange(&count, 0);
  atomic_store(&fail_after, n);
  return c;
}

void *kt__malloc(size_t n) { return kt__alloc_should_fail() ? NULL : malloc(n ? n : 1); }

void *kt__calloc(size_t count_, size_t size) {
  return kt__alloc_should_fail() ? NULL : calloc(count_ ? count_ : 1, size ? size : 1);
}

void *kt__realloc(void *p, size_t n) {
  return kt__alloc_should_fail() ? NULL : realloc(p, n ? n : 1);
}

char *kt__strndup(const char *s, size_t n) {
  char *d = kt__malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = 0;
  }
  return d;
}

char *kt__strdup(const char *s) { return kt__strndup(s, strlen(s)); }

void kt__free(void *p) { free(p); }
