/* Ranks agreeing on tunings (kt_options.coord), with threads as ranks and
** an in-process key-value store as the job's distributed engine: the owner
** of each key settles it and every rank uses its config (and its cubin);
** keys spread over owners; a silent owner, a failing exchange and damaged
** messages end in a fallback with a warning, never a hang. No device: a
** rank settles a key from its cache or with the default. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "cache/store.h"
#include "dispatch/handles.h"
#include "harness.h"
#include "ktune.h"

#define ARGS(d)                                                                                                   \
  {kt_arg_ptr(1 << 24, KT_BF16), kt_arg_ptr(2 << 24, KT_BF16), kt_arg_ptr(0, KT_BF16), kt_arg_ptr(3 << 24, KT_BF16), \
   kt_arg_i32(64), kt_arg_i32(d), kt_arg_f32(1e-6f)}
#define SPEC "tests/specs/small.json"
#define MAXR 4
#define NKEYS 8

/* The job's key-value store: what a torch.distributed store does. */
typedef struct kv {
  pthread_mutex_t lock;
  pthread_cond_t put;
  char *name[64], *val[64];
  size_t len[64];
  int n;
} kv;

typedef struct rank {
  kv *store;
  int fail_publish, fail_fetch;
  int blind;    /* fetches that find nothing however long they wait */
  int lies;     /* publish stores the message, then says it failed */
  int fetches, refused;
  int last_wait_ms; /* the timeout of the last fetch */
} rank;

/* Keeps a name's first message, as kt_coordinator asks: the same bytes
** again are done, other bytes refused. */
static int kv_publish(void *user, const char *name, const void *bytes, size_t len) {
  rank *r = user;
  if (r->fail_publish) return -1;
  kv *s = r->store;
  pthread_mutex_lock(&s->lock);
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->name[i], name)) {
      int same = s->len[i] == len && !memcmp(s->val[i], bytes, len);
      r->refused += !same;
      pthread_mutex_unlock(&s->lock);
      return same ? 0 : -1;
    }
  s->name[s->n] = strdup(name);
  s->val[s->n] = malloc(len);
  memcpy(s->val[s->n], bytes, len);
  s->len[s->n++] = len;
  pthread_cond_broadcast(&s->put);
  pthread_mutex_unlock(&s->lock);
  return r->lies ? -1 : 0;
}

static int kv_fetch(void *user, const char *name, void *buf, size_t cap, size_t *len, int timeout_ms) {
  rank *r = user;
  kv *s = r->store;
  r->fetches++;
  r->last_wait_ms = timeout_ms;
  if (r->fail_fetch) return -1;
  if (r->blind > 0 && r->blind--) return 1;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  long long ns = until.tv_nsec + (long long)timeout_ms * 1000000;
  until.tv_sec += (time_t)(ns / 1000000000);
  until.tv_nsec = (long)(ns % 1000000000);
  pthread_mutex_lock(&s->lock);
  for (;;) {
    for (int i = 0; i < s->n; i++)
      if (!strcmp(s->name[i], name)) {
        *len = s->len[i];
        memcpy(buf, s->val[i], s->len[i] < cap ? s->len[i] : cap);
        pthread_mutex_unlock(&s->lock);
        return 0;
      }
    if (pthread_cond_timedwait(&s->put, &s->lock, &until)) break;
  }
  pthread_mutex_unlock(&s->lock);
  return 1;
}

static void kv_init(kv *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->put, NULL);
}

static void kv_free(kv *s) {
  for (int i = 0; i < s->n; i++) free(s->name[i]), free(s->val[i]);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->put);
}

static char logged[MAXR][2048];
static void log_into(void *user, kt_log_level level, const char *msg) {
  (void)level;
  char *l = user;
  size_t u = strlen(l);
  snprintf(l + u, 2048 - u, "%s\n", msg);
}

/* Rank r of size, caching in dir/r.db, coordinated through s. */
static kt_runtime *open_rank(const char *dir, rank *r, int id, int size, double timeout_s) {
  kt_options o;
  char path[512];
  t_offline_options(&o);
  snprintf(path, sizeof path, "%s/%d.db", dir, id);
  o.cache_path = path;
  o.log = log_into;
  o.log_user = logged[id];
  o.log_level = KT_LOG_WARN;
  o.coord = (kt_coordinator){.rank = id, .size = size, .timeout_s = timeout_s, .user = r,
                             .publish = kv_publish, .fetch = kv_fetch};
  logged[id][0] = 0;
  return t_open(&o);
}

/* A cache row for D in rank rt's cache: each rank has its own config. */
static int seed(kt_runtime *rt, kt_kernel *k, int d, const char *config) {
  kt_arg a[] = ARGS(d);
  char key[512], err[KT_ERRMAX];
  if (kt_kernel_key(k, a, 7, key, sizeof key)) return -1;
  kt__cfgrow row = {.kernel = kt_kernel_name(k), .spec_hash = kt_kernel_spec_hash(k), .device = rt->env.fingerprint,
                    .key = key, .config = config, .time_us = 5, .candidates = 4, .rejected = 0,
                    .nvrtc_version = "13000", .driver_version = "0"};
  return kt__store_put_config(rt->env.store, &row, NULL, err, sizeof err);
}

static const char *const own_config[MAXR] = {"{\"BLOCK\":128,\"ROWS\":1,\"VEC\":1}", "{\"BLOCK\":128,\"ROWS\":1,\"VEC\":8}",
                                              "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":8}", "{\"BLOCK\":128,\"ROWS\":4,\"VEC\":1}"};
static const char *const own_text[MAXR] = {"BLOCK=128,ROWS=1,VEC=1", "BLOCK=128,ROWS=1,VEC=8", "BLOCK=128,ROWS=4,VEC=8",
                                           "BLOCK=128,ROWS=4,VEC=1"};

typedef struct job {
  kt_runtime *rt;
  int d[NKEYS], nd;
  char got[NKEYS][64];
  kt_status st[NKEYS];
  kt_stats stats;
} job;

static void *run_rank(void *arg) {
  job *j = arg;
  kt_kernel *k;
  if (kt_kernel_load(j->rt, SPEC, &k)) return NULL;
  for (int i = 0; i < j->nd; i++) {
    kt_arg a[] = ARGS(j->d[i]);
    j->st[i] = kt_kernel_config_for(k, a, 7, j->got[i], sizeof j->got[i]);
  }
  j->stats.size = sizeof j->stats;
  kt_runtime_stats(j->rt, &j->stats);
  return NULL;
}

static int owner_of(kt_runtime *rt, int d) {
  kt_kernel *k;
  kt_arg a[] = ARGS(d);
  char key[512];
  if (kt_kernel_load(rt, SPEC, &k) || kt_kernel_key(k, a, 7, key, sizeof key)) return -1;
  for (int r = 0; r < rt->coord.size; r++) {
    kt_coordinator c = rt->coord;
    rt->coord.rank = r;
    int mine = kt__coord_owns(k, key);
    rt->coord = c;
    if (mine) return r;
  }
  return -1;
}

/* Three ranks, eight keys, each rank's cache with a config of its own for
** every key: every rank ends with the owner's config of each key, every
** key published once, and more than one rank owns keys. */
static void ranks_launch_what_each_keys_owner_settled(void) {
  const char *dir = t_tmpdir();
  enum { R = 3 };
  kv s;
  kv_init(&s);
  rank rk[R] = {{.store = &s}, {.store = &s}, {.store = &s}};
  job jb[R];
  pthread_t th[R];
  int owners[NKEYS], distinct = 0, seen[R] = {0};
  for (int r = 0; r < R; r++) {
    memset(&jb[r], 0, sizeof jb[r]);
    ASSERT_TRUE((jb[r].rt = open_rank(dir, &rk[r], r, R, 30)));
    kt_kernel *k;
    ASSERT_STATUS(kt_kernel_load(jb[r].rt, SPEC, &k), KT_OK);
    for (int i = 0; i < NKEYS; i++) {
      jb[r].d[i] = 64 * (i + 1);
      ASSERT_EQ(seed(jb[r].rt, k, jb[r].d[i], own_config[r]), 0);
    }
    jb[r].nd = NKEYS;
  }
  for (int i = 0; i < NKEYS; i++) {
    owners[i] = owner_of(jb[0].rt, 64 * (i + 1));
    ASSERT_TRUE(owners[i] >= 0);
    distinct += !seen[owners[i]]++;
  }
  for (int r = 0; r < R; r++) pthread_create(&th[r], NULL, run_rank, &jb[r]);
  for (int r = 0; r < R; r++) pthread_join(th[r], NULL);
  long published = 0;
  for (int r = 0; r < R; r++) {
    for (int i = 0; i < NKEYS; i++) {
      ASSERT_STATUS(jb[r].st[i], KT_OK);
      ASSERT_STR_EQ(jb[r].got[i], own_text[owners[i]]);
    }
    published += (long)jb[r].stats.published;
    ASSERT_EQ(jb[r].stats.followed + jb[r].stats.published, NKEYS);
    ASSERT_EQ(jb[r].stats.coord_failed, 0);
    ASSERT_STR_EQ(logged[r], "");
    kt_runtime_close(jb[r].rt);
  }
  ASSERT_EQ(published, NKEYS);
  ASSERT_EQ(s.n, NKEYS);
  ASSERT_TRUE(distinct >= 2);
  kv_free(&s);
}

/* A key at the bounds (32 fields named with 64 characters, over 2700
** bytes): ranks meet under a name that holds it whole, where 1600 bytes cut
** it and let two keys alike in their first part meet under one name. */
static void long_keys_meet_under_whole_names(void) {
  const char *dir = t_tmpdir();
  char spec[512];
  ASSERT_EQ(t_bounds_spec(dir, spec, sizeof spec), 0);
  kv s;
  kv_init(&s);
  rank rk = {.store = &s};
  kt_runtime *rt = open_rank(dir, &rk, 0, 2, 1);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, spec, &k), KT_OK);
  static char key[KT_KEY_MAX], cfg[KT_CONFIG_MAX], want[KT_KEY_MAX + 512];
  kt_arg a[32];
  for (int i = 0; i < 32; i++) a[i] = kt_arg_i64(INT64_MIN);
  /* The last param's value picks a key that rank 0 owns (with cut names,
  ** every value had the same owner). */
  int v = 0;
  for (; v < 64; v++) {
    a[31] = kt_arg_i64(v);
    ASSERT_STATUS(kt_kernel_key(k, a, 32, key, sizeof key), KT_OK);
    if (kt__coord_owns(k, key)) break;
  }
  ASSERT_TRUE(v < 64);
  ASSERT_STATUS(kt_kernel_config_for(k, a, 32, cfg, sizeof cfg), KT_OK);
  ASSERT_EQ(s.n, 1);
  snprintf(want, sizeof want, "ktune/%s/%s/%s/%s", kt_kernel_name(k), kt_kernel_spec_hash(k), rt->env.fingerprint,
           key);
  ASSERT_TRUE(strlen(key) > 2700);
  ASSERT_STR_EQ(s.name[0], want);
  kt_runtime_close(rt);
  kv_free(&s);
}

/* A key of rank 1 asked by rank 0 alone: rank 0 waits timeout_s, then uses
** its cached config (or the default), says so, and never asks again. */
static void a_silent_owner_ends_in_a_fallback(void) {
  kv s;
  kv_init(&s);
  rank rk = {.store = &s};
  kt_runtime *rt = open_rank(t_tmpdir(), &rk, 0, 2, 0.2);
  ASSERT_TRUE(rt);
  int d = 64;
  while (owner_of(rt, d) != 1) d += 64;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, SPEC, &k), KT_OK);
  ASSERT_EQ(seed(rt, k, d, own_config[2]), 0);
  kt_arg a[] = ARGS(d), b[] = ARGS(d + 2048);
  while (owner_of(rt, b[5].v.i32) != 1) b[5].v.i32 += 64;
  char cfg[64], key[512], want[1200];
  ASSERT_STATUS(kt_kernel_config_for(k, a, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(cfg, own_text[2]);
  ASSERT_STATUS(kt_kernel_key(k, a, 7, key, sizeof key), KT_OK);
  snprintf(want, sizeof want, "rmsnorm_small %s: rank 1, its owner, sent nothing within 0.2 s; the cached config is used\n",
           key);
  ASSERT_STR_EQ(logged[0], want);
  ASSERT_STATUS(kt_kernel_config_for(k, a, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_EQ(rk.fetches, 1);
  ASSERT_STATUS(kt_kernel_config_for(k, b, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(cfg, "BLOCK=128,ROWS=4,VEC=1"); /* the spec's default */
  ASSERT_CONTAINS(logged[0], "sent nothing within 0.2 s; the default config is used\n");
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(rt, &st);
  ASSERT_EQ(st.coord_failed, 2);
  ASSERT_EQ(st.followed, 0);
  kt_runtime_close(rt);
  kv_free(&s);
}

/* Two runtimes of one rank (a process driving two GPUs of one model, as a
** JAX host does), each with a config of its own in its cache, over a store
** that keeps a name's first message (JAX's refuses a second): the first to
** miss a key this rank owns settles and publishes it, the second follows
** that message. One message a key, one config in both, no warning. With
** race, both miss the key at once: the second looks before the first has
** published (here its look finds nothing) and settles the key with its own
** config, but the store refuses its publish; it then follows the message
** there, counted as followed, and later calls launch that config without
** asking the store. */
static void two_runtimes_of_one_rank(int race) {
  const char *dir = t_tmpdir();
  kv s;
  kv_init(&s);
  rank rk[2] = {{.store = &s}, {.store = &s, .blind = race}};
  kt_runtime *rt[2];
  kt_kernel *k[2];
  char sub[2][600];
  int d = 64;
  for (int i = 0; i < 2; i++) {
    snprintf(sub[i], sizeof sub[i], "%s/gpu%d", dir, i);
    ASSERT_EQ(mkdir(sub[i], 0700), 0);
    ASSERT_TRUE((rt[i] = open_rank(sub[i], &rk[i], 0, 2, 5)));
    ASSERT_STATUS(kt_kernel_load(rt[i], SPEC, &k[i]), KT_OK);
  }
  while (owner_of(rt[0], d) != 0) d += 64;
  for (int i = 0; i < 2; i++) ASSERT_EQ(seed(rt[i], k[i], d, own_config[i + 1]), 0);
  kt_arg a[] = ARGS(d);
  char cfg[2][64];
  for (int i = 0; i < 3; i++) { /* the third: runtime 1 again */
    ASSERT_STATUS(kt_kernel_config_for(k[i % 2], a, 7, cfg[i % 2], sizeof cfg[i % 2]), KT_OK);
    ASSERT_STR_EQ(cfg[i % 2], own_text[1]);
  }
  ASSERT_EQ(rk[1].blind, 0);
  ASSERT_EQ(rk[1].refused, race);
  ASSERT_EQ(rk[1].fetches, race ? 2 : 1);
  kt_stats st[2] = {{.size = sizeof st[0]}, {.size = sizeof st[1]}};
  for (int i = 0; i < 2; i++) kt_runtime_stats(rt[i], &st[i]);
  ASSERT_EQ(st[0].published, 1);
  ASSERT_EQ(st[0].followed, 0);
  ASSERT_EQ(st[1].published, 0);
  ASSERT_EQ(st[1].followed, 1);
  ASSERT_EQ(st[0].coord_failed + st[1].coord_failed, 0);
  ASSERT_EQ(s.n, 1);
  ASSERT_STR_EQ(logged[0], "");
  ASSERT_STR_EQ(logged[1], "");
  for (int i = 0; i < 2; i++) kt_runtime_close(rt[i]);
  kv_free(&s);
}

static void runtimes_of_one_rank_run_the_first_ones_config(void) { two_runtimes_of_one_rank(0); }
static void runtimes_of_one_rank_that_race_follow_the_first_message(void) { two_runtimes_of_one_rank(1); }

/* A store that keeps the owner's message but says the publish failed:
** the owner finds its own config there, counts it as published and warns
** of nothing. */
static void a_publish_the_store_kept_counts_whatever_it_said(void) {
  kv s;
  kv_init(&s);
  rank rk = {.store = &s, .lies = 1};
  kt_runtime *rt = open_rank(t_tmpdir(), &rk, 0, 2, 5);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, SPEC, &k), KT_OK);
  int d = 64;
  while (owner_of(rt, d) != 0) d += 64;
  kt_arg a[] = ARGS(d);
  char cfg[64];
  ASSERT_STATUS(kt_kernel_config_for(k, a, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(cfg, "BLOCK=128,ROWS=4,VEC=1");
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(rt, &st);
  ASSERT_EQ(st.published * 100 + st.followed * 10 + st.coord_failed, 100);
  ASSERT_EQ(s.n, 1);
  ASSERT_STR_EQ(logged[0], "");
  kt_runtime_close(rt);
  kv_free(&s);
}

/* A follower whose timeout does not fit fetch's milliseconds (infinity,
** or a year) waits INT_MAX ms, 24 days, for its owner; here the owner has
** published, so the call returns at once with its config. */
static void timeouts_past_int_max_ms_are_cut(void) {
  const char *dir = t_tmpdir();
  static const double timeouts[] = {INFINITY, 3.2e7, 2.1e6};
  static const int want[] = {INT_MAX, INT_MAX, 2100000000};
  kv s;
  kv_init(&s);
  rank rk[2] = {{.store = &s}, {.store = &s}};
  for (int t = 0; t < 3; t++) {
    char sub[2][600];
    kt_runtime *rt[2];
    kt_kernel *k[2];
    for (int r = 0; r < 2; r++) {
      snprintf(sub[r], sizeof sub[r], "%s/t%d-%d", dir, t, r);
      ASSERT_EQ(mkdir(sub[r], 0700), 0);
      ASSERT_TRUE((rt[r] = open_rank(sub[r], &rk[r], r, 2, timeouts[t])));
      ASSERT_STATUS(kt_kernel_load(rt[r], SPEC, &k[r]), KT_OK);
    }
    int d = 64 * (t + 1);
    while (owner_of(rt[0], d) != 0) d += 256;
    kt_arg a[] = ARGS(d);
    char cfg[2][64];
    for (int r = 0; r < 2; r++) ASSERT_STATUS(kt_kernel_config_for(k[r], a, 7, cfg[r], sizeof cfg[r]), KT_OK);
    ASSERT_STR_EQ(cfg[1], cfg[0]);
    ASSERT_EQ(rk[1].last_wait_ms, want[t]);
    for (int r = 0; r < 2; r++) kt_runtime_close(rt[r]);
  }
  kv_free(&s);
}

/* Publish what a message would be, as a broken or hostile owner might. */
static void put(kv *s, kt_runtime *rt, kt_kernel *k, int d, const char *msg, size_t len) {
  kt_arg a[] = ARGS(d);
  char key[512], name[1600];
  kt_kernel_key(k, a, 7, key, sizeof key);
  snprintf(name, sizeof name, "ktune/%s/%s/%s/%s", kt_kernel_name(k), kt_kernel_spec_hash(k), rt->env.fingerprint, key);
  rank w = {.store = s};
  kv_publish(&w, name, msg, len);
}

/* What a follower refuses: the owner's failure, a config outside the space,
** a message that is not ktune's, a cubin whose digest fails; and a rank
** whose own exchange fails. Each is the default config with a warning
** saying which. An owner whose publish fails says so too. */
static void failed_exchanges_are_named(void) {
  kv s;
  kv_init(&s);
  rank rk = {.store = &s};
  kt_runtime *rt = open_rank(t_tmpdir(), &rk, 0, 2, 5);
  ASSERT_TRUE(rt);
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, SPEC, &k), KT_OK);
  static const struct {
    const char *msg, *says;
  } cases[] = {
      {"{\"error\":\"every candidate was rejected\"}\n", "its owner has no config: every candidate was rejected"},
      {"{\"config\":{\"BLOCK\":256,\"ROWS\":1,\"VEC\":1}}\n", "its owner's config {\"BLOCK\":256,\"ROWS\":1,\"VEC\":1} does not fit here"},
      {"hello", "its owner's message is not one ktune reads"},
      {"{\"config\":{\"BLOCK\":128,\"ROWS\":1,\"VEC\":1},\"cubin\":5,\"xxh128\":\"00000000000000000000000000000000\","
       "\"lowered\":\"f\"}\nabcde",
       "its owner's cubin arrived damaged (5 bytes)"},
  };
  int d = 64;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, d += 64) {
    while (owner_of(rt, d) != 1) d += 64;
    put(&s, rt, k, d, cases[i].msg, strlen(cases[i].msg));
    kt_arg a[] = ARGS(d);
    char cfg[64];
    logged[0][0] = 0;
    ASSERT_STATUS(kt_kernel_config_for(k, a, 7, cfg, sizeof cfg), KT_OK);
    ASSERT_STR_EQ(cfg, "BLOCK=128,ROWS=4,VEC=1");
    ASSERT_CONTAINS(logged[0], cases[i].says);
    ASSERT_CONTAINS(logged[0], "; the default config is used\n");
  }
  rk.fail_fetch = 1;
  while (owner_of(rt, d) != 1) d += 64;
  kt_arg a[] = ARGS(d);
  char cfg[64];
  logged[0][0] = 0;
  ASSERT_STATUS(kt_kernel_config_for(k, a, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_CONTAINS(logged[0], "fetching its owner's config failed (rank 1); the default config is used\n");
  rk.fail_publish = 1;
  for (d += 64; owner_of(rt, d) != 0;) d += 64;
  kt_arg b[] = ARGS(d);
  logged[0][0] = 0;
  ASSERT_STATUS(kt_kernel_config_for(k, b, 7, cfg, sizeof cfg), KT_OK);
  ASSERT_CONTAINS(logged[0], "the other ranks are not told this rank's config (publish failed); they use a fallback\n");
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(rt, &st);
  ASSERT_EQ(st.coord_failed, 6);
  kt_runtime_close(rt);
  kv_free(&s);
}

/* The owner has compiled the variant of its config: the follower loads
** the very same cubin instead of compiling one. */
static void the_owners_cubin_travels(void) {
  const char *dir = t_tmpdir();
  kv s;
  kv_init(&s);
  rank rk[2] = {{.store = &s}, {.store = &s}};
  kt_runtime *rt[2];
  kt_kernel *k[2];
  for (int r = 0; r < 2; r++) {
    ASSERT_TRUE((rt[r] = open_rank(dir, &rk[r], r, 2, 30)));
    ASSERT_STATUS(kt_kernel_load(rt[r], SPEC, &k[r]), KT_OK);
  }
  int d = 64;
  while (owner_of(rt[0], d) != 0) d += 64;
  ASSERT_EQ(seed(rt[0], k[0], d, own_config[1]), 0);
  kt_arg a[] = ARGS(d);
  kt__call c[2];
  int64_t cfg[KT_MAX_CFIELDS];
  void *fn;
  ASSERT_STATUS(kt__config_parse(&k[0]->p, own_text[1], cfg), KT_OK);
  for (int r = 0; r < 2; r++) {
    ASSERT_STATUS(kt__call_bind(&k[r]->p, a, 7, &c[r]), KT_OK);
    ASSERT_STATUS(kt__call_config(&k[r]->p, &c[r], cfg), KT_OK);
  }
  ASSERT_STATUS(kt__variant_get(&k[0]->p, &c[0], &fn), KT_OK);
  char got[2][64];
  for (int r = 0; r < 2; r++) ASSERT_STATUS(kt_kernel_config_for(k[r], a, 7, got[r], sizeof got[r]), KT_OK);
  ASSERT_STR_EQ(got[1], own_text[1]);
  const void *bin[2];
  size_t size[2];
  double ms;
  for (int r = 0; r < 2; r++) ASSERT_EQ(kt__variant_cubin(&k[r]->p, &c[r], &bin[r], &size[r], &ms), 0);
  ASSERT_EQ(size[1], size[0]);
  ASSERT_TRUE(!memcmp(bin[0], bin[1], size[0]));
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(rt[1], &st);
  ASSERT_EQ(st.compiles, 0);
  ASSERT_EQ(st.followed, 1);
  ASSERT_STR_EQ(logged[1], "");
  for (int r = 0; r < 2; r++) kt_runtime_close(rt[r]);
  kv_free(&s);
}

/* Options that cannot coordinate are refused with what is missing. */
static void coordinator_options_are_checked(void) {
  kt_options o;
  t_offline_options(&o);
  o.no_cache = 1;
  o.coord = (kt_coordinator){.rank = 2, .size = 2, .publish = kv_publish, .fetch = kv_fetch};
  kt_runtime *rt;
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  ASSERT_STR_EQ(kt_errmsg(rt), "kt_runtime_open: coord: rank 2 of size 2, timeout 0 s: a rank from 0 to size-1, a "
                               "timeout >= 0 and both publish and fetch are needed");
  kt_runtime_close(rt);
  o.coord = (kt_coordinator){.rank = 0, .size = 2, .publish = kv_publish};
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_ERR_INVALID);
  ASSERT_CONTAINS(kt_errmsg(rt), "timeout 0 s, a callback missing:");
  kt_runtime_close(rt);
  o.coord = (kt_coordinator){.rank = 0, .size = 1};
  ASSERT_STATUS(kt_runtime_open(&rt, &o), KT_OK);
  kt_runtime_close(rt);
}

/* The Python package's Coordinator over the same C API (three threads as
** ranks, a dict as the store), and its Runtime's options:
** tests/python/test_coord_cpu.py. */
static void the_python_coordinator_agrees(void) {
  char out[4096];
  int rc = t_sh(out, sizeof out, "KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 "
                                 "tests/python/test_coord_cpu.py");
  ASSERT_LAST_LINE(out, "8 passed, 0 failed, 0 skipped\n");
  ASSERT_EQ(rc, 0);
}

/* python -m ktune.prewarm keeps each rank's cache, export and shard in a
** temporary directory of its own, gone when it ends, also when the tuning
** fails (here, without a GPU, it does). */
static void prewarm_leaves_nothing_behind(void) {
  char out[4096], path[1024], tmp[700];
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  snprintf(tmp, sizeof tmp, "%s/tmp", dir);
  ASSERT_EQ(mkdir(tmp, 0700), 0);
  ASSERT_EQ(t_write_file(dir, "s.jsonl", "{\"kernel\": \"masked_softmax\", \"N\": 4, \"L\": 9, \"T\": \"bf16\"}\n",
                         path, sizeof path),
            0);
  int rc = t_sh(out, sizeof out,
                "TMPDIR=%s KTUNE_LIB=build/libktune.so PYTHONPATH=tools/python python3 -m ktune.prewarm "
                "--shapes %s --out %s/fleet.db",
                tmp, path, dir);
  if (!t_have_driver()) {
    ASSERT_EQ(rc, 1);
    ASSERT_CONTAINS(out, "cannot load the CUDA driver");
  }
  ASSERT_EQ(t_sh(out, sizeof out, "ls -A %s", tmp), 0);
  ASSERT_STR_EQ(out, "");
}

const kt_test t_coord_tests[] = {
    {"coord: long keys meet under whole names", long_keys_meet_under_whole_names},
    {"coord_ranks_launch_what_each_keys_owner_settled", ranks_launch_what_each_keys_owner_settled},
    {"coord_a_silent_owner_ends_in_a_fallback", a_silent_owner_ends_in_a_fallback},
    {"coord_runtimes_of_one_rank_run_the_first_ones_config", runtimes_of_one_rank_run_the_first_ones_config},
    {"coord_runtimes_of_one_rank_that_race_follow_the_first_message",
     runtimes_of_one_rank_that_race_follow_the_first_message},
    {"coord_timeouts_past_int_max_ms_are_cut", timeouts_past_int_max_ms_are_cut},
    {"coord_a_publish_the_store_kept_counts_whatever_it_said", a_publish_the_store_kept_counts_whatever_it_said},
    {"coord_failed_exchanges_are_named", failed_exchanges_are_named},
    {"coord_the_owners_cubin_travels", the_owners_cubin_travels},
    {"coord_options_are_checked", coordinator_options_are_checked},
    {"coord_the_python_coordinator_agrees", the_python_coordinator_agrees},
    {"coord: python -m ktune.prewarm leaves no files behind", prewarm_leaves_nothing_behind},
    {NULL, NULL},
};
