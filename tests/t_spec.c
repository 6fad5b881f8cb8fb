/* Spec loading: the bundled specs load; malformed ones are refused with a
** message naming the file, the field and what is wrong. */
#include <stdlib.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "harness.h"
#include "spec/spec.h"

static const char base[] =
    "{\"name\": \"k\", \"source\": \"rmsnorm.cu\", \"entry\": \"rmsnorm_fwd\",\n"
    " \"template\": [\"T\", \"BLOCK\", \"HAS_RES\"],\n"
    " \"types\": {\"T\": [\"f32\", \"bf16\"]},\n"
    " \"params\": [\n"
    "  {\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"T\", \"access\": \"out\", \"extent\": \"N*D\"},\n"
    "  {\"name\": \"res\", \"type\": \"ptr\", \"dtype\": \"T\", \"access\": \"in\", \"extent\": \"N*D\", \"optional\": true},\n"
    "  {\"name\": \"N\", \"type\": \"i32\", \"key\": \"ignore\"},\n"
    "  {\"name\": \"D\", \"type\": \"i32\"},\n"
    "  {\"name\": \"eps\", \"type\": \"f32\"}],\n"
    " \"derived\": {\"HAS_RES\": \"res != 0\"},\n"
    " \"config\": {\"BLOCK\": [128, 256]}, \"default\": {\"BLOCK\": 128},\n"
    " \"constraints\": [\"BLOCK <= max(D, 128)\"],\n"
    " \"grid\": [\"cdiv(N, 4)\"], \"block\": [\"BLOCK\"]}\n";

/* The first occurrence of from in text (n bytes) replaced by to; -1 when
** from is not there or the result does not fit. */
static int replace(char *text, size_t n, const char *from, const char *to) {
  char *at = strstr(text, from), tail[4096];
  if (!at || strlen(text) - strlen(from) + strlen(to) >= n) return -1;
  snprintf(tail, sizeof tail, "%s", at + strlen(from));
  snprintf(at, n - (size_t)(at - text), "%s%s", to, tail);
  return 0;
}

/* base with the first occurrence of `from` replaced by `to`. */
static char *edit(const char *from, const char *to) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s", base);
  if (replace(buf, sizeof buf, from, to)) snprintf(buf, sizeof buf, "(edit: \"%s\" not in base)", from);
  return buf;
}

static kt_status parse(const char *text, char *err, size_t n, kt__spec **out) {
  err[0] = 0;
  return kt__spec_parse("bad.json", text, strlen(text), "kernels_src", out, err, n);
}

#define BAD(text, want_status, want_msg)                    \
  do {                                                      \
    char err_[2048];                                        \
    kt__spec *s_ = NULL;                                    \
    kt_status st_ = parse(text, err_, sizeof err_, &s_);    \
    kt__spec_free(s_);                                      \
    ASSERT_STR_EQ(err_, want_msg);                          \
    ASSERT_STATUS(st_, want_status);                        \
    ASSERT_TRUE(s_ == NULL);                                \
  } while (0)

static void base_spec_loads(void) {
  char err[2048];
  kt__spec *s;
  ASSERT_STATUS(parse(base, err, sizeof err, &s), KT_OK);
  ASSERT_EQ(s->nparams, 5);
  ASSERT_EQ(s->ncfields, 1);
  ASSERT_EQ(s->nderived, 1);
  ASSERT_EQ(s->ntargs, 3);
  ASSERT_EQ(s->params[2].key, KT__KEY_IGNORE);
  ASSERT_EQ(s->params[3].key, KT__KEY_EXACT);
  ASSERT_EQ(s->params[1].optional, 1);
  ASSERT_EQ(s->inplace, 1);
  ASSERT_TRUE(s->derived[0].e.is_bool);
  ASSERT_TRUE(!s->derived[0].uses_config);
  ASSERT_TRUE(s->constraints[0].uses_config);
  ASSERT_STR_EQ(s->grid[0].text, "cdiv(N, 4)");
  ASSERT_STR_EQ(s->grid[1].text, "1");
  kt__spec_free(s);
  /* Which constraints a config moves: directly, through a derived constant
  ** that reads one, or through smem. */
  char spec[4096];
  snprintf(spec, sizeof spec, "%s", base);
  ASSERT_TRUE(!replace(spec, sizeof spec, "\"HAS_RES\"]", "\"HAS_RES\", \"BIG\"]") &&
              !replace(spec, sizeof spec, "\"derived\": {\"HAS_RES\": \"res != 0\"}",
                       "\"derived\": {\"HAS_RES\": \"res != 0\", \"BIG\": \"BLOCK > 128\"}, \"smem\": \"BLOCK * 4\"") &&
              !replace(spec, sizeof spec, "[\"BLOCK <= max(D, 128)\"]",
                       "[\"D > 0\", \"HAS_RES || D > 1\", \"BIG || D > 2\", \"smem < 49152\", \"BLOCK > 0\"]"));
  ASSERT_STATUS(parse(spec, err, sizeof err, &s), KT_OK);
  ASSERT_EQ(s->nconstraints, 5);
  static const int moves[] = {0, 0, 1, 1, 1};
  for (int i = 0; i < 5; i++) ASSERT_EQ(s->constraints[i].uses_config, moves[i]);
  kt__spec_free(s);
}

static void bundled_specs_load(void) {
  char err[2048];
  kt__spec *s;
  ASSERT_STATUS(kt__spec_load("kernels_src/rmsnorm.json", &s, err, sizeof err), KT_OK);
  ASSERT_STR_EQ(s->name, "rmsnorm_fwd");
  ASSERT_EQ(s->nparams, 7);
  ASSERT_EQ(s->ncfields, 3);
  ASSERT_EQ(s->ntypes, 1);
  ASSERT_EQ(s->types[0].n, 3);
  ASSERT_EQ(s->params[4].key, KT__KEY_IGNORE);
  ASSERT_TRUE(s->source_hash != 0);
  kt__spec_free(s);
}

/* The spec hash covers what changes code or launch, not the candidates: a
** config value added to the space must not invalidate tunings. */
static void spec_hash_ignores_candidates(void) {
  char err[2048];
  kt__spec *a, *b, *c, *d;
  ASSERT_STATUS(parse(base, err, sizeof err, &a), KT_OK);
  ASSERT_STATUS(parse(edit("[128, 256]", "[128, 256, 512]"), err, sizeof err, &b), KT_OK);
  ASSERT_STATUS(parse(edit("\"BLOCK <= max(D, 128)\"", "\"BLOCK <= 1024\""), err, sizeof err, &c),
                KT_OK);
  ASSERT_STATUS(parse(edit("cdiv(N, 4)", "cdiv(N, 2)"), err, sizeof err, &d), KT_OK);
  uint64_t ha = a->spec_hash, hb = b->spec_hash, hc = c->spec_hash, hd = d->spec_hash;
  kt__spec_free(a);
  kt__spec_free(b);
  kt__spec_free(c);
  kt__spec_free(d);
  ASSERT_TRUE(ha == hb);
  ASSERT_TRUE(ha == hc);
  ASSERT_TRUE(ha != hd);
}

/* options.pdl lets the runtime start the kernel while the one before it
** drains: only a source that waits for that kernel may ask for it. The
** option changes the launch, so it is in the spec hash. */
static void early_launch_needs_a_wait(void) {
  static const char close[] = "\"block\": [\"BLOCK\"]}";
  BAD(edit(close, "\"block\": [\"BLOCK\"], \"options\": {\"pdl\": 1}}"), KT_ERR_SPEC,
      "bad.json: options.pdl: must be true or false");
  BAD(edit(close, "\"block\": [\"BLOCK\"], \"options\": {\"pdl\": true}}"), KT_ERR_SPEC,
      "bad.json: options.pdl: kernels_src/rmsnorm.cu never waits for the previous kernel (griddepcontrol.wait)");
  char text[4096], err[2048];
  kt__spec *a, *b;
  snprintf(text, sizeof text, "%s", edit("rmsnorm.cu", "layernorm.cu"));
  ASSERT_STATUS(parse(text, err, sizeof err, &a), KT_OK);
  char *at = strstr(text, close);
  ASSERT_TRUE(at != NULL);
  snprintf(at, sizeof text - (size_t)(at - text), "%s", "\"block\": [\"BLOCK\"], \"options\": {\"pdl\": true}}");
  ASSERT_STATUS(parse(text, err, sizeof err, &b), KT_OK);
  const int pa = a->pdl, pb = b->pdl;
  const uint64_t ha = a->spec_hash, hb = b->spec_hash;
  kt__spec_free(a);
  kt__spec_free(b);
  ASSERT_EQ(pa, 0);
  ASSERT_EQ(pb, 1);
  ASSERT_TRUE(ha != hb);
}

static void malformed_json(void) {
  BAD("{\"name\": \"k\",\n  \"source\": }", KT_ERR_SPEC,
      "bad.json: line 2, column 13: expected a JSON value");
  BAD("[1, 2]", KT_ERR_SPEC, "bad.json: (top level): expected a JSON object");
  BAD(edit("\"constraints\"", "\"constriants\""), KT_ERR_SPEC,
      "bad.json: (top level): unknown field \"constriants\"");
}

/* What cJSON alone would accept silently, or choke on. */
static void hostile_json(void) {
  char text[4096], err[2048];
  kt__spec *s = NULL;
  snprintf(text, sizeof text, "%s junk", base);
  BAD(text, KT_ERR_SPEC, "bad.json: line 14, column 2: text after the JSON value");
  /* Text after a NUL byte: the whole file counts, not the C string. */
  size_t n = strlen(base);
  memcpy(text, base, n);
  memcpy(text + n, "\0{\"x\": 1}", 10);
  ASSERT_STATUS(kt__spec_parse("bad.json", text, n + 10, "kernels_src", &s, err, sizeof err), KT_ERR_SPEC);
  ASSERT_STR_EQ(err, "bad.json: line 14, column 1: a NUL byte");
  ASSERT_TRUE(s == NULL);
  BAD(edit("\"name\": \"k\",", "\"name\": \"k\", \"name\": \"j\","), KT_ERR_SPEC,
      "bad.json: (top level): \"name\" given twice");
  BAD(edit("\"access\": \"out\"", "\"access\": \"out\", \"access\": \"in\""), KT_ERR_SPEC,
      "bad.json: params[0]: \"access\" given twice");
  BAD(edit("{\"BLOCK\": [128, 256]}", "{\"BLOCK\": [128], \"BLOCK\": [256]}"), KT_ERR_SPEC,
      "bad.json: config: \"BLOCK\" given twice");
  BAD(edit("\"entry\": \"rmsnorm_fwd\"", "\"entry\": \"rms\\u0000norm\""), KT_ERR_SPEC,
      "bad.json: line 1, column 52: a string holds a NUL character (\\u0000)");
  /* An escaped backslash before u0000 is no NUL. */
  BAD(edit("\"name\": \"k\"", "\"name\": \"k\\\\u0000\""), KT_ERR_SPEC,
      "bad.json: name: missing or not an identifier");
  /* 2^53 + 1 would read as 2^53. */
  BAD(edit("[128, 256]", "[128, 9007199254740993]"), KT_ERR_SPEC,
      "bad.json: config.BLOCK: values must be integers below 2^53");
  BAD(edit("[\"cdiv(N, 4)\"]", "[9007199254740992]"), KT_ERR_SPEC,
      "bad.json: grid[0]: expected an expression (a string, or an integer below 2^53)");
  /* Nesting that cJSON would refuse only at 1000 levels. */
  size_t u = (size_t)snprintf(text, sizeof text, "{\"name\": ");
  for (int i = 0; i < 600; i++) text[u++] = '[';
  text[u] = 0;
  BAD(text, KT_ERR_SPEC, "bad.json: line 1, column 521: nests more than 512 levels deep");
}

/* A source or spec that is not a regular file, or too large, is refused
** without reading it: /dev/zero would read until memory ran out, a FIFO
** would block forever. */
static void sources_must_be_regular_files(void) {
  const char *dir = t_tmpdir();
  ASSERT_TRUE(dir);
  char fifo[700], big[700], text[4096];
  snprintf(fifo, sizeof fifo, "%s/k.cu", dir);
  ASSERT_EQ(mkfifo(fifo, 0600), 0);
  snprintf(big, sizeof big, "%s/big.cu", dir);
  FILE *f = fopen(big, "w");
  ASSERT_TRUE(f);
  ASSERT_EQ(fseek(f, (4 << 20), SEEK_SET), 0);
  fputc('x', f);
  fclose(f);
  snprintf(text, sizeof text, "%s", edit("\"rmsnorm.cu\"", "\"/dev/zero\""));
  BAD(text, KT_ERR_SPEC, "bad.json: source: cannot read /dev/zero: not a regular file");
  char src[800];
  snprintf(src, sizeof src, "\"%s\"", fifo);
  snprintf(text, sizeof text, "%s", edit("\"rmsnorm.cu\"", src));
  char want[1200];
  snprintf(want, sizeof want, "bad.json: source: cannot read %s: not a regular file", fifo);
  BAD(text, KT_ERR_SPEC, want);
  snprintf(src, sizeof src, "\"%s\"", big);
  snprintf(text, sizeof text, "%s", edit("\"rmsnorm.cu\"", src));
  snprintf(want, sizeof want, "bad.json: source: cannot read %s: larger than 4194304 bytes", big);
  BAD(text, KT_ERR_SPEC, want);
  char err[2048];
  kt__spec *s;
  ASSERT_STATUS(kt__spec_load(fifo, &s, err, sizeof err), KT_ERR_SPEC);
  snprintf(want, sizeof want, "%s: cannot read: not a regular file", fifo);
  ASSERT_STR_EQ(err, want);
  ASSERT_STATUS(kt__spec_load("/dev/zero", &s, err, sizeof err), KT_ERR_SPEC);
  ASSERT_STR_EQ(err, "/dev/zero: cannot read: not a regular file");
  t_sh(text, sizeof text, "rm -rf '%s'", dir);
}

static void malformed_top_level(void) {
  BAD(edit("\"name\": \"k\"", "\"name\": \"k-1\""), KT_ERR_SPEC,
      "bad.json: name: missing or not an identifier");
  BAD(edit("rmsnorm.cu", "nope.cu"), KT_ERR_IO,
      "bad.json: source: cannot read kernels_src/nope.cu: No such file or directory");
  BAD(edit("\"entry\": \"rmsnorm_fwd\"", "\"entry\": \"f(x)\""), KT_ERR_SPEC,
      "bad.json: entry: \"f(x)\" is not a C++ name");
  BAD(edit("[\"cdiv(N, 4)\"]", "[1, 1, 1, 1]"), KT_ERR_SPEC,
      "bad.json: grid: expected 1 to 3 expressions (x, y, z)");
  BAD(edit("\"block\": [\"BLOCK\"]", "\"blocks\": [\"BLOCK\"]"), KT_ERR_SPEC,
      "bad.json: (top level): unknown field \"blocks\"");
}

static void malformed_params(void) {
  BAD(edit("\"name\": \"res\"", "\"name\": \"y\""), KT_ERR_SPEC,
      "bad.json: params[1]: 'y' is defined twice");
  BAD(edit("\"name\": \"N\", \"type\": \"i32\"", "\"name\": \"N\", \"type\": \"u7\""), KT_ERR_SPEC,
      "bad.json: params[2] (N): \"type\" must be \"ptr\", \"i32\", \"i64\" or \"f32\", not \"u7\"");
  BAD(edit("\"access\": \"out\"", "\"access\": \"rw\""), KT_ERR_SPEC,
      "bad.json: params[0] (y): \"access\" must be \"in\", \"out\", \"inout\" or \"consumed\"");
  BAD(edit("\"access\": \"out\", \"extent\": \"N*D\"", "\"access\": \"out\""), KT_ERR_SPEC,
      "bad.json: params[0] (y).extent: missing: a pointer param needs its extent in elements");
  BAD(edit("\"extent\": \"N*D\"", "\"extent\": \"N*\""), KT_ERR_SPEC,
      "bad.json: params[0] (y).extent: column 3: unexpected end of expression in \"N*\"");
  BAD(edit("\"key\": \"ignore\"", "\"key\": \"sometimes\""), KT_ERR_SPEC,
      "bad.json: params[2] (N): \"key\" must be \"exact\", \"pow2\" or \"ignore\"");
  BAD(edit("\"dtype\": \"T\"", "\"dtype\": \"T2\""), KT_ERR_SPEC,
      "bad.json: params[0] (y): \"dtype\": \"T2\" is neither a dtype nor a type variable");
  BAD(edit("\"extent\": \"N*D\"", "\"extent\": \"N*eps\""), KT_ERR_SPEC,
      "bad.json: params[0] (y).extent: column 3: f32 param 'eps' cannot be used in an integer "
      "expression in \"N*eps\"");
  BAD(edit("\"extent\": \"N*D\", \"optional\"", "\"extent\": \"N*D\", \"atol\": 0.1, \"optional\""),
      KT_ERR_SPEC, "bad.json: params[1] (res): \"atol\" applies to outputs; this param is an input");
  BAD(edit("\"access\": \"in\", \"extent\": \"N*D\", \"optional\"",
           "\"access\": \"consumed\", \"extent\": \"N*D\", \"rtol\": 0.1, \"optional\""),
      KT_ERR_SPEC, "bad.json: params[1] (res): \"rtol\" applies to outputs; this param is consumed (never compared)");
  BAD(edit("\"name\": \"eps\"", "\"name\": \"smem\""), KT_ERR_SPEC,
      "bad.json: params[4]: 'smem' is reserved");
  BAD(edit("\"extent\": \"N*D\"", "\"extent\": \"N*BLOCK\""), KT_ERR_SPEC,
      "bad.json: params[0] (y).extent: column 3: unknown name 'BLOCK' in \"N*BLOCK\"");
}

/* Names are at most 64 characters (keys and configs then fit their bounds,
** KT_KEY_MAX and KT_CONFIG_MAX), entries 256. */
static void names_are_bounded(void) {
  char n64[65], n65[66], e256[257], e257[258], from[80], to[300];
  memset(n64, 'a', 64), n64[64] = 0;
  memset(n65, 'a', 65), n65[65] = 0;
  memset(e256, 'e', 256), e256[256] = 0;
  memset(e257, 'e', 257), e257[257] = 0;
  kt__spec *s = NULL;
  char err[2048];
  snprintf(to, sizeof to, "\"name\": \"%s\"", n64);
  ASSERT_STATUS(parse(edit("\"name\": \"eps\"", to), err, sizeof err, &s), KT_OK);
  kt__spec_free(s);
  snprintf(to, sizeof to, "\"name\": \"%s\"", n65);
  BAD(edit("\"name\": \"eps\"", to), KT_ERR_SPEC, "bad.json: params[4]: 'aaaaaaaaaaaaaaaa...' is longer than 64 characters");
  snprintf(from, sizeof from, "\"name\": \"k\"");
  snprintf(to, sizeof to, "\"name\": \"%s\"", n65);
  BAD(edit(from, to), KT_ERR_SPEC, "bad.json: name: 'aaaaaaaaaaaaaaaa...' is longer than 64 characters");
  snprintf(to, sizeof to, "\"entry\": \"%s\"", e256);
  ASSERT_STATUS(parse(edit("\"entry\": \"rmsnorm_fwd\"", to), err, sizeof err, &s), KT_OK);
  kt__spec_free(s);
  snprintf(to, sizeof to, "\"entry\": \"%s\"", e257);
  BAD(edit("\"entry\": \"rmsnorm_fwd\"", to), KT_ERR_SPEC,
      "bad.json: entry: \"eeeeeeeeeeeeeeee...\" is longer than 256 characters");
  snprintf(to, sizeof to, "\"derived\": {\"%s\"", n65);
  char want[200];
  snprintf(want, sizeof want, "bad.json: derived.%s: 'aaaaaaaaaaaaaaaa...' is longer than 64 characters", n65);
  BAD(edit("\"derived\": {\"HAS_RES\"", to), KT_ERR_SPEC, want);
}

/* "tune_at" gives a size the key leaves out the value a tuning times the
** key at: only such a size may have one, its expression may use params and
** builtins, and it is in the spec hash (tunings made without it are made
** again). */
static void tune_at_is_for_sizes_the_key_ignores(void) {
  char err[2048];
  kt__spec *a, *b;
  ASSERT_STATUS(parse(base, err, sizeof err, &a), KT_OK);
  ASSERT_STATUS(parse(edit("\"key\": \"ignore\"", "\"key\": \"ignore\", \"tune_at\": \"cdiv(1048576, D) + num_sms\""),
                      err, sizeof err, &b),
                KT_OK);
  ASSERT_TRUE(a->params[2].tune_at.text == NULL);
  ASSERT_STR_EQ(b->params[2].tune_at.text, "cdiv(1048576, D) + num_sms");
  uint64_t ha = a->spec_hash, hb = b->spec_hash;
  kt__spec_free(a);
  kt__spec_free(b);
  ASSERT_TRUE(ha != hb);
  BAD(edit("{\"name\": \"D\", \"type\": \"i32\"}", "{\"name\": \"D\", \"type\": \"i32\", \"tune_at\": \"64\"}"),
      KT_ERR_SPEC,
      "bad.json: params[3] (D).tune_at: applies to a size the key ignores (\"key\": \"ignore\"); this one is in the key");
  BAD(edit("{\"name\": \"eps\", \"type\": \"f32\"}", "{\"name\": \"eps\", \"type\": \"f32\", \"tune_at\": \"1\"}"),
      KT_ERR_SPEC, "bad.json: params[4] (eps).tune_at: applies to integer scalar params only");
  BAD(edit("\"extent\": \"N*D\"}", "\"extent\": \"N*D\", \"tune_at\": \"1\"}"), KT_ERR_SPEC,
      "bad.json: params[0] (y).tune_at: applies to integer scalar params only");
  BAD(edit("\"key\": \"ignore\"", "\"key\": \"ignore\", \"tune_at\": \"cdiv(4096,\""), KT_ERR_SPEC,
      "bad.json: params[2] (N).tune_at: column 11: unexpected end of expression in \"cdiv(4096,\"");
  BAD(edit("\"key\": \"ignore\"", "\"key\": \"ignore\", \"tune_at\": \"BLOCK * 4\""), KT_ERR_SPEC,
      "bad.json: params[2] (N).tune_at: column 1: unknown name 'BLOCK' in \"BLOCK * 4\"");
  BAD(edit("\"key\": \"ignore\"", "\"key\": \"ignore\", \"tune_at\": true"), KT_ERR_SPEC,
      "bad.json: params[2] (N).tune_at: expected an expression (a string, or an integer below 2^53)");
}

static void write_text(const char *dir, const char *name, const char *text) {
  char path[800];
  (void)t_write_file(dir, name, text, path, sizeof path);
}

/* The spec hash covers the headers a source includes by quoted name, found
** beside it: editing one changes the hash (and so every cubin's); an
** unreadable header, or includes that never end, are named. */
static void headers_are_in_the_hash(void) {
  const char *dir = t_tmpdir();
  char text[4096], err[2048], want[2048], path[800];
  snprintf(path, sizeof path, "%s/k.cu", dir);
  write_text(dir, "k.cu", "#include <cuda_fp16.h>\n  #  include \"h.cuh\"\n#include \"toolkit_only.h\"\n"
                          "template <int BLOCK> __global__ void k(float *y) {}\n");
  write_text(dir, "h.cuh", "#include \"sub/g.cuh\"\n");
  char sub[800];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  ASSERT_EQ(mkdir(sub, 0700), 0);
  write_text(sub, "g.cuh", "#define G 1\n");
  snprintf(text, sizeof text,
           "{\"name\": \"k\", \"source\": \"k.cu\", \"entry\": \"k\", \"template\": [\"BLOCK\"],\n"
           " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\", "
           "\"extent\": \"64\"}],\n"
           " \"config\": {\"BLOCK\": [64]}, \"default\": {\"BLOCK\": 64}, \"grid\": \"1\", \"block\": \"BLOCK\"}\n");
  uint64_t h[3];
  kt__spec *s = NULL;
  for (int i = 0; i < 3; i++) {
    if (i == 1) write_text(sub, "g.cuh", "#define G 2\n");
    if (i == 2) write_text(dir, "k.cu", "#include \"h.cuh\"\ntemplate <int BLOCK> __global__ void k(float *y) {}\n");
    ASSERT_STATUS(kt__spec_parse("k.json", text, strlen(text), dir, &s, err, sizeof err), KT_OK);
    if (!s) return;
    h[i] = s->spec_hash;
    ASSERT_STR_EQ(s->source_dir, dir);
    kt__spec_free(s);
  }
  ASSERT_TRUE(h[0] != h[1] && h[1] != h[2] && h[0] != h[2]);
  /* A header that is not a regular file. */
  char fifo[800];
  snprintf(fifo, sizeof fifo, "%s/sub/g.cuh", dir);
  ASSERT_EQ(remove(fifo), 0);
  ASSERT_EQ(mkfifo(fifo, 0600), 0);
  ASSERT_STATUS(kt__spec_parse("k.json", text, strlen(text), dir, &s, err, sizeof err), KT_ERR_SPEC);
  snprintf(want, sizeof want, "k.json: source: cannot read %s (included by h.cuh): not a regular file", fifo);
  ASSERT_STR_EQ(err, want);
  /* Includes that never end. */
  for (int i = 0; i < 9; i++) {
    char name[16], inc[64];
    snprintf(name, sizeof name, "n%d.cuh", i);
    snprintf(inc, sizeof inc, "#include \"n%d.cuh\"\n", i + 1);
    write_text(dir, name, inc);
  }
  write_text(dir, "h.cuh", "#include \"n0.cuh\"\n");
  ASSERT_STATUS(kt__spec_parse("k.json", text, strlen(text), dir, &s, err, sizeof err), KT_ERR_SPEC);
  ASSERT_STR_EQ(err, "k.json: source: n7.cuh (included by n6.cuh): more than 32 headers or 8 levels of includes");
  /* A name too long to look up is refused: left out, it would leave its
  ** header out of the hash. */
  static char inc[400];
  snprintf(inc, sizeof inc, "#include \"%0300d.cuh\"\n", 0);
  write_text(dir, "h.cuh", inc);
  ASSERT_STATUS(kt__spec_parse("k.json", text, strlen(text), dir, &s, err, sizeof err), KT_ERR_SPEC);
  ASSERT_STR_EQ(err, "k.json: source: #include \"000000000000000000000000000000... (in h.cuh): the name is longer than "
                     "255 bytes");
  t_sh(text, sizeof text, "rm -rf '%s'", dir);
}

/* The spec hash of a spec named k.json whose k.cu (in dir) holds src,
** or 0 with the error in err. */
static uint64_t hash_of(const char *dir, const char *src, char *err, size_t errlen) {
  static const char spec[] =
      "{\"name\": \"k\", \"source\": \"k.cu\", \"entry\": \"k\", \"template\": [\"BLOCK\"],\n"
      " \"params\": [{\"name\": \"y\", \"type\": \"ptr\", \"dtype\": \"f32\", \"access\": \"out\", \"extent\": \"64\"}],\n"
      " \"config\": {\"BLOCK\": [64]}, \"default\": {\"BLOCK\": 64}, \"grid\": \"1\", \"block\": \"BLOCK\"}\n";
  size_t n = strlen(src) + 64;
  char *text = malloc(n);
  if (!text) return 0;
  snprintf(text, n, "%s\ntemplate <int BLOCK> __global__ void k(float *y) {}\n", src);
  write_text(dir, "k.cu", text);
  free(text);
  kt__spec *s = NULL;
  if (kt__spec_parse("k.json", spec, strlen(spec), dir, &s, err, errlen)) return 0;
  uint64_t h = s->spec_hash;
  kt__spec_free(s);
  return h;
}

/* Headers are found where NVRTC finds them, and each is read once: a name
** in angle brackets, or one in quotes that is not beside the header naming
** it, is looked for in the source's directory (NVRTC's include path); a
** header included again (guards, cycles, two headers sharing a third)
** adds nothing. A name the preprocessor computes, and a flag that adds an
** include path, are refused: the headers they reach could not be hashed. */
static void headers_found_as_nvrtc_finds_them(void) {
  const char *dir = t_tmpdir();
  char err[2048], sub[800], out[256];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  ASSERT_EQ(mkdir(sub, 0700), 0);
  write_text(dir, "c.cuh", "#define C 1\n");
  write_text(sub, "a.cuh", "#pragma once\n#include \"c.cuh\"\n#include \"b.cuh\"\n");
  write_text(sub, "b.cuh", "#pragma once\n#include \"a.cuh\"\n");
  static const char *const srcs[] = {"#include <c.cuh>", "#include \"sub/a.cuh\"", "#include\"sub/b.cuh\"",
                                     "#include \\\n  \"c.cuh\"", "# /* a\n comment */ include /**/ <c.cuh>",
                                     "#\\\r\ninclude \"c.cuh\"", "%:include \"c.cuh\"",
                                     "#if __has_include(\"c.cuh\")\n#endif", "#if 1 && __has_include ( <c.cuh> )\n#endif"};
  for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++) {
    uint64_t h0 = hash_of(dir, srcs[i], err, sizeof err);
    ASSERT_TRUE(h0 != 0);
    if (!h0) printf("    %s: %s\n", srcs[i], err);
    write_text(dir, "c.cuh", "#define C 2\n");
    ASSERT_TRUE(h0 != hash_of(dir, srcs[i], err, sizeof err));
    write_text(dir, "c.cuh", "#define C 1\n");
  }
  /* One header named 40 times is one header of the 32. */
  char many[2048] = "";
  for (int i = 0; i < 40; i++) strcat(many, "#include \"c.cuh\"\n");
  ASSERT_TRUE(hash_of(dir, many, err, sizeof err) != 0);
  ASSERT_EQ(hash_of(dir, "#define HDR \"c.cuh\"\n  #  include HDR // the header", err, sizeof err), 0);
  ASSERT_STR_EQ(err, "k.json: source: #include HDR (in k.cu): a name the preprocessor computes cannot be read for "
                     "the hash; write the header's name in quotes");
  ASSERT_EQ(hash_of(dir, "#include HDR /* the header */", err, sizeof err), 0);
  ASSERT_EQ(hash_of(dir, "#if defined(H) && __has_include(H)\n#endif", err, sizeof err), 0);
  ASSERT_STR_EQ(err, "k.json: source: __has_include(H) (in k.cu): a name the preprocessor computes cannot be read "
                     "for the hash; write the header's name in quotes");
  ASSERT_TRUE(hash_of(dir, "#if __has_include_next(<x.h>) || my__has_include(1)\n#endif", err, sizeof err));
  ASSERT_TRUE(hash_of(dir, "#include <cuda_fp16.h>\n#include_next <x.h>\n# include files below", err, sizeof err));
  /* A source of block comments that never close, one a line, up to the
  ** 4 MiB a source may hold: read in one pass, not one a line. */
  static char opened[(4 << 20) - 64];
  for (size_t i = 0; i + 3 < sizeof opened; i += 3) memcpy(opened + i, "/*\n", 3);
  ASSERT_TRUE(hash_of(dir, opened, err, sizeof err) != 0);
  static const char *const flags[] = {"-I/opt/x", "--include-path=/opt/x", "-include=c.cuh", "--pre-include=c.cuh"};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    char text[4096], want[512];
    snprintf(text, sizeof text, "%s", edit("\"block\": [\"BLOCK\"]}", "\"block\": [\"BLOCK\"], \"options\": {}}"));
    char *at = strstr(text, "{}}");
    ASSERT_TRUE(at != NULL);
    if (!at) return;
    snprintf(at, sizeof text - (size_t)(at - text), "{\"flags\": [\"%s\"]}}", flags[i]);
    snprintf(want, sizeof want, "bad.json: options.flags: \"%s\": headers come from the source's directory alone, "
             "so that every header a variant is compiled from is in the spec hash", flags[i]);
    BAD(text, KT_ERR_SPEC, want);
  }
  t_sh(out, sizeof out, "rm -rf '%s'", dir);
}

/* "init" is checked when the spec loads, not when ktune tune first makes
** inputs from it: one message naming the param and what is accepted. */
static void malformed_init(void) {
  const char *res = "\"extent\": \"N*D\", \"optional\"";
  static const struct {
    const char *init, *msg;
  } cases[] = {
      {"randm", "\"randm\" is not a generator (randn, uniform(a,b), ones, zeros, arange, permutation(n), mask(p), "
                "or a number)"},
      {"uniform(1)", "\"uniform(1)\" is not a generator (randn, uniform(a,b), ones, zeros, arange, permutation(n), "
                     "mask(p), or a number)"},
      {"uniform(2,1)", "\"uniform(2,1)\" is not a generator (randn, uniform(a,b), ones, zeros, arange, "
                       "permutation(n), mask(p), or a number)"},
      {"mask(1.5)", "\"mask(1.5)\" is not a generator (randn, uniform(a,b), ones, zeros, arange, permutation(n), "
                    "mask(p), or a number)"},
      {"ones()", "\"ones()\" is not a generator (randn, uniform(a,b), ones, zeros, arange, permutation(n), mask(p), "
                 "or a number)"},
      {"nan", "\"nan\" is not a generator (randn, uniform(a,b), ones, zeros, arange, permutation(n), mask(p), or a "
              "number)"},
      {"permutation(M)", "permutation(M): expected a number > 0 or an integer scalar param"},
      {"permutation(0)", "permutation(0): expected a number > 0 or an integer scalar param"},
      {"permutation(eps)", "permutation(eps): eps is not an integer scalar param"},
      {"permutation(y)", "permutation(y): y is not an integer scalar param"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char to[256], want[512];
    snprintf(to, sizeof to, "\"extent\": \"N*D\", \"init\": \"%s\", \"optional\"", cases[i].init);
    snprintf(want, sizeof want, "bad.json: params[1] (res).init: %s", cases[i].msg);
    BAD(edit(res, to), KT_ERR_SPEC, want);
  }
  BAD(edit("\"key\": \"ignore\"", "\"key\": \"ignore\", \"init\": \"randn\""), KT_ERR_SPEC,
      "bad.json: params[2] (N).init: a scalar's init is a number (its value when a shape leaves it out), not "
      "\"randn\"");
  /* The accepted forms parse to what the inputs are made from. */
  static const char *good[] = {"randn", "uniform(-0.5,0.5)", "ones", "zeros", "arange", "permutation(N)",
                               "permutation(7)", "mask(0.25)", "-3.5"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    char to[256], err[1024];
    snprintf(to, sizeof to, "\"extent\": \"N*D\", \"init\": \"%s\", \"optional\"", good[i]);
    kt__spec *s = NULL;
    ASSERT_STATUS(parse(edit(res, to), err, sizeof err, &s), KT_OK);
    if (!s) continue;
    ASSERT_STR_EQ(s->params[1].init, good[i]);
    kt__spec_free(s);
  }
  kt__gen g;
  ASSERT_EQ(kt__gen_parse("uniform(-0.5,0.5)", &g), 0);
  ASSERT_TRUE(g.kind == KT__G_UNIFORM && g.a == -0.5 && g.b == 0.5);
  ASSERT_EQ(kt__gen_parse("mask(0.25)", &g), 0);
  ASSERT_TRUE(g.kind == KT__G_MASK && g.a == 0.25);
  ASSERT_EQ(kt__gen_parse("permutation(N)", &g), 0);
  ASSERT_TRUE(g.kind == KT__G_PERMUTATION && !strcmp(g.arg, "N"));
  ASSERT_EQ(kt__gen_parse("-3.5", &g), 0);
  ASSERT_TRUE(g.kind == KT__G_NUMBER && g.a == -3.5);
  ASSERT_EQ(kt__gen_parse("", &g), -1);
  ASSERT_EQ(kt__gen_parse("permutation(N", &g), -1);
}

static void malformed_config(void) {
  BAD(edit("[128, 256]", "[]"), KT_ERR_SPEC,
      "bad.json: config.BLOCK: expected a non-empty array of integers");
  BAD(edit("[128, 256]", "[128, 1.5]"), KT_ERR_SPEC, "bad.json: config.BLOCK: values must be integers below 2^53");
  BAD(edit("[128, 256]", "[128, 128]"), KT_ERR_SPEC, "bad.json: config.BLOCK: value 128 listed twice");
  BAD(edit("{\"BLOCK\": 128}", "{\"BLOCK\": 64}"), KT_ERR_SPEC,
      "bad.json: default.BLOCK: 64 is not in config.BLOCK");
  BAD(edit("{\"BLOCK\": 128}", "{}"), KT_ERR_SPEC, "bad.json: default.BLOCK: missing");
  BAD(edit("{\"BLOCK\": 128}", "{\"BLOCK\": 128, \"VEC\": 1}"), KT_ERR_SPEC,
      "bad.json: default: \"VEC\" is not a config field");
  BAD(edit("\"config\": {\"BLOCK\"", "\"config\": {\"D\": [1], \"BLOCK\""), KT_ERR_SPEC,
      "bad.json: config.D: 'D' is defined twice");
  /* A tuning lists every config: 2^24 of them (four fields of 64) is too
  ** many to list on a miss; 2^22 is the most. */
  char vals[400], cfg[2000];
  t_ints(vals, sizeof vals, 1, 64);
  snprintf(cfg, sizeof cfg, "\"config\": {\"A\": [%s], \"B\": [%s], \"C\": [%s], \"BLOCK\": [%s]}", vals, vals, vals, vals);
  BAD(edit("\"config\": {\"BLOCK\": [128, 256]}", cfg), KT_ERR_SPEC,
      "bad.json: config: the space holds more than 4194304 configs (the product of the fields' value counts)");
}

static void malformed_expressions(void) {
  BAD(edit("BLOCK <= max(D, 128)", "BLOCK <= Q"), KT_ERR_SPEC,
      "bad.json: constraints[0]: column 10: unknown name 'Q' in \"BLOCK <= Q\"");
  BAD(edit("\"res != 0\"", "\"res + 1\""), KT_ERR_SPEC,
      "bad.json: derived.HAS_RES: \"res + 1\" is not a boolean expression: list the values it can "
      "take, {\"expr\": ..., \"values\": [...]}, so that every variant can be compiled ahead of time");
  BAD(edit("{\"HAS_RES\": \"res != 0\"}", "{\"HAS_RES\": \"B > 0\", \"B\": \"D > 1\"}"), KT_ERR_SPEC,
      "bad.json: derived.HAS_RES: column 1: unknown name 'B' in \"B > 0\"");
  BAD(edit("{\"HAS_RES\": \"res != 0\"}", "{\"HAS_RES\": \"res != 0\", \"B\": \"smem > 0\"}"),
      KT_ERR_SPEC,
      "bad.json: derived.B: column 1: 'smem' cannot be used in this derived constant (it is defined "
      "later) in \"smem > 0\"");
  BAD(edit("[\"cdiv(N, 4)\"]", "[\"cdiv(N 4)\"]"), KT_ERR_SPEC,
      "bad.json: grid[0]: column 8: cdiv() takes two arguments in \"cdiv(N 4)\"");
}

static void malformed_template(void) {
  BAD(edit("\"HAS_RES\"]", "\"HAS_RES\", \"VEC\"]"), KT_ERR_SPEC,
      "bad.json: template[3]: \"VEC\" is not a type variable, config field, derived constant or "
      "specialized param");
  /* A param promoted to a compile-time constant: exact key, integer,
  ** and it must reach the code. */
  BAD(edit("\"HAS_RES\"]", "\"HAS_RES\", \"D\"]"), KT_ERR_SPEC,
      "bad.json: template[3]: \"D\" is not a type variable, config field, derived constant or "
      "specialized param");
  BAD(edit("{\"name\": \"D\", \"type\": \"i32\"}", "{\"name\": \"D\", \"type\": \"i32\", \"specialize\": true}"),
      KT_ERR_SPEC, "bad.json: template: specialized param \"D\" is not a template argument");
  BAD(edit("\"key\": \"ignore\"}", "\"key\": \"ignore\", \"specialize\": true}"), KT_ERR_SPEC,
      "bad.json: params[2] (N): a specialized param must have \"key\": \"exact\"");
  BAD(edit("{\"name\": \"eps\", \"type\": \"f32\"}", "{\"name\": \"eps\", \"type\": \"f32\", \"specialize\": true}"),
      KT_ERR_SPEC, "bad.json: params[4] (eps): \"specialize\" applies to integer params");
  BAD(edit("{\"name\": \"D\", \"type\": \"i32\"}", "{\"name\": \"D\", \"type\": \"i32\", \"specialize\": 1}"),
      KT_ERR_SPEC, "bad.json: params[3] (D): \"specialize\" must be true or false");
  BAD(edit("\"BLOCK\", \"HAS_RES\"]", "\"BLOCK\"]"), KT_ERR_SPEC,
      "bad.json: template: compile-time constant \"HAS_RES\" is not a template argument");
  BAD(edit("[\"T\", \"BLOCK\"", "[\"BLOCK\""), KT_ERR_SPEC,
      "bad.json: template: type variable \"T\" is not a template argument");
  BAD(edit("\"HAS_RES\"]", "\"HAS_RES\", \"T\"]"), KT_ERR_SPEC, "bad.json: template[3]: \"T\" listed twice");
}

/* Every allocation of a spec load, made to fail in turn: each failure is
** reported as out of memory and leaks nothing (the ASan run checks that). */
/* Every allocation of a load failing in turn, for the first spec and for
** the forward norm's (derived constants, a long constraint list, tune_at). */
static void out_of_memory_everywhere(void) {
  static const char *paths[] = {"kernels_src/rmsnorm.json", "kernels_src/layernorm_fwd.json"};
  char err[2048];
  kt__spec *s;
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    kt__alloc_fail_after(0);
    ASSERT_STATUS(kt__spec_load(paths[i], &s, err, sizeof err), KT_OK);
    kt__spec_free(s);
    long total = kt__alloc_fail_after(0);
    ASSERT_TRUE(total > 20);
    for (long n = 1; n <= total; n++) {
      kt__alloc_fail_after(n);
      kt_status st = kt__spec_load(paths[i], &s, err, sizeof err);
      kt__alloc_fail_after(0);
      if (st != KT_ERR_NOMEM) {
        kt__spec_free(s);
        t_fail(__FILE__, __LINE__, "%s: allocation %ld of %ld failing gave %s (%s)", paths[i], n, total,
               kt_status_name(st), err);
        return;
      }
      ASSERT_TRUE(s == NULL);
    }
  }
}

const kt_test t_spec_tests[] = {
    {"spec: names are bounded", names_are_bounded},
    {"spec: a well-formed spec loads", base_spec_loads},
    {"spec: the bundled specs load", bundled_specs_load},
    {"spec: hash ignores the candidate list", spec_hash_ignores_candidates},
    {"spec: malformed JSON and unknown fields", malformed_json},
    {"spec: malformed top-level fields", malformed_top_level},
    {"spec: junk after the object or a NUL, duplicate keys, \\u0000, 2^53 + 1", hostile_json},
    {"spec: a source must be a regular file of at most 4 MiB", sources_must_be_regular_files},
    {"spec: options.pdl needs a source that waits", early_launch_needs_a_wait},
    {"spec: malformed params", malformed_params},
    {"spec: tune_at is for sizes the key ignores", tune_at_is_for_sizes_the_key_ignores},
    {"spec: init generators checked at load", malformed_init},
    {"spec: the headers a source includes are in the hash", headers_are_in_the_hash},
    {"spec: headers found as NVRTC finds them, each once; computed names refused", headers_found_as_nvrtc_finds_them},
    {"spec: malformed config and default", malformed_config},
    {"spec: malformed expressions", malformed_expressions},
    {"spec: malformed template", malformed_template},
    {"spec: out of memory at every allocation", out_of_memory_everywhere},
    {NULL, NULL},
};
