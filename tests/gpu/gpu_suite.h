/* tests/gpu/gpu_suite.h: the GPU attention suite's cases, variant builds and runs, shared by test_attn_gpu and the mutant test */
#ifndef KF_TESTS_GPU_SUITE_H
#define KF_TESTS_GPU_SUITE_H

#include "gen/build.h"
#include "tuner/attn_run.h"

enum { REF_AUTO = 0, REF_CPU = 1, REF_NAIVE = 2 };
enum { MUT_NONE = 0, MUT_YES = 1 };   /* case takes part in the mutant runs */

/* One case of the suite. Zero-terminated lists. */
typedef struct suite_case {
    const char *family;        /* attn_decode, attn_prefill, attn_naive, attn_combine */
    const char *dtype;
    int b, sq, skv, hq, hkv, d, causal;
    int kv_len[8];             /* b entries when kv_len_n */
    int kv_len_n;
    int q_lens[8];             /* b entries when q_lens_n (packed q) */
    int q_lens_n;
    int packed_kv;
    int layout, row_pad;
    const char *params;        /* overrides over the template default, or NULL */
    int ref;                   /* REF_* */
    int mut;                   /* MUT_* */
    int splits;                /* attn_combine: splits */
    int expand;                /* run on K/V expanded to hq heads with the g = 1 variant (bitwise check) */
    /* model features (issue 21; 0: off): the variant is built with them, the CPU fp64 reference applies them */
    int window, window_left;
    double softcap;
    int sinks;
    double scale;              /* 0: 1/sqrt(d); large: large logits */
    int kv_fp8;                /* 1: K/V as e4m3 bytes with per-head scales (tune_attn_case.kv_fp8), kv_dtype=e4m3 */
    double q_amp;              /* 0 or 1: q ~ N(0,1); else scaled by it (tune_attn_case.q_amp) */
    int page_size;             /* > 0: K/V through a shuffled block table of pages of that many rows */
} suite_case;

extern const suite_case suite_decode[];
extern const suite_case suite_prefill[];
extern const suite_case suite_naive[];
extern const suite_case suite_combine[];
/* The model features (window, softcap, sinks), alone and combined, decode and prefill (mma.sync; the sm_90a
 * impls in suite_feat_sm90), and the combine with sinks */
extern const suite_case suite_feat[], suite_feat_sm90[];
extern const int suite_feat_n, suite_feat_sm90_n;
/* FP8 (e4m3) K/V with per-head scales: decode (splits 1 and > 1, ratios 8/2, 8/4, 32/8, paged, with features) and the
 * mma prefill */
extern const suite_case suite_kv8[];
extern const int suite_kv8_n;
/* attn_naive with the model features (window, softcap, sinks, FP8 K/V) against the CPU fp64 reference */
extern const suite_case suite_naive_feat[];
extern const int suite_naive_feat_n;
/* Paged K/V (shuffled pages, NaN in unused pages and past each length, ragged lengths with 0 and 1, pages of 16, 64
 * and 128): prefill on mma.sync (and decode) in suite_paged, on the sm_90a impls in suite_paged_sm90 */
extern const suite_case suite_paged[], suite_paged_sm90[];
extern const int suite_paged_n, suite_paged_sm90_n;
/* attn_decode impl=direct */
extern const suite_case suite_decode_direct[];
extern const int suite_decode_direct_n;
/* attn_decode impl=wg8 (sm_90a only) */
extern const suite_case suite_decode_wg8[];
extern const int suite_decode_wg8_n;
extern const int suite_decode_n, suite_prefill_n, suite_naive_n, suite_combine_n;
/* attn_prefill impl=wgmma / wgmma_ov / wgmma_pp (sm_90a only): their own cases, and the params strings
 * that turn a D 128 case of suite_prefill into a case of each impl */
extern const suite_case suite_prefill_sm90[];
extern const int suite_prefill_sm90_n;
extern const char *const suite_prefill_sm90_params[3];
extern const char *const suite_prefill_sm90_params_d256[3];
/* attn_prefill impl=wgmma_tma (sm_90a only): its own cases (test_attn_gpu also runs the wgmma cases with the
 * impl swapped) */
extern const suite_case suite_prefill_tma[];
extern const int suite_prefill_tma_n;

/* A mutation: in each line holding `marker`, replace `from` by `to`. */
typedef struct suite_mutant {
    const char *name, *marker, *from, *to;
    int prefill_sm90;          /* 1: a line of attn/fwd_sm90.cuh alone (not in attn_decode impl=direct's source) */
} suite_mutant;
extern const suite_mutant suite_mutants[];
extern const int suite_mutants_n;

/* The build side: a template host, target, database, and one job per distinct variant. */
typedef struct suite {
    gen_host *host;
    gen_target tg;
    db_store *db;
    char db_path[512];
    gen_job *jobs;
    int n_jobs, cap_jobs;
    int mutant;                /* -1: none; index into suite_mutants applied to every GQA source */
    int planted, unplanted;    /* GQA sources the mutant went into / that lack its marker (they run as they are) */
    char unplanted_why[256];   /* the first of those */
    int failed_builds;
} suite;

/* Opens the host (embedded templates or $KFORGE_TEMPLATE_DIR), the target (the GPU's arch
 * when one is present and have_gpu, else sm_90a) and the database ($KFORGE_TEST_DB or
 * ./test_gpu.db). 0 or -1 (message printed). */
int suite_open(suite *s, int have_gpu, int mutant);
void suite_close(suite *s);

/* The job of case c (added on first use; the naive reference of c when naive). Returns the
 * job index, or -1 with the reason in why (invalid variant, template error). With a mutant, a GQA source that
 * lacks the mutant's marker (the line it mutates lives in another impl's fragment) is built as it is and
 * counted in s->unplanted; the others in s->planted. */
int suite_job(suite *s, const suite_case *c, int naive, char *why, size_t whyn);
/* Compiles every job not in the database yet, in parallel. Returns the failed count. */
int suite_build(suite *s);

/* Case c as a tune_attn_case (arrays point into c). */
void suite_attn_case(const suite_case *c, tune_attn_case *tc);
/* Reference mode of c (REF_CPU or REF_NAIVE). */
int suite_ref_mode(const suite_case *c);

/* "attn_decode bf16 b3 sq4 skv700 8/2 d128 c1 kv[700,0,1] bhsd pad2" */
void suite_case_str(const suite_case *c, char *buf, size_t n);

/* Runs case c (its variant already built) and prints one table row. Returns 1 pass, 0 fail.
 * quiet: no row. */
int suite_run_case(suite *s, tune_ctx *ctx, const suite_case *c, int quiet);

#endif
