/* Reading whole files: specs, kernel sources, cache exports. */
#ifndef KT_FILEIO_H
#define KT_FILEIO_H

#include <stddef.h>

/* Read a whole file into a NUL-terminated buffer (caller frees with
** kt__free). Returns 0, or errno. */
int kt__read_file(const char *path, char **out, size_t *len);

#endif
