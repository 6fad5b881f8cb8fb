/* Any bytes as a cache file: opened for reading as the user's cache, then
** as the system cache beside an empty one, and read the ways ktune reads a
** cache (a key's config, its trials, the other keys' winners, quarantine,
** a cubin, the listing, the counts, an export, which must be UTF-8).
** Nothing may crash, leak, hang or write to the file. The seeds are small files of each schema
** version, and files whose tables are made otherwise than ktune makes them
** (tests/fuzz/corpus/cachefile). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/store.h"
#include "cache/text.h"
#include "fuzz.h"

static char path[160], user[160];

static void remove_files(void) {
  static const char *const side[] = {"", "-wal", "-shm", "-journal"};
  char p[200];
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s%s", path, side[i]);
    unlink(p);
    snprintf(p, sizeof p, "%s%s", user, side[i]);
    unlink(p);
  }
}

static void setup(void) {
  if (path[0]) return;
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/ktune-fuzz-cachefile-%d.db", tmp && *tmp ? tmp : "/tmp", (int)getpid());
  snprintf(user, sizeof user, "%s/ktune-fuzz-cachefile-%d-user.db", tmp && *tmp ? tmp : "/tmp", (int)getpid());
  atexit(remove_files);
}

static int put(const uint8_t *data, size_t size) {
  remove_files();
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  int ok = write(fd, data, size) == (ssize_t)size;
  close(fd);
  return ok ? 0 : -1;
}

static int on_trial(void *u, const kt__trialrow *r) { return (void)u, (void)r, 0; }
static void on_winner(void *u, const char *c) { (void)u, (void)c; }
static void on_quarantined(void *u, const char *c, const char *r) { (void)u, (void)c, (void)r; }
static void on_binary(void *u, const kt__binrow *r) { (void)u, (void)r; }
static int on_row(void *u, const kt__cfgrow *r, int sys) { return (void)u, (void)r, (void)sys, 0; }

/* What a runtime and the CLI read, for the key the seeds hold. */
static void read_all(kt_store *s) {
  static const char *const k[4] = {"rmsnorm_fwd", "00000000deadbeef", "NVIDIA H100 80GB HBM3/sm_90/132",
                                   "{\"D\":256,\"T\":\"bf16\"}"};
  char err[2048], cfg[256];
  long counts[4];
  double t;
  kt__store_get_config(s, k[0], k[1], k[2], k[3], cfg, sizeof cfg, &t, err, sizeof err);
  kt__store_trials(s, k[0], k[1], k[2], k[3], on_trial, NULL, err, sizeof err);
  kt__store_winners(s, k[0], k[1], k[2], "{}", 8, on_winner, NULL, err, sizeof err);
  kt__store_quarantined(s, k[0], k[1], k[2], k[3], on_quarantined, NULL, err, sizeof err);
  kt__store_get_binary(s, "00ff", on_binary, NULL, err, sizeof err);
  kt__store_list(s, NULL, on_row, NULL, err, sizeof err);
  kt__store_counts(s, counts, err, sizeof err);
  /* What an export writes is UTF-8 whatever the file held: JSON. */
  char *json = NULL;
  size_t n = 0;
  FILE *out = open_memstream(&json, &n);
  if (!out) abort();
  kt__store_export(s, out, 1, err, sizeof err);
  fclose(out);
  if (!kt__text_utf8(json)) abort();
  free(json);
}

int kt_fuzz_cachefile(const uint8_t *data, size_t size) {
  char err[2048], cfg[256];
  kt_store *s;
  setup();
  if (put(data, size)) return 0;
  kt__store_opts ro = {.path = path, .readonly = 1};
  if (!kt__store_open(&s, &ro, err, sizeof err)) {
    read_all(s);
    kt__store_close(s);
  }
  /* Reading never writes: the file is still the input's bytes. */
  FILE *f = fopen(path, "rb");
  if (f) {
    uint8_t buf[4096];
    size_t at = 0, n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0 && at + n <= size && !memcmp(buf, data + at, n)) at += n;
    int same = n == 0 && at == size && !ferror(f);
    fclose(f);
    if (!same) abort();
  }
  kt__store_opts sys = {.path = user, .system_path = path};
  if (!kt__store_open(&s, &sys, err, sizeof err)) {
    kt__store_get_config(s, "rmsnorm_fwd", "00000000deadbeef", "NVIDIA H100 80GB HBM3/sm_90/132",
                         "{\"D\":512,\"T\":\"bf16\"}", cfg, sizeof cfg, NULL, err, sizeof err);
    kt__store_close(s);
  }
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_cachefile)
