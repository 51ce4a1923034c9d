/* av_log_bridge.c: FFmpeg's log goes to rv_log at DEBUG, so the library never
 * prints on its own (FFmpeg would write to stderr by default), and FFmpeg error
 * codes become text for messages. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <libavutil/error.h>
#include <libavutil/log.h>

#include "ingest_internal.h"

/* The last error FFmpeg logged on this thread, so a failure message can say
 * what FFmpeg saw ("moov atom not found"). */
static _Thread_local char last_error[256];

static void av_log_to_rv(void *avcl, int level, const char *fmt, va_list vl)
{
    if (level > av_log_get_level())
        return;
    char line[1024];
    int print_prefix = 1;
    /* av_log_format_line2 adds the "[h264 @ 0x...]" context prefix. */
    if (av_log_format_line2(avcl, level, fmt, vl, line, sizeof line, &print_prefix) < 0)
        return;
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    if (n == 0)
        return;
    rv_log(RV_LOG_DEBUG, "ffmpeg: %s", line);
    if (level <= AV_LOG_ERROR) {
        /* Without the "[mov @ 0x...] " context prefix. */
        const char *msg = line;
        if (msg[0] == '[' && strstr(msg, "] "))
            msg = strstr(msg, "] ") + 2;
        snprintf(last_error, sizeof last_error, "%s", msg);
    }
}

const char *rv_av_last_log(void)
{
    return last_error;
}

void rv_av_clear_log(void)
{
    last_error[0] = '\0';
}

static void install_once(void)
{
    av_log_set_level(AV_LOG_WARNING);
    av_log_set_callback(av_log_to_rv);
}

void rv_av_log_install(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_once);
}

const char *rv_av_err(int err)
{
    static _Thread_local char buf[AV_ERROR_MAX_STRING_SIZE];
    if (av_strerror(err, buf, sizeof buf) < 0)
        snprintf(buf, sizeof buf, "error %d", err);
    return buf;
}
