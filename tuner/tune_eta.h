/* tuner/tune_eta.h: progress arithmetic of a sweep: remaining time and its short text (pure) */
#ifndef KF_TUNER_TUNE_ETA_H
#define KF_TUNER_TUNE_ETA_H

#include <stddef.h>

/* Seconds left when done of total units took elapsed_s: elapsed/done per unit.
 * -1 when unknown (nothing done yet); 0 when everything is done. */
double tune_eta(double elapsed_s, long done, long total);
/* "45s", "3m10s", "2h05m", "?" for a negative figure. Returns buf. */
char *tune_fmt_duration(double s, char *buf, size_t n);

#endif
