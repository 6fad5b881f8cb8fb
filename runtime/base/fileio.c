#include "base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"

/* The bytes of an open regular file, reading at most max + 1 so that a
** file growing under us is still caught. */
static int read_all(int fd, size_t max, char **out, size_t *len) {
  size_t cap = 8192, n = 0;
  char *buf = kt__malloc(cap);
  if (!buf) return ENOMEM;
  for (;;) {
    if (n + 1 >= cap) {
      size_t nc = cap * 2 > max + 2 ? max + 2 : cap * 2;
      char *b = nc > cap ? kt__realloc(buf, nc) : NULL;
      if (!b) {
        kt__free(buf);
        return nc > cap ? ENOMEM : KT__FILE_TOO_LARGE;
      }
      buf = b;
      cap = nc;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      kt__free(buf);
      return e;
    }
    if (r == 0) break;
    n += (size_t)r;
    if (n > max) {
      kt__free(buf);
      return KT__FILE_TOO_LARGE;
    }
  }
  buf[n] = 0;
  *out = buf;
  if (len) *len = n;
  return 0;
}

int kt__read_file(const char *path, size_t max, char **out, size_t *len) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno;
  struct stat sb;
  int rc = fstat(fd, &sb) ? errno : !S_ISREG(sb.st_mode) ? KT__FILE_NOT_REGULAR
                                   : (size_t)sb.st_size > max ? KT__FILE_TOO_LARGE
                                                              : 0;
  /* Blocking reads from here: a regular file never waits. */
  if (!rc && fcntl(fd, F_SETFL, 0)) rc = errno;
  if (!rc) rc = read_all(fd, max, out, len);
  close(fd);
  return rc;
}

int kt__read_stdin(size_t max, char **out, size_t *len) { return read_all(0, max, out, len); }

const char *kt__read_strerror(int rc, size_t max, char *buf, size_t n) {
  if (rc == KT__FILE_NOT_REGULAR) return "not a regular file";
  if (rc == KT__FILE_TOO_LARGE) {
    snprintf(buf, n, "larger than %zu bytes", max);
    return buf;
  }
  return strerror(rc);
}
