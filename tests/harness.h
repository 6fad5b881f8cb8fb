/* A small test harness: assertions print both values and return from the
** test; the runner prints one closing line "N passed, N failed, N skipped". */
#ifndef KT_HARNESS_H
#define KT_HARNESS_H

#include <stdio.h>
#include <string.h>

typedef struct kt_test {
  const char *name;
  void (*fn)(void);
} kt_test;

void t_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void t_skip(const char *why);
int t_failed(void);
/* Run tests whose name contains filter (NULL: all; "!text": those whose
** name does not contain text), of those the part-th of every parts (1-based;
** 1 and 1: all); print the summary. */
int t_run(const kt_test *const *suites, const char *filter, int part, int parts);
/* A test program's main: the arguments are a filter as t_run takes it
** (else $KT_TEST_FILTER) and --part=K/N, which runs the K-th of every N
** tests the filter leaves (make gpu-test's lanes). Returns the exit status:
** 1 when a test failed, 2 for arguments it does not take. */
int t_main(const kt_test *const *suites, int argc, char **argv);

/* Run a shell command; its stdout and stderr together go to out. Returns
** the exit status, or -1 when it could not run. */
int t_sh(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The ktune command under test: $KTUNE_BIN, else build/ktune. */
const char *t_bin(void);
/* An empty cache at db, made as a user makes one: ktune import of an
** export with no rows. Returns 0, or -1 (out says why). */
int t_empty_cache(const char *db, char *out, size_t n);
/* The last line of out, its newline included (a script's summary line). */
const char *t_last_line(const char *out);
/* A fresh empty directory, in one t_run made under $TMPDIR and removes at
** its end when no test failed; the path is static storage. */
const char *t_tmpdir(void);
/* text written to the file dir/name, whose path goes to path (n bytes).
** Returns 0, or -1 when the file could not be written. */
int t_write_file(const char *dir, const char *name, const char *text, char *path, size_t n);
/* "first, first + 1, ..." (count integers) into buf (n bytes), which is
** returned: a config list for a spec written by a test. */
const char *t_ints(char *buf, size_t n, int first, int count);
/* A name of the longest kind a spec takes (64 characters): prefix, i, then
** '_'; buf holds 65 bytes. */
const char *t_long_name(char *buf, char prefix, int i);
/* dir/e.json (and its source) at the bounds: 32 i64 params in the key and
** 24 config fields, each named with 64 characters; its path into path (n
** bytes). Returns 0, or -1 when it could not be written. */
int t_bounds_spec(const char *dir, char *path, size_t n);
/* One integer from an SQLite query on the file at path (-999 when none),
** and every row's first column, one per line ("(none)" when it fails). */
long long t_db_int(const char *path, const char *sql);
/* Run sql on the database at path, read-write; SQLite's result code. Not
** the sqlite3 shell, which GPU hosts may lack. */
int t_db_exec(const char *path, const char *sql);
void t_db_text(const char *path, const char *sql, char *out, size_t n);
/* Whether a CUDA driver can be loaded here. */
int t_have_driver(void);
/* Options for a runtime without a device, compiling for sm_90, quiet
** below errors. */
struct kt_options;
void t_offline_options(struct kt_options *o);
/* A runtime with those options; NULL when it cannot be opened. Close with
** kt_runtime_close(). */
struct kt_runtime *t_offline(int no_cache);
/* Spec loaded into such a runtime without a cache (*rt); NULL, the test
** failed and *rt NULL, when either cannot be made. */
struct kt_kernel;
struct kt_kernel *t_offline_kernel(const char *spec, struct kt_runtime **rt);
/* A runtime with options o; NULL when it cannot be opened. */
struct kt_runtime *t_open(const struct kt_options *o);

#define ASSERT_TRUE(c)                                           \
  do {                                                           \
    if (!(c)) {                                                  \
      t_fail(__FILE__, __LINE__, "expected %s", #c);             \
      return;                                                    \
    }                                                            \
  } while (0)

#define ASSERT_EQ(a, b)                                                        \
  do {                                                                         \
    long long a_ = (long long)(a), b_ = (long long)(b);                        \
    if (a_ != b_) {                                                            \
      t_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_);    \
      return;                                                                  \
    }                                                                          \
  } while (0)

#define ASSERT_STATUS(a, b)                                                    \
  do {                                                                         \
    kt_status a_ = (a), b_ = (b);                                              \
    if (a_ != b_) {                                                            \
      t_fail(__FILE__, __LINE__, "%s: got %s, expected %s", #a,                \
             kt_status_name(a_), kt_status_name(b_));                          \
      return;                                                                  \
    }                                                                          \
  } while (0)

#define ASSERT_STR_EQ(a, b)                                                    \
  do {                                                                         \
    const char *a_ = (a), *b_ = (b);                                           \
    if (strcmp(a_ ? a_ : "(null)", b_ ? b_ : "(null)")) {                      \
      t_fail(__FILE__, __LINE__, "%s:\n    got      \"%s\"\n    expected \"%s\"", #a, a_, b_); \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* A script's summary: the last line of out must be want (with its
** newline); when it is not, all of out goes to stderr first. */
#define ASSERT_LAST_LINE(out, want)                                            \
  do {                                                                         \
    const char *o_ = (out);                                                    \
    if (strcmp(t_last_line(o_), (want))) fprintf(stderr, "%s", o_);            \
    ASSERT_STR_EQ(t_last_line(o_), (want));                                    \
  } while (0)

#define ASSERT_CONTAINS(hay, needle)                                           \
  do {                                                                         \
    const char *h_ = (hay), *n_ = (needle);                                    \
    if (!h_ || !strstr(h_, n_)) {                                              \
      t_fail(__FILE__, __LINE__, "%s:\n    \"%s\"\n    does not contain \"%s\"", #hay, h_ ? h_ : "(null)", n_); \
      return;                                                                  \
    }                                                                          \
  } while (0)

#define SKIP(why)  \
  do {             \
    t_skip(why);   \
    return;        \
  } while (0)

#endif
