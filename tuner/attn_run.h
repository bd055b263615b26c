/* tuner/attn_run.h: the GQA attention harness: run one attention variant on the GPU against the reference (CPU fp64 or GPU naive), and time it; the session is tuner/tune_ctx.h */
#ifndef KF_TUNER_ATTN_RUN_H
#define KF_TUNER_ATTN_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "gen/build.h"
#include "gen/kv.h"
#include "runtime/cuda.h"
#include "runtime/module.h"
#include "tuner/check.h"
#include "tuner/tune_clock.h"
#include "tuner/tune_ctx.h"
#include "tuner/tune_phase.h"

/*
 * Which reference to use. The CPU fp64 reference (tuner/ref_attn.c) is exact but
 * costs about 3 * b * hq * sq * skv * d multiply-adds (half when causal: two score
 * passes and one value pass) at about 3.5e8 per second per core (measured, -O2); it
 * runs one work item per (query head, sequence) on every core.
 * Past TUNE_ATTN_CPU_REF_MAX of that work (about 11 s of one core) use the GPU
 * naive kernel (attn_naive, fp32 math) instead: it is itself checked against the
 * CPU reference on small cases by tests/gpu/test_attn_gpu.c. tune_attn_ref_work()
 * gives the work figure of a case.
 * The tuner's gates, one per variant (hundreds a shape), switch at TUNE_GATE_CPU_REF_MAX
 * (about 0.15 s of one core): a decode shape of few heads (MQA 8/1, Sq 4) spent 108 of its
 * 118 s of tuning in the CPU reference at the larger limit. The sweep checks the naive
 * kernel against the CPU reference on a small case of each shape before it gates anything
 * (naive_selfcheck in tuner/tune_sweep.c).
 */
#define TUNE_ATTN_CPU_REF_MAX 4e9
#define TUNE_GATE_CPU_REF_MAX 5e7

/* Layout of q, k, v and o in device memory. */
enum {
    TUNE_LAYOUT_BSHD = 0,          /* [B, S, H, D] (packed: [T, H, D]) */
    TUNE_LAYOUT_BHSD = 1,          /* [B, H, S, D] (packed: [H, T, D]): a permuted, strided view */
};

/*
 * One test case of GQA attention (attn_decode, attn_prefill, attn_naive).
 * Logical inputs depend only on (seed, dtype, b, sq, skv, hq, hkv, d, lengths): the same
 * seed gives the same values whatever the layout, so layouts can be compared bit for bit.
 * Everything a kernel must not read is NaN: K/V past each sequence's kv_len, the unused
 * cache capacity, and padding between rows (q, k, v). o is poisoned everywhere, padding
 * included: a write outside the view is counted as stray.
 */
typedef struct tune_attn_case {
    check_dtype dtype;             /* CHECK_BF16 or CHECK_FP16 */
    int b, sq, skv, hq, hkv, d;    /* sq: rows per sequence (max when q_lens); skv: cache capacity */
    int causal;
    const int *kv_len;             /* [b] keys per sequence (0 and 1 allowed, <= skv), or NULL: skv */
    const int *q_lens;             /* [b] query rows per sequence (<= sq): q/o/lse packed with cu_seqlens_q */
    int packed_kv;                 /* with q_lens: k/v packed too ([T_kv, Hkv, D] with cu_seqlens_k from kv_len) */
    int layout;                    /* TUNE_LAYOUT_* of q, k, v, o */
    int row_pad;                   /* 0/1: dense; n: each D-row of q/k/v/o occupies n*D elements (padding NaN) */
    int expand_kv;                 /* 1: run on K/V expanded to hq heads (hkv' = hq, G = 1): the bitwise check */
    int splits;                    /* 0: the variant's sp (1 when absent) */
    uint64_t seed;                 /* 0: a fresh seed (check_fresh_seed) */
    double scale;                  /* 0: 1/sqrt(d) */
    int keep_outputs;              /* 1: copy o and lse back into the result (dense, see below) */
    /* model features (appended; 0: off), as kf_attn_desc: the variant must have been built for them (the shape
     * keys of tune_attn_case_shape), and so is the GPU naive reference (tune_attn_naive_job) */
    int window, window_left;       /* sliding window: keys pi - window_left .. pi */
    double softcap;                /* > 0: score = softcap * tanh(score / softcap) */
    int sinks;                     /* 1: sink logits tune_attn_sink(h, hq) join the denominators */
    /* FP8 K/V and paged K/V (appended; 0: off) */
    int kv_fp8;                    /* 1: K/V uploaded as e4m3 bytes (values up to +-448, some saturated there; tails
                                    * and unused storage 0x7f, e4m3's NaN) with per-head fp32 scales
                                    * tune_attn_kv_scale(); the variant built with kv_dtype=e4m3; CPU reference only */
    int page_size;                 /* > 0: K/V in a pool of page_size-row pages through a block table [b, bt_sb]: the
                                    * pages shuffled (a permutation drawn from the seed), a spare column and pages
                                    * never referenced, every unused page NaN; not with packed_kv */
    double q_amp;                  /* appended; 0 or 1: q ~ N(0,1); else N(0,1) * q_amp (the range of a scaled Q) */
} tune_attn_case;

/* The per-head dequantisation scale of FP8 K (is_v 0) or V (1), logical kv head kh: distinct for neighbouring
 * heads, so a kernel reading another head's scale fails. */
float tune_attn_kv_scale(int is_v, int kh);
/* The byte amplitude of the e4m3 inputs: byte value = round_e4m3(x * amp), x ~ N(0,1) for K (|x| > 2.8 saturates at
 * 448), U[-1,1) for V (gates; up to 440); dequantised: tune_attn_kv_scale * byte value. */
#define TUNE_KV8_AMP_K 160.0
#define TUNE_KV8_AMP_V 440.0
/* The e4m3 byte nearest x (ties to even), saturated at +-448, never NaN. */
unsigned char tune_e4m3_encode(double x);

/* The sink logit of query head h of a case with sinks: spread over [-2, 4] (near the lse of a few hundred keys,
 * so it weighs in). */
double tune_attn_sink(int h);

typedef struct tune_attn_result {
    int pass;                      /* every check below passed */
    int ran;                       /* the kernels ran (0: an error before or during the launch) */
    char ref[16];                  /* "cpu-fp64" or "gpu-naive" */
    uint64_t seed;                 /* the seed used */
    check_stats o;                 /* o against the reference */
    check_lse_stats lse;
    size_t stray;                  /* elements of o's padding that were written */
    double tol;
    char msg[512];                 /* one line: the verdict (what failed is on the session: tune_ctx_errmsg) */
    /* keep_outputs: o as [rows, hq, d] (case dtype), lse as [rows, hq]; row = b*sq + i
     * dense, the packed row otherwise. malloc'd; tune_attn_result_free. */
    void *o_out;
    float *lse_out;
    long long rows;
} tune_attn_result;

void tune_attn_result_free(tune_attn_result *r);

/* Multiply-adds of the CPU reference for a case (see TUNE_ATTN_CPU_REF_MAX). */
double tune_attn_ref_work(const tune_attn_case *c);

/*
 * Runs v on c and checks o and lse: against the CPU fp64 reference when naive is NULL,
 * else against the GPU naive kernel `naive` (attn_naive of the same dtype/d/causal and model
 * features, tune_attn_naive_job; run on the same device buffers). Inputs random (never zeros), outputs poisoned first.
 * Tolerances: check_tol(dtype) on ||o - ref|| / ||ref||, CHECK_LSE_TOL max-abs on lse
 * (looser against the naive kernel: its own rounding adds in). timing != NULL: also
 * times the launches (samples >= 20; 0 asks for 30), see tune_attn_time.
 * With c->seed given and no timing, the host inputs and the reference are kept for the next
 * call of the same case (inputs, seed, scale, same reference): the gates of a shape's variants
 * fill them and compute the reference once. Each call still uploads the inputs into fresh
 * buffers and poisons fresh outputs; a kept GPU naive reference is taken on inputs uploaded
 * again after the variant ran (whatever it wrote). c->seed 0: fresh inputs, nothing kept.
 * Returns 0 when the variant ran (r->pass and r->msg say the verdict), -1 on an error of the
 * harness or the driver (r->pass = 0; the status and message on ctx say which, tune_ctx_errmsg;
 * ctx NULL: -1, nothing kept).
 */
int tune_attn_check(tune_ctx *ctx, const tune_compiled *v, const tune_attn_case *c,
                    const tune_compiled *naive, int samples, tune_attn_result *r,
                    tune_timing *timing);

/* Whether two cases have the same inputs (dtype, geometry, causal flag, layout, padding, lengths
 * and seed): what the kept inputs of tune_attn_check and tune_attn_time are keyed on; splits,
 * scale and keep_outputs do not change the inputs. */
int tune_attn_same_inputs(const tune_attn_case *a, const tune_attn_case *b);

/* Timing alone, on inputs filled once per case (N(0,1) q, k, v, never zero) and kept on the
 * device for the next variant of the same case: `samples` (1 or more; 0: 30) samples in the
 * session's timing mode (see TUNE_TIMING_SUSTAINED), sustained ones over rotating copies of
 * the inputs. -1 on error (on ctx). */
int tune_attn_time(tune_ctx *ctx, const tune_compiled *v, const tune_attn_case *c, int samples,
                   tune_timing *t);


/* Fills j (tmpl, fixed, params) for the attn_naive variant that references case c (its shape keys,
 * the model features included: tune_attn_case_shape), and prepares it (gen_build_prepare); the caller builds it with gen_build_run. -1 with the
 * host's message. */
int tune_attn_naive_job(gen_host *h, const tune_attn_case *c, const gen_target *tg, gen_job *j);

/* The host half of tune_attn_check, no GPU: fills the inputs of case c from seed exactly as a gate would (layout,
 * pages, FP8 bytes and scales) and computes the CPU fp64 reference on them: *o [rows, hq, d], *lse [rows, hq]
 * (malloc'd, the caller frees), *rows the query rows. Two cases with the same logical inputs (layout, pages or an
 * expanded K/V aside) give the same reference bit for bit. -1 with *e set on a bad case (KF_ERR_ARG) or no
 * memory (KF_ERR_NOMEM). */
int tune_attn_case_reference(const tune_attn_case *c, uint64_t seed, double **o, double **lse, long long *rows,
                             core_err *e);

/* "dtype=bf16,b=1,..." shape kvset of a case (for templates' fixed()/default()). */
void tune_attn_case_shape(const tune_attn_case *c, gen_kvset *shape);

#endif
