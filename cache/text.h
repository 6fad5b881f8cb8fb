/* The text a cache row may hold, beside the codec's keys and configs:
** which bytes are printable UTF-8, and a visible form of the rest. A row
** another program wrote, a spec or a path may hold any bytes; what an
** export writes and what the library hands out (listed rows, messages:
** base/error.c uses it too) must be UTF-8, which JSON and Python require,
** and printed must not move a terminal's cursor. */
#ifndef KT_CACHE_TEXT_H
#define KT_CACHE_TEXT_H

#include <stddef.h>

/* How the character at p (not at its terminating 0) reads: its length in
** bytes (1 to 4) when it is well-formed UTF-8 (no overlong form, no
** surrogate, at most U+10FFFF), and *control set when it is a control
** character (C0, DEL, or C1: U+0080 to U+009F, which some terminals obey:
** U+009B starts an escape sequence) or one that moves text on a terminal
** (U+061C, U+200E, U+200F, U+2028 to U+202E, U+2066 to U+2069: the
** bidirectional marks, embeddings, overrides and isolates, and the line
** and paragraph separators). 0 when p starts no well-formed character:
** one byte to show as \xNN. */
int kt__text_char(const unsigned char *p, int *control /* OUT */);

/* Whether s is well-formed UTF-8 holding no control character. */
int kt__text_clean(const char *s);

/* Whether s is well-formed UTF-8 (control characters allowed). */
int kt__text_utf8(const char *s);

/* What kt__text_visible escapes besides malformed bytes (ktune.h's
** kt_text_flag has the same values). */
enum { KT__TEXT_CONTROLS = 1, KT__TEXT_JSON = 2 };

/* s into buf (n bytes, cut at a whole character or escape; buf may be NULL
** with n 0) with every byte of a malformed sequence written \xNN, and of a
** control character too with KT__TEXT_CONTROLS; \\xNN with KT__TEXT_JSON.
** Returns how many bytes of s are escaped (ktune.h's kt_text_visible). */
size_t kt__text_visible(const char *s, unsigned flags, char *buf, size_t n);

#endif
