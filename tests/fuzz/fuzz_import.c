/* Cache import of any bytes, into a cache made afresh every 500 inputs, and
** the codec's canonical form of the same bytes as a key and as a config.
** Whatever an import took exports as UTF-8 (JSON holds nothing else). The
** same bytes as kt_text_visible shows them: UTF-8, without a control
** character where it escapes them, and cut short only as a prefix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/text.h"
#include "cache/codec.h"
#include "cache/store.h"
#include "fuzz.h"

static kt_store *s;
static char path[128];

static void remove_store(void) {
  char side[160];
  kt__store_close(s);
  s = NULL;
  unlink(path);
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
}

static kt_store *store(void) {
  static int uses;
  if (s && ++uses % 500) return s;
  if (!path[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/ktune-fuzz-import-%d.db", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    atexit(remove_store);
  }
  remove_store();
  kt__store_opts o = {.path = path};
  char err[2048];
  if (kt__store_open(&s, &o, err, sizeof err)) abort();
  return s;
}

static void check_visible(const char *text) {
  size_t len = strlen(text), n = 5 * len + 1, cut = len % 13 + 1;
  char *full = malloc(n), *part = malloc(cut);
  for (unsigned flags = 0; full && part && flags < 4; flags++) {
    size_t esc = kt_text_visible(text, flags, full, n);
    if (kt_text_visible(text, flags, NULL, 0) != esc || kt_text_visible(text, flags, part, cut) != esc) abort();
    if (!kt__text_utf8(full) || ((flags & KT_TEXT_CONTROLS) && !kt__text_clean(full))) abort();
    if (strncmp(full, part, strlen(part)) || (!esc && strcmp(full, text))) abort();
  }
  free(full);
  free(part);
}

int kt_fuzz_import(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1), err[2048], out[4096];
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  long counts[5];
  if (!kt__store_import(store(), "fuzz.json", text, 1, counts, err, sizeof err)) {
    char *json = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&json, &n);
    if (!f) abort();
    int st = kt__store_export(s, f, 1, err, sizeof err);
    fclose(f);
    if (st || !kt__text_utf8(json)) abort();
    free(json);
  }
  kt__codec_canon(text, 0, out, sizeof out, err, sizeof err);
  kt__codec_canon(text, 1, out, sizeof out, err, sizeof err);
  check_visible(text);
  free(text);
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_import)
