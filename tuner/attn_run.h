/* tuner/attn_run.h: run one attention variant on the GPU against the reference (CPU fp64 or GPU naive), and time it */
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

/* A compiled variant: what gen_build_prepare/gen_build_run leave in a gen_job. */
typedef struct tune_attn_variant {
    const char *family;            /* "attn_decode", "attn_prefill", "attn_naive" or "attn_combine" */
    gen_kvset vp;                  /* fixed values + params (+ "family"), as rt_attn_grid reads them */
    const void *image;             /* cubin or PTX (not owned) */
    const gen_kernel *kernels;     /* in launch order (not owned) */
    int n_kernels;
    const char *key;               /* variant key, for messages (may be NULL) */
} tune_attn_variant;

/* Fills v from a built job (the job must outlive v). -1 when the job failed. */
int tune_attn_variant_from_job(tune_attn_variant *v, const gen_job *j);

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
     * keys of tune_attn_case_shape); only the CPU fp64 reference knows them (the naive kernel does not) */
    int window, window_left;       /* sliding window: keys pi - window_left .. pi */
    double softcap;                /* > 0: score = softcap * tanh(score / softcap) */
    int sinks;                     /* 1: sink logits tune_attn_sink(h, hq) join the denominators */
} tune_attn_case;

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
    char msg[512];                 /* one line: the verdict or what failed */
    /* keep_outputs: o as [rows, hq, d] (case dtype), lse as [rows, hq]; row = b*sq + i
     * dense, the packed row otherwise. malloc'd; tune_attn_result_free. */
    void *o_out;
    float *lse_out;
    long long rows;
} tune_attn_result;

void tune_attn_result_free(tune_attn_result *r);

/*
 * How a timing is taken (tune_attn_set_timing):
 *  - sustained (the default): the GPU is first brought to its steady state (when it has been
 *    idle for more than TUNE_IDLE_S: the variant run back-to-back until NVML's SM clock and
 *    power settle, see tune_warm_done in tuner/tune_clock.h); each sample is a burst
 *    of `launches` back-to-back calls (about TUNE_BURST_MS) with events around the burst, the
 *    calls rotating over `sets` copies of the inputs (together >= 2x L2 where one set is
 *    smaller); a sample is the burst's time / launches. What a serving engine sees under load.
 *    Calls under TUNE_GRAPH_BELOW_MS are captured once as a graph of the burst and each sample
 *    replays it (launch cost out of the figure; plain launches when the driver refuses).
 *  - burst (the old way): each sample one call after an L2 flush (a 2x-L2 buffer written)
 *    and the idle gap that leaves: the cool, boosted GPU.
 */
enum { TUNE_TIMING_SUSTAINED = 0, TUNE_TIMING_BURST = 1 };
/* A gap longer than this since the last timing's GPU work (the gates, the host's work between two
 * slots) lets the GPU cool: the next timing warms it up again. */
#define TUNE_IDLE_S 0.05
#define TUNE_BURST_MS 1.0
/* Calls shorter than this (ms) are timed as replays of a captured graph of the burst: back-to-back
 * launches of a few-microsecond kernel measure the host's launch rate, not the kernel. */
#define TUNE_GRAPH_BELOW_MS 0.05
/* "sustained" / "burst" -> TUNE_TIMING_*, -1 for anything else; and back (static text). */
int tune_timing_parse(const char *s);
const char *tune_timing_str(int mode);

/* Timing of the kernels of one variant on one case (after a correctness run or not). */
typedef struct tune_attn_timing {
    int samples;                   /* >= 1 (full timings >= 20) */
    double median_ms, p10_ms, p90_ms, min_ms;   /* per call */
    double spread;                 /* (p90 - p10) / median */
    double *samples_ms;            /* malloc'd, `samples` of them (freed by tune_attn_timing_free) */
    int mode;                      /* TUNE_TIMING_* */
    int launches;                  /* calls per sample (burst: 1) */
    int sets;                      /* input sets rotated over (burst: 1) */
    int graph;                     /* 1: each sample a replay of a captured graph of the calls */
    double warm_ms;                /* steady-state warm-up run before the samples (0: none needed) */
    tune_clock clk;                /* SM clock, power, temperature during the samples (NaN: unknown) */
} tune_attn_timing;
void tune_attn_timing_free(tune_attn_timing *t);
/* min, median, p10, p90 and spread of t's `samples` samples_ms. */
void tune_attn_timing_stats(tune_attn_timing *t);

/* A GPU session: context, stream, L2 flush buffer (2x L2). One thread uses it at a time. */
typedef struct tune_attn_ctx tune_attn_ctx;

/* NULL with a message in err when there is no driver/device ("no CUDA driver/device found: ..."). */
tune_attn_ctx *tune_attn_open(int ordinal, char *err, size_t errn);
void tune_attn_close(tune_attn_ctx *c);     /* NULL: no-op */
/* Whether a CUDA error has left the context unusable (an illegal address, say). */
int tune_attn_broken(const tune_attn_ctx *c);

/* Holding (on): tune_attn_check and tune_attn_time keep the last module of a variant and of
 * the naive reference loaded, keyed by image address, so a gate then a timing of one variant
 * (or the naive reference of every gate of a shape) loads it once. Every call unloads what is
 * held; call it (on or off) before an image passed while holding is freed or reused. */
void tune_attn_hold(tune_attn_ctx *c, int on);

/* The timing mode of the session's timings from now on (TUNE_TIMING_*; sustained at open). */
void tune_attn_set_timing(tune_attn_ctx *c, int mode);
int tune_attn_timing_mode(const tune_attn_ctx *c);
/* Tests: in sustained timings from now on, every `every`-th call is enqueued twice (bursts a
 * multiple of `every` calls, so each sample holds exactly 1/every more work); 0: off. */
void tune_attn_set_extra(tune_attn_ctx *c, int every);
/* From now on every sustained timing first runs its variant back to back for at least ms, or
 * TUNE_REWARM_CALLS calls where those take less (after other GPU work too, where it would
 * otherwise start at once): the clock an earlier variant left behind is not the one this variant
 * settles to; a memory-bound decode call barely moves it (0: off). The interleaved rounds use
 * TUNE_ILV_REWARM_MS. */
#define TUNE_REWARM_CALLS 100
void tune_attn_set_rewarm(tune_attn_ctx *c, double ms);
/* The session's NVML device (NULL without NVML: clocks unknown). */
rt_nvml_dev *tune_attn_nvml(const tune_attn_ctx *c);

/* Adds the wall time of tune_attn_check / tune_attn_time's phases (gate_*, time_*, the call
 * counts) to *ph from now on; NULL stops. ph must outlive its use. */
void tune_attn_set_phases(tune_attn_ctx *c, tune_phases *ph);

/* Multiply-adds of the CPU reference for a case (see TUNE_ATTN_CPU_REF_MAX). */
double tune_attn_ref_work(const tune_attn_case *c);

/*
 * Runs v on c and checks o and lse: against the CPU fp64 reference when naive is NULL,
 * else against the GPU naive kernel `naive` (attn_naive of the same dtype/d/causal, run
 * on the same device buffers). Inputs random (never zeros), outputs poisoned first.
 * Tolerances: check_tol(dtype) on ||o - ref|| / ||ref||, CHECK_LSE_TOL max-abs on lse
 * (looser against the naive kernel: its own rounding adds in). timing != NULL: also
 * times the launches (samples >= 20; 0 asks for 30), see tune_attn_time.
 * With c->seed given and no timing, the host inputs and the reference are kept for the next
 * call of the same case (inputs, seed, scale, same reference): the gates of a shape's variants
 * fill them and compute the reference once. Each call still uploads the inputs into fresh
 * buffers and poisons fresh outputs; a kept GPU naive reference is taken on inputs uploaded
 * again after the variant ran (whatever it wrote). c->seed 0: fresh inputs, nothing kept.
 * Returns 0 when the variant ran (r->pass says the verdict), -1 on an error of the
 * harness or the driver (r->msg says which; r->pass = 0).
 */
int tune_attn_check(tune_attn_ctx *ctx, const tune_attn_variant *v, const tune_attn_case *c,
                    const tune_attn_variant *naive, int samples, tune_attn_result *r,
                    tune_attn_timing *timing);

/* Whether two cases have the same inputs (dtype, geometry, causal flag, layout, padding, lengths
 * and seed): what the kept inputs of tune_attn_check and tune_attn_time are keyed on; splits,
 * scale and keep_outputs do not change the inputs. */
int tune_attn_same_inputs(const tune_attn_case *a, const tune_attn_case *b);

/* Timing alone, on inputs filled once per case (N(0,1) q, k, v, never zero) and kept on the
 * device for the next variant of the same case: `samples` (1 or more; 0: 30) samples in the
 * session's timing mode (see TUNE_TIMING_SUSTAINED), sustained ones over rotating copies of
 * the inputs. -1 on error. */
int tune_attn_time(tune_attn_ctx *ctx, const tune_attn_variant *v, const tune_attn_case *c, int samples,
                   tune_attn_timing *t, char *err, size_t errn);

/* ---- for the other families' runners (tuner/kda_run.c, tuner/parts_run.c) ------------ */

/* The session's driver table. */
const rt_cu *tune_ctx_cu(const tune_attn_ctx *c);
/* The loaded module of a compiled variant: held in slot (0 variant, 1 reference) while
 * tune_attn_hold is on, else loaded into *own (the caller unloads it). NULL with msg on error. */
const rt_module *tune_ctx_module(tune_attn_ctx *c, const tune_attn_variant *v, int slot, rt_module *own,
                                 char *msg, size_t msgn);
/* Records a failed driver call (marking the context broken on a sticky error); returns -1. */
int tune_ctx_fail(tune_attn_ctx *c, int cuda_result, const char *what, char *msg, size_t msgn);
/* Enqueues one call of the measured kernels on the default stream, on input set `set`
 * (0 .. sets - 1 of the timing; always 0 outside a sustained timing); 0 or -1 with msg. */
typedef int (*tune_enqueue_fn)(void *arg, int set, char *msg, size_t msgn);
/* Event timing of enqueue in the session's mode (see TUNE_TIMING_SUSTAINED): `samples` (>= 1;
 * 0: 30) samples, sustained ones rotating over `sets` input sets; median and spread as
 * tune_attn_time. -1 with msg. */
int tune_ctx_time(tune_attn_ctx *c, tune_enqueue_fn enqueue, void *arg, int sets, int samples,
                  tune_attn_timing *t, char *msg, size_t msgn);
/* The stream runners launch on: NULL (the default stream), or the stream a sustained timing is
 * capturing a graph on (ctx NULL: NULL). */
CUstream tune_ctx_stream(const tune_attn_ctx *c);
/* Input sets a sustained timing rotates over for inputs of set_bytes (tune_rotate_sets with the
 * GPU's L2); 1 in burst mode. */
int tune_ctx_sets(const tune_attn_ctx *c, double set_bytes);
/* A copy of bytes at src in a new allocation *dst (+16 bytes pad): the driver's result (0: done). */
int tune_ctx_clone(tune_attn_ctx *c, CUdeviceptr *dst, CUdeviceptr src, size_t bytes);
/* Fills elems bf16/fp16 values at dst with N(0, sigma) values (a host tile of them, repeated):
 * the statistics of activations, never zero. 0 or -1 with msg. */
int tune_ctx_fill_normal(tune_attn_ctx *c, CUdeviceptr dst, size_t elems, check_dtype dt, uint64_t seed,
                         double sigma, char *msg, size_t msgn);
/* Binds a runner's call to the loaded module m of its variant (workspace, checks); 0 or -1 with msg. */
typedef int (*tune_bind_fn)(void *arg, const rt_module *m, char *msg, size_t msgn);
/* The timing of a runner: loads v (slot 0), bind(arg, m), then tune_ctx_time(enqueue, arg, sets); phases
 * time_load and time_run counted from *tm (tune_ctx_phase); unloads what it loaded. -1 with msg. */
int tune_ctx_time_variant(tune_attn_ctx *c, const tune_attn_variant *v, tune_bind_fn bind, tune_enqueue_fn enqueue,
                          void *arg, int sets, int samples, tune_attn_timing *t, double *tm, char *msg, size_t msgn);
/* One call of enqueue, then a synchronize; a failure of it goes through tune_ctx_fail with `what`. -1 with msg. */
int tune_ctx_run(tune_attn_ctx *c, tune_enqueue_fn enqueue, void *arg, const char *what, char *msg, size_t msgn);
/* cuMemAlloc of bytes + pad into *p, then bytes of src copied there (none when bytes is 0): the
 * driver's result (0: done), for the caller's tune_ctx_fail. */
int tune_ctx_upload(tune_attn_ctx *c, CUdeviceptr *p, const void *src, size_t bytes, size_t pad);
/* Phase accounting for a runner: counts a gate or timing call (and starts *t), or adds the time
 * since *t to one phase counter (and restarts *t). */
enum { TUNE_PH_GATE_FILL, TUNE_PH_GATE_REF, TUNE_PH_GATE_RUN, TUNE_PH_TIME_FILL, TUNE_PH_TIME_LOAD,
       TUNE_PH_TIME_RUN, TUNE_PH_GATE_CALL, TUNE_PH_TIME_CALL };
void tune_ctx_phase(tune_attn_ctx *c, int what, double *t);

/* attn_combine: random partials (some splits empty, lse -inf; some rows with every split
 * empty) of b*sq rows x hq heads x dv, merged by v, against ref_attn_combine. */
typedef struct tune_combine_case {
    check_dtype dtype;
    int b, sq, hq, dv, splits;
    uint64_t seed;
    int sinks;                     /* 1: sink logits tune_attn_sink(h) (the variant built with sinks=1) */
} tune_combine_case;
int tune_attn_check_combine(tune_attn_ctx *ctx, const tune_attn_variant *v, const tune_combine_case *c,
                            tune_attn_result *r);

/* Fills j (tmpl, fixed, params) for the attn_naive variant that references case c, and
 * prepares it (gen_build_prepare); the caller builds it with gen_build_run. -1 with the
 * host's message. */
int tune_attn_naive_job(gen_host *h, const tune_attn_case *c, const gen_target *tg, gen_job *j);

/* "dtype=bf16,b=1,..." shape kvset of a case (for templates' fixed()/default()). */
void tune_attn_case_shape(const tune_attn_case *c, gen_kvset *shape);

#endif
