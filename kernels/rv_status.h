/* rv_status.h: status codes, the thread-local last-error message and the log
 * callback shared by every ringvit module. It sits in kernels/ because kernels is
 * the bottom of the stack; it and rv_clock.h are the headers comm/ takes from here.
 * Library code never calls exit() and never prints except through rv_log(). */
#ifndef RV_STATUS_H
#define RV_STATUS_H

#include "rv_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rv_status {
    RV_OK = 0,
    RV_ERR_INVALID = -1,     /* bad argument, shape or flag */
    RV_ERR_NOMEM = -2,       /* allocation failed */
    RV_ERR_IO = -3,          /* file could not be opened, read or written */
    RV_ERR_FORMAT = -4,      /* malformed input file (media, weights) */
    RV_ERR_UNSUPPORTED = -5, /* valid request this build or backend cannot serve */
    RV_ERR_TIMEOUT = -6,     /* a peer did not answer within the deadline */
    RV_ERR_COMM = -7,        /* communication failure other than a timeout */
    RV_ERR_BACKEND = -8,     /* error reported by BLAS, CUDA, MPI, FFmpeg ... */
    RV_ERR_INTERNAL = -9,    /* broken invariant: a bug in ringvit */
} rv_status;

/* Short fixed name of a status code ("invalid argument", ...). */
RV_API const char *rv_status_name(rv_status s);

/* The message set by the most recent failing call on this thread ("" if none). */
RV_API const char *rv_last_error(void);

/* Sets this thread's last-error message and returns s, so a failing function can
 * `return rv_fail(RV_ERR_INVALID, "dim %d must be ...", d);`. */
RV_API rv_status rv_fail(rv_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears the last-error message of this thread. */
RV_API void rv_clear_error(void);

typedef enum rv_log_level {
    RV_LOG_ERROR = 0,
    RV_LOG_WARN = 1,
    RV_LOG_INFO = 2,
    RV_LOG_DEBUG = 3,
} rv_log_level;

typedef void (*rv_log_fn)(rv_log_level level, const char *msg, void *user);

/* Installs the log sink (NULL: discard everything) and the most verbose level
 * passed to it. The default sink discards; the command-line tool installs one
 * that writes to standard error. */
RV_API void rv_log_set(rv_log_fn fn, void *user, rv_log_level max_level);

RV_API void rv_log(rv_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
