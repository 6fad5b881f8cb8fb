/* permute_rows, masked_softmax and chunk_state on the GPU against float64
** host references, outputs poisoned before each launch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu_util.h"
#include "harness.h"

#define CHECK_BUF(buf, ref, n, atol, rtol, what, ...)                                    \
  do {                                                                                   \
    char m_[600];                                                                        \
    long bad_ = g_buf_check(buf, ref, n, atol, rtol, what, m_, sizeof m_);               \
    if (bad_) {                                                                          \
      char d_[300];                                                                      \
      snprintf(d_, sizeof d_, __VA_ARGS__);                                              \
      t_fail(__FILE__, __LINE__, "%s: %ld bad; first: %s", d_, bad_, m_);                \
      return -1;                                                                         \
    }                                                                                    \
  } while (0)

static void shuffle(int *p, int n, uint64_t *seed) {
  for (int i = 0; i < n; i++) p[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)g_uniform(seed, 0, i + 1);
    int t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

typedef struct pcase {
  int N, D;
  kt_dtype dt;
  int probs, offset;
} pcase;

/* Forward and backward of one permutation; with bad_entry, map[0] is out of
** range: the forward writes a zero row there and the backward skips it. */
static int permute_case(kt_runtime *rt, kt_kernel *kf, kt_kernel *kb, pcase c, int bad_entry, uint64_t seed,
                        const char *cfg) {
  size_t n = (size_t)c.N * c.D;
  g_buf in, out, map, pr, pro, din;
  int rc = -1;
  int *perm = malloc((size_t)(c.N ? c.N : 1) * sizeof *perm);
  double *ref = malloc((n ? n : 1) * sizeof *ref), *rp = malloc((size_t)(c.N + 1) * sizeof *rp);
  memset(&in, 0, sizeof in), memset(&out, 0, sizeof out), memset(&map, 0, sizeof map);
  memset(&pr, 0, sizeof pr), memset(&pro, 0, sizeof pro), memset(&din, 0, sizeof din);
  if (!perm || !ref || !rp || g_buf_make(&in, rt, c.dt, n, c.offset) || g_buf_make(&out, rt, c.dt, n, c.offset) ||
      g_buf_make(&map, rt, KT_I32, (size_t)c.N, 0) || g_buf_make(&pr, rt, KT_F32, (size_t)c.N, 0) ||
      g_buf_make(&pro, rt, KT_F32, (size_t)c.N, 0) || g_buf_make(&din, rt, c.dt, n, c.offset)) {
    t_fail(__FILE__, __LINE__, "setup: %s", kt_errmsg(rt));
    goto done;
  }
  shuffle(perm, c.N, &seed);
  if (bad_entry) perm[0] = c.N + 5;
  for (int j = 0; j < c.N; j++) map.h[j] = perm[j];
  g_buf_rand(&in, &seed, -3, 3);
  g_buf_rand(&pr, &seed, 0, 1);
  for (int j = 0; j < c.N; j++) {
    int s = perm[j];
    int ok = s >= 0 && s < c.N;
    for (int i = 0; i < c.D; i++) ref[(size_t)j * c.D + i] = ok ? in.h[(size_t)s * c.D + i] : 0;
    rp[j] = ok ? pr.h[s] : 0;
  }
  if (g_buf_upload(&in) || g_buf_upload(&map) || g_buf_upload(&pr) || g_buf_poison(&out) || g_buf_poison(&pro))
    goto done;
  kt_arg a[8] = {kt_arg_ptr(out.ptr, c.dt), kt_arg_ptr(in.ptr, c.dt), kt_arg_ptr(map.ptr, KT_I32),
                 kt_arg_ptr(c.probs ? pr.ptr : 0, KT_F32), kt_arg_ptr(c.probs ? pro.ptr : 0, KT_F32),
                 kt_arg_i32(c.N), kt_arg_i32(c.N), kt_arg_i32(c.D)};
  kt_status st = cfg ? kt_launch_config(kf, NULL, a, 8, cfg) : kt_launch(kf, NULL, a, 8);
  if (st == KT_ERR_CONSTRAINT) {
    rc = 1;
    goto done;
  }
  if (st) {
    t_fail(__FILE__, __LINE__, "permute_rows N=%d D=%d %s: %s", c.N, c.D, cfg ? cfg : "", kt_errmsg(rt));
    goto done;
  }
  {
    char m[600];
    long bad = g_buf_check(&out, ref, n, 0, 0, "out", m, sizeof m);
    if (!bad && c.probs) bad = g_buf_check(&pro, rp, (size_t)c.N, 0, 0, "probs_out", m, sizeof m);
    if (bad) {
      t_fail(__FILE__, __LINE__, "permute_rows N=%d D=%d %s offset=%d %s: %s", c.N, c.D, kt_dtype_name(c.dt),
             c.offset, cfg ? cfg : "", m);
      goto done;
    }
  }
  /* Backward: dout = the forward's reference; din must be `in` again, but
  ** for the skipped row (left poisoned) under bad_entry. */
  memcpy(out.h, ref, n * sizeof *ref);
  memcpy(pro.h, rp, (size_t)c.N * sizeof *rp);
  if (g_buf_upload(&out) || g_buf_upload(&pro) || g_buf_poison(&din) || g_buf_poison(&pr)) goto done;
  kt_arg b[8] = {kt_arg_ptr(din.ptr, c.dt), kt_arg_ptr(out.ptr, c.dt), kt_arg_ptr(map.ptr, KT_I32),
                 kt_arg_ptr(c.probs ? pro.ptr : 0, KT_F32), kt_arg_ptr(c.probs ? pr.ptr : 0, KT_F32),
                 kt_arg_i32(c.N), kt_arg_i32(c.N), kt_arg_i32(c.D)};
  st = cfg ? kt_launch_config(kb, NULL, b, 8, cfg) : kt_launch(kb, NULL, b, 8);
  if (st) {
    t_fail(__FILE__, __LINE__, "permute_rows_bwd N=%d D=%d %s: %s", c.N, c.D, cfg ? cfg : "", kt_errmsg(rt));
    goto done;
  }
  if (!bad_entry) { /* with a bad entry, one row of din is never written */
    char m[600];
    long bad = g_buf_check(&din, in.h, n, 0, 0, "din", m, sizeof m);
    if (!bad && c.probs) bad = g_buf_check(&pr, pr.h, (size_t)c.N, 0, 0, "dprobs", m, sizeof m);
    if (bad) {
      t_fail(__FILE__, __LINE__, "permute_rows_bwd N=%d D=%d %s: %s", c.N, c.D, cfg ? cfg : "", m);
      goto done;
    }
  }
  rc = 0;
done:
  g_buf_free(&in), g_buf_free(&out), g_buf_free(&map), g_buf_free(&pr), g_buf_free(&pro), g_buf_free(&din);
  free(perm), free(ref), free(rp);
  return rc;
}

static void permute_cases(kt_mode mode, const pcase *cs, size_t n) {
  kt_runtime *rt = g_open_mode(mode);
  if (!rt) return;
  kt_kernel *kf, *kb;
  if (!g_load_kernels(rt, "kernels_src/permute_rows.json", &kf, "kernels_src/permute_rows_bwd.json", &kb, NULL)) {
    for (size_t i = 0; i < n; i++)
      if (permute_case(rt, kf, kb, cs[i], 0, 40 + i, NULL)) break;
  }
  kt_runtime_close(rt);
}

static const pcase pcases[] = {
    {1, 64, KT_BF16, 0, 0},    {7, 100, KT_F32, 1, 0},     {32, 1000, KT_F16, 1, 1},
    {450, 4096, KT_BF16, 1, 0}, {5000, 2048, KT_F16, 0, 0}, {24000, 256, KT_BF16, 1, 1},
    {2, 8192, KT_F32, 1, 0},   {20000, 1000, KT_BF16, 0, 0},
};

static void permute_every_shape(void) { permute_cases(KT_MODE_OFF, pcases, sizeof pcases / sizeof pcases[0]); }

static void permute_tuned(void) {
  static const pcase t[] = {{450, 4096, KT_BF16, 1, 0}, {24000, 4096, KT_BF16, 1, 0}};
  permute_cases(KT_MODE_TUNE, t, 2);
}

/* Every config on an aligned and an unaligned shape; a map entry out of
** range gives a zero row. */
static void permute_every_config(void) {
  kt_runtime *rt = g_open_mode(KT_MODE_OFF);
  if (!rt) return;
  kt_kernel *kf, *kb;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/permute_rows.json", &kf), KT_OK);
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/permute_rows_bwd.json", &kb), KT_OK);
  static const int blocks[] = {64, 128, 256, 512, 1024}, rows[] = {1, 2, 4, 8, 16}, vecs[] = {1, 2, 4, 8, 16};
  static const pcase sweep[] = {{300, 1024, KT_BF16, 1, 0}, {77, 1000, KT_F32, 1, 1}};
  int ran = 0;
  for (size_t s = 0; s < 2; s++)
    for (int bi = 0; bi < 5; bi++)
      for (int ri = 0; ri < 5; ri++)
        for (int vi = 0; vi < 5; vi++) {
          char cfg[64];
          snprintf(cfg, sizeof cfg, "BLOCK=%d,ROWS=%d,VEC=%d", blocks[bi], rows[ri], vecs[vi]);
          int rc = permute_case(rt, kf, kb, sweep[s], 0, 7 + s, cfg);
          if (rc < 0) goto out;
          ran += rc == 0;
        }
  ASSERT_EQ(permute_case(rt, kf, kb, (pcase){50, 256, KT_BF16, 1, 0}, 1, 3, NULL), 0);
out:
  printf("    permute sweep: %d configs checked\n", ran);
  ASSERT_TRUE(ran >= 40);
  kt_runtime_close(rt);
}

/* The spec says "inplace": false: the same buffer as input and output is
** refused, naming both params. */
static void permute_refuses_in_place(void) {
  kt_runtime *rt = g_open_mode(KT_MODE_OFF);
  if (!rt) return;
  kt_kernel *kf;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/permute_rows.json", &kf), KT_OK);
  uint64_t buf, map;
  ASSERT_STATUS(kt_device_alloc(rt, 64 * 256 * 2, &buf), KT_OK);
  ASSERT_STATUS(kt_device_alloc(rt, 64 * 4, &map), KT_OK);
  kt_arg a[8] = {kt_arg_ptr(buf, KT_BF16), kt_arg_ptr(buf, KT_BF16), kt_arg_ptr(map, KT_I32), kt_arg_ptr(0, KT_F32),
                 kt_arg_ptr(0, KT_F32), kt_arg_i32(64), kt_arg_i32(64), kt_arg_i32(256)};
  ASSERT_STATUS(kt_launch(kf, NULL, a, 8), KT_ERR_ALIAS);
  ASSERT_CONTAINS(kt_errmsg(rt), "out");
  ASSERT_CONTAINS(kt_errmsg(rt), "in");
  kt_device_free(rt, buf);
  kt_device_free(rt, map);
  kt_runtime_close(rt);
}

typedef struct scase {
  int N, L;
  kt_dtype dt;
  int mask, bias, offset;
} scase;

static int softmax_case(kt_runtime *rt, kt_kernel *k, scase c, uint64_t seed, const char *cfg) {
  size_t n = (size_t)c.N * c.L;
  g_buf x, y, m, b;
  int rc = -1;
  double *ref = malloc((n ? n : 1) * sizeof *ref);
  memset(&x, 0, sizeof x), memset(&y, 0, sizeof y), memset(&m, 0, sizeof m), memset(&b, 0, sizeof b);
  if (!ref || g_buf_make(&x, rt, c.dt, n, c.offset) || g_buf_make(&y, rt, c.dt, n, c.offset) ||
      g_buf_make(&m, rt, KT_U8, n, c.offset) || g_buf_make(&b, rt, c.dt, n, c.offset)) {
    t_fail(__FILE__, __LINE__, "setup: %s", kt_errmsg(rt));
    goto done;
  }
  g_buf_rand(&x, &seed, -8, 8);
  g_buf_rand(&b, &seed, -2, 2);
  for (size_t i = 0; i < n; i++) m.h[i] = g_uniform(&seed, 0, 1) < 0.8;
  if (c.mask && c.N > 1)
    for (int i = 0; i < c.L; i++) m.h[(size_t)(c.N - 1) * c.L + i] = 0; /* a fully masked row */
  const double scale = 0.375;
  for (int r = 0; r < c.N; r++) {
    double mx = -INFINITY, s = 0;
    double *z = ref + (size_t)r * c.L;
    for (int i = 0; i < c.L; i++) {
      size_t e = (size_t)r * c.L + i;
      z[i] = (c.mask && !m.h[e]) ? -INFINITY : (double)(float)(x.h[e] * scale) + (c.bias ? b.h[e] : 0);
      if (z[i] > mx) mx = z[i];
    }
    for (int i = 0; i < c.L; i++) s += mx == -INFINITY ? 0 : exp(z[i] - mx);
    for (int i = 0; i < c.L; i++) z[i] = s > 0 ? exp(z[i] - mx) / s : 0;
  }
  if (g_buf_upload(&x) || g_buf_upload(&m) || g_buf_upload(&b) || g_buf_poison(&y)) goto done;
  kt_arg a[7] = {kt_arg_ptr(y.ptr, c.dt), kt_arg_ptr(x.ptr, c.dt), kt_arg_ptr(c.mask ? m.ptr : 0, KT_U8),
                 kt_arg_ptr(c.bias ? b.ptr : 0, c.dt), kt_arg_i32(c.N), kt_arg_i32(c.L), kt_arg_f32((float)scale)};
  kt_status st = cfg ? kt_launch_config(k, NULL, a, 7, cfg) : kt_launch(k, NULL, a, 7);
  if (st == KT_ERR_CONSTRAINT) {
    rc = 1;
    goto done;
  }
  if (st) {
    t_fail(__FILE__, __LINE__, "masked_softmax N=%d L=%d %s: %s", c.N, c.L, cfg ? cfg : "", kt_errmsg(rt));
    goto done;
  }
  {
    double t = c.dt == KT_F32 ? 1e-5 : c.dt == KT_F16 ? 2e-3 : 1e-2;
    char msg[600];
    long bad = g_buf_check(&y, ref, n, t * 0.01, t, "y", msg, sizeof msg);
    if (bad) {
      t_fail(__FILE__, __LINE__, "masked_softmax N=%d L=%d %s mask=%d bias=%d offset=%d %s: %ld bad; first %s", c.N,
             c.L, kt_dtype_name(c.dt), c.mask, c.bias, c.offset, cfg ? cfg : "", bad, msg);
      goto done;
    }
  }
  rc = 0;
done:
  g_buf_free(&x), g_buf_free(&y), g_buf_free(&m), g_buf_free(&b);
  free(ref);
  return rc;
}

static void softmax_cases(kt_mode mode, const scase *cs, size_t n) {
  kt_runtime *rt = g_open_mode(mode);
  if (!rt) return;
  kt_kernel *k;
  if (!g_load_kernels(rt, "kernels_src/masked_softmax.json", &k, NULL)) {
    for (size_t i = 0; i < n; i++)
      if (softmax_case(rt, k, cs[i], 70 + i, NULL)) break;
  }
  kt_runtime_close(rt);
}

static const scase scases[] = {
    {1, 64, KT_BF16, 0, 0, 0},      {7, 100, KT_F32, 1, 0, 0},     {32, 1000, KT_BF16, 1, 1, 1},
    {450, 4096, KT_BF16, 1, 0, 0},  {5000, 2048, KT_F16, 0, 1, 0}, {100, 8192, KT_F32, 1, 0, 0},
    {24000, 256, KT_BF16, 1, 1, 0}, {10, 20000, KT_BF16, 1, 1, 1}, {2, 33333, KT_F32, 1, 0, 0},
};

static void softmax_every_shape(void) { softmax_cases(KT_MODE_OFF, scases, sizeof scases / sizeof scases[0]); }

static void softmax_tuned(void) {
  static const scase t[] = {{450, 4096, KT_BF16, 1, 0, 0}, {2000, 4096, KT_BF16, 1, 0, 0}, {33, 1001, KT_BF16, 1, 1, 1}};
  softmax_cases(KT_MODE_TUNE, t, 3);
}

/* Every config on a ragged, unaligned shape (the guarded path under every
** VEC) and on an aligned one (vector accesses). */
static void softmax_every_config(void) {
  kt_runtime *rt = g_open_mode(KT_MODE_OFF);
  if (!rt) return;
  kt_kernel *k;
  ASSERT_STATUS(kt_kernel_load(rt, "kernels_src/masked_softmax.json", &k), KT_OK);
  static const int blocks[] = {128, 256, 512, 1024}, rows[] = {1, 2, 4, 8}, vecs[] = {1, 2, 4, 8},
                   items[] = {0, 1, 2, 4, 8, 16};
  static const scase sweep[] = {{33, 1001, KT_BF16, 1, 1, 1}, {64, 1024, KT_F16, 1, 1, 0}, {5, 9000, KT_F32, 1, 0, 0}};
  int ran = 0;
  for (size_t s = 0; s < 3; s++)
    for (int bi = 0; bi < 4; bi++)
      for (int ri = 0; ri < 4; ri++)
        for (int vi = 0; vi < 4; vi++)
          for (int ii = 0; ii < 6; ii++) {
            char cfg[80];
            snprintf(cfg, sizeof cfg, "BLOCK=%d,ROWS=%d,VEC=%d,ITEMS=%d", blocks[bi], rows[ri], vecs[vi], items[ii]);
            int rc = softmax_case(rt, k, sweep[s], 11 + s, cfg);
            if (rc < 0) goto out;
            ran += rc == 0;
          }
out:
  printf("    softmax sweep: %d configs checked\n", ran);
  ASSERT_TRUE(ran >= 60);
  kt_runtime_close(rt);
}

typedef struct ccase {
  int BH, N, C, DK, DV;
  kt_dtype dt;
  int h0;
} ccase;

/* Forward, then the backward's two steps, against float64. spec_fwd lets
** the specialized-N spec stand in for the bundled forward. */
static int chunk_case(kt_runtime *rt, kt_kernel *kf, kt_kernel *ks, kt_kernel *kb, ccase c, uint64_t seed) {
  size_t nk = (size_t)c.BH * c.N * c.C * c.DK, nv = (size_t)c.BH * c.N * c.C * c.DV;
  size_t S = (size_t)c.DK * c.DV, nh = (size_t)c.BH * (c.N + 1) * S;
  g_buf k, v, dec, h0, h, dh, dg, dk, dv, dd;
  g_buf *all[] = {&k, &v, &dec, &h0, &h, &dh, &dg, &dk, &dv, &dd};
  for (size_t i = 0; i < 10; i++) memset(all[i], 0, sizeof *all[i]);
  double *rh = malloc(nh * sizeof *rh), *rg = malloc(nh * sizeof *rg), *rdk = calloc(nk, sizeof *rdk),
         *rdv = calloc(nv, sizeof *rdv), *rdd = calloc((size_t)c.BH * c.N, sizeof *rdd);
  int rc = -1;
  if (!rh || !rg || !rdk || !rdv || !rdd || g_buf_make(&k, rt, c.dt, nk, 0) || g_buf_make(&v, rt, c.dt, nv, 0) ||
      g_buf_make(&dec, rt, KT_F32, (size_t)c.BH * c.N, 0) || g_buf_make(&h0, rt, KT_F32, (size_t)c.BH * S, 0) ||
      g_buf_make(&h, rt, KT_F32, nh, 0) || g_buf_make(&dh, rt, KT_F32, nh, 0) || g_buf_make(&dg, rt, KT_F32, nh, 0) ||
      g_buf_make(&dk, rt, c.dt, nk, 0) || g_buf_make(&dv, rt, c.dt, nv, 0) ||
      g_buf_make(&dd, rt, KT_F32, (size_t)c.BH * c.N, 0)) {
    t_fail(__FILE__, __LINE__, "setup: %s", kt_errmsg(rt));
    goto done;
  }
  g_buf_rand(&k, &seed, -0.5, 0.5);
  g_buf_rand(&v, &seed, -0.5, 0.5);
  g_buf_rand(&dec, &seed, 0.5, 1);
  g_buf_rand(&h0, &seed, -1, 1);
  g_buf_rand(&dh, &seed, -1, 1);
  for (int b = 0; b < c.BH; b++) {
    double *hb = rh + (size_t)b * (c.N + 1) * S;
    for (size_t e = 0; e < S; e++) hb[e] = c.h0 ? h0.h[(size_t)b * S + e] : 0;
    for (int i = 0; i < c.N; i++) {
      const double *kc = k.h + ((size_t)b * c.N + i) * c.C * c.DK, *vc = v.h + ((size_t)b * c.N + i) * c.C * c.DV;
      double d = dec.h[(size_t)b * c.N + i];
      for (int a = 0; a < c.DK; a++)
        for (int e = 0; e < c.DV; e++) {
          double s = 0;
          for (int t = 0; t < c.C; t++) s += kc[t * c.DK + a] * vc[t * c.DV + e];
          hb[(i + 1) * S + (size_t)a * c.DV + e] = d * hb[i * S + (size_t)a * c.DV + e] + s;
        }
    }
    double *gb = rg + (size_t)b * (c.N + 1) * S;
    const double *dhb = dh.h + (size_t)b * (c.N + 1) * S;
    for (size_t e = 0; e < S; e++) gb[(size_t)c.N * S + e] = dhb[(size_t)c.N * S + e];
    for (int i = c.N - 1; i >= 0; i--)
      for (size_t e = 0; e < S; e++)
        gb[i * S + e] = dhb[i * S + e] + dec.h[(size_t)b * c.N + i] * gb[(i + 1) * S + e];
    for (int i = 0; i < c.N; i++) {
      const double *g = gb + (size_t)(i + 1) * S, *hp = hb + (size_t)i * S;
      const double *kc = k.h + ((size_t)b * c.N + i) * c.C * c.DK, *vc = v.h + ((size_t)b * c.N + i) * c.C * c.DV;
      double s = 0;
      for (size_t e = 0; e < S; e++) s += g[e] * hp[e];
      rdd[(size_t)b * c.N + i] = s;
      for (int t = 0; t < c.C; t++) {
        for (int a = 0; a < c.DK; a++) {
          double u = 0;
          for (int e = 0; e < c.DV; e++) u += vc[t * c.DV + e] * g[(size_t)a * c.DV + e];
          rdk[((size_t)b * c.N + i) * c.C * c.DK + (size_t)t * c.DK + a] = u;
        }
        for (int e = 0; e < c.DV; e++) {
          double u = 0;
          for (int a = 0; a < c.DK; a++) u += kc[t * c.DK + a] * g[(size_t)a * c.DV + e];
          rdv[((size_t)b * c.N + i) * c.C * c.DV + (size_t)t * c.DV + e] = u;
        }
      }
    }
  }
  if (g_buf_upload(&k) || g_buf_upload(&v) || g_buf_upload(&dec) || g_buf_upload(&h0) || g_buf_poison(&h)) goto done;
  kt_arg fa[10] = {kt_arg_ptr(h.ptr, KT_F32), kt_arg_ptr(k.ptr, c.dt), kt_arg_ptr(v.ptr, c.dt),
                   kt_arg_ptr(dec.ptr, KT_F32), kt_arg_ptr(c.h0 ? h0.ptr : 0, KT_F32), kt_arg_i32(c.BH),
                   kt_arg_i32(c.N), kt_arg_i32(c.C), kt_arg_i32(c.DK), kt_arg_i32(c.DV)};
  if (kt_launch(kf, NULL, fa, 10)) {
    t_fail(__FILE__, __LINE__, "%s: %s", kt_kernel_name(kf), kt_errmsg(rt));
    goto done;
  }
  const char *dn = kt_dtype_name(c.dt);
  /* h grows over chunks: the tolerance scales with the sums' size. */
  double th = c.dt == KT_F32 ? 1e-4 : 1e-3;
  CHECK_BUF(&h, rh, nh, th, th, "h", "%s BH=%d N=%d C=%d DK=%d DV=%d %s", kt_kernel_name(kf), c.BH, c.N, c.C, c.DK,
            c.DV, dn);
  if (!ks) {
    rc = 0;
    goto done;
  }
  /* The backward reads h as the reference has it (rounded to f32). */
  memcpy(h.h, rh, nh * sizeof *rh);
  if (g_buf_upload(&h) || g_buf_upload(&dh) || g_buf_poison(&dg) || g_buf_poison(&dk) || g_buf_poison(&dv) ||
      g_buf_poison(&dd))
    goto done;
  kt_arg sa[7] = {kt_arg_ptr(dg.ptr, KT_F32), kt_arg_ptr(dh.ptr, KT_F32), kt_arg_ptr(dec.ptr, KT_F32),
                  kt_arg_i32(c.BH), kt_arg_i32(c.N), kt_arg_i32(c.DK), kt_arg_i32(c.DV)};
  kt_arg ba[12] = {kt_arg_ptr(dk.ptr, c.dt), kt_arg_ptr(dv.ptr, c.dt), kt_arg_ptr(dd.ptr, KT_F32),
                   kt_arg_ptr(k.ptr, c.dt),  kt_arg_ptr(v.ptr, c.dt),  kt_arg_ptr(h.ptr, KT_F32),
                   kt_arg_ptr(dg.ptr, KT_F32), kt_arg_i32(c.BH),      kt_arg_i32(c.N),
                   kt_arg_i32(c.C),           kt_arg_i32(c.DK),       kt_arg_i32(c.DV)};
  if (kt_launch(ks, NULL, sa, 7) || kt_launch(kb, NULL, ba, 12)) {
    t_fail(__FILE__, __LINE__, "chunk_state backward: %s", kt_errmsg(rt));
    goto done;
  }
  double t = c.dt == KT_F32 ? 1e-4 : c.dt == KT_F16 ? 4e-3 : 1.6e-2;
  CHECK_BUF(&dg, rg, nh, 1e-4, 1e-4, "dg", "BH=%d N=%d C=%d DK=%d DV=%d %s", c.BH, c.N, c.C, c.DK, c.DV, dn);
  CHECK_BUF(&dk, rdk, nk, t, t, "dk", "BH=%d N=%d C=%d DK=%d DV=%d %s", c.BH, c.N, c.C, c.DK, c.DV, dn);
  CHECK_BUF(&dv, rdv, nv, t, t, "dv", "BH=%d N=%d C=%d DK=%d DV=%d %s", c.BH, c.N, c.C, c.DK, c.DV, dn);
  CHECK_BUF(&dd, rdd, (size_t)c.BH * c.N, 1e-3, 1e-4, "ddecay", "BH=%d N=%d C=%d DK=%d DV=%d %s", c.BH, c.N, c.C,
            c.DK, c.DV, dn);
  rc = 0;
done:
  for (size_t i = 0; i < 10; i++) g_buf_free(all[i]);
  free(rh), free(rg), free(rdk), free(rdv), free(rdd);
  return rc;
}

static const ccase ccases[] = {
    {2, 3, 16, 32, 16, KT_F32, 1},
    {4, 8, 64, 64, 64, KT_BF16, 0},
    {1, 5, 128, 128, 128, KT_F16, 1},
    {3, 1, 32, 16, 128, KT_BF16, 1},
    {2, 3, 16, 32, 16, KT_F32, 1}, /* the first again: its variants still serve */
};

static int load_chunk(kt_runtime *rt, kt_kernel **kf, kt_kernel **ks, kt_kernel **kb) {
  return g_load_kernels(rt, "kernels_src/chunk_state_fwd.json", kf, "kernels_src/chunk_state_bwd_scan.json", ks,
                        "kernels_src/chunk_state_bwd.json", kb, NULL);
}

/* Several (C, DK, DV) variants live in one process, each correct. */
static void chunk_state_variants_coexist(void) {
  kt_runtime *rt = g_open_mode(KT_MODE_OFF);
  if (!rt) return;
  kt_kernel *kf, *ks, *kb;
  if (!load_chunk(rt, &kf, &ks, &kb)) {
    for (size_t i = 0; i < sizeof ccases / sizeof ccases[0]; i++)
      if (chunk_case(rt, kf, ks, kb, ccases[i], 60 + i)) break;
  }
  kt_runtime_close(rt);
}

static void chunk_state_tuned(void) {
  kt_runtime *rt = g_open_mode(KT_MODE_TUNE);
  if (!rt) return;
  kt_kernel *kf, *ks, *kb;
  if (!load_chunk(rt, &kf, &ks, &kb)) {
    chunk_case(rt, kf, ks, kb, (ccase){8, 16, 64, 64, 64, KT_BF16, 1}, 5);
  }
  kt_runtime_close(rt);
}

/* The test spec promotes N to a compile-time constant: each N gets its own
** variant (and key), and both are right; an unlisted C is refused. */
static void chunk_state_specialized_n(void) {
  kt_runtime *rt = g_open_mode(KT_MODE_OFF);
  if (!rt) return;
  kt_kernel *kn;
  ASSERT_STATUS(kt_kernel_load(rt, "tests/specs/chunk_state_fwd_n.json", &kn), KT_OK);
  ASSERT_EQ(chunk_case(rt, kn, NULL, NULL, (ccase){2, 3, 32, 64, 32, KT_BF16, 1}, 1), 0);
  ASSERT_EQ(chunk_case(rt, kn, NULL, NULL, (ccase){2, 5, 32, 64, 32, KT_BF16, 1}, 2), 0);
  ASSERT_EQ(chunk_case(rt, kn, NULL, NULL, (ccase){2, 3, 32, 64, 32, KT_BF16, 0}, 3), 0);
  kt_arg a[10] = {kt_arg_ptr(1 << 20, KT_F32), kt_arg_ptr(2 << 20, KT_BF16), kt_arg_ptr(3 << 20, KT_BF16),
                  kt_arg_ptr(4 << 20, KT_F32), kt_arg_ptr(0, KT_F32), kt_arg_i32(2),
                  kt_arg_i32(3),           kt_arg_i32(32),           kt_arg_i32(64),
                  kt_arg_i32(32)};
  char k3[512], k5[512];
  ASSERT_STATUS(kt_kernel_key(kn, a, 10, k3, sizeof k3), KT_OK);
  a[6] = kt_arg_i32(5);
  ASSERT_STATUS(kt_kernel_key(kn, a, 10, k5, sizeof k5), KT_OK);
  ASSERT_TRUE(strcmp(k3, k5) != 0);
  ASSERT_CONTAINS(k5, "\"N\":5");
  a[7] = kt_arg_i32(48);
  ASSERT_STATUS(kt_launch(kn, NULL, a, 10), KT_ERR_ARGS);
  ASSERT_CONTAINS(kt_errmsg(rt), "derived.CC = 48");
  kt_runtime_close(rt);
}

static void small_ops(void) {
  kt_runtime *rt = g_open_mode(KT_MODE_OFF);
  if (!rt) return;
  kt_kernel *pf, *pb, *sm, *kf, *ks, *kb;
  if (!g_load_kernels(rt, "kernels_src/permute_rows.json", &pf, "kernels_src/permute_rows_bwd.json", &pb,
                      "kernels_src/masked_softmax.json", &sm, NULL) &&
      !load_chunk(rt, &kf, &ks, &kb) && !permute_case(rt, pf, pb, (pcase){33, 1000, KT_BF16, 1, 1}, 0, 1, NULL) &&
      !permute_case(rt, pf, pb, (pcase){64, 2048, KT_F32, 1, 0}, 0, 2, NULL) &&
      !softmax_case(rt, sm, (scase){33, 1001, KT_BF16, 1, 1, 1}, 1, NULL) &&
      !softmax_case(rt, sm, (scase){16, 4096, KT_F16, 1, 1, 0}, 2, "BLOCK=512,ROWS=1,VEC=8,ITEMS=1") &&
      !softmax_case(rt, sm, (scase){3, 9000, KT_F32, 1, 0, 0}, 3, NULL)) {
    chunk_case(rt, kf, ks, kb, (ccase){2, 3, 16, 32, 16, KT_F32, 1}, 4);
  }
  kt_runtime_close(rt);
}

const kt_test gpu_ops_tests[] = {
    {"permute_every_shape", permute_every_shape},
    {"permute_every_config", permute_every_config},
    {"permute_tuned", permute_tuned},
    {"permute_refuses_in_place", permute_refuses_in_place},
    {"softmax_every_shape", softmax_every_shape},
    {"softmax_every_config", softmax_every_config},
    {"softmax_tuned", softmax_tuned},
    {"chunk_state_variants_coexist", chunk_state_variants_coexist},
    {"chunk_state_tuned", chunk_state_tuned},
    {"chunk_state_specialized_n", chunk_state_specialized_n},
    {"small_ops", small_ops},
    {NULL, NULL},
};
