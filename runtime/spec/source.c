#include "spec/source.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/fileio.h"

typedef struct reader {
  XXH3_state_t *h;                /* the source and its headers; NULL: the headers alone */
  XXH3_state_t *hh;               /* the headers alone */
  kt__source *s;
  uint64_t seen[KT__MAX_HEADERS]; /* each header read: its real path, hashed */
  char *err;
  size_t errlen;
} reader;

enum { INC_NAME = 256 }; /* a header's name as written, NUL included */

/* What an #include line names. */
typedef enum inc_kind { INC_NONE, INC_QUOTED, INC_ANGLE, INC_COMPUTED, INC_TOO_LONG } inc_kind;

static int ident_char(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* One text's scan: its end, and the last search for the close of a block
** comment (from: where it began; close: the first close at or after it,
** NULL for none). A text of many openings that close late, or never, is
** searched once, not once an opening. */
typedef struct scan {
  const char *end, *from, *close;
} scan;

/* Past the block comment opening at p: after its close, else the text's end. */
static const char *comment_end(scan *sc, const char *p) {
  const char *s = p + 2;
  if (!sc->from || s < sc->from || (sc->close && s > sc->close)) {
    sc->from = s;
    sc->close = strstr(s, "*/");
  }
  return sc->close ? sc->close + 2 : sc->end;
}

/* p past the blanks of a directive: spaces and tabs, comments (a block
** comment may run onto later lines) and backslash-newlines, all of which
** the preprocessor reads as space. */
static const char *skip_blank(scan *sc, const char *p) {
  for (;;) {
    p += strspn(p, " \t");
    if (p[0] == '\\' && (p[1] == '\n' || (p[1] == '\r' && p[2] == '\n')))
      p += p[1] == '\n' ? 2 : 3;
    else if (p[0] == '/' && p[1] == '*')
      p = comment_end(sc, p);
    else
      return p;
  }
}

/* The name delimited at p, "name" or <name>, copied into name (n bytes):
** INC_QUOTED or INC_ANGLE; INC_TOO_LONG where it does not fit, INC_NONE
** where p holds no such name. */
static inc_kind delimited_name(const char *p, char *name, size_t n) {
  char close = *p == '"' ? '"' : *p == '<' ? '>' : 0;
  size_t len = close ? strcspn(p + 1, close == '"' ? "\"\n" : ">\n") : 0;
  if (!close || p[1 + len] != close || !len) return INC_NONE;
  if (len >= n) return INC_TOO_LONG;
  memcpy(name, p + 1, len);
  name[len] = 0;
  return close == '"' ? INC_QUOTED : INC_ANGLE;
}

/* The include a line starting at line names, its name copied into name
** (n bytes). A name too long to look up is INC_TOO_LONG: a header left out
** of the hash would let a changed one reuse old binaries. So is a name the
** preprocessor computes (#include HEADER, one macro and nothing after it):
** no reader of the text can tell which file that is. */
static inc_kind include_of(scan *sc, const char *line, char *name, size_t n) {
  const char *p = skip_blank(sc, line);
  if (p[0] == '%' && p[1] == ':') p += 2; /* the digraph of # */
  else if (*p == '#') p++;
  else return INC_NONE;
  p = skip_blank(sc, p);
  if (strncmp(p, "include", 7) || ident_char(p[7])) return INC_NONE;
  p = skip_blank(sc, p + 7);
  if (*p == '"' || *p == '<') return delimited_name(p, name, n);
  size_t len = 0;
  while (ident_char(p[len])) len++;
  const char *rest = p + len + strspn(p + len, " \t\r");
  int alone = len && !(*p >= '0' && *p <= '9') &&
              (!*rest || *rest == '\n' || !strncmp(rest, "//", 2) || !strncmp(rest, "/*", 2));
  if (alone) snprintf(name, n, "#include %.*s", (int)len, p);
  return alone ? INC_COMPUTED : INC_NONE;
}

/* Where NVRTC finds a header: a quoted name beside the file that includes
** it, then on the include paths; an angle name on the include paths. The
** include paths are the toolkit's and the source's directory; a name found
** in neither of the source's places is the toolkit's (or NVRTC's own), not
** read. Returns 1 with the file's path in path, 0 when it is not ours, -1
** when the path does not fit. */
static int locate(const reader *r, inc_kind kind, const char *dir, const char *name, char *path, size_t n) {
  const char *dirs[2] = {kind == INC_QUOTED ? dir : r->s->dir, r->s->dir};
  for (int i = 0; i < 2; i++) {
    struct stat sb;
    int w = snprintf(path, n, "%s/%s", dirs[i], name);
    if (w < 0 || (size_t)w >= n) return -1;
    if (!stat(path, &sb)) return 1;
  }
  return 0;
}

/* Whether path was read before (an include guard's second inclusion, a
** header two others include): its bytes are in the hash already. Otherwise
** it is recorded. -1 when its real path cannot be had. */
static int seen_before(reader *r, const char *path) {
  char real[PATH_MAX];
  if (!realpath(path, real)) return -1;
  uint64_t id = XXH3_64bits(real, strlen(real));
  for (int i = 0; i < r->s->nheaders; i++)
    if (r->seen[i] == id) return 1;
  if (r->s->nheaders < KT__MAX_HEADERS) r->seen[r->s->nheaders] = id;
  return 0;
}

static int read_text(reader *r, const char *path, const char *by, char **text);
static int header(reader *r, const char *name, const char *path, const char *by, int depth);

/* The next __has_include("name") or __has_include(<name>) at or after p in
** its line: a header whose presence alone can change what compiles. Its
** kind and name as include_of gives them, and the text after it; NULL when
** the line holds no more. */
static const char *has_include(scan *sc, const char *line, const char *p, inc_kind *kind, char *name, size_t n) {
  static const char tok[] = "__has_include";
  const size_t tl = sizeof tok - 1;
  for (; *p && *p != '\n'; p++) {
    if (strncmp(p, tok, tl) || ident_char(p[tl]) || (p > line && ident_char(p[-1]))) continue;
    const char *q = skip_blank(sc, p + tl);
    if (*q != '(') continue;
    q = skip_blank(sc, q + 1);
    if ((*kind = delimited_name(q, name, n)) != INC_NONE)
      return q + 2 + strcspn(q + 1, *q == '"' ? "\"\n" : ">\n"); /* past the name's close */
    size_t k = strcspn(p, ")\n");
    *kind = INC_COMPUTED;
    snprintf(name, n, "%.*s%s", (int)k, p, p[k] == ')' ? ")" : "");
    return p + tl;
  }
  return NULL;
}

/* One header a line names (kind, name): found, then read unless it is not
** ours; a name that cannot be read for the hash is refused. */
static int named(reader *r, inc_kind kind, const char *name, const char *line, const char *dir, const char *by,
                 int depth) {
  char path[4096];
  if (kind == INC_TOO_LONG) {
    snprintf(r->err, r->errlen, "%.40s... (in %s): the name is longer than %d bytes", line, by, INC_NAME - 1);
    return -1;
  }
  if (kind == INC_COMPUTED) {
    snprintf(r->err, r->errlen, "%s (in %s): a name the preprocessor computes cannot be read for the hash; write "
             "the header's name in quotes", name, by);
    return -1;
  }
  int found = locate(r, kind, dir, name, path, sizeof path);
  if (found < 0) {
    snprintf(r->err, r->errlen, "%s (included by %s): its path is longer than %zu bytes", name, by, sizeof path - 1);
    return -1;
  }
  return found ? header(r, name, path, by, depth) : 0;
}

/* Every header of ours that text (in dir, named by) includes or asks
** about (__has_include), hashed after its name, each once. */
static int headers(reader *r, const char *text, const char *dir, const char *by, int depth) {
  char name[INC_NAME];
  scan sc = {text + strlen(text), NULL, NULL};
  for (const char *line = text; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
    inc_kind kind = include_of(&sc, line, name, sizeof name);
    int rc = kind == INC_NONE ? 0 : named(r, kind, name, line, dir, by, depth);
    for (const char *p = line; !rc && (p = has_include(&sc, line, p, &kind, name, sizeof name));)
      rc = named(r, kind, name, line, dir, by, depth);
    if (rc) return rc;
  }
  return 0;
}

/* A header into h (none where h is NULL): its name, then its text. */
static void feed(XXH3_state_t *h, const char *name, const char *text) {
  if (!h) return;
  XXH3_64bits_update(h, name, strlen(name) + 1);
  XXH3_64bits_update(h, text, strlen(text) + 1);
}

/* One header found at path: read, hashed and searched in turn, unless it
** was read before. */
static int header(reader *r, const char *name, const char *path, const char *by, int depth) {
  int again = seen_before(r, path);
  if (again > 0) return 0;
  if (again < 0) {
    int e = errno;
    snprintf(r->err, r->errlen, "cannot read %s (included by %s): %s", path, by, strerror(e));
    return e;
  }
  if (depth >= KT__MAX_INCLUDE_DEPTH || r->s->nheaders == KT__MAX_HEADERS) {
    snprintf(r->err, r->errlen, "%s (included by %s): more than %d headers or %d levels of includes", name, by,
             KT__MAX_HEADERS, KT__MAX_INCLUDE_DEPTH);
    return -1;
  }
  r->s->nheaders++;
  char *sub;
  int rc = read_text(r, path, by, &sub);
  if (rc) return rc;
  feed(r->h, name, sub);
  feed(r->hh, name, sub);
  char subdir[4096];
  snprintf(subdir, sizeof subdir, "%s", path);
  *strrchr(subdir, '/') = 0;
  rc = headers(r, sub, subdir, name, depth + 1);
  kt__free(sub);
  return rc;
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

/* The source's directory as an absolute path: NVRTC gets it as the
** program's place and include path, so neither the process's working
** directory when it compiles nor a chdir() after the load can change which
** headers a variant is built from. */
static int source_dir(reader *r, const char *path) {
  char dir[4096], real[PATH_MAX];
  const char *slash = r->s->name > path ? r->s->name - 1 : NULL;
  if (!slash) snprintf(dir, sizeof dir, ".");
  else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  if (!realpath(dir, real)) {
    int e = errno;
    snprintf(r->err, r->errlen, "cannot resolve the directory of %s: %s", path, strerror(e));
    return e;
  }
  return (r->s->dir = kt__strdup(real)) ? 0 : ENOMEM;
}

int kt__source_read(const char *path, kt__source *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const char *slash = strrchr(path, '/');
  out->name = slash ? slash + 1 : path;
  reader r = {XXH3_createState(), XXH3_createState(), out, {0}, err, errlen};
  int rc = r.h && r.hh ? read_text(&r, path, NULL, &out->text) : ENOMEM;
  if (!rc) rc = source_dir(&r, path);
  if (!rc) {
    XXH3_64bits_reset(r.h);
    XXH3_64bits_reset(r.hh);
    XXH3_64bits_update(r.h, out->text, strlen(out->text) + 1);
    rc = headers(&r, out->text, out->dir, out->name, 0);
    out->hash = XXH3_64bits_digest(r.h);
    out->headers = XXH3_64bits_digest(r.hh);
  }
  XXH3_freeState(r.h);
  XXH3_freeState(r.hh);
  return rc;
}

int kt__source_headers(const char *text, const char *dir, const char *name, uint64_t *out, char *err,
                       size_t errlen) {
  kt__source s = {.dir = (char *)dir};
  reader r = {NULL, XXH3_createState(), &s, {0}, err, errlen};
  if (!r.hh) return ENOMEM;
  XXH3_64bits_reset(r.hh);
  int rc = headers(&r, text, dir, name, 0);
  *out = XXH3_64bits_digest(r.hh);
  XXH3_freeState(r.hh);
  return rc;
}

void kt__source_free(kt__source *s) {
  kt__free(s->text);
  kt__free(s->dir);
  memset(s, 0, sizeof *s);
}
