/* Ranks agreeing on a key (kt_options.coord): the key's owner publishes
** what it settled, the others fetch it. A message is one JSON line, then
** the cubin's bytes when there is one:
**   {"config":{"BLOCK":128,"VEC":8},"cubin":N,"xxh128":"<32 hex>","lowered":"_Z..."}\n<N bytes>
**   {"error":"why the owner has no config"}
** The digest guards the bytes in transit; a message that fails any check
** is a failed exchange, never a config used. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "dispatch/handles.h"

#define FIRST_CAP ((size_t)256 << 10)
#define MSG_MAX ((size_t)256 << 20)

/* "ktune/<kernel>/<spec hash>/<device>/<key>": ranks on the same kind of
** GPU with the same spec meet under the same name, which COORD_NAME_MAX bytes
** hold whole (a cut one would let two long keys meet under one). */
#define COORD_NAME_MAX \
  (6 + KT_NAME_MAX + 1 + sizeof(((kt__prog *)0)->spec_hash) + sizeof(((kt__env *)0)->fingerprint) + KT_KEY_JSON_MAX)
static void key_name(const kt_kernel *k, const char *json, char *out, size_t n) {
  snprintf(out, n, "ktune/%s/%s/%s/%s", k->p.spec->name, k->p.spec_hash, k->rt->env.fingerprint, json);
}

static int owner_of(const kt_kernel *k, const char *json) {
  char name[COORD_NAME_MAX];
  key_name(k, json, name, sizeof name);
  return (int)(XXH3_64bits(name, strlen(name)) % (uint64_t)k->rt->coord.size);
}

int kt__coord_owns(const kt_kernel *k, const char *json) { return owner_of(k, json) == k->rt->coord.rank; }

int kt__coord_wait_ms(const kt_runtime *rt) {
  /* A timeout of days (or infinity: wait as long as it takes) would not
  ** fit fetch's int; INT_MAX ms is 24 days. */
  double ms = rt->coord.timeout_s * 1e3;
  return ms < (double)INT_MAX ? (int)ms : INT_MAX;
}

static void digest_hex(const void *bytes, size_t n, char out[33]) {
  XXH128_hash_t h = XXH3_128bits(bytes, n);
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

/* The header of cfg's message, with its variant's cubin when this process
** has it (*cubin NULL otherwise). Caller frees with cJSON_free. */
static char *config_header(kt_kernel *k, const kt__call *c, const int64_t *cfg, const void **cubin, size_t *size) {
  char json[KT_CONFIG_JSON_MAX], hex[33];
  const char *lowered = NULL;
  kt__call v = *c;
  kt__config_json(k->p.spec, cfg, json, sizeof json);
  cJSON *o = cJSON_CreateObject(), *conf = cJSON_Parse(json);
  *cubin = NULL;
  if (!kt__call_config(&k->p, &v, cfg) && !kt__variant_binary(&k->p, &v, cubin, size, &lowered)) {
    digest_hex(*cubin, *size, hex);
    if (!cJSON_AddNumberToObject(o, "cubin", (double)*size) || !cJSON_AddStringToObject(o, "xxh128", hex) ||
        !cJSON_AddStringToObject(o, "lowered", lowered))
      *cubin = NULL;
  }
  char *text = NULL;
  if (o && conf && cJSON_AddItemToObject(o, "config", conf)) {
    conf = NULL;
    if (*cubin || !cJSON_GetObjectItem(o, "cubin")) text = cJSON_PrintUnformatted(o);
  }
  cJSON_Delete(conf);
  cJSON_Delete(o);
  return text;
}

static char *error_header(const char *why) {
  cJSON *o = cJSON_CreateObject();
  char *text = o && cJSON_AddStringToObject(o, "error", why) ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return text;
}

/* The message under name: 0 with *msg (caller frees) and *len, 1 when it
** is not there within wait_ms, -1 when the fetch failed. */
static int fetch_all(kt_runtime *rt, const char *name, int wait_ms, char **msg, size_t *len) {
  size_t cap = FIRST_CAP;
  *msg = NULL;
  for (int round = 0; round < 2; round++) {
    char *buf = kt__malloc(cap + 1);
    if (!buf) return -1;
    *len = 0;
    kt__callback_enter(KT__CB_LOCKED);
    int rc = rt->coord.fetch(rt->coord.user, name, buf, cap, len, round ? 0 : wait_ms);
    kt__callback_leave(KT__CB_LOCKED);
    if (rc || *len <= cap) {
      if (rc) kt__free(buf);
      else buf[*len] = 0, *msg = buf;
      return rc == 0 ? 0 : rc == 1 ? 1 : -1;
    }
    kt__free(buf);
    if (*len > MSG_MAX) return -1;
    cap = *len;
  }
  return -1;
}

/* The config of a message, its cubin checked and adopted; -1 with why. */
static int read_message(kt_kernel *k, const kt__call *c, char *msg, size_t len, int64_t *cfg, char *why, size_t n) {
  char *nl = memchr(msg, '\n', len);
  cJSON *o = nl ? (*nl = 0, cJSON_Parse(msg)) : NULL;
  const cJSON *e = cJSON_GetObjectItem(o, "error"), *conf = cJSON_GetObjectItem(o, "config");
  const cJSON *size = cJSON_GetObjectItem(o, "cubin"), *hex = cJSON_GetObjectItem(o, "xxh128");
  const cJSON *lowered = cJSON_GetObjectItem(o, "lowered");
  char *text = cJSON_IsObject(conf) ? cJSON_PrintUnformatted(conf) : NULL;
  size_t body = nl ? len - (size_t)(nl + 1 - msg) : 0;
  char mine[33] = "";
  if (nl && size) digest_hex(nl + 1, body, mine);
  int rc = -1;
  if (cJSON_IsString(e)) snprintf(why, n, "its owner has no config: %s", e->valuestring);
  else if (!text) snprintf(why, n, "its owner's message is not one ktune reads");
  else if (!kt__call_config_valid(&k->p, c, text, cfg)) snprintf(why, n, "its owner's config %s does not fit here", text);
  else if (size && (!cJSON_IsNumber(size) || size->valuedouble != (double)body || !cJSON_IsString(hex) ||
                    strcmp(hex->valuestring, mine) || !cJSON_IsString(lowered)))
    snprintf(why, n, "its owner's cubin arrived damaged (%zu bytes)", body);
  else rc = 0;
  kt__call v = *c;
  if (!rc && size && !kt__call_config(&k->p, &v, cfg) &&
      kt__variant_adopt(&k->p, &v, nl + 1, body, lowered->valuestring))
    kt__log(&k->rt->env.log, KT_LOG_WARN, "%s", kt__errmsg(k->rt->env.id));
  cJSON_free(text);
  cJSON_Delete(o);
  return rc;
}

int kt__coord_publish(kt_kernel *k, const kt__call *c, const char *json, const int64_t *cfg, const char *why,
                      int64_t *took) {
  kt_runtime *rt = k->rt;
  const void *cubin = NULL;
  size_t size = 0;
  char name[COORD_NAME_MAX];
  char *head = cfg ? config_header(k, c, cfg, &cubin, &size) : error_header(why);
  size_t hlen = head ? strlen(head) : 0, total = hlen + 1 + (cubin ? size : 0);
  char *msg = head ? kt__malloc(total) : NULL;
  key_name(k, json, name, sizeof name);
  if (msg) {
    memcpy(msg, head, hlen);
    msg[hlen] = '\n';
    if (cubin) memcpy(msg + hlen + 1, cubin, size);
  }
  int built = msg != NULL, follows = 0;
  int rc = -1;
  if (built) {
    kt__callback_enter(KT__CB_LOCKED);
    rc = rt->coord.publish(rt->coord.user, name, msg, total);
    kt__callback_leave(KT__CB_LOCKED);
  }
  kt__free(msg);
  cJSON_free(head);
  /* Refused: another runtime of this rank may have settled the key first;
  ** the message the name holds says. */
  char ignored[KT_ERRMAX];
  if (rc && cfg && built && !kt__coord_fetch(k, c, json, 0, took, ignored, sizeof ignored)) {
    /* The store holds this very config (whatever it said): published. */
    if (!memcmp(took, cfg, (size_t)k->p.spec->ncfields * sizeof *cfg)) rc = 0;
    else follows = 1;
  }
  if (!rc) {
    atomic_fetch_add_explicit(&rt->env.n.published, 1, memory_order_relaxed);
  } else if (follows) {
    /* The name was taken between this rank's look and its publish: the
    ** ranks already follow that message, so this runtime does too. */
    char mine[KT_CONFIG_JSON_MAX], theirs[KT_CONFIG_JSON_MAX];
    kt__config_json(k->p.spec, cfg, mine, sizeof mine);
    kt__config_json(k->p.spec, took, theirs, sizeof theirs);
    kt__log(&rt->env.log, KT_LOG_INFO, "%s %s: another runtime of this rank published %s first; it replaces %s here",
            k->p.spec->name, json, theirs, mine);
    atomic_fetch_add_explicit(&rt->env.n.followed, 1, memory_order_relaxed);
  } else {
    kt__log(&rt->env.log, KT_LOG_WARN, "%s %s: the other ranks are not told this rank's %s (%s); they use a fallback",
            k->p.spec->name, json, cfg ? "config" : "failure", built ? "publish failed" : "out of memory");
    atomic_fetch_add_explicit(&rt->env.n.coord_failed, 1, memory_order_relaxed);
  }
  return follows;
}

int kt__coord_fetch(kt_kernel *k, const kt__call *c, const char *json, int wait_ms, int64_t *cfg, char *why,
                    size_t n) {
  kt_runtime *rt = k->rt;
  char name[COORD_NAME_MAX], *msg;
  size_t len;
  key_name(k, json, name, sizeof name);
  int rc = fetch_all(rt, name, wait_ms, &msg, &len);
  if (rc == 1) snprintf(why, n, "rank %d, its owner, sent nothing within %g s", owner_of(k, json), rt->coord.timeout_s);
  if (rc < 0) snprintf(why, n, "fetching its owner's config failed (rank %d)", owner_of(k, json));
  if (rc) return rc;
  rc = read_message(k, c, msg, len, cfg, why, n);
  kt__free(msg);
  return rc;
}
