/* A check of JSON text that allocates nothing, run before cJSON parses a
** spec: it places syntax errors exactly, refuses what cJSON would accept
** silently (text after the value, a NUL byte, a string holding \u0000),
** and leaves cJSON's own failures to mean out of memory. */
#ifndef KT_JSONCHECK_H
#define KT_JSONCHECK_H

#include <stddef.h>

/* Deepest nesting of arrays and objects accepted (cJSON's limit is 1000). */
#define KT__JSON_MAX_NEST 512

/* 0 when text[0..len) is one JSON value with only whitespace around it;
** else -1 with the offset of the fault in *at and what is wrong in why. */
int kt__json_check(const char *text, size_t len, size_t *at, char *why, size_t wl);

#endif
