#include "base/fileio.h"

#include <errno.h>
#include <stdio.h>

#include "base/alloc.h"

int kt__read_file(const char *path, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return errno;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (cap - n < 4096) {
      size_t nc = cap ? cap * 2 : 8192;
      char *b = kt__realloc(buf, nc);
      if (!b) {
        kt__free(buf);
        fclose(f);
        return ENOMEM;
      }
      buf = b;
      cap = nc;
    }
    size_t r = fread(buf + n, 1, cap - n - 1, f);
    n += r;
    if (r == 0) break;
  }
  int e = ferror(f) ? EIO : 0;
  fclose(f);
  if (e) {
    kt__free(buf);
    return e;
  }
  buf[n] = 0;
  *out = buf;
  if (len) *len = n;
  return 0;
}
