/*
** The norms' kt_arg arrays, filled from plain pointers: one place for
** the params of layernorm_fwd, layernorm_bwd_row, layernorm_bwd and
** layernorm_bwd_reduce (their specs' order), for the bodies that take
** Python tensors (_fastnorm.c) and those that take torch's tensor handles
** (_fastaten.c).
*/
#ifndef KTUNE_FASTARGS_H
#define KTUNE_FASTARGS_H

#include <stdint.h>

#include "ktune.h"

/* The kernels of one device, in norm_register's order. */
enum { K_FWD, K_ROW, K_BWD, K_REDUCE, K_COUNT };

/* A device pointer and its kt_dtype: {0, 0} is a null pointer that names
** no dtype (what ktune.ops passes as None); {0, code} one that names it. */
typedef struct {
  uint64_t ptr;
  int code;
} fa_ref;

static inline void fa_ptr(kt_arg *a, fa_ref r) {
  a->kind = KT_ARG_PTR;
  a->dtype = (kt_dtype)r.code;
  a->v.i64 = 0;
  a->v.ptr = r.ptr;
}

/* An i32 param (callers checked the bounds). */
static inline void fa_i32(kt_arg *a, long long v) {
  a->kind = KT_ARG_I32;
  a->dtype = 0;
  a->v.i64 = 0;
  a->v.i32 = (int32_t)v;
}

/* layernorm_fwd: y x res res_out w b mean rstd | N D G eps rms */
typedef struct {
  fa_ref y, x, res, h, w, b, mean, rstd;
  long long T, D, groups;
  double eps;
  int rms;
} fa_fwd;

static inline void fa_fill_fwd(kt_arg a[13], const fa_fwd *f) {
  const fa_ref *p[] = {&f->y, &f->x, &f->res, &f->h, &f->w, &f->b, &f->mean, &f->rstd};
  for (int i = 0; i < 8; i++) fa_ptr(&a[i], *p[i]);
  fa_i32(&a[8], f->T);
  fa_i32(&a[9], f->D);
  fa_i32(&a[10], f->groups);
  a[11].kind = KT_ARG_F32;
  a[11].dtype = 0;
  a[11].v.i64 = 0;
  a[11].v.f32 = (float)f->eps;
  fa_i32(&a[12], f->rms);
}

/* The backward's pointers: dx, then dw and db (layernorm_bwd_row) or
** their partial rows (layernorm_bwd); dy h w mean rstd dres. */
typedef struct {
  fa_ref dx, dw, db, dy, h, w, mean, rstd, dres;
  long long T, D, groups;
  int rms;
} fa_bwd;

static inline void fa_fill_bwd_ptrs(kt_arg a[9], const fa_bwd *b) {
  const fa_ref *p[] = {&b->dx, &b->dw, &b->db, &b->dy, &b->h, &b->w, &b->mean, &b->rstd, &b->dres};
  for (int i = 0; i < 9; i++) fa_ptr(&a[i], *p[i]);
}

/* layernorm_bwd_row: the pointers | T D G rms */
static inline void fa_fill_bwd_row(kt_arg a[13], const fa_bwd *b) {
  fa_fill_bwd_ptrs(a, b);
  fa_i32(&a[9], b->T);
  fa_i32(&a[10], b->D);
  fa_i32(&a[11], b->groups);
  fa_i32(&a[12], b->rms);
}

/* layernorm_bwd: the pointers (dw, db: the P partial rows) | T D G P rms */
static inline void fa_fill_bwd(kt_arg a[14], const fa_bwd *b, long long P) {
  fa_fill_bwd_ptrs(a, b);
  fa_i32(&a[9], b->T);
  fa_i32(&a[10], b->D);
  fa_i32(&a[11], b->groups);
  fa_i32(&a[12], P);
  fa_i32(&a[13], b->rms);
}

/* layernorm_bwd_reduce: dw db dw_part db_part | T D P */
static inline void fa_fill_reduce(kt_arg a[7], fa_ref dw, fa_ref db, fa_ref dwp, fa_ref dbp, long long T, long long D,
                                  long long P) {
  fa_ptr(&a[0], dw);
  fa_ptr(&a[1], db);
  fa_ptr(&a[2], dwp);
  fa_ptr(&a[3], dbp);
  fa_i32(&a[4], T);
  fa_i32(&a[5], D);
  fa_i32(&a[6], P);
}

#endif
