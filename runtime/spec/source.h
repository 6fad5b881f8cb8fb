/* A kernel's source and the headers it includes by quoted name
** (#include "kt_device.cuh"), found beside the file that includes them. The
** headers' bytes are read once, for the hash: a changed header must compile
** anew and must never reuse a cubin built from the old one. NVRTC then gets
** the source's directory as an include path. A quoted name found nowhere
** beside it is left to NVRTC (it may be a toolkit header). */
#ifndef KT_SOURCE_H
#define KT_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#define KT__MAX_HEADERS 32 /* headers one source may pull in, all levels */
#define KT__MAX_INCLUDE_DEPTH 8

typedef struct kt__source {
  char *text;     /* the source file */
  char *dir;      /* its directory */
  uint64_t hash;  /* of the source and each header (name and bytes), in the
                     order they are included */
  int nheaders;
} kt__source;

/* Read path and its headers. Returns 0, or an errno value /
** KT__FILE_* code with what failed in err ("kt_device.cuh (included by
** x.cu): larger than 4194304 bytes"); free out in any case. */
int kt__source_read(const char *path, kt__source *out, char *err, size_t errlen);
void kt__source_free(kt__source *s);

#endif
