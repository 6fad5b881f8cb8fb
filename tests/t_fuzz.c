/* The fuzz corpora (tests/fuzz/corpus/TARGET) and any crash reproducers
** kept from earlier fuzzing (tests/fuzz/crashes/TARGET) replayed through
** the targets on every run, with or without clang: a finding once fixed
** stays fixed. */
#include <dirent.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/fileio.h"
#include "fuzz/fuzz.h"
#include "harness.h"

/* Every file of dir through fn; the number replayed, or -1. */
static long replay(const char *dir, int (*fn)(const uint8_t *, size_t)) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  long n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[1024], *data;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (kt__read_file(path, (size_t)1 << 24, &data, &len)) {
      n = -1;
      break;
    }
    fn((const uint8_t *)data, len);
    kt__free(data);
    n++;
  }
  closedir(d);
  return n;
}

static void corpora_replay(void) {
  static const struct {
    const char *name;
    int (*fn)(const uint8_t *, size_t);
  } targets[] = {{"spec", kt_fuzz_spec}, {"expr", kt_fuzz_expr}, {"shape", kt_fuzz_shape}, {"import", kt_fuzz_import},
               {"coord", kt_fuzz_coord}, {"cachefile", kt_fuzz_cachefile}, {"source", kt_fuzz_source},
               {"call", kt_fuzz_call}, {"trials", kt_fuzz_trials}};
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
    char corpus[256], crashes[256];
    snprintf(corpus, sizeof corpus, "tests/fuzz/corpus/%s", targets[i].name);
    snprintf(crashes, sizeof crashes, "tests/fuzz/crashes/%s", targets[i].name);
    long a = replay(corpus, targets[i].fn), b = replay(crashes, targets[i].fn);
    printf("    %s: %ld corpus inputs, %ld crash reproducers\n", targets[i].name, a, b);
    ASSERT_TRUE(a > 0);
    ASSERT_TRUE(b >= 0);
  }
}

const kt_test t_fuzz_tests[] = {
    {"fuzz: the corpora and crash reproducers replay cleanly", corpora_replay},
    {NULL, NULL},
};
