/* tuner/tune_select.h: winner selection over recorded measurements: control band, resume state, merge preference (pure) */
#ifndef KF_TUNER_TUNE_SELECT_H
#define KF_TUNER_TUNE_SELECT_H

/* Status of a measurement, as db stores it ("ok", "wrong", "error"). */
enum { TUNE_OK = 0, TUNE_WRONG = 1, TUNE_ERROR = 2 };

/* Timings with fewer samples are screening figures (successive halving): never a winner. */
#define TUNE_MIN_SAMPLES 20
/* Smallest control band: two timings of one variant that agree better than this are
 * still taken to be 1% apart (a lucky pair must not make every 0.1% gain a win). */
#define TUNE_BAND_FLOOR 0.01

/* One current measurement of one shape, as the selection sees it. */
typedef struct tune_meas {
    const char *variant_key;
    int status;            /* TUNE_OK, TUNE_WRONG, TUNE_ERROR */
    int is_control;        /* the repeated default */
    int n_samples;
    double median_ms;
    double spread_ms;      /* p90 - p10 */
    long long id;          /* measurement id (larger = later) */
    int paired;            /* from the interleaved rounds (a paired default time stored): complete even when a
                              finalist dropped early has fewer than the full samples */
} tune_meas;

int tune_status_parse(const char *s);        /* "ok" -> TUNE_OK, "wrong", else TUNE_ERROR */
const char *tune_status_str(int status);     /* static text */

/* The control band: |a - b| / min(a, b), at least floor. NaN when either is not a
 * positive time. */
double tune_band(double a_ms, double b_ms, double floor);

typedef struct tune_choice {
    int winner;            /* index into the measurements, -1: no winner (nothing passed) */
    int default_kept;      /* 1: the default stays (nothing beat it by more than the band) */
    int default_ok;        /* the default has a full, passing timing */
    int control_ok;        /* and a control timing */
    double default_ms;     /* min of the default's two timings (NaN when not measured) */
    double best_ms;        /* fastest other candidate (NaN when none) */
    double band;           /* tune_band of the two default timings (floor without a control) */
    double speedup;        /* default_ms / winner's median: 1 when kept, NaN without a default */
} tune_choice;

/*
 * Picks the winner among n measurements of one shape:
 *  - a variant with any 'wrong' measurement never wins, nor does an 'error' or a timing
 *    of fewer than min_samples samples (screening); of several full timings of one
 *    variant the one with more samples (then the later one) counts;
 *  - the default is default_key's timing, the control its is_control timing; the
 *    default's time is the faster of the two, the band their relative difference;
 *  - the fastest other candidate wins only when (default - best) / default > band;
 *    otherwise the default (its non-control measurement) stays;
 *  - without a passing default the fastest candidate wins (speedup NaN).
 * Returns the winner index (also in out->winner), -1 when nothing passed.
 */
int tune_select(const tune_meas *m, int n, const char *default_key, int min_samples,
                double band_floor, tune_choice *out);

/* Where a variant stands before a step that wants `samples` samples of it, from the
 * shape's current measurements (a re-run resumes from them). */
enum {
    TUNE_TODO = 0,         /* never measured: gate and time it */
    TUNE_SCREENED = 1,     /* passed the gate, but no timing of `samples` samples yet: time it */
    TUNE_DONE = 2,         /* a passing timing of at least `samples` samples, or one from the interleaved
                              rounds (paired): reuse it */
    TUNE_REJECTED = 3,     /* recorded as wrong (or error, unless retry_errors): never again */
};
/* *best_ms / *best_n (may be NULL) get the passing timing with the most samples (NaN / 0). */
int tune_resume_state(const tune_meas *m, int n, const char *variant_key, int is_control,
                      int samples, int retry_errors, double *best_ms, int *best_n);

/* What a sustained (interleaved) shape still has to do, from its current measurements: the one
 * rule run_interleaved follows, so that a re-run of a finished shape times nothing and keeps its
 * stored winner. */
typedef struct tune_ilv_resume {
    int n_gate;            /* variants never measured and not gated in this run: gate them */
    int n_rejected;        /* recorded wrong (or error, unless retry_errors): skipped */
    int dflt;              /* the default is among the variants and not rejected */
    int n_cand;            /* candidates left: not the default, not rejected */
    int n_screen;          /* of them, to screen first (more than `finalists` and no figure stored) */
    int n_final;           /* candidates for the rounds (in final[]); 0 while some are to screen */
    int n_time;            /* of the default and the finalists, those without a full timing */
    int keep;              /* nothing to gate, screen or time and a winner stored: keep the winner */
} tune_ilv_resume;

/* A candidate's screening figure: its latest passing timing of fewer than TUNE_MIN_SAMPLES samples that
 * is not from the rounds, else its passing timing with the most samples; NaN when none. A finalist's
 * timing in the rounds (full, or cut short by an early drop) is not its screening figure, so a re-run
 * ranks the candidates as the first run did. */
double tune_screen_figure(const tune_meas *m, int n, const char *variant_key);

/*
 * The plan over nk variants (keys[k]; idefault: the default's index, -1 when it is not planned);
 * passed[k] (may be NULL): the variant passed its gate in this run (gates store nothing).
 * state[k] gets tune_resume_state's answer for `samples` samples (TUNE_SCREENED for a TODO that
 * passed). Candidates are the others, not rejected, in key order; with a default and more than
 * `finalists` of them, each needs a screening figure (its passing timing of fewer than
 * TUNE_MIN_SAMPLES samples, else its full one); once all have one, final[] gets the `finalists`
 * fastest (tune_halving_keep), else every candidate (indices into keys). A shape is kept when
 * nothing is to gate or screen, the default and the finalists have full timings (or, without a
 * default, every candidate has) and has_winner. state and final have nk entries.
 */
void tune_ilv_resume_plan(const tune_meas *m, int n, const char *const *keys, int nk, int idefault,
                          const unsigned char *passed, int samples, int retry_errors, int finalists,
                          int has_winner, int *state, int *final, tune_ilv_resume *out);

/* Merge of two winners for the same (gpu, family, shape): the better-measured one,
 * i.e. more samples, then the smaller relative spread (spread / median), then a.
 * Returns 0 for a, 1 for b. */
typedef struct tune_merge_side {
    int n_samples;
    double median_ms, spread_ms;
} tune_merge_side;
int tune_merge_prefer(const tune_merge_side *a, const tune_merge_side *b);

#endif
