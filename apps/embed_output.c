/* embed_output.c: the output file of `ringvit embed`, one safetensors file per
 * input:
 *   global          (D) F32      mean of every token's output but CLS
 *   segments        (G, D) F32   means over windows of --segment seconds
 *   segment_start   (G) F64      s since the recording's start (t0)
 *   segment_end     (G) F64
 *   segment_tokens  (G) I64      tokens pooled in each window
 *   video_mean      (D) F32      mean of the video tokens (zeros when none)
 *   audio_mean      (D) F32      mean of the audio tokens (zeros when none)
 *   cls             (D) F32      the CLS token's output (models with one)
 *   dist            (D) F32      the distillation token's output (AST)
 *   pooled          (D) F32      the model family's pooled output (rv_vit_pool_head)
 *   projected       (P) F32      its projection (CLIP's visual_projection, when stored)
 * and with --tokens, every token in sequence order:
 *   tokens          (S, D) F32
 *   token_time      (S, 2) F64   start, end, s since t0
 *   token_modality  (S) U8       0 video, 1 audio, 2 cls
 *   token_pos       (S, 3) I64   video (tubelet, row, column), audio (step, band, 0)
 * Metadata (strings): format, source, probe (JSON), model, model_hash, config
 * (JSON), family, random_weights, cp, strategy, attention, hop_s, causal, fps, size,
 * segment_s,
 * recording_s, tokens, video_tokens, audio_tokens, ringvit_version.
 *
 * Writing goes through rv_st_writer_write, which writes "<path>.tmp.<pid>" and
 * renames it when complete; a run killed meanwhile leaves that temporary file,
 * which embed_output_clean_stale removes on the next run. Only a regular file
 * (or nothing) is replaced; a symlink is written through to its target, whose
 * folder then holds the temporary file (rv_out_target). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "embed.h"
#include "out_path.h"
#include "rv_safetensors.h"
#include "rv_version.h"

static rv_status meta_int(rv_st_writer *w, const char *key, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return rv_st_writer_meta(w, key, buf);
}

static rv_status meta_num(rv_st_writer *w, const char *key, double v)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    return rv_st_writer_meta(w, key, buf);
}

rv_status embed_output_write(const embed_output *o)
{
    const embed_settings *s = o->set;
    const rv_vit_pooled *p = o->pooled;
    const rv_tok_layout *L = o->L;
    const int64_t D = p->dim, G = p->segments, S = L->seq;
    int64_t d1[1] = {D}, g1[1] = {G}, gd[2] = {G, D}, s1[1] = {S}, s2[2] = {S, 2},
            s3[2] = {S, 3}, sd[2] = {S, D};
    char fps[32];
    snprintf(fps, sizeof fps, "%d/%d", L->ingest.fps_num, L->ingest.fps_den);
    rv_st_writer *w = NULL;
    rv_status st;
    char attention[64];
    /* Metadata is UTF-8: a file name that is not keeps its other bytes as \xNN. */
    char *source = rv_cli_utf8_text(o->source);
    if (!source)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory", o->path);
    rv_span_format(&s->span, attention, sizeof attention);
    /* 8-byte elements first, then 4, then 1: every tensor starts aligned. */
    if ((st = rv_st_writer_new(&w)) != RV_OK ||
        (st = rv_st_writer_add(w, "segment_start", RV_F64, 1, g1, p->segment_start)) != RV_OK ||
        (st = rv_st_writer_add(w, "segment_end", RV_F64, 1, g1, p->segment_end)) != RV_OK ||
        (st = rv_st_writer_add(w, "segment_tokens", RV_I64, 1, g1, p->segment_tokens)) != RV_OK)
        goto end;
    if (s->tokens &&
        ((st = rv_st_writer_add(w, "token_time", RV_F64, 2, s2, o->token_time)) != RV_OK ||
         (st = rv_st_writer_add(w, "token_pos", RV_I64, 2, s3, o->token_pos)) != RV_OK))
        goto end;
    if ((st = rv_st_writer_add(w, "global", RV_F32, 1, d1, p->global)) != RV_OK ||
        (st = rv_st_writer_add(w, "segments", RV_F32, 2, gd, p->segment)) != RV_OK ||
        (st = rv_st_writer_add(w, "video_mean", RV_F32, 1, d1, p->modality_mean)) != RV_OK ||
        (st = rv_st_writer_add(w, "audio_mean", RV_F32, 1, d1, p->modality_mean + D)) != RV_OK)
        goto end;
    if (s->model->cfg.cls && (st = rv_st_writer_add(w, "cls", RV_F32, 1, d1, p->cls)) != RV_OK)
        goto end;
    if (s->model->cfg.cls > 1 && (st = rv_st_writer_add(w, "dist", RV_F32, 1, d1, p->dist)) != RV_OK)
        goto end;
    if (p->pooled && (st = rv_st_writer_add(w, "pooled", RV_F32, 1, d1, p->pooled)) != RV_OK)
        goto end;
    int64_t pj[1] = {p->proj_dim};
    if (p->proj_dim > 0 &&
        (st = rv_st_writer_add(w, "projected", RV_F32, 1, pj, p->projected)) != RV_OK)
        goto end;
    if (s->tokens &&
        ((st = rv_st_writer_add(w, "tokens", RV_F32, 2, sd, o->tokens)) != RV_OK ||
         (st = rv_st_writer_add(w, "token_modality", RV_U8, 1, s1, o->token_modality)) != RV_OK))
        goto end;
    if ((st = rv_st_writer_meta(w, "format", EMBED_FORMAT)) != RV_OK ||
        (st = rv_st_writer_meta(w, "source", source)) != RV_OK ||
        (st = rv_st_writer_meta(w, "probe", o->probe_json ? o->probe_json : "null")) != RV_OK ||
        (st = rv_st_writer_meta(w, "model", s->model_name)) != RV_OK ||
        (st = rv_st_writer_meta(w, "model_hash", s->model_hash)) != RV_OK ||
        (st = rv_st_writer_meta(w, "config", s->config_json)) != RV_OK ||
        (st = rv_st_writer_meta(w, "family", rv_vit_family_name(s->model->cfg.family))) != RV_OK ||
        (st = rv_st_writer_meta(w, "random_weights", s->random_weights ? "true" : "false")) != RV_OK ||
        (st = meta_int(w, "cp", s->ranks)) != RV_OK ||
        (st = rv_st_writer_meta(w, "strategy", rv_cp_strategy_name(s->strategy))) != RV_OK ||
        (st = rv_st_writer_meta(w, "attention", attention)) != RV_OK ||
        (st = meta_num(w, "hop_s", s->hop_s > 0 ? s->hop_s : s->segment_s)) != RV_OK ||
        (st = rv_st_writer_meta(w, "causal", s->causal ? "true" : "false")) != RV_OK ||
        (st = rv_st_writer_meta(w, "fps", fps)) != RV_OK ||
        (st = meta_int(w, "size", L->ingest.size)) != RV_OK ||
        (st = meta_num(w, "segment_s", s->segment_s)) != RV_OK ||
        (st = meta_num(w, "recording_s", o->end_s)) != RV_OK ||
        (st = meta_int(w, "tokens", S)) != RV_OK ||
        (st = meta_int(w, "video_tokens", p->modality_tokens[0])) != RV_OK ||
        (st = meta_int(w, "audio_tokens", p->modality_tokens[1])) != RV_OK ||
        (st = rv_st_writer_meta(w, "ringvit_version", RINGVIT_VERSION)) != RV_OK)
        goto end;
    /* Checked before the batch and again now (see out_path.h); a symlink is
     * written through to its target. */
    char target[4096];
    if ((st = rv_out_target(o->path, target, sizeof target)) != RV_OK)
        goto end;
    /* rv_st_writer_write's temporary name, for the signal handler. */
    snprintf(embed_tmp_path, sizeof embed_tmp_path, "%s.tmp.%ld", target, (long)getpid());
    st = rv_st_writer_write(w, target);
    embed_tmp_path[0] = '\0';
end:
    rv_st_writer_free(&w);
    free(source);
    return st;
}

int embed_output_complete(const char *path, const embed_settings *set)
{
    static const char *const always[] = {"global", "segments", "segment_start", "segment_end",
                                         "segment_tokens", "video_mean", "audio_mean", "pooled"};
    static const char *const per_token[] = {"tokens", "token_time", "token_modality",
                                            "token_pos"};
    if (access(path, F_OK) != 0)
        return 0;
    rv_safetensors *st = NULL;
    int ok = 0;
    if (rv_st_open(path, &st) != RV_OK)
        goto end;
    const char *fmt = rv_st_meta(st, "format");
    if (!fmt || strcmp(fmt, EMBED_FORMAT) != 0)
        goto end;
    /* An output of another model is not this run's: it is redone. */
    const char *hash = rv_st_meta(st, "model_hash");
    if (!hash || strcmp(hash, set->model_hash) != 0)
        goto end;
    for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
        if (!rv_st_find(st, always[i]))
            goto end;
    for (size_t i = 0; set->tokens && i < sizeof per_token / sizeof per_token[0]; i++)
        if (!rv_st_find(st, per_token[i]))
            goto end;
    if (set->model->cfg.cls && !rv_st_find(st, "cls"))
        goto end;
    const rv_st_tensor *g = rv_st_find(st, "global");
    ok = g->ndim == 1 && g->shape[0] == set->model->cfg.dim && g->dtype == RV_F32;
end:
    rv_st_free(&st);
    return ok;
}

/* "<name>.tmp.<digits>" -> name length and pid; 0 when not of that form. */
static size_t tmp_of(const char *entry, long *pid)
{
    const char *t = strstr(entry, ".safetensors.tmp.");
    if (!t)
        return 0;
    const char *d = t + strlen(".safetensors.tmp.");
    if (!*d)
        return 0;
    char *end;
    long v = strtol(d, &end, 10);
    if (*end || v <= 0)
        return 0;
    *pid = v;
    return (size_t)(t - entry) + strlen(".safetensors");
}

int embed_output_clean_stale(const embed_input *in, int n)
{
    if (n <= 0)
        return 0;
    /* Every output lives in one folder (-o's, or --out-dir). */
    const char *o0 = in[0].output, *slash = strrchr(o0, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - o0) : 1, slash ? o0 : ".");
    if (slash == o0)
        snprintf(dir, sizeof dir, "/");
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = 0;
        size_t len = tmp_of(e->d_name, &pid);
        if (!len)
            continue;
        /* A live process may be writing it (another run, or a rank of this one). */
        if (pid == (long)getpid() || !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
            continue;
        for (int i = 0; i < n; i++) {
            const char *base = strrchr(in[i].output, '/');
            base = base ? base + 1 : in[i].output;
            if (strlen(base) == len && strncmp(base, e->d_name, len) == 0) {
                char full[8192];
                snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
                if (unlink(full) == 0) {
                    removed++;
                    rv_log(RV_LOG_INFO, "embed: removed %s, left by a run that was stopped", full);
                }
                break;
            }
        }
    }
    closedir(d);
    return removed;
}
