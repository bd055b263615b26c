/* tuner/tune_ctx.h: the tuner's GPU session, generic over families: context, stream, modules, phase accounting, timing */
#ifndef KF_TUNER_TUNE_CTX_H
#define KF_TUNER_TUNE_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "gen/build.h"
#include "gen/kv.h"
#include "runtime/cuda.h"
#include "runtime/module.h"
#include "runtime/nvml.h"
#include "tuner/check.h"
#include "tuner/tune_clock.h"
#include "tuner/tune_phase.h"

/*
 * One session a GPU (tune_open): what every family's runner shares, named tune_ like the rest of
 * the tuner; the family-specific parts (GQA cases under tune_attn_, KDA and split-score problems)
 * are in the runners' files.
 */

/* A compiled variant: what gen_build_prepare/gen_build_run leave in a gen_job (tune_variant,
 * tuner/tune_enum.h, is one variant of a shape's space before it is built). */
typedef struct tune_compiled {
    const char *family;            /* "attn_decode", "attn_prefill", "attn_naive" or "attn_combine" */
    gen_kvset vp;                  /* fixed values + params (+ "family"), as rt_attn_grid reads them */
    const void *image;             /* cubin or PTX (not owned) */
    const gen_kernel *kernels;     /* in launch order (not owned) */
    int n_kernels;
    const char *key;               /* variant key, for messages (may be NULL) */
} tune_compiled;

/* Fills v from a built job (the job must outlive v). -1 when the job failed. */
int tune_compiled_from_job(tune_compiled *v, const gen_job *j);

/*
 * How a timing is taken (tune_set_timing):
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
typedef struct tune_timing {
    int samples;                   /* >= 1 (full timings >= 20) */
    double median_ms, p10_ms, p90_ms, min_ms;   /* per call */
    double spread;                 /* (p90 - p10) / median */
    double *samples_ms;            /* malloc'd, `samples` of them (freed by tune_timing_free) */
    int mode;                      /* TUNE_TIMING_* */
    int launches;                  /* calls per sample (burst: 1) */
    int sets;                      /* input sets rotated over (burst: 1) */
    int graph;                     /* 1: each sample a replay of a captured graph of the calls */
    double warm_ms;                /* steady-state warm-up run before the samples (0: none needed) */
    tune_clock clk;                /* SM clock, power, temperature during the samples (NaN: unknown) */
} tune_timing;
void tune_timing_free(tune_timing *t);
/* min, median, p10, p90 and spread of t's `samples` samples_ms. */
void tune_timing_stats(tune_timing *t);

/* A GPU session: context, stream, L2 flush buffer (2x L2). One thread uses it at a time. A call on
 * it that fails returns -1 (or NULL) and leaves its status and message on the session, as kf_ctx
 * keeps its own (runtime/kforge.h): tune_ctx_errmsg says why. */
typedef struct tune_ctx tune_ctx;

/* NULL with the reason in *e when there is no driver/device (KF_ERR_CUDA, "no CUDA driver/device
 * found: ..."), or no memory (KF_ERR_NOMEM). e may be NULL. */
tune_ctx *tune_open(int ordinal, core_err *e);
void tune_close(tune_ctx *c);     /* NULL: no-op */
/* The message of the last failure of a call on c ("" when none failed), valid until the next call
 * on c; c NULL: a static text saying there is no session. */
const char *tune_ctx_errmsg(const tune_ctx *c);
/* The status of that failure (KF_OK when none failed; c NULL: KF_ERR_CUDA, no context). */
kf_status tune_ctx_status(const tune_ctx *c);
/* Whether a CUDA error has left the context unusable (an illegal address, say). */
int tune_broken(const tune_ctx *c);

/* Holding (on): tune_attn_check and tune_attn_time keep the last module of a variant and of
 * the naive reference loaded, keyed by image address, so a gate then a timing of one variant
 * (or the naive reference of every gate of a shape) loads it once. Every call unloads what is
 * held; call it (on or off) before an image passed while holding is freed or reused. */
void tune_hold(tune_ctx *c, int on);

/* The timing mode of the session's timings from now on (TUNE_TIMING_*; sustained at open). */
void tune_set_timing(tune_ctx *c, int mode);
int tune_timing_mode(const tune_ctx *c);
/* Tests: in sustained timings from now on, every `every`-th call is enqueued twice (bursts a
 * multiple of `every` calls, so each sample holds exactly 1/every more work); 0: off. */
void tune_set_extra(tune_ctx *c, int every);
/* From now on every sustained timing first runs its variant back to back for at least ms, or
 * TUNE_REWARM_CALLS calls where those take less (after other GPU work too, where it would
 * otherwise start at once): the clock an earlier variant left behind is not the one this variant
 * settles to; a memory-bound decode call barely moves it (0: off). The interleaved rounds use
 * TUNE_ILV_REWARM_MS. max_calls caps it (TUNE_REWARM_CALLS for the interleaved rounds' default;
 * 0: no cap, the whole ms whatever a call takes). */
#define TUNE_REWARM_CALLS 100
void tune_set_rewarm(tune_ctx *c, double ms, int max_calls);
/* The session's NVML device (NULL without NVML: clocks unknown). */
rt_nvml_dev *tune_nvml(const tune_ctx *c);

/* Adds the wall time of tune_attn_check / tune_attn_time's phases (gate_*, time_*, the call
 * counts) to *ph from now on; NULL stops. ph must outlive its use. */
void tune_set_phases(tune_ctx *c, tune_phases *ph);

/* ---- for the families' runners (tuner/gqa_run.c via attn_run.c, tuner/kda_run.c, tuner/parts_run.c) ---- */

/* The session's driver table. */
const rt_cu *tune_ctx_cu(const tune_ctx *c);
/* Sets c's status and message where a failure happens (printf-style; an argument may be
 * tune_ctx_errmsg(c) itself, to prefix it); returns -1. c NULL: returns -1, nothing kept. */
int tune_ctx_seterr(tune_ctx *c, kf_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The session's error, for the calls that take a core_err * (rt_module_load, rt_kda_check, ...):
 * they set it where they fail. c NULL: NULL (core_err_set takes it). */
core_err *tune_ctx_err(tune_ctx *c);
/* The loaded module of a compiled variant: held in slot (0 variant, 1 reference) while
 * tune_hold is on, else loaded into *own (the caller unloads it). NULL on error (on c). */
const rt_module *tune_ctx_module(tune_ctx *c, const tune_compiled *v, int slot, rt_module *own);
/* Records a failed driver call on c (KF_ERR_CUDA, "what: the driver's error"; marking the context
 * broken on a sticky error); returns -1. */
int tune_ctx_fail(tune_ctx *c, int cuda_result, const char *what);
/* Enqueues one call of the measured kernels on the default stream, on input set `set`
 * (0 .. sets - 1 of the timing; always 0 outside a sustained timing); 0 or -1 (error on c). */
typedef int (*tune_enqueue_fn)(tune_ctx *c, void *arg, int set);
/* Event timing of enqueue in the session's mode (see TUNE_TIMING_SUSTAINED): `samples` (>= 1;
 * 0: 30) samples, sustained ones rotating over `sets` input sets; median and spread as
 * tune_attn_time. -1 on error (on c). */
int tune_ctx_time(tune_ctx *c, tune_enqueue_fn enqueue, void *arg, int sets, int samples, tune_timing *t);
/* The stream runners launch on: NULL (the default stream), or the stream a sustained timing is
 * capturing a graph on (ctx NULL: NULL). */
CUstream tune_ctx_stream(const tune_ctx *c);
/* Input sets a sustained timing rotates over for inputs of set_bytes (tune_rotate_sets with the
 * GPU's L2); 1 in burst mode. */
int tune_ctx_sets(const tune_ctx *c, double set_bytes);
/* A copy of bytes at src in a new allocation *dst (+16 bytes pad): the driver's result (0: done). */
int tune_ctx_clone(tune_ctx *c, CUdeviceptr *dst, CUdeviceptr src, size_t bytes);
/* Fills elems bf16/fp16 values at dst with N(0, sigma) values (a host tile of them, repeated):
 * the statistics of activations, never zero. 0 or -1 (error on c). */
int tune_ctx_fill_normal(tune_ctx *c, CUdeviceptr dst, size_t elems, check_dtype dt, uint64_t seed,
                         double sigma);
/* Binds a runner's call to the loaded module m of its variant (workspace, checks); 0 or -1 (error on c). */
typedef int (*tune_bind_fn)(tune_ctx *c, void *arg, const rt_module *m);
/* The timing of a runner: loads v (slot 0), bind(c, arg, m), then tune_ctx_time(enqueue, arg, sets); phases
 * time_load and time_run counted from *tm (tune_ctx_phase); unloads what it loaded. -1 on error (on c). */
int tune_ctx_time_variant(tune_ctx *c, const tune_compiled *v, tune_bind_fn bind, tune_enqueue_fn enqueue,
                          void *arg, int sets, int samples, tune_timing *t, double *tm);
/* One call of enqueue, then a synchronize; a failure of it goes through tune_ctx_fail with `what`.
 * -1 on error (on c). */
int tune_ctx_run(tune_ctx *c, tune_enqueue_fn enqueue, void *arg, const char *what);
/* cuMemAlloc of bytes + pad into *p, then bytes of src copied there (none when bytes is 0): the
 * driver's result (0: done), for the caller's tune_ctx_fail. */
int tune_ctx_upload(tune_ctx *c, CUdeviceptr *p, const void *src, size_t bytes, size_t pad);
/* Phase accounting for a runner: counts a gate or timing call (and starts *t), or adds the time
 * since *t to one phase counter (and restarts *t). */
enum { TUNE_PH_GATE_FILL, TUNE_PH_GATE_REF, TUNE_PH_GATE_RUN, TUNE_PH_TIME_FILL, TUNE_PH_TIME_LOAD,
       TUNE_PH_TIME_RUN, TUNE_PH_GATE_CALL, TUNE_PH_TIME_CALL };
void tune_ctx_phase(tune_ctx *c, int what, double *t);

#endif
