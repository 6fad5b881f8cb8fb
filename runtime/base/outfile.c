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
  o->unnamed = 0;
  snprintf(o->dst, sizeof o->dst, "%s", path);
  o->f = fopen(path, binary ? "wb" : "w");
  return o->f ? 0 : errno;
}

/* A name beside dst that no file has ("DST.ktune-tmp-PID-N"), given to a
** file by make (0, or -1 with errno: EEXIST tries the next name). */
static int name_beside(kt__outfile *o, int (*make)(const char *name, int fd), int fd) {
  for (int tries = 0; tries < 100; tries++) {
    unsigned n = atomic_fetch_add(&serial, 1);
    int w = snprintf(o->tmp, sizeof o->tmp, "%s.ktune-tmp-%ld-%u", o->dst, (long)getpid(), n);
    if (w < 0 || (size_t)w >= sizeof o->tmp) return errno = ENAMETOOLONG, -1;
    int r = make(o->tmp, fd);
    if (r >= 0 || errno != EEXIST) return r;
  }
  return -1;
}

static int make_new(const char *name, int fd) {
  (void)fd;
  return open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
}

/* fd's file, which has no name, linked as name (through /proc: linking by
** the descriptor itself needs a privilege). */
static int link_as(const char *name, int fd) {
  char self[64];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  return linkat(AT_FDCWD, self, AT_FDCWD, name, AT_SYMLINK_FOLLOW);
}

/* A file with no name in dst's directory (O_TMPFILE), linked beside dst
** only once written: a process killed while writing leaves nothing. -1
** where the filesystem or the kernel makes none, or /proc is not there to
** link it through. */
static int new_unnamed(kt__outfile *o) {
#ifdef O_TMPFILE
  char dir[PATH_MAX], self[64], target[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", o->dst);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else slash[slash == dir] = 0; /* "/x" lies in "/" */
  int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) return -1;
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  if (readlink(self, target, sizeof target) < 0) {
    close(fd);
    return -1;
  }
  return fd;
#else
  (void)o;
  return -1;
#endif
}

int kt__out_open(kt__outfile *o, const char *path, int binary) {
  struct stat st, lst;
  o->f = NULL;
  o->unnamed = 0;
  int exists = !stat(path, &st), link = !lstat(path, &lst) && S_ISLNK(lst.st_mode);
  if (exists ? !S_ISREG(st.st_mode) : link) return in_place(o, path, binary); /* fopen makes a link's target */
  if (link ? !realpath(path, o->dst) : snprintf(o->dst, sizeof o->dst, "%s", path) >= (int)sizeof o->dst)
    return in_place(o, path, binary);
  int fd = new_unnamed(o);
  o->tmp[0] = 0;
  o->unnamed = fd >= 0;
  if (fd < 0) fd = name_beside(o, make_new, -1);
  if (fd < 0) return in_place(o, path, binary);
  if (exists) (void)fchmod(fd, st.st_mode & 07777);
  if (!(o->f = fdopen(fd, binary ? "wb" : "w"))) {
    int e = errno;
    close(fd);
    if (o->tmp[0]) unlink(o->tmp);
    return e;
  }
  return 0;
}

int kt__out_commit(kt__outfile *o) {
  int e = 0;
  errno = 0;
  /* An unnamed file gets its name while its descriptor is open. */
  if (o->unnamed && (fflush(o->f) || ferror(o->f))) e = errno ? errno : EIO;
  else if (o->unnamed && name_beside(o, link_as, fileno(o->f)) < 0) e = errno, o->tmp[0] = 0;
  int bad = ferror(o->f);
  if (fclose(o->f) && !e) e = errno;
  if (bad && !e) e = EIO;
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
