/* Writing a file whole or not at all: cache exports, cubins and their
** manifest. The bytes go to a new file beside the path, renamed over it
** once written, so that a write that fails (a full disk) or a process that
** dies while writing leaves the file that was there as it was; a reader
** never sees half of one. */
#ifndef KT_OUTFILE_H
#define KT_OUTFILE_H

#include <limits.h>
#include <stdio.h>

typedef struct kt__outfile {
  FILE *f;             /* where to write, between open and commit or abort */
  char tmp[PATH_MAX];  /* the new file; "" where path itself is written, or the new file has no name yet */
  char dst[PATH_MAX];  /* what it becomes: path, or the file a link names */
  int unnamed;         /* the new file is named only at commit (O_TMPFILE) */
} kt__outfile;

/* Opens a new file beside path (beside the file it names, where path is a
** link), with the mode of the file it replaces, or 0666 less the umask: one
** with no name (O_TMPFILE), linked as "DST.ktune-tmp-PID-N" at commit, so
** that a process killed while writing leaves nothing; where the filesystem
** makes none, that name from the start. Where path is not a regular file
** (a device such as /dev/null, a pipe) or no file can be made beside it (a
** directory this user may not write to), path itself is opened, as
** fopen(path, "w") would.
** binary: "wb". 0, or an errno value (path cannot be written). */
int kt__out_open(kt__outfile *o, const char *path, int binary);

/* Closes the file and renames it over dst. 0, or an errno value, and then
** the new file is removed and dst is as it was. */
int kt__out_commit(kt__outfile *o);

/* Closes and removes the new file; dst is as it was. */
void kt__out_abort(kt__outfile *o);

/* Ends a write: kt__out_commit when written says every byte went out,
** else kt__out_abort. 0, or an errno value (the failed write's, else EIO). */
int kt__out_end(kt__outfile *o, int written);

#endif
