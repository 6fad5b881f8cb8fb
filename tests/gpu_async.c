/* Async mode on the GPU: a miss returns with a stand-in and a correct
** result, the key is tuned in the background on copies of the inputs and
** the winner replaces the stand-in; many threads missing one key queue it
** once; closing while a tuning runs stops it and stores nothing, and so
** do kt_runtime_stop_tuning (launches go on) and a process's exit while
** the tuner compiles (cleanly), and a child forked while it tunes exits at
** once; a graph
** captured while the tuner works is not disturbed and queues nothing; the
** background winner is the blocking mode's; a key timed at its tune_at
** sizes copies nothing of the call's and makes no inputs of the call's
** sizes; past the copy limit a miss is tuned on inputs made at the call's
** sizes, the caller's buffer untouched; an owner whose publish the store
** refuses installs the message there, not its winner. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "device/driver.h"
#include "dispatch/handles.h"
#include "gpu_util.h"
#include "harness.h"

typedef struct logbuf {
  pthread_mutex_t lock;
  char text[65536];
} logbuf;

static void capture_log(void *user, kt_log_level level, const char *msg) {
  logbuf *l = user;
  (void)level;
  pthread_mutex_lock(&l->lock);
  size_t n = strlen(l->text);
  snprintf(l->text + n, sizeof l->text - n, "%s\n", msg);
  pthread_mutex_unlock(&l->lock);
}

static logbuf lb = {PTHREAD_MUTEX_INITIALIZER, ""};
extern const char *g_self;

/* copy_limit: kt_options.async_copy_limit (0: the default). */
static kt_runtime *open_limit(const char *cache, kt_mode mode, size_t copy_limit) {
  lb.text[0] = 0;
  kt_options o;
  kt_options_init(&o);
  o.cache_path = cache;
  o.mode = mode;
  o.log = capture_log;
  o.log_user = &lb;
  o.log_level = KT_LOG_INFO;
  o.async_copy_limit = copy_limit;
  return g_open_with(&o);
}

static kt_runtime *open_mode(const char *cache, kt_mode mode) { return open_limit(cache, mode, 0); }

static const char *cache_named(const char *name) {
  static char path[4][700];
  static int next;
  char *p = path[next++ % 4];
  snprintf(p, sizeof path[0], "%s/%s", t_tmpdir(), name);
  return p;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static kt_stats stats(kt_runtime *rt) {
  kt_stats s = {.size = sizeof s};
  kt_runtime_stats(rt, &s);
  return s;
}

/* x += 1 on n floats holding i: how many elements are not i + times. */
static long add_one_check(kt_runtime *rt, uint64_t x, long n, int times) {
  float *h = malloc((size_t)n * 4);
  long bad = -1;
  if (h && !kt_stream_sync(rt, NULL) && !kt_device_download(rt, h, x, (size_t)n * 4)) {
    bad = 0;
    for (long i = 0; i < n; i++) bad += h[i] != (float)(i % 1000 + times);
  }
  free(h);
  return bad;
}

/* x[i] = i % 1000 on n floats; nonzero on failure. */
static int add_one_fill(kt_runtime *rt, uint64_t x, long n) {
  float *h = malloc((size_t)n * 4);
  if (!h) return -1;
  for (long i = 0; i < n; i++) h[i] = (float)(i % 1000);
  int rc = kt_device_upload(rt, x, h, (size_t)n * 4) != KT_OK;
  free(h);
  return rc;
}

static uint64_t add_one_buffer(kt_runtime *rt, long n) {
  uint64_t x = 0;
  if (kt_device_alloc(rt, (size_t)n * 4, &x)) return 0;
  if (add_one_fill(rt, x, n)) {
    kt_device_free(rt, x);
    return 0;
  }
  return x;
}

/* add_one (loaded as k) launched once on a new buffer of n floats, which
** must then hold one application: *x is the buffer, left 0 after a
** failure (the test failed). */
static void add_one_first_call(kt_runtime *rt, kt_kernel *k, long n, uint64_t *x) {
  uint64_t b = add_one_buffer(rt, n);
  ASSERT_TRUE(b != 0);
  kt_arg a[] = {kt_arg_ptr(b, KT_F32), kt_arg_i64(n)};
  ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
  ASSERT_EQ(add_one_check(rt, b, n, 1), 0);
  *x = b;
}

/* The first launch of a key returns with the stand-in (the default here)
** and the buffer written once; the background winner replaces it. */
static void async_hit_miss_swap(void) {
  const char *cache = cache_named("async.db");
  kt_runtime *rt = open_mode(cache, KT_MODE_ASYNC);
  if (!rt) return;
  kt_kernel *k;
  if (g_load_kernels(rt, "tests/specs/add_one.json", &k, NULL)) return;
  long n = 1 << 22;
  uint64_t x = 0;
  add_one_first_call(rt, k, n, &x);
  if (!x) return;
  kt_arg a[] = {kt_arg_ptr(x, KT_F32), kt_arg_i64(n)};
  kt_stats s = stats(rt);
  ASSERT_EQ(s.standins * 10 + s.async_queued, 11);
  ASSERT_CONTAINS(lb.text, "add_one {\"n\":4194304,\"x\":16}: launched with the default while it is tuned in the "
                           "background");
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 120), KT_OK);
  s = stats(rt);
  ASSERT_EQ(s.async_done * 100 + s.async_failed * 10 + s.async_pending, 100);
  char cfg[128], row[128];
  ASSERT_STATUS(kt_kernel_config_for(k, a, 2, cfg, sizeof cfg), KT_OK);
  t_db_text(cache, "SELECT config FROM configs", row, sizeof row);
  row[strcspn(row, "\n")] = 0;
  char json[128];
  ASSERT_STATUS(kt_kernel_config_json(k, cfg, json, sizeof json), KT_OK);
  ASSERT_STR_EQ(json, row);
  for (int i = 0; i < 3; i++) ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
  ASSERT_EQ(add_one_check(rt, x, n, 4), 0);
  s = stats(rt);
  ASSERT_EQ(s.misses, 1);
  /* Nothing left to wait for: at once. */
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 0), KT_OK);
  kt_device_free(rt, x);
  kt_runtime_close(rt);
  /* A nearby key of another process starts from that winner. */
  rt = open_mode(cache, KT_MODE_ASYNC);
  ASSERT_TRUE(rt);
  if (!rt || g_load_kernels(rt, "tests/specs/add_one.json", &k, NULL)) return;
  x = add_one_buffer(rt, n / 2);
  a[0] = kt_arg_ptr(x, KT_F32);
  a[1] = kt_arg_i64(n / 2);
  ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
  ASSERT_CONTAINS(lb.text, "add_one {\"n\":2097152,\"x\":16}: launched with the winner of {\"n\":4194304,\"x\":16} while");
  ASSERT_EQ(add_one_check(rt, x, n / 2, 1), 0);
  kt_device_free(rt, x);
  kt_runtime_close(rt);
}

/* Eight threads miss one key at once, each on a buffer of its own: the key
** is queued once, and every buffer is written exactly once. */
typedef struct racer {
  kt_runtime *rt;
  kt_kernel *k;
  uint64_t x;
  kt_status st;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  kt_arg a[] = {kt_arg_ptr(r->x, KT_F32), kt_arg_i64(1 << 20)};
  r->st = kt_launch(r->k, NULL, a, 2);
  return NULL;
}

static void queue_dedupe_across_threads(void) {
  kt_runtime *rt = open_mode(cache_named("dedupe.db"), KT_MODE_ASYNC);
  if (!rt) return;
  kt_kernel *k;
  if (g_load_kernels(rt, "tests/specs/add_one.json", &k, NULL)) return;
  racer r[8];
  pthread_t t[8];
  for (int i = 0; i < 8; i++) {
    r[i] = (racer){rt, k, add_one_buffer(rt, 1 << 20), KT_OK};
    ASSERT_TRUE(r[i].x != 0);
  }
  for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, race, &r[i]);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 8; i++) {
    ASSERT_STATUS(r[i].st, KT_OK);
    ASSERT_EQ(add_one_check(rt, r[i].x, 1 << 20, 1), 0);
  }
  kt_stats s = stats(rt);
  ASSERT_EQ(s.async_queued * 10 + s.standins, 11);
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 120), KT_OK);
  ASSERT_EQ(stats(rt).async_done, 1);
  for (int i = 0; i < 8; i++) kt_device_free(rt, r[i].x);
  kt_runtime_close(rt);
}

/* An async runtime in a long tuning: layernorm_fwd missed at 4096x4096,
** the tuner two trials in. buf: x, y and w; a: the call. */
typedef struct long_run {
  kt_runtime *rt;
  kt_kernel *k;
  uint64_t buf[3];
  kt_arg a[13];
} long_run;

enum { LONG_N = 4096, LONG_D = 4096 };

/* layernorm_fwd's call at LONG_N x LONG_D, bf16, into a: y from x with the
** weight w (0: none), no bias or residual, no statistics saved. */
static void long_call(kt_arg a[13], uint64_t y, uint64_t x, uint64_t w) {
  kt_arg c[] = {kt_arg_ptr(y, KT_BF16), kt_arg_ptr(x, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(0, KT_BF16), kt_arg_ptr(w, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(0, KT_F32),  kt_arg_ptr(0, KT_F32),  kt_arg_i32(LONG_N),
                kt_arg_i32(LONG_D),     kt_arg_i32(1),          kt_arg_f32(1e-5f),
                kt_arg_i32(1)};
  memcpy(a, c, sizeof c);
}

/* long_tuning's miss: 0, or -1 after a failure. */
static int start_long_tuning(long_run *t) {
  enum { N = LONG_N, D = LONG_D };
  kt_runtime *rt = t->rt;
  if (g_load_kernels(rt, "kernels_src/layernorm_fwd.json", &t->k, NULL)) return -1;
  for (int i = 0; i < 2; i++)
    if (kt_device_alloc(rt, (size_t)N * D * 2, &t->buf[i]) || kt_device_fill(rt, t->buf[i], 0x3c, (size_t)N * D * 2))
      return t_fail(__FILE__, __LINE__, "device memory: %s", kt_errmsg(rt)), -1;
  if (kt_device_alloc(rt, D * 2, &t->buf[2]) || kt_device_fill(rt, t->buf[2], 0x3c, D * 2))
    return t_fail(__FILE__, __LINE__, "device memory: %s", kt_errmsg(rt)), -1;
  long_call(t->a, t->buf[1], t->buf[0], t->buf[2]);
  if (kt_launch(t->k, NULL, t->a, 13) || kt_stream_sync(rt, NULL))
    return t_fail(__FILE__, __LINE__, "the miss: %s", kt_errmsg(rt)), -1;
  /* Let the tuner get into its trials. */
  for (int i = 0; i < 1500 && stats(rt).trials < 2; i++) {
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
  if (stats(rt).trials < 2) return t_fail(__FILE__, __LINE__, "the tuner timed no trials in 30 s"), -1;
  return 0;
}

/* *t in a long tuning on cache: 0, or -1 after a failure or a skip. */
static int long_tuning(const char *cache, long_run *t) {
  memset(t, 0, sizeof *t);
  t->rt = open_mode(cache, KT_MODE_ASYNC);
  if (t->rt && start_long_tuning(t)) {
    kt_runtime_close(t->rt);
    t->rt = NULL;
  }
  return t->rt ? 0 : -1;
}

/* Frees t's buffers. */
static void long_run_free(long_run *t) {
  for (int i = 0; i < 3; i++) kt_device_free(t->rt, t->buf[i]);
}

/* Closing while a long tuning runs: it stops before its next trial, the
** close returns, and nothing of it is stored, leased or quarantined. */
static void close_while_tuning(void) {
  const char *cache = cache_named("close.db");
  long_run t;
  if (long_tuning(cache, &t)) return;
  kt_runtime *rt = t.rt;
  long_run_free(&t);
  double t0 = now_ms();
  kt_runtime_close(rt);
  double ms = now_ms() - t0;
  printf("    close while tuning: %.0f ms\n", ms);
  ASSERT_TRUE(ms < 10000);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM configs"), 0);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM quarantine"), 0);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM leases"), 0);
}

/* kt_runtime_stop_tuning while a long tuning runs: it returns once the
** tuner has stopped, nothing is stored or leased, and the runtime goes on:
** the stopped key's stand-in and a new key's serve their calls, and the
** new key is not queued. */
static void stop_while_tuning(void) {
  const char *cache = cache_named("stop.db");
  long_run t;
  if (long_tuning(cache, &t)) return;
  kt_runtime *rt = t.rt;
  ASSERT_STATUS(kt_runtime_stop_tuning(rt), KT_OK);
  kt_stats s0 = stats(rt);
  ASSERT_EQ(s0.async_pending, 0);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM configs"), 0);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM leases"), 0);
  ASSERT_STATUS(kt_launch(t.k, NULL, t.a, 13), KT_OK); /* the stopped key */
  t.a[8] = kt_arg_i32(2048);                            /* a new key: 2048x2048 */
  t.a[9] = kt_arg_i32(2048);
  ASSERT_STATUS(kt_launch(t.k, NULL, t.a, 13), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 0), KT_OK);
  kt_stats s1 = stats(rt);
  ASSERT_EQ(s1.standins - s0.standins, 1);
  ASSERT_EQ(s1.async_queued - s0.async_queued, 0);
  ASSERT_EQ(s1.async_failed - s0.async_failed, 1);
  ASSERT_CONTAINS(lb.text, "background tuning was stopped (kt_runtime_stop_tuning)");
  ASSERT_STATUS(kt_runtime_stop_tuning(rt), KT_OK);
  long_run_free(&t);
  kt_runtime_close(rt);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM configs"), 0);
}

/* ktune-gpu-test --exit-child CACHE: a miss in async mode, then the
** process exits while the background tuner compiles its candidates (in
** this process: the caller sets KTUNE_NVRTC_HELPER=off), without closing
** the runtime. */
int exit_child(const char *cache) {
  kt_options o;
  kt_options_init(&o);
  o.cache_path = cache;
  o.mode = KT_MODE_ASYNC;
  o.log_level = KT_LOG_ERROR;
  kt_runtime *rt;
  kt_kernel *k;
  uint64_t x, y;
  enum { N = LONG_N, D = LONG_D };
  if (kt_runtime_open(&rt, &o) || kt_kernel_load(rt, "kernels_src/layernorm_fwd.json", &k) ||
      kt_device_alloc(rt, (size_t)N * D * 2, &x) || kt_device_alloc(rt, (size_t)N * D * 2, &y) ||
      kt_device_fill(rt, x, 0x3c, (size_t)N * D * 2)) {
    printf("setup: %s\n", kt_errmsg(rt));
    return 1;
  }
  kt_arg a[13];
  long_call(a, y, x, 0);
  kt_status st = kt_launch(k, NULL, a, 13);
  if (!st) st = kt_stream_sync(rt, NULL);
  printf("launched: %s\n", kt_status_name(st));
  fflush(stdout);
  struct timespec ts = {0, 400000000}; /* the tuner is compiling by now */
  nanosleep(&ts, NULL);
  exit(0);
}

/* A process that exits while its background tuner compiles exits with
** status 0, and the cancelled tuning stored nothing. NVRTC compiles in the
** process here, as it does wherever no helper is free. */
static void exit_while_tuning(void) {
  kt_runtime *rt = g_open_mode(KT_MODE_OFF); /* or a clean skip */
  if (!rt) return;
  kt_runtime_close(rt);
  char out[1024];
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "exit%d.db", i);
    const char *cache = cache_named(name);
    ASSERT_EQ(t_sh(out, sizeof out, "KTUNE_NVRTC_HELPER=off '%s' --exit-child '%s' 2>&1", g_self, cache), 0);
    ASSERT_STR_EQ(out, "launched: KT_OK\n");
    ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM configs"), 0);
  }
}

/* A child forked while the parent's tuner runs has no tuner thread: in the
** child, stop and wait return at once, and its exit (through exit(), which
** runs the exit hooks) does not wait for a thread it does not have. The
** parent's tuning goes on and stores its winner. */
static void fork_while_tuning(void) {
  const char *cache = cache_named("fork.db");
  long_run t;
  if (long_tuning(cache, &t)) return;
  kt_runtime *rt = t.rt;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int ok = kt_runtime_stop_tuning(rt) == KT_OK && kt_runtime_wait_tuning(rt, -1) == KT_OK &&
             stats(rt).async_pending == 0;
    exit(ok ? 0 : 2);
  }
  ASSERT_TRUE(pid > 0);
  int status = -1;
  double t0 = now_ms();
  while (pid > 0 && waitpid(pid, &status, WNOHANG) == 0 && now_ms() - t0 < 30000) {
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
  if (pid > 0 && now_ms() - t0 >= 30000) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    t_fail(__FILE__, __LINE__, "the forked child did not exit in 30 s");
  }
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 300), KT_OK);
  ASSERT_EQ(stats(rt).async_done, 1);
  long_run_free(&t);
  kt_runtime_close(rt);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM configs"), 1);
}

/* While the background tuner works on one key, a graph is captured (global
** capture mode, as PyTorch's default) on a stream of its own, launching a
** tuned key and an unseen one: the capture is not disturbed, the unseen
** key gets a stand-in for that call and queues nothing; replays are
** right; outside the capture it queues. */
static void capture_during_async(void) {
  kt_runtime *rt = open_mode(cache_named("capture.db"), KT_MODE_ASYNC);
  if (!rt) return;
  kt_kernel *add, *pk;
  if (g_load_kernels(rt, "tests/specs/add_one.json", &add, "tests/specs/pick.json", &pk, NULL)) return;
  long na = 1 << 20, nc = 1 << 18;
  uint64_t xa = add_one_buffer(rt, na), xc = add_one_buffer(rt, nc), xp;
  ASSERT_STATUS(kt_device_alloc(rt, (size_t)4 << 22, &xp), KT_OK);
  kt_arg a[] = {kt_arg_ptr(xa, KT_F32), kt_arg_i64(na)};
  kt_arg c[] = {kt_arg_ptr(xc, KT_F32), kt_arg_i64(nc)};
  kt_arg p[] = {kt_arg_ptr(xp, KT_F32), kt_arg_i32(1 << 22)};
  ASSERT_STATUS(kt_launch(add, NULL, a, 2), KT_OK);
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 120), KT_OK);
  ASSERT_STATUS(kt_launch(pk, NULL, p, 2), KT_OK); /* queued: tuned while the graph is captured */
  kt_stream s;
  char err[1024];
  ASSERT_STATUS(kt_stream_create(rt, &s), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  ASSERT_STATUS(kt__dev_capture_begin(s, 1, err, sizeof err), KT_OK);
  kt_status st1 = kt_launch(add, s, a, 2), st2 = kt_launch(add, s, c, 2);
  kt_status rs = kt__dev_capture_end_and_run(s, 2, err, sizeof err);
  ASSERT_STATUS(st1, KT_OK);
  ASSERT_STATUS(st2, KT_OK);
  if (rs) t_fail(__FILE__, __LINE__, "%s", err);
  ASSERT_STATUS(rs, KT_OK);
  ASSERT_EQ(add_one_check(rt, xa, na, 3), 0);
  ASSERT_EQ(add_one_check(rt, xc, nc, 2), 0);
  kt_stats st = stats(rt);
  ASSERT_EQ(st.async_queued * 10 + st.standins, 23);
  ASSERT_CONTAINS(lb.text, "add_one {\"n\":262144,\"x\":16}: stream is capturing; the winner of {\"n\":1048576,\"x\":16} "
                           "is used without queueing a tuning");
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 120), KT_OK);
  ASSERT_STATUS(kt_launch(add, s, c, 2), KT_OK);
  ASSERT_EQ(stats(rt).async_queued, 3);
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 120), KT_OK);
  ASSERT_EQ(add_one_check(rt, xc, nc, 3), 0);
  kt_stream_destroy(rt, s);
  kt_device_free(rt, xa);
  kt_device_free(rt, xc);
  kt_device_free(rt, xp);
  kt_runtime_close(rt);
}

/* The background tuning's winner is the blocking mode's. */
static void winner_equality(void) {
  char blocking[128] = "", background[128] = "";
  for (int mode = 0; mode < 2; mode++) {
    kt_runtime *rt = open_mode(cache_named(mode ? "eq-async.db" : "eq-tune.db"), mode ? KT_MODE_ASYNC : KT_MODE_TUNE);
    if (!rt) return;
    kt_kernel *k;
    if (g_load_kernels(rt, "tests/specs/pick.json", &k, NULL)) return;
    uint64_t x;
    ASSERT_STATUS(kt_device_alloc(rt, 4 << 16, &x), KT_OK);
    kt_arg a[] = {kt_arg_ptr(x, KT_F32), kt_arg_i32(1 << 16)};
    ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
    ASSERT_STATUS(kt_runtime_wait_tuning(rt, 120), KT_OK);
    ASSERT_STATUS(kt_kernel_config_for(k, a, 2, mode ? background : blocking, sizeof blocking), KT_OK);
    kt_device_free(rt, x);
    kt_runtime_close(rt);
  }
  ASSERT_STR_EQ(blocking, "SLOW=0,BLOCK=128");
  ASSERT_STR_EQ(background, blocking);
}

/* A key timed at its tune_at sizes (rmsnorm_fwd's rows) is tuned on inputs
** the tuner makes: the miss copies none of the call's and says so, the
** background tuning times the tune_at rows, and the call's result (made
** by the stand-in) is right. */
static void tune_at_key_copies_nothing(void) {
  const char *cache = cache_named("tuneat.db");
  kt_runtime *rt = open_mode(cache, KT_MODE_ASYNC);
  if (!rt) return;
  kt_kernel *k;
  if (g_load_kernels(rt, "kernels_src/rmsnorm.json", &k, NULL)) return;
  enum { N = 2, D = 256 };
  g_buf x, y, w;
  uint64_t seed = 5;
  ASSERT_EQ(g_buf_make(&x, rt, KT_BF16, N * D, 0) || g_buf_make(&y, rt, KT_BF16, N * D, 0) ||
                g_buf_make(&w, rt, KT_BF16, D, 0),
            0);
  g_buf_rand(&x, &seed, -2, 2);
  g_buf_rand(&w, &seed, 0.5, 1.5);
  ASSERT_EQ(g_buf_upload(&x) || g_buf_upload(&y) || g_buf_upload(&w), 0);
  double ref[N * D];
  g_norm_ref(x.h, w.h, NULL, N, D, 1, 1e-6, ref);
  kt_arg a[] = {kt_arg_ptr(y.ptr, KT_BF16), kt_arg_ptr(x.ptr, KT_BF16), kt_arg_ptr(0, KT_BF16),
                kt_arg_ptr(w.ptr, KT_BF16), kt_arg_i32(N),             kt_arg_i32(D),
                kt_arg_f32(1e-6f)};
  ASSERT_STATUS(kt_launch(k, NULL, a, 7), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  char msg[512] = "";
  long bad = g_buf_check(&y, ref, N * D, 0.03, 0.02, "rmsnorm_fwd", msg, sizeof msg);
  if (bad) t_fail(__FILE__, __LINE__, "%ld bad elements: %s", bad, msg);
  ASSERT_CONTAINS(lb.text, "rmsnorm_fwd {\"D\":256,");
  ASSERT_CONTAINS(lb.text, "}: the call's inputs are not copied: the tuning times its tune_at sizes\n");
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 120), KT_OK);
  kt_stats s = stats(rt);
  ASSERT_EQ(s.async_done * 100 + s.async_failed * 10 + s.async_pending, 100);
  ASSERT_CONTAINS(lb.text, "} at N=65536 (the call's N=2): {");
  /* Only the tune_at sizes' inputs were made: none at the call's. */
  ASSERT_TRUE(strstr(lb.text, "at the call's sizes") == NULL);
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM configs WHERE kernel = 'rmsnorm_fwd'"), 1);
  g_buf_free(&x);
  g_buf_free(&y);
  g_buf_free(&w);
  kt_runtime_close(rt);
}

/* Past kt_options.async_copy_limit a miss copies none of the call's
** inputs: the tuner makes its own at the call's sizes and says so, the
** caller's buffer (written once by the stand-in, then refilled by the
** caller at once) is neither read nor written by the tuning, and the
** winner is stored. */
static void copy_limit_tunes_on_inputs_of_its_own(void) {
  const char *cache = cache_named("limit.db");
  kt_runtime *rt = open_limit(cache, KT_MODE_ASYNC, 1);
  if (!rt) return;
  kt_kernel *k;
  if (g_load_kernels(rt, "tests/specs/add_one.json", &k, NULL)) return;
  long n = 1 << 20;
  uint64_t x = 0;
  add_one_first_call(rt, k, n, &x);
  if (!x) return;
  ASSERT_EQ(add_one_fill(rt, x, n), 0);
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 120), KT_OK);
  kt_stats s = stats(rt);
  ASSERT_EQ(s.async_done * 100 + s.async_failed * 10 + s.async_pending, 100);
  ASSERT_EQ(add_one_check(rt, x, n, 0), 0);
  ASSERT_CONTAINS(lb.text, "add_one {\"n\":1048576,\"x\":16}: timed on inputs made from \"init\" at the call's sizes\n");
  ASSERT_EQ(t_db_int(cache, "SELECT count(*) FROM configs WHERE kernel = 'add_one'"), 1);
  kt_device_free(rt, x);
  kt_runtime_close(rt);
}

/* A store of one name that some other runtime of this rank always wins:
** at the owner's publish the rival message is there first, and the
** owner's is refused. Nothing is there before. */
typedef struct rival_store {
  char name[2048];
  int published, refused;
} rival_store;

static const char rival_msg[] = "{\"config\":{\"SLOW\":1,\"BLOCK\":128}}\n";

static int rival_publish(void *user, const char *name, const void *bytes, size_t len) {
  rival_store *r = user;
  (void)bytes, (void)len;
  snprintf(r->name, sizeof r->name, "%s", name);
  r->published = 1;
  r->refused++;
  return -1;
}

static int rival_fetch(void *user, const char *name, void *buf, size_t cap, size_t *len, int timeout_ms) {
  rival_store *r = user;
  (void)timeout_ms;
  if (!r->published || strcmp(name, r->name)) return 1;
  *len = sizeof rival_msg - 1;
  memcpy(buf, rival_msg, *len < cap ? *len : cap);
  return 0;
}

/* In async mode the key's owner tunes in the background; where its publish
** is refused because another runtime of its rank published the key first,
** the tuner installs that message's config, not its own winner: later
** launches run it, it is counted as followed, and the log says so. */
static void refused_owner_installs_the_first_message(void) {
  rival_store store = {.published = 0};
  lb.text[0] = 0;
  kt_options o;
  kt_options_init(&o);
  o.cache_path = cache_named("rival.db");
  o.mode = KT_MODE_ASYNC;
  o.log = capture_log;
  o.log_user = &lb;
  o.log_level = KT_LOG_INFO;
  o.coord = (kt_coordinator){.rank = 0, .size = 2, .timeout_s = 5, .user = &store, .publish = rival_publish,
                             .fetch = rival_fetch};
  kt_runtime *rt = g_open_with(&o);
  if (!rt) return;
  kt_kernel *k;
  if (g_load_kernels(rt, "tests/specs/pick.json", &k, NULL)) return;
  int n = 1 << 16;
  char key[256];
  for (;; n *= 2) { /* a key that this rank owns */
    kt_arg a[] = {kt_arg_ptr(1 << 20, KT_F32), kt_arg_i32(n)}; /* aligned as an allocation */
    ASSERT_STATUS(kt_kernel_key(k, a, 2, key, sizeof key), KT_OK);
    if (kt__coord_owns(k, key)) break;
  }
  uint64_t x;
  ASSERT_STATUS(kt_device_alloc(rt, (size_t)n * 4, &x), KT_OK);
  kt_arg a[] = {kt_arg_ptr(x, KT_F32), kt_arg_i32(n)};
  ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
  ASSERT_STATUS(kt_runtime_wait_tuning(rt, 120), KT_OK);
  char cfg[128], want[512];
  ASSERT_STATUS(kt_kernel_config_for(k, a, 2, cfg, sizeof cfg), KT_OK);
  ASSERT_STR_EQ(cfg, "SLOW=1,BLOCK=128");
  ASSERT_STATUS(kt_launch(k, NULL, a, 2), KT_OK);
  ASSERT_STATUS(kt_stream_sync(rt, NULL), KT_OK);
  kt_stats s = stats(rt);
  ASSERT_EQ(s.async_done * 100 + s.async_failed * 10 + s.async_pending, 100);
  ASSERT_EQ(s.published * 100 + s.followed * 10 + s.coord_failed, 10);
  ASSERT_EQ(store.refused, 1);
  snprintf(want, sizeof want,
           "pick %s: another runtime of this rank published {\"BLOCK\":128,\"SLOW\":1} first; it replaces "
           "{\"BLOCK\":128,\"SLOW\":0} here\n",
           key);
  ASSERT_CONTAINS(lb.text, want);
  kt_device_free(rt, x);
  kt_runtime_close(rt);
}

const kt_test gpu_async_tests[] = {
    {"gpu async: a miss launches a stand-in at once; the background winner replaces it", async_hit_miss_swap},
    {"gpu async: eight threads missing one key queue it once", queue_dedupe_across_threads},
    {"gpu async: closing while a tuning runs stops it and stores nothing", close_while_tuning},
    {"gpu async: kt_runtime_stop_tuning stops a running tuning; launches go on with stand-ins", stop_while_tuning},
    {"gpu async: a process that exits while its tuner compiles exits cleanly, storing nothing", exit_while_tuning},
    {"gpu async: a child forked while the tuner runs stops, waits and exits at once", fork_while_tuning},
    {"gpu async: a graph captured while the tuner works is not disturbed and queues nothing", capture_during_async},
    {"gpu async: the background winner is the blocking mode's", winner_equality},
    {"gpu async: an owner whose publish is refused installs the message the store kept",
     refused_owner_installs_the_first_message},
    {"gpu async: a key timed at its tune_at sizes copies none of the call's inputs", tune_at_key_copies_nothing},
    {"gpu async: past the copy limit a miss is tuned on inputs of its own at the call's sizes",
     copy_limit_tunes_on_inputs_of_its_own},
    {NULL, NULL},
};
