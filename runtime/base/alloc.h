/* Allocation wrappers. Every allocation in the library goes through these so
** that tests can make the n-th one fail and check the error paths. */
#ifndef KT_ALLOC_H
#define KT_ALLOC_H

#include <stddef.h>

void *kt__malloc(size_t n);
void *kt__calloc(size_t count, size_t size);
void *kt__realloc(void *p, size_t n);
char *kt__strdup(const char *s);
char *kt__strndup(const char *s, size_t n);
void kt__free(void *p);

/* Counts one allocation; nonzero when the test hook says it must fail.
** Tests route SQLite's and cJSON's allocators through it too. */
int kt__alloc_should_fail(void);

/* Test hook: the n-th allocation from now (1-based) and every one after it
** fails; 0 turns failures off. Returns how many allocations were made since
** the last call, so a test can sweep n over every allocation of an action. */
long kt__alloc_fail_after(long n);

#endif
