/* Reading whole files: specs, kernel sources, cache exports. */
#ifndef KT_FILEIO_H
#define KT_FILEIO_H

#include <stddef.h>

/* Beyond errno values, kt__read_file may return these. */
#define KT__FILE_NOT_REGULAR (-1) /* a FIFO, a device, a directory */
#define KT__FILE_TOO_LARGE (-2)   /* more than the limit given */

/* Read a whole regular file of at most max bytes into a NUL-terminated
** buffer (caller frees with kt__free); *len (may be NULL) is its length,
** which a NUL inside the file makes longer than strlen(). Never blocks on
** a FIFO and never reads an endless device. Returns 0, an errno value, or
** KT__FILE_NOT_REGULAR / KT__FILE_TOO_LARGE. */
int kt__read_file(const char *path, size_t max, char **out, size_t *len);
/* The same from standard input (a pipe is fine: it ends). */
int kt__read_stdin(size_t max, char **out, size_t *len);
/* "not a regular file", "larger than N bytes", or strerror(rc). Static. */
const char *kt__read_strerror(int rc, size_t max, char *buf, size_t n);

/* The limits ktune reads files with. */
#define KT__SPEC_MAX ((size_t)1 << 20)     /* a spec: 1 MiB */
#define KT__SOURCE_MAX ((size_t)4 << 20)   /* a kernel source: 4 MiB */
#define KT__IMPORT_MAX ((size_t)1 << 30)   /* a cache export: 1 GiB */

#endif
