#include "spec/source.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/fileio.h"

typedef struct reader {
  XXH3_state_t *h;
  kt__source *s;
  char *err;
  size_t errlen;
} reader;

/* The quoted name of an #include line starting at line, into name; 0 when
** the line is not one, -1 when the name does not fit in n bytes (a header
** left out of the hash would let a changed one reuse old binaries). */
static int quoted_include(const char *line, char *name, size_t n) {
  const char *p = line + strspn(line, " \t");
  if (*p++ != '#') return 0;
  p += strspn(p, " \t");
  if (strncmp(p, "include", 7)) return 0;
  p += 7;
  p += strspn(p, " \t");
  if (*p++ != '"') return 0;
  size_t len = strcspn(p, "\"\n");
  if (p[len] != '"' || !len) return 0;
  if (len >= n) return -1;
  memcpy(name, p, len);
  name[len] = 0;
  return 1;
}

static int read_text(reader *r, const char *path, const char *by, char **text);

/* Every header text includes, found beside dir, hashed after its name. */
static int headers(reader *r, const char *text, const char *dir, const char *by, int depth) {
  char name[256], path[4096];
  for (const char *line = text; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
    struct stat sb;
    int q = quoted_include(line, name, sizeof name);
    if (!q) continue;
    if (q < 0) {
      snprintf(r->err, r->errlen, "%.40s... (in %s): the name is longer than %zu bytes", line, by, sizeof name - 1);
      return -1;
    }
    int w = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= sizeof path) {
      snprintf(r->err, r->errlen, "%s (included by %s): its path is longer than %zu bytes", name, by, sizeof path - 1);
      return -1;
    }
    if (stat(path, &sb)) continue; /* not ours: NVRTC looks in the toolkit */
    if (depth >= KT__MAX_INCLUDE_DEPTH || r->s->nheaders == KT__MAX_HEADERS) {
      snprintf(r->err, r->errlen, "%s (included by %s): more than %d headers or %d levels of includes", name, by,
               KT__MAX_HEADERS, KT__MAX_INCLUDE_DEPTH);
      return -1;
    }
    r->s->nheaders++;
    char *sub;
    int rc = read_text(r, path, by, &sub);
    if (rc) return rc;
    XXH3_64bits_update(r->h, name, strlen(name) + 1);
    XXH3_64bits_update(r->h, sub, strlen(sub) + 1);
    char subdir[4096];
    snprintf(subdir, sizeof subdir, "%s", path);
    *strrchr(subdir, '/') = 0;
    rc = headers(r, sub, subdir, name, depth + 1);
    kt__free(sub);
    if (rc) return rc;
  }
  return 0;
}

/* One file as text: regular, within the limit, no NUL byte. */
static int read_text(reader *r, const char *path, const char *by, char **text) {
  size_t len;
  char buf[64];
  int e = kt__read_file(path, KT__SOURCE_MAX, text, &len);
  if (!e && strlen(*text) != len) {
    kt__free(*text);
    *text = NULL;
    snprintf(r->err, r->errlen, "%s holds a NUL byte", path);
    return KT__FILE_NOT_REGULAR;
  }
  if (e && e != ENOMEM)
    snprintf(r->err, r->errlen, "cannot read %s%s%s%s: %s", path, by ? " (included by " : "", by ? by : "",
             by ? ")" : "", kt__read_strerror(e, KT__SOURCE_MAX, buf, sizeof buf));
  return e;
}

int kt__source_read(const char *path, kt__source *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  reader r = {XXH3_createState(), out, err, errlen};
  if (!r.h || !(out->dir = kt__strdup(path))) {
    XXH3_freeState(r.h);
    return ENOMEM;
  }
  char *slash = strrchr(out->dir, '/');
  if (slash) *slash = 0;
  else snprintf(out->dir, strlen(path) + 1, ".");
  XXH3_64bits_reset(r.h);
  int rc = read_text(&r, path, NULL, &out->text);
  if (!rc) {
    XXH3_64bits_update(r.h, out->text, strlen(out->text) + 1);
    const char *base = strrchr(path, '/');
    rc = headers(&r, out->text, out->dir, base ? base + 1 : path, 0);
  }
  out->hash = XXH3_64bits_digest(r.h);
  XXH3_freeState(r.h);
  return rc;
}

void kt__source_free(kt__source *s) {
  kt__free(s->text);
  kt__free(s->dir);
  memset(s, 0, sizeof *s);
}
