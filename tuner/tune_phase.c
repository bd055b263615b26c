/* tuner/tune_phase.c: wall-clock accounting of where a sweep's time goes (CLOCK_MONOTONIC seconds) */
#include "tuner/tune_phase.h"

#include <stdio.h>

double tune_phases_accounted(const tune_phases *p)
{
    return p->plan + p->wait + p->gate_fill + p->gate_ref + p->gate_run + p->time_fill + p->time_load +
           p->time_run + p->db;
}

void tune_phases_add(tune_phases *to, const tune_phases *f)
{
    to->wall += f->wall;
    to->plan += f->plan;
    to->wait += f->wait;
    to->gate_fill += f->gate_fill;
    to->gate_ref += f->gate_ref;
    to->gate_run += f->gate_run;
    to->time_fill += f->time_fill;
    to->time_load += f->time_load;
    to->time_run += f->time_run;
    to->db += f->db;
    to->gates += f->gates;
    to->timings += f->timings;
}

static double other_of(const tune_phases *p)
{
    double o = p->wall - tune_phases_accounted(p);
    return o > 0 ? o : 0;
}

void tune_phases_str(const tune_phases *p, char *buf, size_t n)
{
    int k = p->plan > 0 ? snprintf(buf, n, "plan %.1f s, ", p->plan) : 0;
    if (k < 0 || (size_t)k >= n)
        return;
    snprintf(buf + k, n - (size_t)k,
             "gate %.1f s (fill %.1f, ref %.1f, run %.1f), time %.1f s (fill %.1f, load %.1f, run %.1f),"
             " db %.1f s, compile wait %.1f s, other %.1f s",
             p->gate_fill + p->gate_ref + p->gate_run, p->gate_fill, p->gate_ref, p->gate_run,
             p->time_fill + p->time_load + p->time_run, p->time_fill, p->time_load, p->time_run, p->db, p->wait,
             other_of(p));
}

void tune_phases_json(const tune_phases *p, char *buf, size_t n)
{
    snprintf(buf, n,
             "\"wall_s\":%.4f,\"plan_s\":%.4f,\"gate_s\":%.4f,\"gate_fill_s\":%.4f,\"gate_ref_s\":%.4f,"
             "\"gate_run_s\":%.4f,\"time_s\":%.4f,\"time_fill_s\":%.4f,\"time_load_s\":%.4f,\"time_run_s\":%.4f,"
             "\"db_s\":%.4f,\"compile_wait_s\":%.4f,\"other_s\":%.4f,\"gates\":%ld,\"timings\":%ld",
             p->wall, p->plan, p->gate_fill + p->gate_ref + p->gate_run, p->gate_fill, p->gate_ref, p->gate_run,
             p->time_fill + p->time_load + p->time_run, p->time_fill, p->time_load, p->time_run, p->db, p->wait,
             other_of(p), p->gates, p->timings);
}
