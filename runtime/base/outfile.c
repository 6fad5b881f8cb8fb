/* A file written whole or not at all (outfile.h says why). */
#include "base/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_uint serial;

/* path itself, as fopen would: a device, a pipe, a link to nothing, or a
** directory where no new file can be made. */
static int in_place(kt__outfile *o, const char *path, int binary) {
  o->tmp[0] = 0;
  snprintf(o->dst, sizeof o->dst, "%s", path);
  o->f = fopen(path, binary ? "wb" : "w");
  return o->f ? 0 : errno;
}

/* A new file beside dst, made with O_EXCL (never another's); -1 when none
** can be. */
static int new_beside(kt__outfile *o) {
  for (int tries = 0; tries < 100; tries++) {
    unsigned n = atomic_fetch_add(&serial, 1);
    int w = snprintf(o->tmp, sizeof o->tmp, "%s.ktune-tmp-%ld-%u", o->dst, (long)getpid(), n);
    if (w < 0 || (size_t)w >= sizeof o->tmp) return -1;
    int fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

int kt__out_open(kt__outfile *o, const char *path, int binary) {
  struct stat st, lst;
  o->f = NULL;
  int exists = !stat(path, &st), link = !lstat(path, &lst) && S_ISLNK(lst.st_mode);
  if (exists ? !S_ISREG(st.st_mode) : link) return in_place(o, path, binary); /* fopen makes a link's target */
  if (link ? !realpath(path, o->dst) : snprintf(o->dst, sizeof o->dst, "%s", path) >= (int)sizeof o->dst)
    return in_place(o, path, binary);
  int fd = new_beside(o);
  if (fd < 0) return in_place(o, path, binary);
  if (exists) (void)fchmod(fd, st.st_mode & 07777);
  if (!(o->f = fdopen(fd, binary ? "wb" : "w"))) {
    int e = errno;
    close(fd);
    unlink(o->tmp);
    return e;
  }
  return 0;
}

int kt__out_commit(kt__outfile *o) {
  int bad = ferror(o->f);
  int e = fclose(o->f) ? errno : bad ? EIO : 0;
  o->f = NULL;
  if (!o->tmp[0]) return e;
  if (!e && rename(o->tmp, o->dst)) e = errno;
  if (e) unlink(o->tmp);
  return e;
}

void kt__out_abort(kt__outfile *o) {
  if (o->f) fclose(o->f);
  o->f = NULL;
  if (o->tmp[0]) unlink(o->tmp);
}

int kt__out_end(kt__outfile *o, int written) {
  if (written) return kt__out_commit(o);
  int e = errno ? errno : EIO; /* before fclose and unlink can change it */
  kt__out_abort(o);
  return e;
}
