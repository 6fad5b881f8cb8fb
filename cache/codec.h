/* The canonical JSON of tuning keys and configs: how the cache stores them,
** so that equal keys are equal strings, and what every reader compares. One
** codec: the tuner, the cache's import, the CLI and the Python package (via
** ktune.h) all go through it.
**
** Canonical form: one object; fields sorted by name (byte order), each
** once; no spaces. Values:
**   integers as decimal (within 64 bits);
**   floats (an f32 key field) as their float32 value: integral and within
**     +-2^53 as an integer, else finite with %.9g (which reads back to the
**     same float32), else the strings "nan", "inf", "-inf";
**   strings (dtype names) as given: printable ASCII, '"' and '\' escaped.
** Names are printable ASCII too. Nothing else (no nesting, true/false or
** null) is a key or a config. */
#ifndef KT_CODEC_H
#define KT_CODEC_H

#include <stddef.h>
#include <stdint.h>

enum { KT__V_INT, KT__V_F32, KT__V_STR };

typedef struct kt__kv {
  const char *name;
  int kind;          /* KT__V_* */
  int64_t i;
  float f;
  const char *s;
} kt__kv;

/* The most fields a key or a config may have. */
#define KT__KV_MAX 128

/* The longest name a spec gives a field (an identifier): with a value of at
** most 20 characters (an int64, an f32 as %.9g or an integer, a dtype name
** in quotes), the canonical JSON of n fields fits in KT__JSON_MAX(n) bytes,
** its NUL included, so a key or config of a loaded spec is never cut. */
#define KT__NAME_MAX 64
#define KT__JSON_MAX(n) (3 + (n) * (KT__NAME_MAX + 24))

/* The bytes that hold any config's text, NUL included: a spec has at most
** 24 config fields (spec/key.h checks that it agrees). A stored config
** longer than that is one no reader takes: it reads as "". */
#define KT__CONFIG_JSON_MAX KT__JSON_MAX(24)

/* Write n fields (any order; v is sorted in place) as canonical JSON.
** Returns 0, or -1 when out is too small or a name is repeated or not
** printable ASCII (out is then ""). */
int kt__codec_write(kt__kv *v, int n, char *out, size_t size);

/* Read a JSON object of numbers and strings into v (at most max fields);
** names and strings are copied into buf. Numbers written as integers stay
** exact; others become KT__V_F32 unless integral within +-2^53. Returns
** the number of fields, or -1 with the reason in why. */
int kt__codec_read(const char *json, kt__kv *v, int max, char *buf, size_t bufsize, char *why, size_t wl);

/* json as canonical JSON: read, then written. ints_only refuses anything
** but integers (a config). Returns 0, or -1 with the reason in why. */
int kt__codec_canon(const char *json, int ints_only, char *out, size_t size, char *why, size_t wl);

#endif
