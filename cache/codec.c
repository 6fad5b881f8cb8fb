/* The canonical JSON of keys and configs. The reader is written here, not
** taken from cJSON, because cJSON keeps every number as a double: a 64-bit
** key value beyond 2^53 would come back as another number. */
#include "cache/codec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int printable(int c) { return c >= 0x20 && c < 0x7f; }

static int by_name(const void *a, const void *b) { return strcmp(((const kt__kv *)a)->name, ((const kt__kv *)b)->name); }

/* A quoted string; 0, or -1 when a character is not printable ASCII. */
static int put_string(const char *s, char *out, size_t size, size_t *u) {
  if (*u < size) out[(*u)++] = '"';
  for (; *s; s++) {
    if (!printable((unsigned char)*s)) return -1;
    if ((*s == '"' || *s == '\\') && *u < size) out[(*u)++] = '\\';
    if (*u < size) out[(*u)++] = *s;
  }
  if (*u < size) out[(*u)++] = '"';
  return 0;
}

static void put_f32(float f, char *out, size_t size, size_t *u) {
  double d = f;
  const char *word = isnan(d) ? "\"nan\"" : isinf(d) ? (d > 0 ? "\"inf\"" : "\"-inf\"") : NULL;
  size_t room = *u < size ? size - *u : 0;
  int w;
  if (word) w = snprintf(out + *u, room, "%s", word);
  else if (d == floor(d) && fabs(d) < 9007199254740992.0) w = snprintf(out + *u, room, "%lld", (long long)d);
  else w = snprintf(out + *u, room, "%.9g", d);
  *u += w > 0 ? (size_t)w : 0;
}

int kt__codec_write(kt__kv *v, int n, char *out, size_t size) {
  if (!size) return -1;
  qsort(v, (size_t)n, sizeof *v, by_name);
  size_t u = 0;
  out[u++] = '{';
  for (int i = 0; i < n; i++) {
    if (i && !strcmp(v[i - 1].name, v[i].name)) goto fail;
    if (i && u < size) out[u++] = ',';
    if (put_string(v[i].name, out, size, &u)) goto fail;
    if (u < size) out[u++] = ':';
    if (v[i].kind == KT__V_STR) {
      if (put_string(v[i].s, out, size, &u)) goto fail;
    } else if (v[i].kind == KT__V_F32) {
      put_f32(v[i].f, out, size, &u);
    } else {
      int w = snprintf(out + u, u < size ? size - u : 0, "%lld", (long long)v[i].i);
      u += w > 0 ? (size_t)w : 0;
    }
  }
  if (u < size) out[u++] = '}';
  if (u < size) {
    out[u] = 0;
    return 0;
  }
fail:
  out[0] = 0;
  return -1;
}

typedef struct reader {
  const char *p;
  char *buf, *why;
  size_t used, bufsize, wl;
} reader;

static int fail(reader *r, const char *msg) {
  snprintf(r->why, r->wl, "%s", msg);
  return -1;
}

/* Consume c when it is next (never past the end of the text). */
static int eat(reader *r, char c) {
  if (*r->p != c) return 0;
  r->p++;
  return 1;
}

static void skip(reader *r) {
  while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r') r->p++;
}

static int hexval(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One escape after the backslash; the character, or -1. */
static int unescape(reader *r) {
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  const char *e = *r->p ? strchr(from, *r->p) : NULL;
  if (e) {
    r->p++;
    return to[e - from];
  }
  if (*r->p != 'u') return -1;
  int c = 0;
  for (int k = 1; k <= 4; k++) {
    int h = hexval((unsigned char)r->p[k]);
    if (h < 0) return -1;
    c = c * 16 + h;
  }
  r->p += 5;
  return c;
}

/* A string into buf; its start, or NULL. */
static const char *string(reader *r) {
  if (*r->p != '"') return fail(r, "expected a string"), NULL;
  r->p++;
  const char *start = r->buf + r->used;
  for (;;) {
    int c = (unsigned char)*r->p;
    if (c == '"') break;
    if (!c) return fail(r, "unterminated string"), NULL;
    r->p++;
    if (c == '\\' && (c = unescape(r)) < 0) return fail(r, "bad escape in a string"), NULL;
    if (!printable(c)) return fail(r, "a string holds a character that is not printable ASCII"), NULL;
    if (r->used + 1 >= r->bufsize) return fail(r, "too long"), NULL;
    r->buf[r->used++] = (char)c;
  }
  r->p++;
  r->buf[r->used++] = 0;
  return start;
}

/* The extent of a JSON number at r->p; 0 when there is none. *is_int: no
** fraction and no exponent. */
static size_t number_len(const char *p, int *is_int) {
  const char *s = p;
  *is_int = 1;
  if (*s == '-') s++;
  if (*s == '0') s++;
  else if (*s >= '1' && *s <= '9') while (*s >= '0' && *s <= '9') s++;
  else return 0;
  if (*s == '.') {
    *is_int = 0;
    if (!(*++s >= '0' && *s <= '9')) return 0;
    while (*s >= '0' && *s <= '9') s++;
  }
  if (*s == 'e' || *s == 'E') {
    *is_int = 0;
    if (*++s == '+' || *s == '-') s++;
    if (!(*s >= '0' && *s <= '9')) return 0;
    while (*s >= '0' && *s <= '9') s++;
  }
  return (size_t)(s - p);
}

static int number(reader *r, kt__kv *v) {
  int is_int;
  size_t n = number_len(r->p, &is_int);
  if (!n) return fail(r, "a key holds numbers and strings only");
  char text[64];
  if (n >= sizeof text) return fail(r, "a number is too long");
  memcpy(text, r->p, n);
  text[n] = 0;
  r->p += n;
  errno = 0;
  if (is_int) {
    v->kind = KT__V_INT;
    v->i = strtoll(text, NULL, 10);
    return errno ? fail(r, "an integer does not fit in 64 bits") : 0;
  }
  double d = strtod(text, NULL);
  if (!isfinite(d) || fabs(d) > 3.4028234663852886e38) return fail(r, "a number is beyond the float32 range");
  if (d == floor(d) && fabs(d) < 9007199254740992.0) {
    v->kind = KT__V_INT;
    v->i = (int64_t)d;
  } else {
    v->kind = KT__V_F32;
    v->f = (float)d;
  }
  return 0;
}

/* "name": value */
static int field(reader *r, kt__kv *v) {
  skip(r);
  if (!(v->name = string(r))) return -1;
  skip(r);
  if (!eat(r, ':')) return fail(r, "expected ':' after a name");
  skip(r);
  if (*r->p != '"') return number(r, v);
  v->kind = KT__V_STR;
  if (!(v->s = string(r))) return -1;
  /* The words the codec writes for non-finite floats read back as them. */
  static const char *words[] = {"nan", "inf", "-inf"};
  static const float vals[] = {NAN, INFINITY, -INFINITY};
  for (int k = 0; k < 3; k++)
    if (!strcmp(v->s, words[k])) v->kind = KT__V_F32, v->f = vals[k];
  return 0;
}

int kt__codec_read(const char *json, kt__kv *v, int max, char *buf, size_t bufsize, char *why, size_t wl) {
  reader r = {json ? json : "", buf, why, 0, bufsize, wl};
  int n = 0;
  skip(&r);
  if (!eat(&r, '{')) return fail(&r, "not a JSON object");
  skip(&r);
  if (!eat(&r, '}'))
    for (;;) {
      if (n == max) return fail(&r, "too many fields");
      if (field(&r, &v[n++])) return -1;
      skip(&r);
      if (eat(&r, '}')) break;
      if (!eat(&r, ',')) return fail(&r, "expected ',' or '}'");
    }
  skip(&r);
  if (*r.p) return fail(&r, "text after the object");
  return n;
}

int kt__codec_canon(const char *json, int ints_only, char *out, size_t size, char *why, size_t wl) {
  kt__kv v[KT__KV_MAX];
  char buf[KT__JSON_MAX(KT__KV_MAX)];
  int n = kt__codec_read(json, v, KT__KV_MAX, buf, sizeof buf, why, wl);
  if (n < 0) return -1;
  for (int i = 0; i < n; i++) {
    if (ints_only && v[i].kind != KT__V_INT) {
      snprintf(why, wl, "\"%s\" is not an integer", v[i].name);
      return -1;
    }
    for (int j = 0; j < i; j++)
      if (!strcmp(v[i].name, v[j].name)) {
        snprintf(why, wl, "\"%s\" given twice", v[i].name);
        return -1;
      }
  }
  if (kt__codec_write(v, n, out, size)) {
    snprintf(why, wl, "too long");
    return -1;
  }
  return 0;
}
