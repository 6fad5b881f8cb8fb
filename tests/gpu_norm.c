/* layernorm_fwd, layernorm_bwd, layernorm_bwd_reduce and layernorm_bwd_row on
** float64 host references: every switch on and off, groups, three dtypes,
** pointers offset by 2 bytes, and the backward's persistent grid with tiles
** larger than a program's share of rows (T=450 over 264 programs: two rows
** each, against tiles of up to 8). Outputs are poisoned before each launch
** and the bytes around them must keep their poison. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "gpu_util.h"
#include "harness.h"

/* w: 1 a weight and its dw; 2 a weight whose dw no one asks for (a frozen
** norm): read for dx, dw and its partial rows passed null and left as
** they were. */
typedef struct ncase {
  int T, D, G;
  kt_dtype dt, wdt;
  int rms, res, store, w, b, dres, offset;
} ncase;

typedef struct nbufs {
  ncase c;
  int P;
  double stat_tol; /* mean and rstd's tolerance (0: 1e-4) */
  g_buf x, res, w, b, y, res_out, mean, rstd;
  g_buf dy, dres, dx, dw_part, db_part, dw, db;
  g_buf bx, bmean, brstd; /* the backward's inputs: h rounded to dt, fp32 mean and rstd */
  double *ry, *rmean, *rrstd, *rdx, *rdw, *rdb; /* reference */
} nbufs;

static void nb_free(nbufs *n) {
  g_buf *all[] = {&n->x, &n->res, &n->w, &n->b, &n->y, &n->res_out, &n->mean, &n->rstd,
                  &n->dy, &n->dres, &n->dx, &n->dw_part, &n->db_part, &n->dw, &n->db,
                  &n->bx, &n->bmean, &n->brstd};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) g_buf_free(all[i]);
  free(n->ry), free(n->rmean), free(n->rrstd), free(n->rdx), free(n->rdw), free(n->rdb);
}

/* Every input uploaded once: no kernel writes one, and converting them on
** the host for each of a sweep's thousands of launches cost minutes. */
static int nb_upload(nbufs *n) {
  const ncase *c = &n->c;
  size_t S = (size_t)c->T * c->G;
  for (size_t s = 0; s < S; s++) n->bmean.h[s] = (float)n->rmean[s], n->brstd.h[s] = (float)n->rrstd[s];
  g_buf *in[] = {&n->x, &n->res, &n->w, &n->b, &n->dy, &n->dres, &n->bx, &n->bmean, &n->brstd};
  for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
    if (g_buf_upload(in[i])) return -1;
  return 0;
}

/* Inputs, and every reference output, in float64 from the rounded inputs;
** skew, where given, reshapes x first (its values are rounded after). */
static int nb_make_skewed(nbufs *n, kt_runtime *rt, ncase c, int P, uint64_t seed, void (*skew)(nbufs *)) {
  memset(n, 0, sizeof *n);
  n->c = c;
  n->P = P;
  size_t N = (size_t)c.T * c.D, S = (size_t)c.T * c.G, L = (size_t)(c.D / c.G);
  int o = c.offset;
  if (g_buf_make(&n->x, rt, c.dt, N, o) || g_buf_make(&n->res, rt, c.dt, N, o) ||
      g_buf_make(&n->w, rt, c.wdt, (size_t)c.D, o) || g_buf_make(&n->b, rt, c.wdt, (size_t)c.D, o) ||
      g_buf_make(&n->y, rt, c.dt, N, o) || g_buf_make(&n->res_out, rt, c.dt, N, o) ||
      g_buf_make(&n->mean, rt, KT_F32, S, 0) || g_buf_make(&n->rstd, rt, KT_F32, S, 0) ||
      g_buf_make(&n->dy, rt, c.dt, N, o) || g_buf_make(&n->dres, rt, c.dt, N, o) ||
      g_buf_make(&n->dx, rt, c.dt, N, o) || g_buf_make(&n->dw_part, rt, KT_F32, (size_t)P * c.D, 0) ||
      g_buf_make(&n->db_part, rt, KT_F32, (size_t)P * c.D, 0) || g_buf_make(&n->dw, rt, c.wdt, (size_t)c.D, o) ||
      g_buf_make(&n->db, rt, c.wdt, (size_t)c.D, o) || g_buf_make(&n->bx, rt, c.dt, N, o) ||
      g_buf_make(&n->bmean, rt, KT_F32, S, 0) || g_buf_make(&n->brstd, rt, KT_F32, S, 0))
    return -1;
  g_buf_rand(&n->x, &seed, -2, 2.5);
  g_buf_rand(&n->res, &seed, -1, 1);
  g_buf_rand(&n->w, &seed, 0.5, 1.5);
  g_buf_rand(&n->b, &seed, -0.5, 0.5);
  g_buf_rand(&n->dy, &seed, -1, 1);
  g_buf_rand(&n->dres, &seed, -1, 1);
  if (skew) {
    skew(n);
    g_buf_round(&n->x);
  }
  n->ry = malloc(N * sizeof(double));
  n->rdx = malloc(N * sizeof(double));
  n->rmean = malloc(S * sizeof(double));
  n->rrstd = malloc(S * sizeof(double));
  n->rdw = calloc((size_t)c.D, sizeof(double));
  n->rdb = calloc((size_t)c.D, sizeof(double));
  if (!n->ry || !n->rdx || !n->rmean || !n->rrstd || !n->rdw || !n->rdb) return -1;
  /* h = x + res rounded to dt, as the forward stores it: the forward
  ** normalises it and the backward reads it back. */
  for (size_t i = 0; i < N; i++) n->bx.h[i] = n->x.h[i] + (c.res ? n->res.h[i] : 0);
  g_buf_round(&n->bx);
  const double *hr = n->bx.h;
  for (size_t s = 0; s < S; s++) {
    const double *u = hr + s * L;
    size_t wb = (s % (size_t)c.G) * L;
    for (int pass = 0; pass < 2; pass++) {
      double mu = 0, q = 0, rs;
      if (!pass) {
        if (!c.rms) {
          for (size_t i = 0; i < L; i++) mu += u[i];
          mu /= (double)L;
        }
        for (size_t i = 0; i < L; i++) q += (u[i] - mu) * (u[i] - mu);
        rs = 1 / sqrt(q / (double)L + 1e-5);
      } else {
        /* the backward reads the fp32 mean and rstd the forward stored */
        mu = (float)n->rmean[s];
        rs = (float)n->rrstd[s];
      }
      if (!pass) {
        n->rmean[s] = mu;
        n->rrstd[s] = rs;
        for (size_t i = 0; i < L; i++) {
          double o2 = (u[i] - mu) * rs;
          if (c.w) o2 *= n->w.h[wb + i];
          if (c.b) o2 += n->b.h[wb + i];
          n->ry[s * L + i] = o2;
        }
        continue;
      }
      double c1 = 0, c2 = 0;
      for (size_t i = 0; i < L; i++) {
        double xh = (u[i] - mu) * rs, g = n->dy.h[s * L + i] * (c.w ? n->w.h[wb + i] : 1);
        c1 += xh * g;
        c2 += g;
        n->rdw[wb + i] += n->dy.h[s * L + i] * xh;
        n->rdb[wb + i] += n->dy.h[s * L + i];
      }
      c1 /= (double)L;
      c2 = c.rms ? 0 : c2 / (double)L;
      for (size_t i = 0; i < L; i++) {
        double xh = (u[i] - mu) * rs, g = n->dy.h[s * L + i] * (c.w ? n->w.h[wb + i] : 1);
        n->rdx[s * L + i] = (g - (xh * c1 + c2)) * rs + (c.dres ? n->dres.h[s * L + i] : 0);
      }
    }
  }
  return nb_upload(n);
}

static int nb_make(nbufs *n, kt_runtime *rt, ncase c, int P, uint64_t seed) {
  return nb_make_skewed(n, rt, c, P, seed, NULL);
}

/* nb_make, the failure reported (nb freed) when it fails. */
static int nb_setup(nbufs *n, kt_runtime *rt, ncase c, int P, uint64_t seed) {
  if (!nb_make(n, rt, c, P, seed)) return 0;
  t_fail(__FILE__, __LINE__, "setup: %s", kt_errmsg(rt));
  nb_free(n);
  return -1;
}

static double tol_of(kt_dtype t) { return t == KT_F32 ? 2e-5 : t == KT_F16 ? 4e-3 : 1.6e-2; }

static void fwd_args(nbufs *n, kt_arg *a) {
  const ncase *c = &n->c;
  a[0] = kt_arg_ptr(n->y.ptr, c->dt);
  a[1] = kt_arg_ptr(n->x.ptr, c->dt);
  a[2] = kt_arg_ptr(c->res ? n->res.ptr : 0, c->dt);
  a[3] = kt_arg_ptr(c->store ? n->res_out.ptr : 0, c->dt);
  a[4] = kt_arg_ptr(c->w ? n->w.ptr : 0, c->wdt);
  a[5] = kt_arg_ptr(c->b ? n->b.ptr : 0, c->wdt);
  a[6] = kt_arg_ptr(c->rms ? 0 : n->mean.ptr, KT_F32);
  a[7] = kt_arg_ptr(n->rstd.ptr, KT_F32);
  a[8] = kt_arg_i32(c->T);
  a[9] = kt_arg_i32(c->D);
  a[10] = kt_arg_i32(c->G);
  a[11] = kt_arg_f32(1e-5f);
  a[12] = kt_arg_i32(c->rms);
}

/* The arguments the two backward kernels share, dw and db (partial rows, or
** the sums themselves) of dtype pdt. x for the backward: h = x + res as the
** forward stores it (rounded). */
static void grad_args(nbufs *n, kt_arg *a, const g_buf *dw, const g_buf *db, kt_dtype pdt) {
  const ncase *c = &n->c;
  a[0] = kt_arg_ptr(n->dx.ptr, c->dt);
  a[1] = kt_arg_ptr(c->w == 1 ? dw->ptr : 0, pdt);
  a[2] = kt_arg_ptr(c->b ? db->ptr : 0, pdt);
  a[3] = kt_arg_ptr(n->dy.ptr, c->dt);
  a[4] = kt_arg_ptr(n->bx.ptr, c->dt);
  a[5] = kt_arg_ptr(c->w ? n->w.ptr : 0, c->wdt);
  a[6] = kt_arg_ptr(c->rms ? 0 : n->bmean.ptr, KT_F32);
  a[7] = kt_arg_ptr(n->brstd.ptr, KT_F32);
  a[8] = kt_arg_ptr(c->dres ? n->dres.ptr : 0, c->dt);
}

static void bwd_args(nbufs *n, kt_arg *a) {
  const ncase *c = &n->c;
  grad_args(n, a, &n->dw_part, &n->db_part, KT_F32);
  a[9] = kt_arg_i32(c->T);
  a[10] = kt_arg_i32(c->D);
  a[11] = kt_arg_i32(c->G);
  a[12] = kt_arg_i32(n->P);
  a[13] = kt_arg_i32(c->rms);
}

/* layernorm_bwd_row's: dw and db in the weight's dtype; no P. */
static void row_args(nbufs *n, kt_arg *a) {
  const ncase *c = &n->c;
  grad_args(n, a, &n->dw, &n->db, c->wdt);
  a[9] = kt_arg_i32(c->T);
  a[10] = kt_arg_i32(c->D);
  a[11] = kt_arg_i32(c->G);
  a[12] = kt_arg_i32(c->rms);
}

static void red_args(nbufs *n, kt_arg *a) {
  const ncase *c = &n->c;
  a[0] = kt_arg_ptr(c->w == 1 ? n->dw.ptr : 0, c->wdt);
  a[1] = kt_arg_ptr(c->b ? n->db.ptr : 0, c->wdt);
  a[2] = kt_arg_ptr(c->w == 1 ? n->dw_part.ptr : 0, KT_F32);
  a[3] = kt_arg_ptr(c->b ? n->db_part.ptr : 0, KT_F32);
  a[4] = kt_arg_i32(c->T);
  a[5] = kt_arg_i32(c->D);
  a[6] = kt_arg_i32(n->P);
}

static int describe(const ncase *c, char *buf, size_t n) {
  return snprintf(buf, n, "T=%d D=%d G=%d %s/%s rms=%d res=%d store=%d w=%d b=%d dres=%d offset=%d", c->T,
                  c->D, c->G, kt_dtype_name(c->dt), kt_dtype_name(c->wdt), c->rms, c->res, c->store, c->w,
                  c->b, c->dres, c->offset * (int)kt_dtype_size(c->dt));
}

#define CHECK(buf, ref, n, atol, rtol, what)                                          \
  do {                                                                                \
    char m_[600];                                                                     \
    long bad_ = g_buf_check(buf, ref, n, atol, rtol, what, m_, sizeof m_);            \
    if (bad_) {                                                                       \
      char d_[256];                                                                   \
      describe(&nb->c, d_, sizeof d_);                                                \
      t_fail(__FILE__, __LINE__, "%s%s%s: %ld bad; first: %s", d_, cfg ? " " : "",    \
             cfg ? cfg : "", bad_, m_);                                               \
      return -1;                                                                      \
    }                                                                                 \
  } while (0)

/* Whether the forward's and the backward's outputs still hold the poison
** laid before a call that launched nothing (its config refused). A sweep
** passes one, so that its refused configs lay no poison again: a shape's
** sweep makes 465,920 calls, nearly all refused, and with four or five
** fills before each, every one waited for, a shape of 22 launches took
** 20 s on an H200. Every launch clears both. NULL: poison before every
** call. */
typedef struct poisoned {
  int fwd, bwd;
} poisoned;

static int poison_fwd(nbufs *nb, poisoned *pz) {
  if (pz && pz->fwd) return 0;
  if (g_buf_poison(&nb->y) || g_buf_poison(&nb->res_out) || g_buf_poison(&nb->mean) || g_buf_poison(&nb->rstd))
    return -1;
  if (pz) pz->fwd = 1;
  return 0;
}

/* The backward's outputs: layernorm_bwd's and its reduce's, and
** layernorm_bwd_row's (db_part too, which it never writes). */
static int poison_bwd(nbufs *nb, poisoned *pz) {
  if (pz && pz->bwd) return 0;
  if (g_buf_poison(&nb->dx) || g_buf_poison(&nb->dw_part) || g_buf_poison(&nb->db_part) || g_buf_poison(&nb->dw) ||
      g_buf_poison(&nb->db))
    return -1;
  if (pz) pz->bwd = 1;
  return 0;
}

/* st of a call: KT_ERR_CONSTRAINT launched nothing; anything else may have. */
static kt_status launched(poisoned *pz, kt_status st) {
  if (pz && st != KT_ERR_CONSTRAINT) pz->fwd = pz->bwd = 0;
  return st;
}

/* The forward, checked; cfg NULL: kt_launch's choice. */
static int run_fwd(kt_kernel *k, nbufs *nb, const char *cfg, poisoned *pz) {
  const ncase *c = &nb->c;
  kt_arg a[13];
  if (poison_fwd(nb, pz)) return -1;
  fwd_args(nb, a);
  kt_status st = launched(pz, cfg ? kt_launch_config(k, NULL, a, 13, cfg) : kt_launch(k, NULL, a, 13));
  if (st == KT_ERR_CONSTRAINT) return 1;
  if (st) {
    t_fail(__FILE__, __LINE__, "layernorm_fwd %s: %s", cfg ? cfg : "", kt_errmsg(nb->x.rt));
    return -1;
  }
  size_t N = (size_t)c->T * c->D, S = (size_t)c->T * c->G;
  double t = tol_of(c->dt);
  CHECK(&nb->y, nb->ry, N, t, t, "y");
  /* One rounding of x + res to dt, the same on both sides: exact. */
  if (c->store) CHECK(&nb->res_out, nb->bx.h, N, 0, 0, "res_out");
  const double stol = nb->stat_tol > 0 ? nb->stat_tol : 1e-4;
  if (!c->rms) CHECK(&nb->mean, nb->rmean, S, stol, stol, "mean");
  CHECK(&nb->rstd, nb->rrstd, S, stol, stol, "rstd");
  return 0;
}

/* dx, dw and db against float64; dw (and its partial rows) untouched
** where no one asked for it. */
static int check_grads(nbufs *nb, const char *cfg) {
  const ncase *c = &nb->c;
  size_t N = (size_t)c->T * c->D;
  double t = tol_of(c->dt), tw = c->wdt == KT_F32 ? 1e-4 : tol_of(c->wdt);
  /* dw sums T products: allow for fp32 accumulation of the rounded dy. */
  double aw = tw + 1e-5 * c->T;
  CHECK(&nb->dx, nb->rdx, N, t, t, "dx");
  if (c->w == 1) CHECK(&nb->dw, nb->rdw, (size_t)c->D, aw, tw, "dw");
  if (c->w == 2) CHECK(&nb->dw, nb->rdw, 0, 0, 0, "dw (not asked for)");
  if (c->w == 2) CHECK(&nb->dw_part, nb->rdw, 0, 0, 0, "dw_part (not asked for)");
  if (c->b) CHECK(&nb->db, nb->rdb, (size_t)c->D, aw, tw, "db");
  return 0;
}

/* The backward and its reduction, checked, on the forward's outputs as
** the reference computed them (so the backward runs without the forward). */
static int run_bwd(kt_kernel *kb, kt_kernel *kr, nbufs *nb, const char *cfg, poisoned *pz) {
  kt_arg a[14], r[7];
  if (poison_bwd(nb, pz)) return -1;
  bwd_args(nb, a);
  red_args(nb, r);
  kt_status st = launched(pz, cfg ? kt_launch_config(kb, NULL, a, 14, cfg) : kt_launch(kb, NULL, a, 14));
  if (st == KT_ERR_CONSTRAINT) return 1;
  if (!st) st = kt_launch(kr, NULL, r, 7);
  if (st) {
    t_fail(__FILE__, __LINE__, "layernorm_bwd %s: %s", cfg ? cfg : "", kt_errmsg(nb->x.rt));
    return -1;
  }
  return check_grads(nb, cfg);
}

/* The bytes of b's elements as its last check downloaded them. */
static const unsigned char *buf_bytes(const g_buf *b) {
  return (const unsigned char *)b->stage + (b->ptr - b->alloc);
}

/* layernorm_bwd_row (one program), checked as run_bwd checks the backward
** and its reduce; and dw and db, where want_dw and want_db are given (the
** two launches' bytes over the same single row), equal to them byte for
** byte: one row's sum is its terms rounded once either way. */
static int run_row(kt_kernel *k, nbufs *nb, const char *cfg, const unsigned char *want_dw,
                   const unsigned char *want_db, poisoned *pz) {
  const ncase *c = &nb->c;
  kt_arg a[13];
  if (poison_bwd(nb, pz)) return -1;
  row_args(nb, a);
  kt_status st = launched(pz, cfg ? kt_launch_config(k, NULL, a, 13, cfg) : kt_launch(k, NULL, a, 13));
  if (st == KT_ERR_CONSTRAINT) return 1;
  if (st) {
    t_fail(__FILE__, __LINE__, "layernorm_bwd_row %s: %s", cfg ? cfg : "", kt_errmsg(nb->x.rt));
    return -1;
  }
  if (check_grads(nb, cfg)) return -1;
  const size_t bytes = (size_t)c->D * kt_dtype_size(c->wdt);
  const int dw_differs = c->w == 1 && want_dw && memcmp(buf_bytes(&nb->dw), want_dw, bytes);
  if (dw_differs || (c->b && want_db && memcmp(buf_bytes(&nb->db), want_db, bytes))) {
    char d[256];
    describe(c, d, sizeof d);
    t_fail(__FILE__, __LINE__, "%s %s: %s not the bytes layernorm_bwd and its reduce wrote", d, cfg ? cfg : "",
           dw_differs ? "dw" : "db");
    return -1;
  }
  return 0;
}

static const ncase cases[] = {
    /* T D G dt wdt rms res store w b dres offset */
    {1, 64, 1, KT_BF16, KT_F32, 0, 0, 0, 1, 1, 0, 0},
    {2, 100, 1, KT_F32, KT_F32, 1, 1, 1, 1, 0, 1, 0},
    {7, 256, 4, KT_F16, KT_F16, 0, 1, 0, 1, 1, 0, 0},
    {32, 1000, 4, KT_BF16, KT_BF16, 1, 0, 0, 0, 0, 0, 0},
    {100, 2048, 1, KT_BF16, KT_F32, 0, 1, 1, 1, 1, 1, 1},
    {450, 256, 1, KT_BF16, KT_F32, 1, 0, 0, 1, 0, 0, 0},
    {500, 8192, 1, KT_BF16, KT_BF16, 0, 0, 1, 1, 1, 1, 0},
    {5000, 4096, 1, KT_F16, KT_F32, 1, 1, 1, 1, 0, 1, 0},
    {10000, 2048, 4, KT_F32, KT_F32, 0, 0, 0, 1, 1, 0, 0},
    {20000, 1000, 1, KT_BF16, KT_F32, 0, 1, 0, 0, 1, 0, 0},
    {24000, 256, 1, KT_BF16, KT_F32, 1, 1, 1, 1, 0, 0, 0},
    {450, 4096, 1, KT_F32, KT_F32, 0, 0, 0, 1, 1, 1, 1},
    {7, 100, 4, KT_BF16, KT_F32, 0, 1, 1, 1, 1, 1, 1},
    {1, 8192, 4, KT_F32, KT_F32, 1, 0, 0, 1, 0, 0, 0},
    {5000, 64, 4, KT_BF16, KT_BF16, 0, 0, 0, 0, 1, 1, 0},
    {3, 20000, 1, KT_BF16, KT_F32, 0, 1, 1, 1, 1, 0, 0},
    /* A weight whose dw no one asks for: db alone, and no sums at all. */
    {300, 4096, 1, KT_BF16, KT_BF16, 0, 0, 0, 2, 1, 0, 0},
    {64, 2048, 1, KT_F16, KT_F32, 1, 1, 1, 2, 0, 1, 1},
    {5000, 1000, 1, KT_BF16, KT_BF16, 0, 0, 0, 2, 0, 1, 0},
};

/* Whether the device runs thread-block clusters (sm_90 and later; arch is
** "sm_XY"). */
static int has_clusters(kt_runtime *rt) {
  kt_runtime_info info = {.size = sizeof info};
  kt_runtime_get_info(rt, &info);
  return atoi(info.arch + 3) >= 90;
}

static int load3(kt_runtime *rt, kt_kernel **f, kt_kernel **b, kt_kernel **r) {
  return g_load_kernels(rt, "kernels_src/layernorm_fwd.json", f, "kernels_src/layernorm_bwd.json", b,
                        "kernels_src/layernorm_bwd_reduce.json", r, NULL);
}

/* A runtime in the given mode with the three norm kernels loaded; NULL
** (the reason reported, or the test skipped) when either fails. */
static kt_runtime *open3(kt_mode mode, kt_kernel **f, kt_kernel **b, kt_kernel **r) {
  kt_runtime *rt = g_open_mode(mode);
  if (rt && load3(rt, f, b, r)) {
    kt_runtime_close(rt);
    return NULL;
  }
  return rt;
}

static void run_cases(kt_mode mode, const ncase *cs, size_t ncs) {
  kt_kernel *f, *b, *r;
  kt_runtime *rt = open3(mode, &f, &b, &r);
  if (!rt) return;
  kt_runtime_info info = {.size = sizeof info};
  kt_runtime_get_info(rt, &info);
  for (size_t i = 0; i < ncs; i++) {
    nbufs nb;
    if (nb_setup(&nb, rt, cs[i], 2 * info.num_sms, 500 + i)) break;
    int bad = run_fwd(f, &nb, NULL, NULL) || run_bwd(b, r, &nb, NULL, NULL);
    nb_free(&nb);
    if (bad) break;
  }
  kt_runtime_close(rt);
}

/* Every shape with the config kt_launch picks when nothing is tuned. */
static void norm_every_shape_default_config(void) {
  run_cases(KT_MODE_OFF, cases, sizeof cases / sizeof cases[0]);
}

/* A few keys tuned: each winner passed the tuner's check against the
** default config, and is checked here against float64. */
static void norm_tuned(void) {
  static const ncase tuned[] = {
      {450, 256, 1, KT_BF16, KT_F32, 1, 0, 0, 1, 0, 0, 0},
      {100, 2048, 1, KT_BF16, KT_F32, 0, 1, 1, 1, 1, 1, 0},
      {24000, 256, 1, KT_BF16, KT_F32, 1, 0, 0, 1, 0, 0, 0}, /* same keys as the first: no tuning */
      {1000, 1536, 1, KT_BF16, KT_BF16, 0, 0, 0, 2, 0, 0, 0},  /* a frozen weight: no sums */
      {1000, 1536, 1, KT_BF16, KT_BF16, 0, 0, 0, 2, 1, 0, 0},  /* the bias's alone */
  };
  run_cases(KT_MODE_TUNE, tuned, sizeof tuned / sizeof tuned[0]);
}

/* What the sweep below ran, by structure. */
typedef struct sweep_counts {
  int ran, piped, packed, held, held128, odd[4], half, staged, shared, clustered, merged, reread, kept;
  double refused_s; /* in the calls whose config the constraints refuse */
} sweep_counts;

/* Every backward variant of one (BLOCK, ROWS, VEC, ITEMS, STAGES): ACC,
** CL, MG, REREAD and HOLD. Returns -1 on a wrong result. */
static int sweep_bwd(kt_kernel *b, kt_kernel *r, nbufs *nb, const char *cfg, int tpr, int piped,
                     sweep_counts *n, poisoned *pz) {
  for (int acc = 0; acc < 2; acc++)
    for (int cl = 1; cl <= 4; cl *= 2)
      for (int mg = 1; mg <= 4; mg *= 2)
        for (int rr = 0; rr < 2; rr++)
          for (int hd = 0; hd < 2; hd++) {
            char fcfg[128];
            snprintf(fcfg, sizeof fcfg, "%s,ACC=%d,CL=%d,MG=%d,REREAD=%d,HOLD=%d", cfg, acc, cl, mg, rr, hd);
            const double t = kt__now_ms();
            int rb = run_bwd(b, r, nb, fcfg, pz);
            if (rb == 1) n->refused_s += (kt__now_ms() - t) / 1e3;
            if (rb < 0) return -1;
            if (rb) continue;
            n->ran++, n->half += tpr == 16, n->piped += piped, n->shared += acc, n->clustered += cl > 1;
            n->merged += mg > 1, n->reread += rr, n->kept += hd;
          }
  return 0;
}

/* The forward's blocks that are not a power of two. */
static const int odd_blocks[4] = {320, 384, 640, 768};

/* Every forward variant of one (BLOCK, ROWS, VEC, ITEMS, STAGES): PACK,
** OCC and WSH. Returns -1 on a wrong result. */
static int sweep_fwd(kt_kernel *f, nbufs *nb, const char *cfg, int block, int tpr, int piped, sweep_counts *n,
                     poisoned *pz) {
  static const int occs[] = {1, 2, 3, 4, 5, 6, 9, 12};
  for (int pk = 0; pk < 2; pk++)
    for (int oi = 0; oi < 8; oi++)
      for (int ws = 0; ws < 2; ws++) {
        char fcfg[128];
        snprintf(fcfg, sizeof fcfg, "%s,PACK=%d,OCC=%d,WSH=%d", cfg, pk, occs[oi], ws);
        const double t = kt__now_ms();
        int rf = run_fwd(f, nb, fcfg, pz);
        if (rf == 1) n->refused_s += (kt__now_ms() - t) / 1e3;
        if (rf < 0) return -1;
        if (rf) continue;
        n->ran++, n->piped += piped, n->packed += pk, n->held += occs[oi] > 1;
        for (int i = 0; i < 4; i++) n->odd[i] += block == odd_blocks[i];
        n->held128 += occs[oi] > 1 && block == 128;
        n->half += tpr == 16, n->staged += ws;
      }
  return 0;
}

/* Every (BLOCK, ROWS, VEC, ITEMS, STAGES) the constraints allow at one
** shape, both ways. Returns -1 on a wrong result. */
static int sweep_shape(kt_kernel *f, kt_kernel *b, kt_kernel *r, nbufs *nb, sweep_counts *n) {
  static const int blocks[] = {128, 256, 320, 384, 512, 640, 768, 1024}, rows[] = {1, 2, 4, 8, 16},
                   vecs[] = {1, 2, 4, 8}, items[] = {0, 1, 2, 3, 4, 8, 16}, stages[] = {0, 2, 3, 4};
  poisoned pz = {0, 0};
  for (int bi = 0; bi < 8; bi++)
    for (int ri = 0; ri < 5; ri++)
      for (int vi = 0; vi < 4; vi++)
        for (int ii = 0; ii < 7; ii++)
          for (int si = 0; si < 4; si++) {
            char cfg[96];
            snprintf(cfg, sizeof cfg, "BLOCK=%d,ROWS=%d,VEC=%d,ITEMS=%d,STAGES=%d", blocks[bi], rows[ri], vecs[vi],
                     items[ii], stages[si]);
            const int tpr = blocks[bi] / rows[ri];
            if (sweep_bwd(b, r, nb, cfg, tpr, si > 0, n, &pz) ||
                sweep_fwd(f, nb, cfg, blocks[bi], tpr, si > 0, n, &pz))
              return -1;
          }
  return 0;
}

/* The sweep's counts against what it must have covered. */
static void sweep_check(const sweep_counts *n, int clusters, const char *arch) {
  printf("    norm sweep: %d (config, shape) launches checked, %d of them pipelined (STAGES > 0), %d packed, "
         "%d with registers held for more blocks (OCC > 1; %d of them in blocks of 128), "
         "%d, %d, %d and %d in blocks of 320, 384, 640 and 768, "
         "%d with half a warp a row, "
         "%d with the weight and bias staged in shared memory (WSH = 1), %d with shared sums (ACC = 1), "
         "%d in clusters (CL > 1), %d merging rows' sums (MG > 1), %d reading tiles again (REREAD = 1), "
         "%d holding the weight past 16 KB a block (HOLD = 1)\n",
         n->ran, n->piped, n->packed, n->held, n->held128, n->odd[0], n->odd[1], n->odd[2], n->odd[3], n->half,
         n->staged, n->shared, n->clustered,
         n->merged, n->reread, n->kept);
  if (n->ran < 40) t_fail(__FILE__, __LINE__, "only %d configs ran", n->ran);
  if (n->piped < 20) t_fail(__FILE__, __LINE__, "only %d pipelined configs ran", n->piped);
  if (n->packed < 10) t_fail(__FILE__, __LINE__, "only %d packed forward configs ran", n->packed);
  if (n->held < 20) t_fail(__FILE__, __LINE__, "only %d forward configs with OCC > 1 ran", n->held);
  if (n->held128 < 4)
    t_fail(__FILE__, __LINE__, "only %d forward configs with OCC > 1 in blocks of 128 ran", n->held128);
  for (int i = 0; i < 4; i++)
    if (n->odd[i] < 4)
      t_fail(__FILE__, __LINE__, "only %d forward configs in blocks of %d ran", n->odd[i], odd_blocks[i]);
  if (n->half < 12) t_fail(__FILE__, __LINE__, "only %d configs with half a warp a row ran", n->half);
  if (n->staged < 40) t_fail(__FILE__, __LINE__, "only %d forward configs staging the weight and bias ran", n->staged);
  if (n->shared < 10) t_fail(__FILE__, __LINE__, "only %d backward configs with shared sums ran", n->shared);
  if (n->reread < 20) t_fail(__FILE__, __LINE__, "only %d backward configs reading tiles again ran", n->reread);
  if (n->kept < 10) t_fail(__FILE__, __LINE__, "only %d backward configs holding the weight past 16 KB ran", n->kept);
  if (clusters ? n->clustered < 40 : n->clustered != 0)
    t_fail(__FILE__, __LINE__, "%d backward configs in clusters ran on %s", n->clustered, arch);
  if (clusters ? n->merged < 20 : n->merged != 0)
    t_fail(__FILE__, __LINE__, "%d backward configs merging rows' sums ran on %s", n->merged, arch);
}

typedef struct sweep_case {
  ncase c;
  int P;
} sweep_case;

/* Every config of each case, forward and backward, into n; 0, or -1 where
** one was wrong (reported). */
static int sweep_cases(kt_runtime *rt, kt_kernel *f, kt_kernel *b, kt_kernel *r, const sweep_case *cs, size_t ncs,
                       sweep_counts *n) {
  for (size_t i = 0; i < ncs; i++) {
    const double t0 = kt__now_ms();
    const int ran0 = n->ran;
    const double refused0 = n->refused_s;
    nbufs nb;
    if (nb_setup(&nb, rt, cs[i].c, cs[i].P, 900 + i)) return -1;
    /* Every variant the sweep can use, compiled in parallel first. */
    kt_arg fa[13], ba[14];
    fwd_args(&nb, fa);
    bwd_args(&nb, ba);
    int bad = kt_kernel_compile_for(f, fa, 13, NULL, NULL, NULL) || kt_kernel_compile_for(b, ba, 14, NULL, NULL, NULL);
    if (bad) t_fail(__FILE__, __LINE__, "compile: %s", kt_errmsg(rt));
    const double tc = kt__now_ms();
    if (!bad) bad = sweep_shape(f, b, r, &nb, n);
    nb_free(&nb);
    const double t1 = kt__now_ms();
    /* Where a case's time goes: its setup and compile, then the sweep. */
    printf("    %dx%d: %d launches checked in %.1f s (set up and compiled in %.1f s, configs refused in %.1f s)\n",
           cs[i].c.T, cs[i].c.D, n->ran - ran0, (t1 - t0) / 1e3, (tc - t0) / 1e3, n->refused_s - refused0);
    fflush(stdout);
    if (bad) return -1;
  }
  return 0;
}

/* Every (BLOCK, ROWS, VEC, ITEMS, STAGES) the constraints allow, forward
** (with PACK 0 and 1, OCC 1 to 6, 9 and 12: registers held for more
** blocks an SM, and WSH 0 and 1: the weight and bias staged in shared memory) and
** backward (with ACC 0 and 1, REREAD 0 and 1, HOLD 0 and 1: the weight
** kept in registers past 16 KB a block, and on
** sm_90 programs of CL = 1, 2 and 4 blocks that split each row's columns,
** or of MG = 2 and 4 blocks that split the program's rows), where a
** program owns fewer rows than a tile holds: T=450 over 264 programs (2
** rows each), 200 programs (3 rows; 50 programs own none) and T=7
** (programs of one row, most of the grid idle); T=5000 over 100 programs,
** where the backward's pipeline ring wraps many times; and rows too long
** for a block's registers (D of 12288, 16384, 6000 and 10000, the last two
** not powers of two, 6000 not a multiple of a block's vectors) over
** programs that own 5, 3, 1 or 4 rows and none. Forward blocks that are
** not a power of two where they cover a row exactly: 384 threads (D = 6144,
** 9216 and 12288: 12 warps, whose sums are added over 16 lanes), 320 and
** 640 (D = 5120 with a residual, and 10240), 768 (D = 6144, RMSNorm, and
** 12288). Half a warp a row, forward and
** backward, on short rows (D = 64, 128 and 256, the last in groups of 64
** too): two rows a warp, each summed over its 16 lanes. */
static void norm_backward_tile_larger_than_rows(void) {
  kt_kernel *f, *b, *r;
  kt_runtime *rt = open3(KT_MODE_OFF, &f, &b, &r);
  if (!rt) return;
  static const sweep_case sweep[] = {
      {{450, 256, 1, KT_BF16, KT_F32, 0, 0, 0, 1, 1, 1, 0}, 264},
      {{450, 1000, 1, KT_F32, KT_F32, 1, 0, 0, 1, 0, 0, 0}, 200},
      {{7, 2048, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, 264},
      {{450, 256, 4, KT_BF16, KT_F32, 0, 0, 0, 1, 1, 0, 0}, 200},
      {{450, 256, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 264},
      {{5000, 512, 1, KT_F16, KT_F16, 0, 0, 0, 1, 1, 1, 0}, 100}, /* 50 rows: the ring wraps */
      {{37, 12288, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 8},   /* 5 rows, the last program 2 */
      {{19, 16384, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 7},   /* 3 rows, the last 1 */
      {{11, 6000, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 16},   /* 1 row; 5 programs own none */
      {{23, 10000, 1, KT_F16, KT_F16, 1, 0, 0, 1, 0, 1, 0}, 6},     /* 4 rows, the last 3; w held past 16 KB */
      {{13, 9216, 1, KT_F16, KT_F16, 0, 1, 1, 1, 1, 0, 0}, 16},    /* blocks of 384, 3 items a thread */
      {{9, 5120, 1, KT_BF16, KT_BF16, 0, 1, 1, 1, 1, 0, 0}, 4},     /* blocks of 640 and 320 */
      {{6, 6144, 1, KT_F16, KT_F16, 1, 0, 0, 1, 0, 0, 0}, 4},       /* blocks of 768 and 384 */
      {{5, 10240, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, 2},    /* 640 and 320, held for 2 and 4 an SM */
      {{450, 64, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 264},  /* half a warp a row, both ways */
      {{100, 128, 1, KT_F16, KT_F16, 1, 0, 0, 1, 0, 0, 0}, 33},
  };
  kt_runtime_info info = {.size = sizeof info};
  kt_runtime_get_info(rt, &info);
  sweep_counts n = {0};
  if (!sweep_cases(rt, f, b, r, sweep, sizeof sweep / sizeof sweep[0], &n)) sweep_check(&n, has_clusters(rt), info.arch);
  kt_runtime_close(rt);
}

/* The sweep's configs where the weight is read but its dw is not asked for
** (a frozen norm: dw and its partial rows null, left as they were): with
** db alone, T=100 over 33 programs of 3 rows, the last of 1 (its sums in
** shared memory, or merged over blocks that split rows on sm_90), and with
** no sum at all at D = 10240, the weight held past 16 KB. */
static void norm_backward_frozen_weight_every_config(void) {
  kt_kernel *f, *b, *r;
  kt_runtime *rt = open3(KT_MODE_OFF, &f, &b, &r);
  if (!rt) return;
  static const sweep_case sweep[] = {
      {{100, 2048, 1, KT_BF16, KT_BF16, 0, 0, 0, 2, 1, 1, 0}, 33},
      {{5, 10240, 1, KT_BF16, KT_BF16, 1, 0, 0, 2, 0, 0, 0}, 2},
  };
  sweep_counts n = {0};
  if (!sweep_cases(rt, f, b, r, sweep, sizeof sweep / sizeof sweep[0], &n)) {
    const int clusters = has_clusters(rt);
    printf("    frozen weight: %d (config, shape) launches checked, %d pipelined, %d with shared sums, %d merging "
           "rows' sums, %d holding the weight past 16 KB\n", n.ran, n.piped, n.shared, n.merged, n.kept);
    if (n.ran < 40 || n.piped < 10 || n.shared < 1 || n.kept < 1 || (clusters && n.merged < 1))
      t_fail(__FILE__, __LINE__, "too few configs ran: %d, %d pipelined, %d shared, %d held, %d merged", n.ran,
             n.piped, n.shared, n.kept, n.merged);
  }
  kt_runtime_close(rt);
}

/* The forward's key leaves T out: one tuning serves every T. The
** backward's holds the power-of-two buckets of T (the rows a program owns
** decide its best config) and of P (a config of clusters suits a quarter of
** the programs that one of single blocks does). */
static void norm_key_leaves_out_T(void) {
  kt_runtime *rt = g_open();
  if (!rt) return;
  kt_kernel *f, *b, *r;
  if (!load3(rt, &f, &b, &r)) {
    char k1[512], k2[512];
    nbufs nb;
    ncase c = {450, 256, 1, KT_BF16, KT_F32, 0, 0, 0, 1, 1, 0, 0};
    if (nb_make(&nb, rt, c, 264, 3)) t_fail(__FILE__, __LINE__, "setup");
    kt_arg a[14];
    bwd_args(&nb, a);
    kt_kernel_key(b, a, 14, k1, sizeof k1);
    a[9] = kt_arg_i32(512);
    a[12] = kt_arg_i32(300);
    kt_kernel_key(b, a, 14, k2, sizeof k2);
    ASSERT_STR_EQ(k1, k2);
    ASSERT_CONTAINS(k1, "\"N\":512");
    ASSERT_CONTAINS(k1, "\"P\":512");
    a[9] = kt_arg_i32(513);
    a[12] = kt_arg_i32(33);
    kt_kernel_key(b, a, 14, k2, sizeof k2);
    ASSERT_CONTAINS(k2, "\"N\":1024");
    ASSERT_CONTAINS(k2, "\"P\":64");
    fwd_args(&nb, a);
    kt_kernel_key(f, a, 13, k1, sizeof k1);
    a[8] = kt_arg_i32(1);
    kt_kernel_key(f, a, 13, k2, sizeof k2);
    ASSERT_STR_EQ(k1, k2);
    nb_free(&nb);
  }
  kt_runtime_close(rt);
}

/* Rows whose statistics cancel: the first element an outlier (+100, -100:
** the shift of LayerNorm's one-pass variance is that element), a row
** offset by 300 and one by -300 with its first element at the far end; the
** rest drawn as usual. */
static void skew_rows(nbufs *n) {
  const size_t L = (size_t)(n->c.D / n->c.G);
  const double first[] = {100, -100, 0, 0}, add[] = {0, 0, 300, -300};
  for (size_t s = 0; s < (size_t)n->c.T * n->c.G && s < 4; s++) {
    for (size_t i = 0; i < L; i++) n->x.h[s * L + i] += add[s];
    n->x.h[s * L] += first[s] + (s == 3 ? -3 : 0);
  }
}

/* A case and the forward config forced on it. */
typedef struct fwd_case {
  ncase c;
  const char *cfg;
} fwd_case;

/* run_fwd with a forced config, which the constraints must admit; frees nb.
** Nonzero: stop. */
static int run_fwd_forced(kt_kernel *f, nbufs *nb, const char *cfg) {
  int rf = run_fwd(f, nb, cfg, NULL);
  if (rf > 0) t_fail(__FILE__, __LINE__, "%s refused: %s", cfg, kt_errmsg(nb->x.rt));
  nb_free(nb);
  return rf;
}

/* LayerNorm's forward on 16-bit rows whose mean and variance cancel, in
** registers (ITEMS > 0: rows of up to 16384 take the one-pass variance about
** their first element, longer ones two reductions), packed, pipelined and
** grouped: y within the usual tolerances of float64, and mean and rstd
** within the one-pass variance's bound (its rounding moves the variance by
** at most about L * 2^-24 of it, rstd by half that: L * 2^-24 is the
** tolerance, 1e-4 at least). Where x[0] is the far outlier, rows of 12288
** in blocks of 384 put rstd 3.8e-4 from float64 where blocks of 512 of
** 16384 stayed within 1e-4 (also with the weight and bias staged, WSH):
** the sums' order decides how much of the bound a row takes. (f32 rows take
** two reductions, as before; on the rows offset by 300 their mean's
** rounding puts y outside this file's f32 tolerance of 2e-5.) */
static void norm_forward_statistics_that_cancel(void) {
  static const fwd_case runs[] = {
      {{4, 16384, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=512,ROWS=1,VEC=8,ITEMS=4,STAGES=0,PACK=0,OCC=1,WSH=0"},
      {{4, 16384, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=512,ROWS=1,VEC=8,ITEMS=4,STAGES=0,PACK=1,OCC=1,WSH=0"},
      {{4, 16384, 1, KT_BF16, KT_BF16, 0, 1, 1, 1, 1, 0, 0}, "BLOCK=1024,ROWS=1,VEC=8,ITEMS=2,STAGES=2,PACK=0,OCC=1,WSH=0"},
      {{6, 1000, 1, KT_F16, KT_F32, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=128,ROWS=1,VEC=4,ITEMS=2,STAGES=0,PACK=0,OCC=1,WSH=0"},
      {{4, 4000, 4, KT_F16, KT_F16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=128,ROWS=4,VEC=4,ITEMS=8,STAGES=0,PACK=0,OCC=1,WSH=0"},
      {{4, 32768, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=1024,ROWS=1,VEC=8,ITEMS=4,STAGES=0,PACK=0,OCC=1,WSH=0"},
      {{4, 12288, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=384,ROWS=1,VEC=8,ITEMS=4,STAGES=0,PACK=0,OCC=3,WSH=0"},
      {{5, 5120, 1, KT_F16, KT_F16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=256,ROWS=1,VEC=8,ITEMS=3,STAGES=0,PACK=0,OCC=5,WSH=0"},
      {{4, 16384, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=512,ROWS=1,VEC=8,ITEMS=4,STAGES=0,PACK=0,OCC=1,WSH=1"},
      {{4, 4000, 4, KT_F16, KT_F16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=128,ROWS=4,VEC=4,ITEMS=8,STAGES=0,PACK=0,OCC=1,WSH=1"},
      {{4, 10240, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=640,ROWS=1,VEC=8,ITEMS=2,STAGES=0,PACK=1,OCC=2,WSH=1"},
  };
  kt_kernel *f, *b, *r;
  kt_runtime *rt = open3(KT_MODE_OFF, &f, &b, &r);
  if (!rt) return;
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    nbufs nb;
    if (nb_make_skewed(&nb, rt, runs[i].c, 4, 1100 + i, skew_rows)) {
      t_fail(__FILE__, __LINE__, "setup: %s", kt_errmsg(rt));
      nb_free(&nb);
      break;
    }
    const int L = runs[i].c.D / runs[i].c.G;
    if (runs[i].c.dt != KT_F32 && L <= 16384) nb.stat_tol = fmax(1e-4, L * 0x1p-24);
    if (run_fwd_forced(f, &nb, runs[i].cfg)) break;
  }
  kt_runtime_close(rt);
}

/* open3, and layernorm_bwd_row in *w. */
static kt_runtime *open4(kt_mode mode, kt_kernel **f, kt_kernel **b, kt_kernel **r, kt_kernel **w) {
  kt_runtime *rt = open3(mode, f, b, r);
  if (rt && g_load_kernels(rt, "kernels_src/layernorm_bwd_row.json", w, NULL)) {
    kt_runtime_close(rt);
    return NULL;
  }
  return rt;
}

/* One row's dw and db from layernorm_bwd (P = 1, its default config) and
** its reduce, checked against float64, copied into *dw and *db (the
** caller frees them). */
static int two_launch_bytes(kt_kernel *b, kt_kernel *r, nbufs *nb, unsigned char **dw, unsigned char **db) {
  const size_t bytes = (size_t)nb->c.D * kt_dtype_size(nb->c.wdt);
  *dw = *db = NULL;
  if (run_bwd(b, r, nb, NULL, NULL)) return -1;
  *dw = malloc(bytes);
  *db = malloc(bytes);
  if (!*dw || !*db) {
    t_fail(__FILE__, __LINE__, "out of memory");
    return -1;
  }
  memcpy(*dw, buf_bytes(&nb->dw), bytes);
  memcpy(*db, buf_bytes(&nb->db), bytes);
  return 0;
}

/* The n-th config of layernorm_bwd_row's space (n < ROW_CONFIGS) in cfg,
** its fields in f (BLOCK, ROWS, VEC, ITEMS, STAGES, CL, MG). */
enum { ROW_CONFIGS = 6 * 4 * 4 * 7 * 4 * 3 * 4 };
static void row_config(int n, char *cfg, size_t len, int *f) {
  static const int blocks[] = {32, 64, 128, 256, 512, 1024}, items[] = {0, 1, 2, 3, 4, 8, 16};
  f[0] = blocks[n % 6], n /= 6;
  f[1] = 1 << (n % 4), n /= 4;
  f[2] = 1 << (n % 4), n /= 4;
  f[3] = items[n % 7], n /= 7;
  f[4] = n % 4 ? 1 + n % 4 : 0, n /= 4;
  f[5] = 1 << (n % 3), n /= 3;
  f[6] = 1 << n;
  snprintf(cfg, len, "BLOCK=%d,ROWS=%d,VEC=%d,ITEMS=%d,STAGES=%d,CL=%d,MG=%d", f[0], f[1], f[2], f[3], f[4], f[5],
           f[6]);
}

/* layernorm_bwd_row with every config its constraints allow: BLOCK, ROWS
** (segments of a block, their sums met in f32 shared memory), VEC, ITEMS
** (0: a loop over the row, its dw and db added in place, as with groups;
** one row only), STAGES (rows in flight) and, on sm_90, clusters of CL = 2
** and 4 blocks that split the rows' columns or of MG = 2 to 8 blocks that
** split the rows (blocks left without a row included); T = 1 to 33, rows
** that are not a power of two (100, 1000, 6000, 20000), groups, both
** norms, every switch (no weight and no bias: no dw or db; a weight whose
** dw no one asks for), three dtypes,
** pointers offset by one element. dx, dw and db against float64; at T = 1
** dw and db also byte for byte against layernorm_bwd and its reduce. */
static void norm_backward_one_row(void) {
  static const ncase rowcases[] = {
      /* T D G dt wdt rms res store w b dres offset */
      {1, 64, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 0, 0},
      {1, 100, 1, KT_F32, KT_F32, 0, 0, 0, 1, 1, 1, 1},
      {1, 1000, 1, KT_BF16, KT_F32, 0, 0, 0, 1, 1, 1, 1},
      {1, 1536, 1, KT_F16, KT_F16, 1, 0, 0, 1, 0, 1, 0},
      {1, 4096, 4, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0},
      {1, 6000, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0},
      {1, 8192, 1, KT_F16, KT_F32, 1, 0, 0, 1, 0, 0, 0},
      {1, 16384, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0},
      {1, 20000, 1, KT_BF16, KT_F32, 0, 0, 0, 0, 1, 0, 1},
      {1, 256, 1, KT_BF16, KT_BF16, 1, 0, 0, 0, 0, 1, 0},
      {2, 4096, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0},
      {3, 1000, 1, KT_F16, KT_F32, 1, 0, 0, 1, 0, 0, 1},
      {4, 256, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0},
      {5, 6000, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0},
      {8, 256, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 0, 0},
      {13, 1000, 1, KT_F16, KT_F16, 0, 0, 0, 1, 1, 1, 1},
      {16, 4096, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0},
      {11, 3000, 1, KT_F32, KT_F32, 0, 0, 0, 0, 1, 1, 0},
      {33, 100, 1, KT_BF16, KT_F32, 1, 0, 0, 1, 0, 1, 1},
      /* A weight whose dw no one asks for. */
      {1, 4096, 1, KT_BF16, KT_BF16, 0, 0, 0, 2, 1, 0, 0},
      {6, 1000, 1, KT_F16, KT_F16, 1, 0, 0, 2, 0, 1, 1},
      {16, 2048, 1, KT_BF16, KT_F32, 0, 0, 0, 2, 1, 0, 0},
  };
  kt_kernel *f, *b, *r, *w;
  kt_runtime *rt = open4(KT_MODE_OFF, &f, &b, &r, &w);
  if (!rt) return;
  const int clusters = has_clusters(rt);
  int ran = 0, clustered = 0, looped = 0, piped = 0, rows = 0, segs = 0, merged = 0, bad = 0;
  for (size_t i = 0; i < sizeof rowcases / sizeof rowcases[0] && !bad; i++) {
    nbufs nb;
    unsigned char *dw = NULL, *db = NULL;
    kt_arg a[13];
    if (nb_setup(&nb, rt, rowcases[i], 1, 1300 + i)) break;
    row_args(&nb, a);
    bad = rowcases[i].T == 1 ? two_launch_bytes(b, r, &nb, &dw, &db) : run_bwd(b, r, &nb, NULL, NULL);
    if (!bad && kt_kernel_compile_for(w, a, 13, NULL, NULL, NULL)) {
      t_fail(__FILE__, __LINE__, "compile: %s", kt_errmsg(rt));
      bad = 1;
    }
    poisoned pz = {0, 0};
    for (int n = 0; n < ROW_CONFIGS && !bad; n++) {
      char cfg[128];
      int c[7];
      row_config(n, cfg, sizeof cfg, c);
      int rr = run_row(w, &nb, cfg, dw, db, &pz);
      if (rr < 0) bad = 1;
      if (rr) continue;
      ran++;
      segs += c[1] > 1;
      piped += c[4] > 0;
      clustered += c[5] > 1;
      merged += c[6] > 1;
      looped += c[3] == 0;
      rows += rowcases[i].T > 1;
    }
    free(dw), free(db);
    nb_free(&nb);
  }
  printf("    one program: %d (config, shape) launches checked, %d over several rows, %d with several segments "
         "(ROWS > 1), %d in clusters over columns (CL > 1), %d over rows (MG > 1), %d looping over the row "
         "(ITEMS = 0), %d pipelined (STAGES > 0)\n", ran, rows, segs, clustered, merged, looped, piped);
  if (!bad && ran < 100) t_fail(__FILE__, __LINE__, "only %d configs ran", ran);
  if (!bad && rows < 40) t_fail(__FILE__, __LINE__, "only %d configs over several rows ran", rows);
  if (!bad && segs < 40) t_fail(__FILE__, __LINE__, "only %d configs with ROWS > 1 ran", segs);
  if (!bad && looped < 10) t_fail(__FILE__, __LINE__, "only %d configs with ITEMS = 0 ran", looped);
  if (!bad && piped < 40) t_fail(__FILE__, __LINE__, "only %d pipelined configs ran", piped);
  if (!bad && (clusters ? clustered < 20 || merged < 20 : clustered + merged != 0))
    t_fail(__FILE__, __LINE__, "%d + %d configs in clusters ran on a device %s clusters", clustered, merged,
           clusters ? "with" : "without");
  kt_runtime_close(rt);
}

/* layernorm_bwd_row on small cases, for compute-sanitizer: a loop over a
** row of 1000 with dres; groups of 1024, each one item a thread; a ragged
** last item (3000 over 3072 columns) with an f32 bias alone; a ragged f32
** row of 100 with every switch, offset; three rows of 4096 through the
** pipeline with dres; on sm_90 an RMSNorm row of 6000 over a cluster of
** two, five such rows pipelined, and a LayerNorm row of 16384 with an f32
** weight over four. Several rows a block (ROWS > 1, sums met in shared
** memory): 7 rows of 1000 in four segments (the last tile part live), 6
** ragged f16 rows of 200 in eight, offset; and on sm_90 clusters that split
** the rows (MG > 1): 13 rows of 4096 over four blocks of two segments, 5
** rows of 1000 over eight blocks (three without a row; pairs of floats
** read across the cluster), 9 f32 rows of 3000 pipelined over two blocks
** with the bias alone; a weight read whose dw no one asks for: db merged
** alone over eight blocks, and rows of 1000 in four segments with no sum
** at all. The config kt_launch picks untuned too (the default
** refused by the constraints at D = 64: the valid config nearest it). */
static void small_norm_one_row(void) {
  static const struct {
    ncase c;
    const char *cfg;
    int cl;
  } runs[] = {
      {{1, 1000, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, "BLOCK=32,ROWS=1,VEC=1,ITEMS=0,STAGES=0,CL=1,MG=1", 1},
      {{1, 4096, 4, KT_F16, KT_F16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=128,ROWS=1,VEC=8,ITEMS=1,STAGES=0,CL=1,MG=1", 1},
      {{1, 3000, 1, KT_BF16, KT_F32, 0, 0, 0, 0, 1, 1, 0}, "BLOCK=256,ROWS=1,VEC=4,ITEMS=3,STAGES=0,CL=1,MG=1", 1},
      {{1, 100, 1, KT_F32, KT_F32, 0, 0, 0, 1, 1, 1, 1}, "BLOCK=32,ROWS=1,VEC=1,ITEMS=4,STAGES=0,CL=1,MG=1", 1},
      {{1, 64, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 0, 0}, NULL, 1},
      {{3, 4096, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, "BLOCK=256,ROWS=1,VEC=8,ITEMS=2,STAGES=3,CL=1,MG=1", 1},
      {{5, 6000, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 0, 0}, "BLOCK=128,ROWS=1,VEC=8,ITEMS=3,STAGES=2,CL=2,MG=1", 2},
      {{1, 6000, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 0, 0}, "BLOCK=128,ROWS=1,VEC=8,ITEMS=3,STAGES=0,CL=2,MG=1", 2},
      {{1, 16384, 1, KT_BF16, KT_F32, 0, 0, 0, 1, 1, 1, 0}, "BLOCK=256,ROWS=1,VEC=4,ITEMS=4,STAGES=0,CL=4,MG=1", 4},
      {{7, 1000, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, "BLOCK=512,ROWS=4,VEC=8,ITEMS=1,STAGES=0,CL=1,MG=1", 1},
      {{6, 200, 1, KT_F16, KT_F16, 1, 0, 0, 1, 0, 0, 1}, "BLOCK=256,ROWS=8,VEC=1,ITEMS=8,STAGES=0,CL=1,MG=1", 1},
      {{13, 4096, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 0, 0}, "BLOCK=256,ROWS=2,VEC=8,ITEMS=4,STAGES=0,CL=1,MG=4", 4},
      {{5, 1000, 1, KT_F16, KT_F16, 0, 0, 0, 1, 1, 1, 0}, "BLOCK=32,ROWS=1,VEC=2,ITEMS=16,STAGES=0,CL=1,MG=8", 8},
      {{9, 3000, 1, KT_F32, KT_F32, 0, 0, 0, 0, 1, 1, 0}, "BLOCK=256,ROWS=2,VEC=4,ITEMS=8,STAGES=2,CL=1,MG=2", 2},
      /* The weight read, its dw not asked for: db merged alone, and no sums. */
      {{5, 1000, 1, KT_F16, KT_F16, 0, 0, 0, 2, 1, 1, 0}, "BLOCK=32,ROWS=1,VEC=2,ITEMS=16,STAGES=0,CL=1,MG=8", 8},
      {{7, 1000, 1, KT_BF16, KT_BF16, 1, 0, 0, 2, 0, 1, 0}, "BLOCK=512,ROWS=4,VEC=8,ITEMS=1,STAGES=0,CL=1,MG=1", 1},
  };
  kt_kernel *f, *b, *r, *w;
  kt_runtime *rt = open4(KT_MODE_OFF, &f, &b, &r, &w);
  if (!rt) return;
  const int clusters = has_clusters(rt);
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    if (runs[i].cl > 1 && !clusters) continue;
    nbufs nb;
    if (nb_setup(&nb, rt, runs[i].c, 1, 1400 + i)) break;
    int rr = run_row(w, &nb, runs[i].cfg, NULL, NULL, NULL);
    if (rr > 0) t_fail(__FILE__, __LINE__, "%s refused: %s", runs[i].cfg, kt_errmsg(rt));
    nb_free(&nb);
    if (rr) break;
  }
  kt_runtime_close(rt);
}

/* Small cases only, for compute-sanitizer (make gpu-sanitize). */
static void small_norm(void) {
  static const ncase small[] = {
      {7, 256, 4, KT_F16, KT_F16, 0, 1, 1, 1, 1, 1, 0},
      {450, 256, 1, KT_BF16, KT_F32, 1, 1, 1, 1, 0, 0, 1},
      {33, 1000, 1, KT_F32, KT_BF16, 0, 0, 0, 1, 1, 1, 0},
      {3, 20000, 1, KT_BF16, KT_F32, 0, 1, 1, 1, 1, 0, 0},
      {33, 1000, 1, KT_BF16, KT_BF16, 0, 0, 0, 2, 1, 1, 0}, /* dw not asked for */
  };
  run_cases(KT_MODE_OFF, small, sizeof small / sizeof small[0]);
}

/* The pipelines (STAGES > 0) on small cases, for compute-sanitizer: backward
** programs of 5 rows and of 3 (the last) against ROWS of 1, 2 and 4, every
** depth, bf16 and f32, groups in the forward, and rings that wrap (T=1200:
** forward blocks of several tiles, backward programs of 10); and the forward
** with its segment kept packed (PACK=1): a ragged f16 row with res_out,
** groups with an f32 weight, an RMSNorm row of 4096; and the backward's
** sums in shared memory (ACC=1): with a bias, pipelined, bias alone in f32,
** weight alone over a row of 3000 (three items, the last ragged); and on
** sm_90 programs that are clusters (CL > 1): a row of 256 over two blocks
** with dres, pipelined quarters of 2048 where one cluster owns no rows, a
** ragged RMSNorm half-row of 1500 with shared sums, an f32 bias alone in
** quarters of 250, an f16 ring that wraps in tiles of two rows, and tiles of
** four rows over programs of five; and tiles read again from their slots
** (REREAD=1): a ragged LayerNorm row of 3000 with dres, tiles of two RMSNorm
** rows in f16 whose ring wraps, shared sums beside it, and clusters of two
** over programs of one row, seven of which own none; and programs of blocks
** that split their rows (MG > 1): two blocks of 3 and 2 rows in tiles of
** two with dres, four over a ragged row of 3000 read again where one block
** owns none, an f16 RMSNorm ring that wraps, and an f32 bias alone in
** quarters of 252 columns; and forward blocks of 384 threads (12 warps a
** row: sums over 16 lanes, 4 of them padding) and registers held for more
** blocks an SM (OCC > 1): an RMSNorm row of 12288, packed; groups of 3072
** with a residual; rows of 9216 with a residual; rows of 3072; a ragged row
** of 5120 with a residual; rows of 3072 in blocks of 256; and half a warp
** a row (two rows a warp, each summed over its 16 lanes): forward rows of
** 256 with a residual, rows of 64 in blocks of 16 rows, a packed RMSNorm
** row of 256, groups of 64 with an f32 weight; forward and backward rows of
** 64; a backward f16 RMSNorm row of 128 in tiles of four rows over programs
** of three; and the backward's weight held in registers past 16 KB a block
** (HOLD=1): a ragged f16 RMSNorm row of 10000 with dres and shared sums, a
** LayerNorm row of 16384 in blocks of 512 that split programs of 3 and 2
** rows (MG=2, tiles read again), an f32 weight over halves of 12288 in
** clusters of two; and a weight read whose dw no one asks for: shared
** sums of db alone, four blocks merging db alone over a ragged row of 3000,
** and the weight held past 16 KB with no sum at all. */
static void small_norm_pipelined(void) {
  enum { BWD = 1, FWD = 2, BOTH = 3 };
  static const struct {
    ncase c;
    int P, which;
    const char *cfg;
    int pack; /* the forward's PACK */
    int acc;  /* the backward's ACC */
    int cl;   /* the backward's CL */
    int rr;   /* the backward's REREAD */
    int mg;   /* the backward's MG */
    int occ;  /* the forward's OCC (0: 1) */
    int hold; /* the backward's HOLD */
  } runs[] = {
      {{33, 256, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 7, BWD, "BLOCK=32,ROWS=1,VEC=8,ITEMS=1,STAGES=2", 0, 0, 1, 0, 1, 0, 0},
      {{33, 256, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 7, BWD, "BLOCK=64,ROWS=2,VEC=8,ITEMS=1,STAGES=3", 0, 0, 1, 0, 1, 0, 0},
      {{33, 256, 1, KT_BF16, KT_BF16, 0, 1, 1, 1, 1, 1, 0}, 7, BOTH, "BLOCK=128,ROWS=4,VEC=8,ITEMS=1,STAGES=4", 0, 0, 1, 0, 1, 0, 0},
      {{33, 256, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 0, 0}, 7, BOTH, "BLOCK=128,ROWS=4,VEC=8,ITEMS=1,STAGES=2", 0, 0, 1, 0, 1, 0, 0},
      {{20, 1000, 1, KT_F32, KT_F32, 0, 0, 0, 1, 1, 0, 0}, 3, BOTH, "BLOCK=256,ROWS=1,VEC=4,ITEMS=1,STAGES=3", 0, 0, 1, 0, 1, 0, 0},
      {{20, 1000, 1, KT_F32, KT_F32, 0, 1, 0, 0, 0, 1, 0}, 3, BOTH, "BLOCK=128,ROWS=1,VEC=4,ITEMS=2,STAGES=2", 0, 0, 1, 0, 1, 0, 0},
      {{7, 1024, 4, KT_F16, KT_F16, 0, 1, 1, 1, 1, 0, 0}, 3, FWD, "BLOCK=128,ROWS=4,VEC=8,ITEMS=1,STAGES=3", 0, 0, 1, 0, 1, 0, 0},
      {{1200, 1024, 1, KT_BF16, KT_BF16, 0, 1, 1, 1, 1, 1, 0}, 16, BOTH, "BLOCK=1024,ROWS=8,VEC=8,ITEMS=1,STAGES=3", 0, 0, 1, 0, 1, 0, 0},
      {{7, 1000, 1, KT_F16, KT_F16, 0, 0, 1, 1, 1, 1, 0}, 3, FWD, "BLOCK=128,ROWS=4,VEC=4,ITEMS=8,STAGES=0", 1, 0, 1, 0, 1, 0, 0},
      {{5, 4000, 4, KT_BF16, KT_F32, 0, 0, 0, 1, 1, 1, 0}, 3, FWD, "BLOCK=128,ROWS=4,VEC=4,ITEMS=8,STAGES=0", 1, 0, 1, 0, 1, 0, 0},
      {{33, 4096, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 1, 0}, 3, FWD, "BLOCK=128,ROWS=1,VEC=8,ITEMS=4,STAGES=0", 1, 0, 1, 0, 1, 0, 0},
      {{9, 2048, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 4, BWD, "BLOCK=128,ROWS=1,VEC=8,ITEMS=2,STAGES=0", 0, 1, 1, 0, 1, 0, 0},
      {{9, 2048, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, 4, BWD, "BLOCK=128,ROWS=1,VEC=8,ITEMS=2,STAGES=3", 0, 1, 1, 0, 1, 0, 0},
      {{5, 1000, 1, KT_F32, KT_F32, 0, 0, 0, 0, 1, 0, 0}, 2, BWD, "BLOCK=64,ROWS=1,VEC=4,ITEMS=4,STAGES=2", 0, 1, 1, 0, 1, 0, 0},
      {{7, 3000, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 1, 0}, 3, BWD, "BLOCK=128,ROWS=1,VEC=8,ITEMS=3,STAGES=0", 0, 1, 1, 0, 1, 0, 0},
      {{33, 256, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 7, BWD, "BLOCK=32,ROWS=1,VEC=4,ITEMS=1,STAGES=0", 0, 0, 2, 0, 1, 0, 0},
      {{9, 2048, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 4, BWD, "BLOCK=64,ROWS=1,VEC=8,ITEMS=1,STAGES=3", 0, 0, 4, 0, 1, 0, 0},
      {{7, 3000, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 1, 0}, 3, BWD, "BLOCK=128,ROWS=1,VEC=4,ITEMS=4,STAGES=0", 0, 1, 2, 0, 1, 0, 0},
      {{5, 1000, 1, KT_F32, KT_F32, 0, 0, 0, 0, 1, 0, 0}, 2, BWD, "BLOCK=32,ROWS=1,VEC=2,ITEMS=4,STAGES=0", 0, 0, 4, 0, 1, 0, 0},
      {{1200, 1024, 1, KT_F16, KT_F16, 0, 0, 0, 1, 1, 0, 0}, 16, BWD, "BLOCK=128,ROWS=2,VEC=8,ITEMS=1,STAGES=4", 0, 0, 2, 0, 1, 0, 0},
      {{33, 256, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 1, 0}, 7, BWD, "BLOCK=128,ROWS=4,VEC=4,ITEMS=1,STAGES=0", 0, 0, 2, 0, 1, 0, 0},
      {{7, 3000, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 3, BWD, "BLOCK=128,ROWS=1,VEC=8,ITEMS=3,STAGES=2", 0, 0, 1, 1, 1, 0, 0},
      {{1200, 1024, 1, KT_F16, KT_F16, 1, 0, 0, 1, 0, 0, 0}, 16, BWD, "BLOCK=128,ROWS=2,VEC=8,ITEMS=2,STAGES=3", 0, 0, 1, 1, 1, 0, 0},
      {{9, 2048, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, 4, BWD, "BLOCK=128,ROWS=1,VEC=8,ITEMS=2,STAGES=2", 0, 1, 1, 1, 1, 0, 0},
      {{9, 4096, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 16, BWD, "BLOCK=128,ROWS=1,VEC=8,ITEMS=2,STAGES=2", 0, 0, 2, 1, 1, 0, 0},
      {{33, 256, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 7, BWD, "BLOCK=64,ROWS=2,VEC=8,ITEMS=1,STAGES=3", 0, 0, 1, 0, 2, 0, 0},
      {{7, 3000, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 3, BWD, "BLOCK=128,ROWS=1,VEC=8,ITEMS=3,STAGES=2", 0, 0, 1, 1, 4, 0, 0},
      {{1200, 1024, 1, KT_F16, KT_F16, 1, 0, 0, 1, 0, 0, 0}, 16, BWD, "BLOCK=128,ROWS=2,VEC=8,ITEMS=2,STAGES=4", 0, 0, 1, 0, 2, 0, 0},
      {{20, 1000, 1, KT_F32, KT_F32, 0, 0, 0, 0, 1, 0, 0}, 3, BWD, "BLOCK=256,ROWS=1,VEC=4,ITEMS=1,STAGES=3", 0, 0, 1, 0, 4, 0, 0},
      {{5, 12288, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 0, 0}, 3, FWD, "BLOCK=384,ROWS=1,VEC=8,ITEMS=4,STAGES=0", 1, 0, 1, 0, 1, 3, 0},
      {{7, 6144, 2, KT_BF16, KT_BF16, 0, 1, 1, 1, 1, 0, 0}, 3, FWD, "BLOCK=384,ROWS=1,VEC=8,ITEMS=1,STAGES=0", 0, 0, 1, 0, 1, 1, 0},
      {{7, 9216, 1, KT_F16, KT_F16, 0, 1, 1, 1, 1, 0, 0}, 3, FWD, "BLOCK=384,ROWS=1,VEC=8,ITEMS=3,STAGES=0", 0, 0, 1, 0, 1, 3, 0},
      {{9, 3072, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, 3, FWD, "BLOCK=384,ROWS=1,VEC=8,ITEMS=1,STAGES=0", 0, 0, 1, 0, 1, 1, 0},
      /* Half a warp a row; in blocks of 8 or 16 rows, the last block part live. */
      {{35, 256, 1, KT_BF16, KT_BF16, 0, 1, 1, 1, 1, 1, 0}, 3, FWD, "BLOCK=128,ROWS=8,VEC=8,ITEMS=2,STAGES=0", 0, 0, 1, 0, 1, 0, 0},
      {{35, 64, 1, KT_F16, KT_F16, 0, 0, 0, 1, 1, 1, 0}, 3, FWD, "BLOCK=256,ROWS=16,VEC=4,ITEMS=1,STAGES=0", 0, 0, 1, 0, 1, 0, 0},
      {{33, 256, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 1, 0}, 3, FWD, "BLOCK=256,ROWS=16,VEC=8,ITEMS=2,STAGES=0", 1, 0, 1, 0, 1, 0, 0},
      {{9, 256, 4, KT_BF16, KT_F32, 0, 0, 0, 1, 1, 1, 0}, 3, FWD, "BLOCK=128,ROWS=8,VEC=4,ITEMS=1,STAGES=0", 0, 0, 1, 0, 1, 0, 0},
      {{35, 64, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0}, 7, BOTH, "BLOCK=128,ROWS=8,VEC=4,ITEMS=1,STAGES=0", 0, 0, 1, 0, 1, 0, 0},
      {{9, 128, 1, KT_F16, KT_F16, 1, 0, 0, 1, 0, 0, 0}, 4, BWD, "BLOCK=64,ROWS=4,VEC=8,ITEMS=1,STAGES=0", 0, 0, 1, 0, 1, 0, 0},
      {{9, 5120, 1, KT_F16, KT_F16, 0, 1, 1, 1, 1, 0, 0}, 3, FWD, "BLOCK=256,ROWS=1,VEC=8,ITEMS=3,STAGES=0", 0, 0, 1, 0, 1, 5, 0},
      {{3, 3072, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, 3, FWD, "BLOCK=256,ROWS=1,VEC=8,ITEMS=2,STAGES=0", 0, 0, 1, 0, 1, 6, 0},
      /* The weight held past 16 KB a block. */
      {{5, 10000, 1, KT_F16, KT_F16, 1, 0, 0, 1, 0, 1, 0}, 2, BWD, "BLOCK=512,ROWS=1,VEC=8,ITEMS=3,STAGES=2", 0, 1, 1, 0, 1, 0, 1},
      {{7, 16384, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, 3, BWD, "BLOCK=512,ROWS=1,VEC=8,ITEMS=4,STAGES=2", 0, 0, 1, 1, 2, 0, 1},
      {{5, 12288, 1, KT_BF16, KT_F32, 0, 0, 0, 1, 1, 0, 0}, 2, BWD, "BLOCK=256,ROWS=1,VEC=4,ITEMS=8,STAGES=0", 0, 0, 2, 0, 1, 0, 1},
      /* The weight read, its dw not asked for: shared sums and merged
      ** blocks of db alone; the weight held with no sum at all. */
      {{9, 2048, 1, KT_BF16, KT_BF16, 0, 0, 0, 2, 1, 0, 0}, 4, BWD, "BLOCK=128,ROWS=1,VEC=8,ITEMS=2,STAGES=3", 0, 1, 1, 0, 1, 0, 0},
      {{7, 3000, 1, KT_BF16, KT_BF16, 0, 0, 0, 2, 1, 1, 0}, 3, BWD, "BLOCK=128,ROWS=1,VEC=8,ITEMS=3,STAGES=2", 0, 0, 1, 1, 4, 0, 0},
      {{5, 10000, 1, KT_F16, KT_F16, 1, 0, 0, 2, 0, 1, 0}, 2, BWD, "BLOCK=512,ROWS=1,VEC=8,ITEMS=3,STAGES=2", 0, 0, 1, 0, 1, 0, 1},
  };
  kt_kernel *f, *b, *r;
  kt_runtime *rt = open3(KT_MODE_OFF, &f, &b, &r);
  if (!rt) return;
  const int clusters = has_clusters(rt);
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    const int mg = runs[i].mg;
    if ((runs[i].cl > 1 || mg > 1) && !clusters) continue;
    nbufs nb;
    if (nb_setup(&nb, rt, runs[i].c, runs[i].P, 700 + i)) break;
    char fcfg[112], bcfg[112];
    snprintf(fcfg, sizeof fcfg, "%s,PACK=%d,OCC=%d,WSH=0", runs[i].cfg, runs[i].pack, runs[i].occ ? runs[i].occ : 1);
    snprintf(bcfg, sizeof bcfg, "%s,ACC=%d,CL=%d,MG=%d,REREAD=%d,HOLD=%d", runs[i].cfg, runs[i].acc, runs[i].cl,
             mg, runs[i].rr, runs[i].hold);
    int rf = runs[i].which & FWD ? run_fwd(f, &nb, fcfg, NULL) : 0;
    int rb = rf < 0 ? -1 : runs[i].which & BWD ? run_bwd(b, r, &nb, bcfg, NULL) : 0;
    if (rf > 0 || rb > 0) t_fail(__FILE__, __LINE__, "%s refused: %s", rf > 0 ? fcfg : bcfg, kt_errmsg(rt));
    nb_free(&nb);
    if (rf || rb) break;
  }
  kt_runtime_close(rt);
}

/* The forward with the weight and bias staged in shared memory (WSH=1),
** for compute-sanitizer: every thread copies a share of the whole row's
** weight and bias (not only the columns it reads), so the block waits for
** all of it before any store. A ragged f16 row of 1000 with a residual and
** res_out in blocks of four rows, the last block part live; groups of 1000
** with an f32 weight in blocks of four groups; the bias alone; the weight
** alone, RMSNorm, packed; a row of 16384 in blocks of 512 (64 KB staged);
** rows of 12288 in blocks of 384 held for three an SM; half a warp a row
** (rows of 64, 16 a block); and blocks that are not a power of two, one
** row each: 5120 in 640 threads with a residual and res_out, 5120 in 320
** packed and held for four an SM, RMSNorm's 12288 in 768 held for two. */
static void small_norm_staged_weight(void) {
  static const fwd_case runs[] = {
      {{9, 1000, 1, KT_F16, KT_F16, 0, 1, 1, 1, 1, 0, 0}, "BLOCK=128,ROWS=4,VEC=4,ITEMS=8,STAGES=0,PACK=0,OCC=1,WSH=1"},
      {{3, 4000, 4, KT_BF16, KT_F32, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=128,ROWS=4,VEC=4,ITEMS=8,STAGES=0,PACK=0,OCC=1,WSH=1"},
      {{5, 2048, 1, KT_BF16, KT_BF16, 0, 0, 0, 0, 1, 0, 0}, "BLOCK=128,ROWS=1,VEC=8,ITEMS=2,STAGES=0,PACK=0,OCC=1,WSH=1"},
      {{33, 4096, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 0, 0}, "BLOCK=128,ROWS=1,VEC=8,ITEMS=4,STAGES=0,PACK=1,OCC=1,WSH=1"},
      {{3, 16384, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=512,ROWS=1,VEC=8,ITEMS=4,STAGES=0,PACK=0,OCC=1,WSH=1"},
      {{4, 12288, 1, KT_BF16, KT_BF16, 0, 1, 0, 1, 1, 0, 0}, "BLOCK=384,ROWS=1,VEC=8,ITEMS=4,STAGES=0,PACK=0,OCC=3,WSH=1"},
      {{35, 64, 1, KT_F16, KT_F16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=256,ROWS=16,VEC=4,ITEMS=1,STAGES=0,PACK=0,OCC=1,WSH=1"},
      /* Blocks of 20, 10 and 24 warps, each covering its row exactly. */
      {{5, 5120, 1, KT_BF16, KT_BF16, 0, 1, 1, 1, 1, 0, 0}, "BLOCK=640,ROWS=1,VEC=8,ITEMS=1,STAGES=0,PACK=0,OCC=1,WSH=1"},
      {{7, 5120, 1, KT_F16, KT_F16, 0, 0, 0, 1, 1, 0, 0}, "BLOCK=320,ROWS=1,VEC=8,ITEMS=2,STAGES=0,PACK=1,OCC=4,WSH=0"},
      {{3, 12288, 1, KT_BF16, KT_BF16, 1, 0, 0, 1, 0, 0, 0}, "BLOCK=768,ROWS=1,VEC=8,ITEMS=2,STAGES=0,PACK=0,OCC=2,WSH=1"},
  };
  kt_kernel *f, *b, *r;
  kt_runtime *rt = open3(KT_MODE_OFF, &f, &b, &r);
  if (!rt) return;
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    nbufs nb;
    if (nb_setup(&nb, rt, runs[i].c, 3, 1300 + i) || run_fwd_forced(f, &nb, runs[i].cfg)) break;
  }
  kt_runtime_close(rt);
}

/* dy poisoned, then slow_copy writes it from src and the backward (its
** reduce too, unless row) runs at cfg, all on stream s; checked. 1 where
** cfg is refused. The kernels run once before, on the uploaded dy, so
** that no compilation between the launches lets slow_copy end first. */
static int bwd_after_copy(kt_kernel *copy, kt_kernel *k, kt_kernel *kr, int row, nbufs *nb, uint64_t src,
                          kt_stream s, const char *cfg) {
  kt_runtime *rt = nb->x.rt;
  const size_t words = nb->c.T * (size_t)nb->c.D * kt_dtype_size(nb->c.dt) / 4;
  kt_arg ca[] = {kt_arg_ptr(nb->dy.ptr, KT_I32), kt_arg_ptr(src, KT_I32), kt_arg_i32((int)words),
                 kt_arg_i64(2000000)};
  kt_arg a[14], r[7];
  const int na = row ? 13 : 14;
  if (row)
    row_args(nb, a);
  else
    bwd_args(nb, a);
  red_args(nb, r);
  kt_status st = KT_OK;
  for (int pass = 0; pass < 2 && !st; pass++) {
    g_buf *out[] = {&nb->dy, &nb->dx, &nb->dw_part, &nb->db_part, &nb->dw, &nb->db};
    for (size_t i = pass ? 0 : 1; i < sizeof out / sizeof out[0]; i++)
      if (g_buf_poison(out[i])) return -1;
    if (pass) st = kt_launch(copy, s, ca, 4);
    if (!st) st = cfg ? kt_launch_config(k, s, a, na, cfg) : kt_launch(k, s, a, na);
    if (st == KT_ERR_CONSTRAINT) return 1;
    if (!st && !row) st = kt_launch(kr, s, r, 7);
    if (!st) st = kt_stream_sync(rt, s);
  }
  if (st) {
    t_fail(__FILE__, __LINE__, "%s %s: %s", row ? "layernorm_bwd_row" : "layernorm_bwd", cfg ? cfg : "",
           kt_errmsg(rt));
    return -1;
  }
  return check_grads(nb, cfg);
}

/* layernorm_bwd_row and layernorm_bwd_reduce are launched early
** (options.pdl, sm_90+): their blocks may start while the kernel before
** them still runs, so nothing global may be read before it ends (with
** layernorm_bwd launched early too and the backward's wait deleted, dx was
** NaN here on an H100). slow_copy (which lets them launch at once, spins
** about a millisecond, then copies) writes dy over its poison just before
** each backward, on one stream, and dx, dw and db must come from the
** copied dy (against float64): layernorm_bwd_row pipelined; layernorm_bwd,
** with the reduce launched early after it, at the default config,
** pipelined with shared sums, and on sm_90 in clusters that split the
** columns and that split the rows. */
static void small_norm_backward_launched_early(void) {
  static const struct {
    int row, cl;
    const char *cfg;
  } runs[] = {
      {0, 1, NULL},
      {0, 1, "BLOCK=64,ROWS=1,VEC=8,ITEMS=2,STAGES=2,ACC=1,CL=1,MG=1,REREAD=0,HOLD=0"},
      {0, 2, "BLOCK=64,ROWS=1,VEC=8,ITEMS=1,STAGES=0,ACC=0,CL=2,MG=1,REREAD=0,HOLD=0"},
      {0, 2, "BLOCK=128,ROWS=1,VEC=8,ITEMS=1,STAGES=3,ACC=0,CL=1,MG=2,REREAD=0,HOLD=0"},
      {1, 1, "BLOCK=128,ROWS=1,VEC=8,ITEMS=1,STAGES=2,CL=1,MG=1"},
  };
  kt_kernel *copy, *b, *r, *w;
  kt_runtime *rt = g_open_mode(KT_MODE_OFF);
  if (!rt) return;
  if (g_load_kernels(rt, "tests/specs/slow_copy.json", &copy, "kernels_src/layernorm_bwd.json", &b,
                     "kernels_src/layernorm_bwd_reduce.json", &r, "kernels_src/layernorm_bwd_row.json", &w, NULL)) {
    kt_runtime_close(rt);
    return;
  }
  const ncase c = {300, 1024, 1, KT_BF16, KT_BF16, 0, 0, 0, 1, 1, 1, 0};
  nbufs nb;
  uint64_t src = 0;
  kt_stream s = NULL;
  const size_t bytes = (size_t)c.T * c.D * kt_dtype_size(c.dt);
  if (nb_setup(&nb, rt, c, 16, 1500)) {
    kt_runtime_close(rt);
    return;
  }
  ASSERT_STATUS(kt_device_alloc(rt, bytes, &src), KT_OK);
  ASSERT_STATUS(kt_device_upload(rt, src, nb.dy.stage, bytes), KT_OK);
  ASSERT_STATUS(kt_stream_create(rt, &s), KT_OK);
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    if (runs[i].cl > 1 && !has_clusters(rt)) continue;
    int rc = bwd_after_copy(copy, runs[i].row ? w : b, r, runs[i].row, &nb, src, s, runs[i].cfg);
    if (rc > 0) t_fail(__FILE__, __LINE__, "%s refused: %s", runs[i].cfg, kt_errmsg(rt));
    if (rc) break;
  }
  kt_stream_destroy(rt, s);
  kt_device_free(rt, src);
  nb_free(&nb);
  kt_runtime_close(rt);
}

const kt_test gpu_norm_tests[] = {
    {"norm_every_shape_default_config", norm_every_shape_default_config},
    {"norm_backward_tile_larger_than_rows", norm_backward_tile_larger_than_rows},
    {"norm_backward_frozen_weight_every_config", norm_backward_frozen_weight_every_config},
    {"norm_tuned", norm_tuned},
    {"norm_backward_one_row", norm_backward_one_row},
    {"norm_key_leaves_out_T", norm_key_leaves_out_T},
    {"norm_forward_statistics_that_cancel", norm_forward_statistics_that_cancel},
    {"small_norm", small_norm},
    {"small_norm_pipelined", small_norm_pipelined},
    {"small_norm_staged_weight", small_norm_staged_weight},
    {"small_norm_one_row", small_norm_one_row},
    {"small_norm_backward_launched_early", small_norm_backward_launched_early},
    {NULL, NULL},
};
