#include "base/clock.h"

#include <time.h>

double kt__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void kt__realtime_in(double ms, struct timespec *out) {
  if (!(ms > 0)) ms = 0;
  if (ms > 3.6e6) ms = 3.6e6;
  clock_gettime(CLOCK_REALTIME, out);
  long long ns = (long long)out->tv_nsec + (long long)(ms * 1e6);
  out->tv_sec += (time_t)(ns / 1000000000);
  out->tv_nsec = (long)(ns % 1000000000);
}
