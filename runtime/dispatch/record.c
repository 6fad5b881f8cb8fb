/* Recording missed keys (kt_options.record_path, $KTUNE_RECORD): one line
** of a --shapes file per key the cache did not have, so that a job run
** once with recording can be pre-warmed offline with ktune tune --shapes.
** A line is written with one write() on a file opened for appending, so
** that lines of many processes never interleave; a process writes each
** line once. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "dispatch/handles.h"

/* The lines this process has written (their hashes, with the file's). */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *seen;
static size_t nseen, capseen;

/* 1 when h is new (and now remembered), 0 when written before, -1 when
** out of memory. */
static int first_time(uint64_t h) {
  int fresh = 1;
  pthread_mutex_lock(&seen_lock);
  for (size_t i = 0; i < nseen && fresh; i++) fresh = seen[i] != h;
  if (fresh && nseen == capseen) {
    size_t cap = capseen ? capseen * 2 : 64;
    uint64_t *s = kt__realloc(seen, cap * sizeof *s);
    if (s) seen = s, capseen = cap;
    else fresh = -1;
  }
  if (fresh == 1) seen[nseen++] = h;
  pthread_mutex_unlock(&seen_lock);
  return fresh;
}

/* An f32 in the fewest digits that read back as the same float (1e-05,
** not 9.9999997473787516e-06). */
static cJSON *float_item(cJSON *o, const char *name, float f) {
  char buf[32];
  if (!isfinite(f)) return cJSON_AddNumberToObject(o, name, (double)f);
  for (int digits = 6; digits <= 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
    if (strtof(buf, NULL) == f) break;
  }
  return cJSON_AddRawToObject(o, name, buf);
}

/* The call in the words of a --shapes line: scalars by value, each type
** variable by the dtype of its first pointer, absent pointers as null,
** pointers off a 256-byte boundary by their offset ("x@": 16). */
static cJSON *shape_line(const kt_kernel *k, const kt_arg *args) {
  const kt__spec *s = k->p.spec;
  cJSON *o = cJSON_CreateObject();
  int named[KT_MAX_PARAMS] = {0};
  if (!o || !cJSON_AddStringToObject(o, "kernel", s->name)) goto fail;
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *p = &s->params[i];
    const kt_arg *a = &args[i];
    char at[80];
    cJSON *v;
    if (p->type == KT__P_PTR) {
      if (p->tvar >= 0 && !named[p->tvar]) {
        named[p->tvar] = 1;
        const char *dt = kt_dtype_name(a->dtype);
        if (!dt || !cJSON_AddStringToObject(o, s->types[p->tvar].name, dt)) goto fail;
      }
      if (a->v.ptr && a->v.ptr % 256 == 0) continue;
      snprintf(at, sizeof at, "%s@", p->name);
      v = a->v.ptr ? cJSON_AddNumberToObject(o, at, (double)(a->v.ptr % 256)) : cJSON_AddNullToObject(o, p->name);
    } else if (p->type == KT__P_F32) {
      v = float_item(o, p->name, a->v.f32);
    } else {
      v = cJSON_AddNumberToObject(o, p->name, p->type == KT__P_I32 ? (double)a->v.i32 : (double)a->v.i64);
    }
    if (!v) goto fail;
  }
  return o;
fail:
  cJSON_Delete(o);
  return NULL;
}

void kt__record(kt_kernel *k, const kt_arg *args) {
  kt_runtime *rt = k->rt;
  cJSON *o = shape_line(k, args);
  char *text = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!text) {
    kt__log(&rt->env.log, KT_LOG_WARN, "%s: out of memory recording a missed key", k->p.spec->name);
    return;
  }
  size_t len = strlen(text);
  uint64_t h = XXH3_64bits_withSeed(text, len, XXH3_64bits(rt->record_path, strlen(rt->record_path)));
  int fresh = first_time(h);
  if (fresh == 1) {
    text[len] = '\n'; /* over the NUL: the line goes out in one write */
    /* O_NONBLOCK: a FIFO that nothing reads would hold this call for ever. */
    int fd = open(rt->record_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    ssize_t w = fd < 0 ? -1 : write(fd, text, len + 1);
    int e = errno;
    if (fd >= 0) close(fd);
    if (w != (ssize_t)(len + 1))
      kt__log(&rt->env.log, KT_LOG_WARN, "KTUNE_RECORD %s: a missed key of %s is not recorded: %s", rt->record_path,
              k->p.spec->name, w < 0 ? strerror(e) : "short write");
  }
  cJSON_free(text);
}
