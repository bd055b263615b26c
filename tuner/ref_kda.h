/* tuner/ref_kda.h: plain CPU fp64 references of Kimi Delta Attention: the token recurrence (the oracle) and the chunked form */
#ifndef KF_TUNER_REF_KDA_H
#define KF_TUNER_REF_KDA_H

#include <stddef.h>

#include "templates/common/kda_params.h"

/*
 * The problem is described by a kf_kda_params (templates/common/kda_params.h) holding HOST
 * pointers; every convention there applies (strides, packed/padded, gate forms, l2norm,
 * beta sigmoid, K-first/V-first states, q head = hv / (hv_heads / h_heads)). ws is ignored.
 *
 * Outputs of the references (dense, fp64):
 *   o  [rows, hv_heads, dv], rows = ref_kda_rows(p): row = bos + i packed, n*t + i padded;
 *   ht [nseq, hv_heads, dk, dv] K-first (may be NULL).
 * Only value heads hv0 <= hv < hv0 + nhv are computed (nhv <= 0: all heads); the others are
 * left as they are. Nothing past a sequence's last token is read.
 */
long long ref_kda_rows(const kf_kda_params *p);

/* Prepared inputs of token i of sequence n, value head hv: q (l2-normalised if asked, times
 * scale), k (normalised if asked), v, g (log space, after the gate form), beta (after sigmoid).
 * q, k, g have dk entries, v has dv. */
void ref_kda_token(const kf_kda_params *p, int n, long long i, int hv,
                   double *q, double *k, double *v, double *g, double *beta);

/* Token-by-token recurrence: S <- diag(exp g) S; u = beta (v - S^T k); S += k u^T; o = S^T q. */
void ref_kda(const kf_kda_params *p, int hv0, int nhv, double *o, double *ht);

/* Deliberate slips for tests that must fail; append only. */
typedef enum {
    REF_KDA_EXACT = 0,
    REF_KDA_MUT_NO_DECAY = 1,     /* state update drops diag(exp G_last) */
    REF_KDA_MUT_NO_DIAG = 2,      /* A_qk without its diagonal */
    REF_KDA_MUT_NO_INTER = 3,     /* V' = U (the W S term dropped) */
} ref_kda_mut;

/*
 * Chunked form, chunk size c (>= 1), per chunk with cumulative gates G_i = sum_{s<=i} g_s:
 *   L[i,j] = beta_i sum_d k_i[d] k_j[d] exp(G_i[d] - G_j[d])   (j < i)
 *   T = (I + L)^-1 diag(beta)  (forward substitution);  W = T (exp(G) . K);  U = T V
 *   V' = U - W S;  O = (Q . exp G) S + A_qk V',  A_qk[i,j] = sum_d q_i k_j exp(G_i - G_j) (j <= i)
 *   S <- diag(exp G_last) S + (K . exp(G_last - G))^T V'
 * Every exp argument is <= 0 (no exp(-G) alone). Returns 0, or -1 on a bad chunk size.
 */
int ref_kda_chunked(const kf_kda_params *p, int c, ref_kda_mut mut, int hv0, int nhv, double *o, double *ht);

/*
 * Segment maps: the chunk update is affine in the state, S_out = A S_in + B. ref_kda_segment
 * returns, for tokens [i0, i1) of sequence n, value head hv, A [dk, dk] and B [dk, dv] (chunks
 * of c tokens from i0); composing the maps of consecutive segments from the initial state
 * gives the final state (the parallel scan of the prefill).
 */
int ref_kda_segment(const kf_kda_params *p, int c, int n, int hv, long long i0, long long i1,
                    double *a, double *b);

/*
 * Random host problems for the tests and the correctness gate. Inputs are filled from a seed:
 * q, k N(0, 1) bf16 (k scaled by dk^-0.5 without l2norm, so the delta rule stays stable);
 * v U[-1, 1) bf16; beta raw N(0, 1) (beta_sigmoid) or U[0, 1); gate 0: g U[-log_gate_max, 0];
 * gate 1: g_raw N(0, 1), a_log U[-1, 1), dt_bias U[-1, 4) (pushes g towards lower_bound);
 * h0 U[-1, 1). Row padding (pad_qk, pad_state) is filled with NaN: a kernel that reads it fails.
 * Layouts: q, k [rows, h, dk + pad_qk]; v, o [rows, hv, dv]; g [rows, hv, dk]; beta [rows, hv];
 * h0/ht [nseq, hv, dk, dv + pad_state] (K-first) or [nseq, hv, dv, dk + pad_state] (V-first);
 * rows = total tokens (packed) or nseq * t (padded, with the sequence strides set).
 */
typedef struct ref_kda_case {
    int nseq;
    const int *lens;       /* packed lengths [nseq] (0 allowed), or NULL: padded, t tokens each */
    int t;
    int cu64;              /* cu_seqlens as int64 */
    int h, hv, dk, dv;
    int gate;              /* 0 log-space g, 1 lower-bound form */
    double lower_bound;    /* gate 1 */
    double log_gate_max;   /* gate 0: g in [-log_gate_max, 0] */
    int l2norm, beta_sigmoid;
    int h0;                /* 0 none, 1 K-first, 2 V-first */
    int ht;                /* 0 none, 1 K-first, 2 V-first */
    int pad_qk;            /* extra elements after each q/k head row */
    int pad_state;         /* extra elements after each state row */
    int fill_rows;         /* > 0: q, k, v, g and beta drawn for the first fill_rows token rows only, then those
                              rows repeated (the tuner's timing inputs: the same statistics, filled in a fraction
                              of the time); 0: every row drawn (gates, tests) */
} ref_kda_case;

typedef struct ref_kda_host {
    kf_kda_params p;       /* host pointers into the buffers below; o, ht point at them too */
    void *q, *k, *v, *cu;
    float *g, *beta, *a_log, *dt_bias, *h0, *ht;
    void *o;               /* bf16 [rows, hv, dv] */
    size_t nq, nk, nv, ng, nbeta, nalog, ndt, nh0, nht, ncu_bytes, no;   /* elements (cu: bytes) */
} ref_kda_host;

/* Builds the problem (returns 0, or -1 on a bad case or no memory). */
int ref_kda_host_make(ref_kda_host *hp, const ref_kda_case *c, unsigned long long seed);
void ref_kda_host_free(ref_kda_host *hp);

#endif
