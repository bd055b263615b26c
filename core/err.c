/* core/err.c: the error of a call that has no handle of its own: a status and a message, set where the failure happens */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

kf_status core_err_vset(core_err *e, kf_status st, const char *fmt, va_list ap)
{
    if (!e)
        return st;
    char buf[sizeof e->msg];   /* fmt's arguments may point into e->msg */
    vsnprintf(buf, sizeof buf, fmt, ap);
    memcpy(e->msg, buf, sizeof buf);
    e->st = st;
    return st;
}

kf_status core_err_set(core_err *e, kf_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    core_err_vset(e, st, fmt, ap);
    va_end(ap);
    return st;
}

int core_err_fail(core_err *e, kf_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    core_err_vset(e, st, fmt, ap);
    va_end(ap);
    return -1;
}
