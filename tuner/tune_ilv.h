/* tuner/tune_ilv.h: interleaved timing of a shape: input sets to rotate, the order of the rounds, the control band and the paired decision (pure) */
#ifndef KF_TUNER_TUNE_ILV_H
#define KF_TUNER_TUNE_ILV_H

/*
 * Sustained timing compares variants on a GPU whose clock follows its power and temperature,
 * so the default is timed between every two candidates (D A D B D ... per round, several
 * rounds) and each candidate is compared with the default timings next to it: a drift of the
 * GPU over the sweep moves both sides of a comparison alike.
 */

/* Samples of one slot: a full timing of `samples` samples takes ceil(samples / TUNE_ILV_SLOT)
 * rounds (at least 2), so --samples 30 gives 10 rounds of 3 and --samples 20 seven. Many short
 * slots rather than a few long ones: on an H200 at its power limit the time of a slot wanders by
 * 2-4% (the clock follows power with a lag), so the decision rests on the rounds, each paired
 * with its own neighbours (bench/NOTES.md, session 5). */
#define TUNE_ILV_SLOT 3
/* Each slot of the rounds starts with this much of its own variant back to back, untimed
 * (tune_set_rewarm): without it a slot runs at the clock the previous variant left. */
#define TUNE_ILV_REWARM_MS 50.0
/* The band is this many standard errors of the paired decision (one-sided, about 2%). */
#define TUNE_ILV_Z 2.0
/* Rounds and samples a slot for a full timing of `samples` samples. */
void tune_ilv_plan(int samples, int *rounds, int *slot_samples);
/* Shapes with more candidates than this screen them first (TUNE_ILV_SCREEN samples each, one
 * after the other), then time the fastest TUNE_ILV_FINALISTS in the interleaved rounds. 6, not 8
 * (session 7): the rounds are most of a shape's time (rounds x (2 x finalists + 1) slots) and the
 * mla_decode and prefill sweeps ran past their 120 s with 8; a variant screened 7th or 8th wins only
 * against ones within the screening's few percent. */
#define TUNE_ILV_FINALISTS 6
#define TUNE_ILV_SCREEN 5
/* At most this many rotating input sets. */
#define TUNE_ROTATE_MAX_SETS 64

/* How many copies of a case's inputs (set_bytes each) rotate so that the sets together hold
 * at least 2x the L2 (l2_bytes): 1 when one set already does (or l2 is unknown, <= 0), else
 * ceil(2 l2 / set_bytes), at most TUNE_ROTATE_MAX_SETS. */
int tune_rotate_sets(double set_bytes, double l2_bytes);

/* Calls in one sustained sample: about burst_ms of calls of one_ms each, at least 2, at most
 * 100000; a multiple of `every` when every > 0 (the planted slowdown of the tests: one extra call
 * every `every`); for a graph (replayed as one fixed set sequence) also such that the calls of a
 * burst, extra ones included, make whole rotations over `sets`, so that a replay's last call and
 * the next replay's first read different sets. */
int tune_burst_calls(double one_ms, double burst_ms, int every, int sets, int graph);

/* The order of the timing slots for n_cand candidates over `rounds` rounds: -1 for the
 * default, i for candidate i. Per round D C0 D C1 ... D C(n-1), then one closing D: every
 * candidate slot has a default slot on each side. Returns the number of slots,
 * rounds * 2 * n_cand + 1 (1 when n_cand is 0); slots may be NULL to ask for it; at most cap
 * written. */
int tune_ilv_order(int n_cand, int rounds, int *slots, int cap);

/* A candidate's paired comparison. */
typedef struct tune_ilv_cand {
    int n;                 /* its samples */
    int slots;             /* its slots with samples (the rounds it was paired in) */
    double ms;             /* median of its samples over every round (NaN: none) */
    double ref_ms;         /* median of the samples of the default slots next to its slots */
    double ratio;          /* median over its slots of slot median / mean of the neighbours' medians */
    double band;           /* the band for its number of slots (res->band * sqrt(rounds / slots)) */
    int faster;            /* 1 - ratio > band */
} tune_ilv_cand;

typedef struct tune_ilv_result {
    int winner;            /* candidate index, -1: the default stays */
    double band;           /* see tune_ilv_decide */
    double drift;          /* (max - min) / min over the default slots' medians */
    double default_ms;     /* median of every default sample */
    int default_n;         /* default samples */
    double speedup;        /* winner's ref_ms / ms; 1 when the default stays, NaN without a default */
} tune_ilv_result;

/*
 * The decision over n_slots timed slots (who[k] as tune_ilv_order gives, samples[k] the
 * ns[k] per-launch times of slot k; ns[k] 0 for a slot that failed). Each candidate slot is
 * paired with the default slots on either side (the next one out where one failed): its ratio
 * is the median over its slots of slot median / mean of the neighbours' medians, so a drift of
 * the GPU moves both sides alike. The band is the noise of that ratio when the candidate is no
 * faster: s, the per-slot noise, from consecutive default slots (1.4826 x the median absolute
 * deviation of log(d(k+1) / d(k)), / sqrt 2; their RMS / sqrt 2 below 5 pairs), and the band
 * TUNE_ILV_Z x 1.2533 (a median's efficiency) x sqrt(1.5) (one slot against the mean of two) x
 * s / sqrt(rounds), at least floor; rounds = the most slots any candidate has, and a candidate
 * with fewer slots gets a band wider by sqrt(rounds / its slots). A candidate is faster when
 * 1 - ratio > its band; the fastest such (smallest ratio) wins. cand has n_cand entries.
 * Returns the winner (also in res->winner), -1 when the default stays.
 */
int tune_ilv_decide(const int *who, const double *const *samples, const int *ns, int n_slots, int n_cand,
                    double floor, tune_ilv_cand *cand, tune_ilv_result *res);

/* Early drop in the rounds: after TUNE_ILV_DROP_AFTER complete rounds, a candidate whose paired ratio is
 * above 1 + TUNE_ILV_DROP_BANDS x its band (slower than the default by twice what a winner must beat it
 * by) is timed no more. Most finalists of a sweep are a few percent slower than the default; their
 * remaining rounds were most of a shape's time (session 8). While the band is wider than `target`
 * (TUNE_ILV_BAND_TARGET), the last candidates are never all dropped: the closest of them stays in the
 * rounds, so the band over the rounds left comes within the target (session 11: every finalist of D 256 4K
 * dropped after 3 rounds left its band at 3.2-4.4%). */
#define TUNE_ILV_DROP_AFTER 3
#define TUNE_ILV_DROP_BANDS 2.0
/* Decides on the slots so far (n_slots of them; later slots not yet timed) and sets dropped[c] = 1 for
 * each candidate out of the running as above (entries already 1 stay 1). Returns the number of
 * candidates dropped in all; -1 when out of memory (nothing changed). */
int tune_ilv_drop(const int *who, const double *const *samples, const int *ns, int n_slots, int n_cand,
                  double floor, double target, int *dropped);
/* Whether slot k is skipped once some candidates are dropped: a dropped (or failed) candidate's slot, and
 * the default slot just before it (the default slots next to the others stay). */
int tune_ilv_skip(const int *who, int n_slots, int k, const int *dropped);

/* The band a shape's rounds aim for. At the power limit a prefill slot wanders by 2-4% and the band of the
 * planned rounds came out at 2.05-2.11% on 3 of 6 prefill readings (session 9), so while it is wider than this
 * after the planned rounds, more rounds follow (the same order continued: D C0 D C1 ... D), at most
 * TUNE_ILV_MORE x the planned rounds in all. */
#define TUNE_ILV_BAND_TARGET 0.02
#define TUNE_ILV_MORE 2
/* Rounds in all for a band of `band` after `rounds` rounds to come down to `target`: the band falls as
 * 1 / sqrt(rounds), so ceil(rounds (band / target)^2), at most TUNE_ILV_MORE x rounds. `rounds` when the band
 * is within the target already, when it is not a number, or when the floor (the band's least value) is not
 * below the target. */
int tune_ilv_more_rounds(int rounds, double band, double target, double floor);

/* Median of n values (copied, not reordered); NaN when n is 0. */
double tune_median(const double *v, int n);

#endif
