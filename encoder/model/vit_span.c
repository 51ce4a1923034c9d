/* vit_span.c: attention spans of the encoder (rv_vit.h): parsing and printing
 * "full | frame | block=W | window=W", and the per-token keys a span hands the
 * context-parallel attention (rv_cp_attn_set_span): a window's key is the
 * token's start time with reach W / 2; a block's or frame's key is the token's
 * window index (the tokenizer cut the recording into those blocks, each led by
 * its own special tokens) with reach 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit_internal.h"

rv_status rv_span_parse(const char *text, rv_span *out)
{
    rv_span s = {.kind = RV_SPAN_FULL, .seconds = 0};
    const char *arg = NULL;
    if (!text || !out)
        return rv_fail(RV_ERR_INVALID, "attention span: NULL argument");
    if (strcmp(text, "full") == 0) {
        s.kind = RV_SPAN_FULL;
    } else if (strcmp(text, "frame") == 0) {
        s.kind = RV_SPAN_FRAME;
    } else if (strncmp(text, "window=", 7) == 0) {
        s.kind = RV_SPAN_WINDOW, arg = text + 7;
    } else if (strncmp(text, "block=", 6) == 0) {
        s.kind = RV_SPAN_BLOCK, arg = text + 6;
    } else {
        return rv_fail(RV_ERR_INVALID, "attention span '%.64s': want full, frame, "
                       "block=SECONDS or window=SECONDS", text);
    }
    if (arg) {
        char *end = NULL;
        s.seconds = strtod(arg, &end);
        if (end == arg || *end || !isfinite(s.seconds) || s.seconds <= 0 || s.seconds > 1e7)
            return rv_fail(RV_ERR_INVALID, "attention span '%.64s': the seconds must be a "
                           "number in (0, 1e7]", text);
        if (s.kind == RV_SPAN_BLOCK && fabs(s.seconds * 1e6 - llround(s.seconds * 1e6)) > 1e-3)
            return rv_fail(RV_ERR_INVALID, "attention span '%.64s': blocks are whole "
                           "microseconds", text);
    }
    *out = s;
    return RV_OK;
}

void rv_span_format(const rv_span *s, char *buf, size_t cap)
{
    switch (s ? s->kind : RV_SPAN_FULL) {
    case RV_SPAN_WINDOW: snprintf(buf, cap, "window=%.9g", s->seconds); break;
    case RV_SPAN_BLOCK: snprintf(buf, cap, "block=%.9g", s->seconds); break;
    case RV_SPAN_FRAME: snprintf(buf, cap, "frame"); break;
    default: snprintf(buf, cap, "full"); break;
    }
}

rv_status vit_span_setup(rv_cp_attn *cp, const rv_vit_run *run, const rv_vit_tokens *in)
{
    const rv_span *sp = &run->span;
    if (sp->kind == RV_SPAN_FULL)
        return RV_OK;
    if ((sp->kind == RV_SPAN_BLOCK || sp->kind == RV_SPAN_FRAME) && in->len > 0 && !in->window)
        return rv_fail(RV_ERR_INVALID, "vit forward: a %s span needs every token's block "
                       "(rv_vit_tokens.window)", sp->kind == RV_SPAN_FRAME ? "frame" : "block");
    const size_t n = (size_t)(in->len > 0 ? in->len : 1);
    double *key = malloc(sizeof(double) * n), *time = malloc(sizeof(double) * n);
    rv_status st;
    if (!key || !time) {
        st = rv_fail(RV_ERR_NOMEM, "vit forward: out of memory for the span's keys");
        goto end;
    }
    for (int64_t i = 0; i < in->len; i++) {
        time[i] = in->seq_time[2 * i];
        key[i] = sp->kind == RV_SPAN_WINDOW ? time[i] : (double)in->window[i];
    }
    st = rv_cp_attn_set_span(cp, sp->kind == RV_SPAN_WINDOW ? sp->seconds / 2 : 0.0, key, time);
end:
    free(key);
    free(time);
    return st;
}
