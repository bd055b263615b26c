/* tuner/par.h: host work split into parts on threads (input fill, the CPU references) */
#ifndef KF_TUNER_PAR_H
#define KF_TUNER_PAR_H

/* Threads worth using for about work_ns of one core's work in `items` pieces: one per ~2 ms
 * of work, at most the cores (and 64), at most items, at least 1. */
int par_threads_for(double work_ns, long long items);

/* Runs fn(arg, part, parts) for every part in 0..parts-1 (parts clamped to 1..64), part 0 on
 * the calling thread, and returns when all have finished. A part whose thread cannot start
 * runs on the calling thread: the work is done either way. */
void par_run(void (*fn)(void *arg, int part, int parts), void *arg, int parts);

/* [lo, hi) of part `part` of n items split in `parts` */
void par_range(long long n, int part, int parts, long long *lo, long long *hi);

#endif
