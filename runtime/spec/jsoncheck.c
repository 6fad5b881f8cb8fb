#include "spec/jsoncheck.h"

#include <stdio.h>
#include <string.h>

typedef struct scan {
  const char *s;
  size_t i, n;
  int nest;
  const char *why;
} scan;

static int fail(scan *p, const char *why) {
  p->why = why;
  return -1;
}

static void ws(scan *p) {
  while (p->i < p->n && strchr(" \t\n\r", p->s[p->i]) && p->s[p->i]) p->i++;
}

static int lit(scan *p, const char *word) {
  size_t k = strlen(word);
  if (p->n - p->i < k || memcmp(p->s + p->i, word, k)) return fail(p, "expected a JSON value");
  p->i += k;
  return 0;
}

static int hex4(scan *p, int *v) {
  *v = 0;
  for (int k = 0; k < 4; k++, p->i++) {
    char c = p->i < p->n ? p->s[p->i] : 0;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return fail(p, "a \\u escape needs four hex digits");
    *v = *v * 16 + d;
  }
  return 0;
}

static int string(scan *p) {
  p->i++; /* the opening quote */
  for (;;) {
    if (p->i >= p->n) return fail(p, "unterminated string");
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '"') break;
    if (c == 0) return fail(p, "a NUL byte");
    if (c < 0x20) return fail(p, "a control character in a string");
    if (c != '\\') {
      p->i++;
      continue;
    }
    p->i++;
    char e = p->i < p->n ? p->s[p->i] : 0;
    if (e && strchr("\"\\/bfnrt", e)) {
      p->i++;
      continue;
    }
    if (e != 'u') return fail(p, "a bad escape in a string");
    size_t at = p->i - 1;
    p->i++;
    int v;
    if (hex4(p, &v)) return -1;
    if (!v) {
      p->i = at;
      return fail(p, "a string holds a NUL character (\\u0000)");
    }
  }
  p->i++;
  return 0;
}

static int digits(scan *p) {
  size_t start = p->i;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
  return p->i > start ? 0 : fail(p, "a bad number");
}

static int number(scan *p) {
  if (p->s[p->i] == '-') p->i++;
  if (p->i < p->n && p->s[p->i] == '0') p->i++;
  else if (digits(p)) return -1;
  if (p->i < p->n && p->s[p->i] == '.') {
    p->i++;
    if (digits(p)) return -1;
  }
  if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
    p->i++;
    if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
    if (digits(p)) return -1;
  }
  return 0;
}

static int value(scan *p);

/* The members of an object or the items of an array, up to close. */
static int members(scan *p, char close, int keyed) {
  if (++p->nest > KT__JSON_MAX_NEST) return fail(p, "nests more than 512 levels deep");
  p->i++;
  ws(p);
  if (p->i < p->n && p->s[p->i] == close) {
    p->i++;
    p->nest--;
    return 0;
  }
  for (;;) {
    ws(p);
    if (keyed) {
      if (p->i >= p->n || p->s[p->i] != '"') return fail(p, "expected a string (a member's name)");
      if (string(p)) return -1;
      ws(p);
      if (p->i >= p->n || p->s[p->i] != ':') return fail(p, "expected ':'");
      p->i++;
    }
    if (value(p)) return -1;
    ws(p);
    char c = p->i < p->n ? p->s[p->i] : 0;
    p->i++;
    if (c == close) break;
    if (c != ',') {
      p->i--;
      return fail(p, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
  p->nest--;
  return 0;
}

static int value(scan *p) {
  ws(p);
  if (p->i >= p->n) return fail(p, "unexpected end of text");
  switch (p->s[p->i]) {
    case '{': return members(p, '}', 1);
    case '[': return members(p, ']', 0);
    case '"': return string(p);
    case 't': return lit(p, "true");
    case 'f': return lit(p, "false");
    case 'n': return lit(p, "null");
    case 0: return fail(p, "a NUL byte");
    default:
      return (p->s[p->i] == '-' || (p->s[p->i] >= '0' && p->s[p->i] <= '9')) ? number(p)
                                                                             : fail(p, "expected a JSON value");
  }
}

int kt__json_check(const char *text, size_t len, size_t *at, char *why, size_t wl) {
  scan p = {text, 0, len, 0, NULL};
  int rc = value(&p);
  if (!rc) {
    ws(&p);
    if (p.i < p.n) rc = fail(&p, p.s[p.i] ? "text after the JSON value" : "a NUL byte");
  }
  if (rc) {
    *at = p.i < len ? p.i : len;
    snprintf(why, wl, "%s", p.why);
  }
  return rc;
}
