/* The spec loader on any bytes: a spec file as written (sources resolve
** beside the bundled kernels). A spec that loads keeps the bounds its
** names promise: its longest key and config (every field at its widest
** value) fit KT_KEY_MAX and KT_CONFIG_MAX whole. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "fuzz.h"
#include "spec/key.h"
#include "spec/spec.h"

/* The widest value of each key field: INT64_MIN, -FLT_MAX's bits for an
** f32 scalar (written with %.9g), a dtype named by the longest name. */
static void widest_key(const kt__keydef *kd, int64_t *key) {
  for (int i = 0; i < kd->n; i++)
    key[i] = kd->f[i].kind == KT__KF_F32 ? 0xff7fffff : kd->f[i].kind == KT__KF_TYPE ? KT_BF16 : INT64_MIN;
}

static void check_bounds(const kt__spec *s) {
  kt__keydef kd;
  int64_t key[KT_MAX_KEY], cfg[KT_MAX_CFIELDS];
  static char json[KT_KEY_JSON_MAX];
  if (kt__key_define(s, &kd)) return; /* a spec of too many key fields is refused where it is loaded */
  widest_key(&kd, key);
  kt__key_json(&kd, key, json, sizeof json);
  if (json[0] != '{') abort();
  for (int i = 0; i < s->ncfields; i++) cfg[i] = INT64_MIN;
  kt__config_json(s, cfg, json, KT_CONFIG_JSON_MAX);
  if (json[0] != '{') abort();
}

int kt_fuzz_spec(const uint8_t *data, size_t size) {
  char err[2048];
  kt__spec *s = NULL;
  if (kt__spec_parse("fuzz.json", (const char *)data, size, "kernels_src", &s, err, sizeof err) == KT_OK) {
    if (!s || !s->name) abort();
    check_bounds(s);
  }
  kt__spec_free(s);
  return 0;
}

KT_FUZZ_ENTRY(kt_fuzz_spec)
