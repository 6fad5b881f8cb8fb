/* A monotonic clock, for timing compiles, trials and tunings. */
#ifndef KT_CLOCK_H
#define KT_CLOCK_H

/* Milliseconds since an arbitrary point; never goes back. */
double kt__now_ms(void);

#endif
