/* core/err.h: the error of a call that has no handle of its own: a status and a message, set where the failure happens */
#ifndef KF_CORE_ERR_H
#define KF_CORE_ERR_H

#include <stdarg.h>

#include "runtime/kforge.h"

/*
 * What kf_ctx (runtime/ctx.h) and the tuner session (tuner/tune_ctx.h) keep on their handles, for
 * the calls that run before or without one: loading the driver, loading a module, the pure
 * selection functions, a bundle's loader. One pointer where a (buffer, size) pair was threaded
 * through the call chain; the status is decided where the failure happens, the caller passes both on.
 */
typedef struct core_err {
    kf_status st;              /* KF_OK until a failure sets it */
    char msg[2048];            /* "" until a failure sets it */
} core_err;

#define CORE_ERR_INIT {KF_OK, ""}

/* Sets e's status and message (printf-style; an argument may be e->msg itself, to prefix it) and
 * returns st: `return core_err_set(e, KF_ERR_ARG, "desc.hq = %d ...", ...)`. e NULL: returns st. */
kf_status core_err_set(core_err *e, kf_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same with a va_list, for a module's own printf-like setter. */
kf_status core_err_vset(core_err *e, kf_status st, const char *fmt, va_list ap);
/* The same for the functions whose convention is 0 / -1: returns -1. */
int core_err_fail(core_err *e, kf_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
