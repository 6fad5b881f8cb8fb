/* A monotonic clock, for timing compiles, trials and tunings. */
#ifndef KT_CLOCK_H
#define KT_CLOCK_H

/* Milliseconds since an arbitrary point; never goes back. */
double kt__now_ms(void);

struct timespec;
/* The CLOCK_REALTIME time ms from now, as pthread_cond_timedwait takes it:
** ms below 0 (or NaN) is now, above an hour an hour (a waiter that loops
** until its own deadline waits again; infinity or days would overflow the
** nanoseconds). */
void kt__realtime_in(double ms, struct timespec *out);

#endif
