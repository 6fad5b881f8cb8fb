#include "shape.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct item {
  char name[KT_NAME_MAX + 1], value[64];
  int used;
} item;

/* [*s, *e) without the spaces and tabs around it (N=1, D=256 as people
** write it: no name or value holds one). */
static void trim(const char **s, const char **e) {
  while (*s < *e && (**s == ' ' || **s == '\t')) ++*s;
  while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t')) --*e;
}

static int parse(const char *shape, item *it, int max, char *err, size_t errlen) {
  int n = 0;
  const char *p = shape;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *eq = memchr(p, '=', len), *at = memchr(p, '@', len);
    const char *sep = eq ? eq : at, *ns = p, *ne = p, *vs = p, *ve = p;
    if (sep) ne = sep, vs = sep + 1, ve = p + len, trim(&ns, &ne), trim(&vs, &ve);
    if (ns == ne || n == max || (size_t)(ne - ns) >= sizeof it->name ||
        (size_t)(ve - vs) + (sep == at) >= sizeof it->value) {
      snprintf(err, errlen, "expected NAME=VALUE or NAME@BYTES items separated by commas");
      return -1;
    }
    snprintf(it[n].name, sizeof it[n].name, "%.*s", (int)(ne - ns), ns);
    for (int i = 0; i < n; i++)
      if (!strcmp(it[i].name, it[n].name)) {
        /* The first would be taken and the second named as no param. */
        snprintf(err, errlen, "%s is given twice", it[n].name);
        return -1;
      }
    snprintf(it[n].value, sizeof it[n].value, "%s%.*s", sep == at ? "@" : "", (int)(ve - vs), vs);
    it[n].used = 0;
    n++;
    p += len;
    if (*p == ',') p++;
  }
  return n;
}

/* "f32, f16, bf16, ...": every dtype's name. */
static const char *dtype_list(void) {
  static char list[256];
  size_t u = 0;
  for (int t = 1; kt_dtype_name((kt_dtype)t) && u < sizeof list; t++)
    u += (size_t)snprintf(list + u, sizeof list - u, "%s%s", t > 1 ? ", " : "", kt_dtype_name((kt_dtype)t));
  return list;
}

static item *find(item *it, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(it[i].name, name)) {
      it[i].used = 1;
      return &it[i];
    }
  return NULL;
}

/* A scalar's text as its param's type: a finite f32, or a whole number in
** the range of i32 or i64 (never wrapped: 4294967552 is no i32). */
static int scalar(const kt_param_info *p, const char *val, kt_arg *a) {
  char *end;
  errno = 0;
  if (p->kind == KT_ARG_F32) {
    float f = strtof(val, &end);
    *a = kt_arg_f32(f);
    return end == val || *end || !isfinite(f);
  }
  long long x = strtoll(val, &end, 10);
  if (end == val || *end || errno == ERANGE) return -1;
  if (p->kind == KT_ARG_I64) {
    *a = kt_arg_i64(x);
    return 0;
  }
  *a = kt_arg_i32((int32_t)x);
  return x < INT32_MIN || x > INT32_MAX;
}

int shape_args(kt_kernel *k, const char *shape, kt_arg *args, char *err, size_t errlen) {
  item it[64];
  char missing[2 * KT_NAME_MAX + 64] = ""; /* the first value not given */
  int n = parse(shape, it, 64, err, errlen);
  if (n < 0) return -1;
  for (int i = 0; i < kt_kernel_nparams(k); i++) {
    kt_param_info p = {.size = sizeof p};
    if (kt_kernel_param(k, i, &p)) return snprintf(err, errlen, "param %d of the spec cannot be read", i), -1;
    item *v = find(it, n, p.name);
    if (p.kind == KT_ARG_PTR) {
      kt_dtype dt;
      if (kt_dtype_parse(p.dtype, &dt)) {
        item *tv = find(it, n, p.dtype);
        if (!tv) tv = find(it, n, "dtype");
        if (tv && kt_dtype_parse(tv->value, &dt)) {
          snprintf(err, errlen, "%s=%s: %s is not a dtype (%s)", tv->name, tv->value, tv->value, dtype_list());
          return -1;
        }
        if (!tv) {
          if (!missing[0])
            snprintf(missing, sizeof missing, "give the dtype of %s as %s=bf16 (or dtype=...)", p.name, p.dtype);
          continue;
        }
      }
      /* Made-up addresses 64 TiB apart: no two params' ranges overlap,
      ** however long the call (kt_kernel_tune_shape reads none of them). */
      uint64_t addr = 0x7f0000000000ULL + (uint64_t)i * (1ULL << 46);
      char *end;
      if (v && !strcmp(v->value, "null")) {
        addr = 0;
      } else if (v && v->value[0] == '@' && v->value[1] >= '0' && v->value[1] <= '9' &&
                 strtoull(v->value + 1, &end, 10) < 4096 && !*end) {
        addr += strtoull(v->value + 1, NULL, 10);
      } else if (v) {
        snprintf(err, errlen, "pointer %s takes =null or @BYTES (an offset below 4096)", p.name);
        return -1;
      }
      args[i] = kt_arg_ptr(addr, dt);
      continue;
    }
    if (!v && strcmp(p.key, "ignore")) {
      if (!missing[0]) snprintf(missing, sizeof missing, "%s is in the tuning key; give its value", p.name);
      continue;
    }
    /* Unnamed scalars take the spec's init when it is a number. */
    char *iend;
    const char *val = v ? v->value : (p.kind == KT_ARG_F32 ? "0" : "1");
    if (!v && p.init[0] && (strtod(p.init, &iend), !*iend)) val = p.init;
    if (scalar(&p, val, &args[i])) {
      static const char *const want[] = {[KT_ARG_I32] = "an i32 (a whole number from -2147483648 to 2147483647)",
                                         [KT_ARG_I64] = "an i64 (a whole number that fits in 64 bits)",
                                         [KT_ARG_F32] = "a finite f32"};
      snprintf(err, errlen, "%s=%s is not %s", p.name, val, want[p.kind]);
      return -1;
    }
  }
  /* A name the spec lacks first: most often it is the value said missing,
  ** misspelt. */
  for (int i = 0; i < n; i++)
    if (!it[i].used && strcmp(it[i].name, "dtype")) {
      snprintf(err, errlen, "%s is not a param or type variable of %s", it[i].name, kt_kernel_name(k));
      return -1;
    }
  if (missing[0]) return snprintf(err, errlen, "%s", missing), -1;
  return 0;
}

/* Whether s may stand in a shape as a name or a value: a shape's item is
** NAME=VALUE or NAME@BYTES, items split at commas. */
static int plain(const char *s) { return *s && !strpbrk(s, ",=@ \t\n"); }

/* One member of a --shapes line as a shape's item in item (n bytes);
** 0, or -1 with the reason in err. Numbers are written so that shape_args
** reads the same value: whole ones that fit 64 bits as such, others as
** %.17g, which an int param then refuses. */
static int json_item(const cJSON *it, char *item, size_t n, char *err, size_t errlen) {
  const char *name = it->string;
  size_t len = strlen(name);
  int off = len && name[len - 1] == '@', w;
  double v = it->valuedouble;
  if (!len || (off && len == 1) || strpbrk(name, ",= \t\n") || strchr(name, '@') != (off ? name + len - 1 : NULL))
    return snprintf(err, errlen, "\"%.40s\": not a param name", name), -1;
  if (off) {
    if (!cJSON_IsNumber(it) || !(v >= 0 && v < 4096) || v != (double)(int)v)
      return snprintf(err, errlen, "\"%.40s\" must be a byte offset (a whole number from 0 to 4095)", name), -1;
    w = snprintf(item, n, "%.*s@%d", (int)(len - 1), name, (int)v);
  } else if (cJSON_IsNull(it)) {
    w = snprintf(item, n, "%s=null", name);
  } else if (cJSON_IsString(it)) {
    if (!plain(it->valuestring))
      return snprintf(err, errlen, "\"%.40s\": \"%.40s\" is not a dtype name", name, it->valuestring), -1;
    w = snprintf(item, n, "%s=%s", name, it->valuestring);
  } else if (cJSON_IsNumber(it)) {
    if (v >= -9223372036854775808.0 && v < 9223372036854775808.0 && v == (double)(long long)v)
      w = snprintf(item, n, "%s=%lld", name, (long long)v);
    else w = snprintf(item, n, "%s=%.17g", name, v);
  } else {
    return snprintf(err, errlen, "\"%.40s\": expected a number, a dtype string or null", name), -1;
  }
  if (w < 0 || (size_t)w >= n) return snprintf(err, errlen, "\"%.*s...\": too long for a shape's item", 16, name), -1;
  return 0;
}

int shape_from_json(const char *line, char *shape, size_t n, char *kernel, size_t kn, char *err,
                    size_t errlen) {
  cJSON *j = cJSON_ParseWithOpts(line, NULL, 1); /* nothing but space after the object */
  kernel[0] = shape[0] = 0;
  if (!j || !cJSON_IsObject(j)) {
    snprintf(err, errlen, "expected a JSON object per line");
    cJSON_Delete(j);
    return -1;
  }
  size_t used = 0;
  int rc = 0;
  for (const cJSON *it = j->child; it && !rc; it = it->next) {
    char item[KT_NAME_MAX + 256];
    if (!strcmp(it->string, "kernel")) {
      if (!cJSON_IsString(it) || strlen(it->valuestring) >= kn) {
        snprintf(err, errlen, "\"kernel\" must be a string of at most %zu characters", kn - 1);
        rc = -1;
      } else {
        snprintf(kernel, kn, "%s", it->valuestring);
      }
    } else if (!(rc = json_item(it, item, sizeof item, err, errlen))) {
      used += (size_t)snprintf(shape + used, used < n ? n - used : 0, "%s%s", used ? "," : "", item);
    }
  }
  cJSON_Delete(j);
  if (!rc && used >= n) {
    snprintf(err, errlen, "shape too long");
    rc = -1;
  }
  return rc;
}
