/* A kernel's source and the headers of its own it includes, found where
** NVRTC finds them: a quoted name beside the file naming it, then in the
** source's directory; an angle name in the source's directory. Each is
** read once, for the hash: a changed header must compile anew and must
** never reuse a cubin built from the old one. NVRTC then compiles the
** source under its absolute path with that directory as an include path,
** so the working directory is never searched. A name found in neither
** place is the toolkit's, left to NVRTC; a computed name is refused. */
#ifndef KT_SOURCE_H
#define KT_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#define KT__MAX_HEADERS 32 /* headers one source may pull in, all levels */
#define KT__MAX_INCLUDE_DEPTH 8

typedef struct kt__source {
  char *text;     /* the source file */
  char *dir;      /* its directory, absolute */
  const char *name; /* its file's name: the path's last component, in the
                       path kt__source_read was given */
  uint64_t hash;  /* of the source and each header (name and bytes), in the
                     order they are included */
  uint64_t headers; /* of the headers alone: kt__source_headers's answer */
  int nheaders;
} kt__source;

/* Read path and its headers. Returns 0, or an errno value /
** KT__FILE_* code with what failed in err ("kt_device.cuh (included by
** x.cu): larger than 4194304 bytes"); free out in any case. */
int kt__source_read(const char *path, kt__source *out, char *err, size_t errlen);
/* The hash of the headers that text (a source as read, in the absolute
** directory dir, named name in messages) includes, as they are on disk now.
** It equals kt__source.headers while no header has changed since: NVRTC
** reads them from disk at each compile, so a compile made after a header
** changed is not of the spec that was loaded. Returns as kt__source_read. */
int kt__source_headers(const char *text, const char *dir, const char *name, uint64_t *out, char *err,
                       size_t errlen);
void kt__source_free(kt__source *s);

#endif
