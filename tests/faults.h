/* Fault injection for the CPU tests: SQLite's and cJSON's allocations go
** through the library's allocation hook (kt__alloc_fail_after), and a VFS
** wrapped around SQLite's default one fails the n-th read, write, sync or
** lock, so that error paths are tested, not hoped for. */
#ifndef KT_FAULTS_H
#define KT_FAULTS_H

/* Route SQLite's and cJSON's allocators through the hook and register the
** fault VFS as the default. Call once, before anything uses SQLite. */
void t_faults_install(void);

/* The n-th file operation (read, write, sync, lock) from now, 1-based,
** fails once with the matching SQLITE_IOERR; 0 turns it off. Returns how
** many operations were made since the last call. */
long t_io_fail_at(long n);

#endif
