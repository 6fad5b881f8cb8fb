/* A helper process's directory for NVRTC's precompiled headers (pchdir.h
** says why). */
#include "device/pchdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PREFIX "ktune-nvrtc."
/* Our directory, NVRTC's in it, its files: never deeper. */
enum { DEPTH = 3, MIN_AGE_S = 60, PASSES = 8 };

static char mine[PATH_MAX];
static int mine_fd = -1;

/* One record of getdents64 (linux_dirent64). */
struct dent {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[];
};

/* Removes name under dirfd, directories at most depth deep, links never
** followed. Only system calls, no allocation: a signal handler calls it.
** The entries of a directory are listed again until a pass removes none,
** since removing while listing may skip some. */
static void remove_at(int dirfd, const char *name, int depth) {
  if (!unlinkat(dirfd, name, 0) || errno != EISDIR || depth <= 0) return;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  _Alignas(8) char buf[4096];
  for (int pass = 0, removed = 1; removed && pass < PASSES; pass++) {
    removed = 0;
    lseek(fd, 0, SEEK_SET);
    for (long got; (got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0;) {
      for (long at = 0; at < got;) {
        struct dent *d = (struct dent *)(buf + at);
        at += d->reclen;
        if (!strcmp(d->name, ".") || !strcmp(d->name, "..")) continue;
        remove_at(fd, d->name, depth - 1);
        removed = 1;
      }
    }
  }
  close(fd);
  unlinkat(dirfd, name, AT_REMOVEDIR);
}

/* Whether entry name under dfd is a dead helper's directory: ours, a
** directory (not a link), unchanged for min_age_s, its lock free. On 1,
** *fd holds the lock until closed. */
static int dead(int dfd, const char *name, int min_age_s, int *fd) {
  struct stat st;
  *fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (*fd < 0) return 0;
  if (!fstat(*fd, &st) && st.st_uid == geteuid() && S_ISDIR(st.st_mode) &&
      time(NULL) - st.st_mtime >= min_age_s && !flock(*fd, LOCK_EX | LOCK_NB))
    return 1;
  close(*fd);
  *fd = -1;
  return 0;
}

int kt__pchdir_sweep(const char *dir, int min_age_s) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    int fd;
    if (strncmp(e->d_name, PREFIX, sizeof PREFIX - 1) || !dead(dirfd(d), e->d_name, min_age_s, &fd)) continue;
    remove_at(dirfd(d), e->d_name, DEPTH);
    close(fd);
    n++;
  }
  closedir(d);
  return n;
}

static void release_on(int sig) {
  kt__pchdir_release();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Makes and locks mine under tmp; 0, or -1 with errno set. */
static int make_mine(const char *tmp) {
  int w = snprintf(mine, sizeof mine, "%s/" PREFIX "%ld.XXXXXX", tmp, (long)getpid());
  if (w < 0 || (size_t)w >= sizeof mine) errno = ENAMETOOLONG;
  if (w < 0 || (size_t)w >= sizeof mine || !mkdtemp(mine)) {
    mine[0] = 0;
    return -1;
  }
  mine_fd = open(mine, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (mine_fd >= 0 && !flock(mine_fd, LOCK_EX | LOCK_NB)) return 0;
  int e = errno;
  kt__pchdir_release();
  errno = e;
  return -1;
}

int kt__pchdir_claim(char *why, size_t n) {
  if (mine[0]) return 0;
  const char *tmp = getenv("TMPDIR");
  if (!tmp || tmp[0] != '/') tmp = "/tmp";
  kt__pchdir_sweep(tmp, MIN_AGE_S);
  if (make_mine(tmp)) return snprintf(why, n, "%s: cannot make a directory there: %s", tmp, strerror(errno)), -1;
  if (setenv("TMPDIR", mine, 1)) {
    kt__pchdir_release();
    return snprintf(why, n, "cannot set TMPDIR: %s", strerror(errno)), -1;
  }
  struct sigaction sa = {.sa_handler = release_on};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_UNBLOCK, &term, NULL); /* a spawned process inherits its parent's mask */
  return 0;
}

void kt__pchdir_release(void) {
  if (mine[0]) remove_at(AT_FDCWD, mine, DEPTH);
  mine[0] = 0;
  if (mine_fd >= 0) close(mine_fd);
  mine_fd = -1;
}
