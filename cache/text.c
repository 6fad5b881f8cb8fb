/* Printable UTF-8 (text.h says why). */
#include "cache/text.h"

#include <stdio.h>
#include <string.h>

int kt__text_char(const unsigned char *p, int *control) {
  unsigned c = p[0];
  *control = 0;
  if (c < 0x80) return *control = c < 0x20 || c == 0x7f, 1;
  /* The lead byte gives the length and the range the second byte must be
  ** in: narrower after E0, ED, F0 and F4, which rules out overlong forms,
  ** surrogates and code points above U+10FFFF (RFC 3629, table 3-7 of
  ** the Unicode standard). */
  int len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (!len) return 0;
  unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
  unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
  if (p[1] < lo || p[1] > hi) return 0;
  unsigned cp = c & (0x7f >> len);
  for (int i = 1; i < len; i++) {
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  /* C1, and what moves text on a terminal without a control byte: the
  ** bidirectional marks, embeddings, overrides and isolates (a name that
  ** shows reversed), and the line and paragraph separators. */
  *control = cp <= 0x9f || cp == 0x61c || cp == 0x200e || cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) ||
             (cp >= 0x2066 && cp <= 0x2069);
  return len;
}

/* Whether s reads whole, and without a control character unless allowed. */
static int reads(const char *s, int controls_ok) {
  int ctl;
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    int len = kt__text_char(p, &ctl);
    if (!len || (ctl && !controls_ok)) return 0;
    p += len;
  }
  return 1;
}

int kt__text_clean(const char *s) { return reads(s, 0); }

int kt__text_utf8(const char *s) { return reads(s, 1); }

size_t kt__text_visible(const char *s, unsigned flags, char *buf, size_t n) {
  const char *fmt = flags & KT__TEXT_JSON ? "\\\\x%02x" : "\\x%02x";
  size_t u = 0, escaped = 0, w = flags & KT__TEXT_JSON ? 5 : 4;
  int ctl, full = !buf || !n;
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
    int len = kt__text_char(p, &ctl), esc = !len || (ctl && (flags & KT__TEXT_CONTROLS));
    size_t take = len ? (size_t)len : 1, need = esc ? w * take : take;
    escaped += esc ? take : 0;
    /* Once one piece does not fit, nothing after it is written: the text
    ** is cut, not holed. */
    full = full || u + need >= n;
    for (size_t i = 0; i < take && !full; i++) {
      if (esc) u += (size_t)snprintf(buf + u, n - u, fmt, p[i]);
      else buf[u++] = (char)p[i];
    }
    p += take;
  }
  if (buf && n) buf[u] = 0;
  return escaped;
}
