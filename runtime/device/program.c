/* A spec made ready to compile: NVRTC options, the variant seed, the key
** layout and the builtins its expressions read. */
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "device/variant.h"

/* NVRTC options: fixed ones, then the spec's. All of them feed the variant
** seed, so a changed option never reuses a module, except the include
** paths (they name a machine's directories, not what is compiled: the
** headers' bytes are in the spec hash) and --no-cache. */
static kt_status program_options(kt__prog *p) {
  const kt__env *env = p->env;
  const kt__spec *s = p->spec;
  if (s->nflags > KT__MAX_FLAGS)
    return kt__err(env->id, KT_ERR_SPEC, "%s: options.flags: at most %d flags", s->path, KT__MAX_FLAGS);
  if (strlen(s->source_dir) + 3 > sizeof p->optbuf[2])
    return kt__err(env->id, KT_ERR_SPEC, "%s: the source's directory name is too long", s->path);
  if (strlen(env->cuda_home) + 11 > sizeof p->optbuf[1])
    return kt__err(env->id, KT_ERR_INVALID, "%s: the toolkit's directory name (cuda_home) is too long", s->path);
  snprintf(p->optbuf[0], sizeof p->optbuf[0], "--gpu-architecture=%s", env->arch);
  snprintf(p->optbuf[1], sizeof p->optbuf[1], "-I%s/include", env->cuda_home);
  snprintf(p->optbuf[2], sizeof p->optbuf[2], "-I%s", s->source_dir);
  snprintf(p->prog_name, sizeof p->prog_name, "%s/%s", s->source_dir, s->source_name);
  /* NVRTC's precompiled headers (--pch, below) are reused for a source
  ** whose includes and options match, without reading the headers again:
  ** a header edited and its spec loaded again compiled from the old text.
  ** A macro of the headers' hash makes their text part of the options. It
  ** changes no output: the hash is in the spec hash already. */
  snprintf(p->headers_opt, sizeof p->headers_opt, "-DKT__HEADERS=0x%016llx", (unsigned long long)s->headers_hash);
  enum { UNHASHED = 4 };
  p->opts[p->nopts++] = p->headers_opt;
  p->opts[p->nopts++] = p->optbuf[1];
  p->opts[p->nopts++] = p->optbuf[2];
  /* The cache keeps every cubin; NVRTC's own cache would keep a second
  ** copy in the driver's, and start the driver in every process that
  ** compiles (helpers included) to do so. It changes no output. */
  p->opts[p->nopts++] = "--no-cache";
  p->opts[p->nopts++] = p->optbuf[0];
  p->opts[p->nopts++] = "-std=c++17";
  /* NVRTC keeps a precompiled form of the toolkit headers in the process:
  ** every variant after the first compiles about a third faster. Only a
  ** helper that owns where NVRTC writes it is asked (device/pchdir.h). */
  p->opts[p->nopts++] = "--pch";
  if (s->fast_math) p->opts[p->nopts++] = "--use_fast_math";
  for (int i = 0; i < s->nflags; i++) p->opts[p->nopts++] = s->flags[i];
  XXH3_state_t *h = XXH3_createState();
  if (!h) return kt__err(env->id, KT_ERR_NOMEM, "%s: out of memory", s->path);
  XXH3_64bits_reset(h);
  XXH3_64bits_update(h, &s->spec_hash, sizeof s->spec_hash);
  for (int i = UNHASHED; i < p->nopts; i++) XXH3_64bits_update(h, p->opts[i], strlen(p->opts[i]) + 1);
  p->variant_seed = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return KT_OK;
}

/* Opt-in shared memory per block by compute capability, for compiling
** without a device (from the CUDA programming guide's table). */
static int64_t offline_smem(int cc) {
  if (cc >= 90) return 232448;
  if (cc == 80 || cc == 87) return 166912;
  if (cc >= 86) return 101376;
  if (cc >= 75) return 65536;
  return 49152;
}

kt_status kt__prog_load(kt__prog *p, kt__env *env, const char *path, int no_pdl) {
  memset(p, 0, sizeof *p);
  p->env = env;
  char err[KT_ERRMAX];
  kt_status st = kt__spec_load(path, &p->spec, err, sizeof err);
  if (st) return kt__err(env->id, st, "%s", err);
  if (kt__vtable_init(&p->vt)) {
    kt__spec_free(p->spec);
    p->spec = NULL;
    return kt__err(env->id, KT_ERR_NOMEM, "%s: out of memory", path);
  }
  if ((st = program_options(p))) {
    kt__prog_free(p);
    return st;
  }
  if (kt__key_define(p->spec, &p->keydef)) {
    kt__prog_free(p);
    return kt__err(env->id, KT_ERR_SPEC, "%s: the tuning key would have more than %d fields", path, KT_MAX_KEY);
  }
  snprintf(p->spec_hash, sizeof p->spec_hash, "%016llx", (unsigned long long)p->spec->spec_hash);
  p->builtins[KT__BUILTIN_NUM_SMS] = env->dev.num_sms;
  p->builtins[KT__BUILTIN_CC] = env->cc;
  p->builtins[KT__BUILTIN_MAX_SMEM] = env->have_device ? env->dev.smem_per_block_optin : offline_smem(env->cc);
  p->builtins[KT__BUILTIN_L2_BYTES] = env->dev.l2_bytes;
  /* The wait is compiled in only for sm_90+: the arch compiled for must
  ** have it, not just the device. */
  p->pdl = p->spec->pdl && !no_pdl && env->have_device && env->cc >= 90 && env->dev.cc_major >= 9;
  return KT_OK;
}

void kt__prog_free(kt__prog *p) {
  if (!p || !p->spec) return;
  kt__vtable_free(&p->vt);
  kt__spec_free(p->spec);
  p->spec = NULL;
}
