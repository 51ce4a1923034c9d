/* vit_load_util.c: the checks and conversions the weight readers share
 * (vit_load_util.h), rv_vit_load_info's name lists, and the caller's load options
 * applied to a config read from a file or a folder. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_convert.h"
#include "vit_load_util.h"
#include "vit_tensors.h"

int vit_dtype_ok(rv_dtype d)
{
    return d == RV_F32 || d == RV_F16 || d == RV_BF16;
}

void vit_format_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

rv_status vit_check_dtype(const rv_safetensors *st, const rv_st_tensor *t)
{
    if (!vit_dtype_ok(t->dtype))
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '" VIT_NAME_FMT "' has dtype %s; expected F32 "
                       "(or F16, BF16)",
                       rv_st_label(st), t->name, rv_dtype_name(t->dtype));
    return RV_OK;
}

rv_status vit_check_tensor(const rv_safetensors *st, const rv_st_tensor *t, int ndim,
                           const int64_t *shape, const char *why)
{
    rv_status s = vit_check_dtype(st, t);
    if (s != RV_OK)
        return s;
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        char got[160], want[160];
        vit_format_shape(got, sizeof got, t->ndim, t->shape);
        vit_format_shape(want, sizeof want, ndim, shape);
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '" VIT_NAME_FMT "' has shape %s; expected %s%s",
                       rv_st_label(st), t->name, got, want, why ? why : "");
    }
    return RV_OK;
}

rv_status vit_extent(const rv_safetensors *st, const rv_st_tensor *t, int dim, int *out)
{
    int64_t v = dim < t->ndim ? t->shape[dim] : 0;
    if (v < 1 || v > VIT_MAX_EXTENT)
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '" VIT_NAME_FMT "' has extent %" PRId64
                       " in dimension %d (expected 1 .. %d)",
                       rv_st_label(st), t->name, v, dim, VIT_MAX_EXTENT);
    *out = (int)v;
    return RV_OK;
}

rv_status vit_check_finite(const rv_safetensors *st, const rv_st_tensor *t)
{
    /* On the raw bits (all exponent bits set), so no conversion is needed. */
    const unsigned char *p = t->data;
    const int wide = t->dtype == RV_F32;
    const uint32_t exp = wide ? 0x7f800000u : t->dtype == RV_BF16 ? 0x7f80u : 0x7c00u;
    const uint32_t sign = wide ? 0x80000000u : 0x8000u;
    for (int64_t i = 0; i < t->numel; i++) {
        uint32_t u = wide ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                (uint32_t)p[3] << 24
                          : (uint32_t)p[0] | (uint32_t)p[1] << 8;
        p += wide ? 4 : 2;
        if ((u & exp) != exp)
            continue;
        const char *what = (u & ~(exp | sign)) ? "NaN" : (u & sign) ? "-Inf" : "+Inf";
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '" VIT_NAME_FMT "' holds %s at index %" PRId64
                       " (of %" PRId64 " values); non-finite weights are refused (a diverged "
                       "or corrupt file?)",
                       rv_st_label(st), t->name, what, i, t->numel);
    }
    return RV_OK;
}

rv_status vit_floats_finite(const char *what, const char *path, const char *name,
                            const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return rv_fail(RV_ERR_INVALID,
                           "%s '%s': tensor '" VIT_NAME_FMT "' holds %s at index %" PRId64
                           " (of %" PRId64 " values); a diverged model is not written",
                           what, path, name, isnan(x[i]) ? "NaN" : x[i] > 0 ? "+Inf" : "-Inf",
                           i, n);
    return RV_OK;
}

rv_status vit_check_fits(const char *what, const char *source, const rv_vit_config *c,
                         uint64_t need_floats, uint64_t have_bytes)
{
    if (need_floats <= have_bytes / 2)
        return RV_OK;
    return rv_fail(RV_ERR_FORMAT,
                   "%s: the %s describes a model (dim %d, %d layers, mlp %d) whose tensors "
                   "need at least %" PRIu64 " bytes (%" PRIu64 " values), but the weights hold "
                   "only %" PRIu64 " bytes of tensor data; refused before allocating it",
                   what, source, c->dim, c->layers, c->mlp, need_floats * 2, need_floats,
                   have_bytes);
}

rv_status vit_read_video(const rv_st_tensor *t, const rv_vit_config *c, int file_T, float *dst,
                         const char *label)
{
    float *file = malloc((size_t)t->numel * sizeof *file);
    if (!file)
        return rv_fail(RV_ERR_NOMEM, "loading '%s': out of memory for '" VIT_NAME_FMT "'", label,
                       t->name);
    st_to_f32(t, file);
    if (file_T == c->tubelet) {
        vit_video_from_file(file, c->dim, c->tubelet, c->patch, dst);
    } else {
        /* Inflation: the 2D (D, 3, P, P) weight, / T, in each of the T frames. */
        const int T = c->tubelet, P = c->patch, C = RV_VIT_CHANNELS;
        const int64_t per_file = (int64_t)C * P * P, per_mem = (int64_t)T * P * P * C;
        for (int64_t d = 0; d < c->dim; d++)
            for (int ch = 0; ch < C; ch++)
                for (int y = 0; y < P; y++)
                    for (int x = 0; x < P; x++) {
                        float v = file[d * per_file + ((int64_t)ch * P + y) * P + x] / (float)T;
                        for (int tt = 0; tt < T; tt++)
                            dst[d * per_mem + (((int64_t)tt * P + y) * P + x) * C + ch] = v;
                    }
    }
    free(file);
    return RV_OK;
}

rv_status vit_info_add(char ***list, int *n, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **grown = realloc(*list, sizeof **list * (size_t)(*n + 1));
    if (!grown)
        return rv_fail(RV_ERR_NOMEM, "loading weights: out of memory for the load report");
    *list = grown;
    if (!(grown[*n] = strdup(buf)))
        return rv_fail(RV_ERR_NOMEM, "loading weights: out of memory for the load report");
    (*n)++;
    return RV_OK;
}

void vit_warn_unknown(const char *what, const rv_vit_load_info *info)
{
    const int n = info->nunknown;
    if (n == 0)
        return;
    rv_log(RV_LOG_WARN, "%s: ignoring %d unknown tensor%s: '" VIT_NAME_FMT "'%s%s%s", what, n,
           n == 1 ? "" : "s", info->unknown[0], n > 1 ? ", '" : "", n > 1 ? info->unknown[1] : "",
           n > 2 ? "', ..." : n > 1 ? "'" : "");
}

static void free_list(char ***list, int *n)
{
    for (int i = 0; *list && i < *n; i++)
        free((*list)[i]);
    free(*list);
    *list = NULL;
    *n = 0;
}

void rv_vit_load_info_free(rv_vit_load_info *info)
{
    if (!info)
        return;
    free_list(&info->ignored, &info->nignored);
    free_list(&info->unknown, &info->nunknown);
    free_list(&info->zeroed, &info->nzeroed);
    free_list(&info->notes, &info->nnotes);
    memset(info, 0, sizeof *info);
}

rv_status vit_apply_load_opts(const rv_vit_load_opts *opts, const char *lb, int file_T,
                              const char *video_name, rv_vit_config *c)
{
    const int want_heads = opts && opts->heads > 0 ? opts->heads : 0;
    const int want_T = opts && opts->tubelet > 0 ? opts->tubelet : 0;
    if (want_heads)
        c->heads = want_heads;
    if (want_heads && c->dim % want_heads != 0)
        return rv_fail(RV_ERR_INVALID, "head count %d does not divide the width D %d of '%s'",
                       want_heads, c->dim, lb);
    if (want_T && want_T != c->tubelet) {
        if (!c->video)
            return rv_fail(RV_ERR_INVALID, "'%s' has no video weights; a tubelet (%d) means "
                           "nothing for it", lb, want_T);
        if (file_T != 1)
            return rv_fail(RV_ERR_INVALID,
                           "weights file '%s' holds tubelet %d weights ('" VIT_NAME_FMT "'); "
                           "tubelet %d was asked for (only a 2D patch weight can be inflated)",
                           lb, file_T, video_name ? video_name : "?", want_T);
        c->tubelet = want_T; /* inflated when read */
    }
    rv_status s = rv_vit_config_check(c);
    if (s != RV_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rv_last_error());
        return rv_fail(want_T ? s : RV_ERR_FORMAT, /* sizes read from the file */
                       "model '%s': %s", lb, msg);
    }
    return RV_OK;
}
