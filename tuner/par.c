/* tuner/par.c: host work split into parts on threads (input fill, the CPU references) */
#include "tuner/par.h"

#include <pthread.h>
#include <unistd.h>

/* Threads worth using for about work_ns of one core's work in `items` pieces: one per ~2 ms
 * of work (a thread costs tens of microseconds), at most the cores (and 64). */
int par_threads_for(double work_ns, long long items)
{
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    long long nt = nproc < 1 ? 1 : nproc > 64 ? 64 : nproc;
    double want = work_ns / 2e6;
    if (want < (double)nt)
        nt = want < 1 ? 1 : (long long)want;
    if (nt > items)
        nt = items > 0 ? items : 1;
    return (int)nt;
}

typedef struct par_part {
    void (*fn)(void *arg, int part, int parts);
    void *arg;
    int part, parts;
} par_part;

static void *par_main(void *arg)
{
    par_part *p = arg;
    p->fn(p->arg, p->part, p->parts);
    return NULL;
}

/* Runs fn(arg, part, parts) for every part in 0..parts-1 (at most 64), part 0 on this thread.
 * A part whose thread cannot start runs here. */
void par_run(void (*fn)(void *, int, int), void *arg, int parts)
{
    par_part p[64];
    pthread_t th[64];
    int started[64] = {0};
    if (parts > 64)
        parts = 64;
    if (parts < 1)
        parts = 1;
    for (int i = 0; i < parts; i++) {
        p[i] = (par_part){fn, arg, i, parts};
        if (i > 0)
            started[i] = pthread_create(&th[i], NULL, par_main, &p[i]) == 0;
    }
    for (int i = 0; i < parts; i++)
        if (!started[i])
            fn(arg, i, parts);
    for (int i = 1; i < parts; i++)
        if (started[i])
            pthread_join(th[i], NULL);
}

/* [lo, hi) of part `part` of n in `parts` */
void par_range(long long n, int part, int parts, long long *lo, long long *hi)
{
    *lo = n * part / parts;
    *hi = n * (part + 1) / parts;
}
