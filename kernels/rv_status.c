/* rv_status.c: status names, the thread-local last-error buffer and the log sink. */
#include "rv_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

static rv_log_fn log_fn;
static void *log_user;
static rv_log_level log_max = RV_LOG_INFO;

const char *rv_status_name(rv_status s)
{
    switch (s) {
    case RV_OK: return "ok";
    case RV_ERR_INVALID: return "invalid argument";
    case RV_ERR_NOMEM: return "out of memory";
    case RV_ERR_IO: return "i/o error";
    case RV_ERR_FORMAT: return "malformed input";
    case RV_ERR_UNSUPPORTED: return "unsupported";
    case RV_ERR_TIMEOUT: return "timeout";
    case RV_ERR_COMM: return "communication error";
    case RV_ERR_BACKEND: return "backend error";
    case RV_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *rv_last_error(void)
{
    return last_error;
}

rv_status rv_fail(rv_status s, const char *fmt, ...)
{
    /* Formatted aside first: the arguments may include rv_last_error() itself,
     * when a caller adds context to the message of a call that failed. */
    char buf[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(last_error, buf, sizeof buf);
    return s;
}

void rv_clear_error(void)
{
    last_error[0] = '\0';
}

void rv_log_set(rv_log_fn fn, void *user, rv_log_level max_level)
{
    log_fn = fn;
    log_user = user;
    log_max = max_level;
}

void rv_log(rv_log_level level, const char *fmt, ...)
{
    if (!log_fn || level > log_max)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(level, msg, log_user);
}
