/* video_convert.c: one decoded frame to the S x S RGB picture ingest hands out.
 * Order (the peer reference in tests/peer/ingest_golden.py does the same):
 *   1. swscale, area averaging, to RGBA at the scaled size in the coded
 *      orientation, with the frame's colour matrix and range;
 *   2. rotate by the stream's display rotation (a quarter turn is a transpose);
 *   3. centre-crop to S x S, or with pad place it centred on black.
 * Steps 2 and 3 are one pass that reads each output pixel from where it sits in
 * the scaled picture. */
#include <stdlib.h>
#include <string.h>

#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>

#include "ingest_internal.h"

/* Area averaging: a proper low-pass for the large downscales of video to model
 * input (1280 -> 398 px), and about half the work of bicubic. RGBA out of
 * swscale has SIMD paths that packed RGB24 lacks (about 1.5x faster); the alpha
 * byte is dropped while cropping. */
#define SWS_FLAGS SWS_AREA
#define SWS_OUT_FMT AV_PIX_FMT_RGBA
#define SWS_OUT_BPP 4

void rv_convert_scaled_size(int w, int h, int size, int pad, int *ow, int *oh)
{
    /* crop: the shorter side becomes S; pad: the longer side does. */
    int w_is_ref = pad ? (w >= h) : (w <= h);
    int64_t a = w_is_ref ? h : w, b = w_is_ref ? w : h; /* other side, reference side */
    int64_t other = (2 * a * size + b) / (2 * b);         /* round half up */
    if (other < 1)
        other = 1;
    if (w_is_ref) {
        *ow = size;
        *oh = (int)(other > RV_INGEST_MAX_SIDE * 4 ? RV_INGEST_MAX_SIDE * 4 : other);
    } else {
        *oh = size;
        *ow = (int)(other > RV_INGEST_MAX_SIDE * 4 ? RV_INGEST_MAX_SIDE * 4 : other);
    }
}

void rv_ingest_scaled_size(int w, int h, int size, int pad, int *ow, int *oh)
{
    if (w <= 0 || h <= 0 || size <= 0) {
        *ow = *oh = 0;
        return;
    }
    rv_convert_scaled_size(w, h, size, pad, ow, oh);
}

rv_status rv_convert_init(rv_convert *c, int size, int pad, int rotation, int threads)
{
    memset(c, 0, sizeof *c);
    c->threads = threads;
    c->size = size;
    c->pad = pad;
    c->rotation = rotation;
    c->src_fmt = -1;
    return RV_OK;
}

void rv_convert_release(rv_convert *c)
{
    sws_freeContext(c->sws);
    c->sws = NULL;
    av_frame_free(&c->scaled);
}

/* The swscale colour matrix for a frame's colour space: those swscale knows,
 * else its default (BT.601), as the ffmpeg command's scale filter does. */
static int sws_colorspace(enum AVColorSpace cs)
{
    switch (cs) {
    case AVCOL_SPC_BT709: return SWS_CS_ITU709;
    case AVCOL_SPC_FCC: return SWS_CS_FCC;
    case AVCOL_SPC_SMPTE170M: return SWS_CS_SMPTE170M;
    case AVCOL_SPC_SMPTE240M: return SWS_CS_SMPTE240M;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return SWS_CS_BT2020;
    default: return SWS_CS_DEFAULT;
    }
}

static rv_status setup(rv_convert *c, const char *path, const AVFrame *f)
{
    int cs = sws_colorspace(f->colorspace);
    int full = f->color_range == AVCOL_RANGE_JPEG;
    if (c->sws && f->width == c->src_w && f->height == c->src_h && f->format == c->src_fmt &&
        cs == c->src_cs && full == c->src_range)
        return RV_OK;
    rv_convert_release(c);
    if (f->width <= 0 || f->height <= 0 || f->width > RV_INGEST_MAX_SIDE ||
        f->height > RV_INGEST_MAX_SIDE || (int64_t)f->width * f->height > RV_INGEST_MAX_PIXELS)
        return rv_fail(RV_ERR_UNSUPPORTED, "%s: decoded frame of %dx%d px is out of range",
                       path, f->width, f->height);
    int quarter = c->rotation == 90 || c->rotation == 270;
    int disp_w = quarter ? f->height : f->width, disp_h = quarter ? f->width : f->height;
    rv_convert_scaled_size(disp_w, disp_h, c->size, c->pad, &c->dw, &c->dh);
    c->sw = quarter ? c->dh : c->dw;
    c->sh = quarter ? c->dw : c->dh;
    if (c->sw > RV_INGEST_MAX_SIDE * 2 || c->sh > RV_INGEST_MAX_SIDE * 2)
        return rv_fail(RV_ERR_UNSUPPORTED, "%s: picture of %dx%d px is too elongated to "
                       "resize to %d px", path, f->width, f->height, c->size);
    /* c->threads swscale slice threads (1 from the conversion worker); any
     * count gives the same output (each slice applies the same filter taps). */
    int ok = (c->sws = sws_alloc_context()) != NULL;
    ok = ok && av_opt_set_int(c->sws, "srcw", f->width, 0) >= 0 &&
         av_opt_set_int(c->sws, "srch", f->height, 0) >= 0 &&
         av_opt_set_int(c->sws, "src_format", f->format, 0) >= 0 &&
         av_opt_set_int(c->sws, "dstw", c->sw, 0) >= 0 &&
         av_opt_set_int(c->sws, "dsth", c->sh, 0) >= 0 &&
         av_opt_set_int(c->sws, "dst_format", SWS_OUT_FMT, 0) >= 0 &&
         av_opt_set_int(c->sws, "sws_flags", SWS_FLAGS, 0) >= 0 &&
         av_opt_set_int(c->sws, "threads", c->threads, 0) >= 0 &&
         sws_init_context(c->sws, NULL, NULL) >= 0;
    if (!ok) {
        sws_freeContext(c->sws);
        c->sws = NULL;
        return rv_fail(RV_ERR_UNSUPPORTED, "%s: cannot convert %s frames of %dx%d px to RGB",
                       path, av_get_pix_fmt_name(f->format) ? av_get_pix_fmt_name(f->format)
                                                            : "unknown",
                       f->width, f->height);
    }
    if (cs != SWS_CS_DEFAULT || full) {
        /* Change only what the frame says, as PyAV's reformat does with a source
         * colour space: the context's other settings stay. */
        int *inv, *tbl, src_range, dst_range, bri, con, sat;
        if (sws_getColorspaceDetails(c->sws, &inv, &src_range, &tbl, &dst_range, &bri, &con,
                                     &sat) >= 0) {
            const int *src_tbl = cs != SWS_CS_DEFAULT ? sws_getCoefficients(cs) : inv;
            sws_setColorspaceDetails(c->sws, src_tbl, full ? 1 : src_range, tbl, dst_range,
                                     bri, con, sat);
        }
    }
    if (!(c->scaled = av_frame_alloc())) /* refcounted, as sws_scale_frame wants */
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
    c->scaled->format = SWS_OUT_FMT;
    c->scaled->width = c->sw;
    c->scaled->height = c->sh;
    if (av_frame_get_buffer(c->scaled, 64) < 0)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory for a %dx%d picture", path, c->sw,
                       c->sh);
    c->src_w = f->width;
    c->src_h = f->height;
    c->src_fmt = f->format;
    c->src_cs = cs;
    c->src_range = full;
    return RV_OK;
}

rv_status rv_convert_frame(rv_convert *c, const char *path, const AVFrame *f, uint8_t *out)
{
    rv_status st = setup(c, path, f);
    if (st != RV_OK)
        return st;
    int ret = sws_scale_frame(c->sws, c->scaled, f);
    if (ret < 0)
        return rv_fail(RV_ERR_BACKEND, "%s: swscale failed on a %dx%d frame (%s)", path,
                       f->width, f->height, rv_av_err(ret));

    const int S = c->size, dw = c->dw, dh = c->dh;
    /* Display-orientation window: crop offsets into the scaled picture, or pad
     * offsets of the picture inside the output. */
    int ox = 0, oy = 0, px = 0, py = 0, w = S, h = S;
    if (c->pad) {
        memset(out, 0, (size_t)S * S * 3);
        px = (S - dw) / 2;
        py = (S - dh) / 2;
        w = dw;
        h = dh;
    } else {
        ox = (dw - S) / 2;
        oy = (dh - S) / 2;
    }
    const uint8_t *src = c->scaled->data[0];
    const int ss = c->scaled->linesize[0], sw = c->sw, sh = c->sh;
    enum { B = SWS_OUT_BPP };
    for (int y = 0; y < h; y++) {
        uint8_t *o = out + ((size_t)(y + py) * S + px) * 3;
        const int Y = y + oy;
        /* p(x): the scaled pixel shown at output column x of this row. */
#define COPY_ROW(p)                                                                    \
    for (int x = 0; x < w; x++) {                                                      \
        const uint8_t *q = (p);                                                        \
        o[3 * x] = q[0], o[3 * x + 1] = q[1], o[3 * x + 2] = q[2];                     \
    }
        switch (c->rotation) {
        case 90: /* display (X, Y) <- coded (col Y, row sh-1-X) */
            COPY_ROW(src + (size_t)(sh - 1 - (x + ox)) * ss + (size_t)Y * B)
            break;
        case 180: /* display (X, Y) <- coded (col sw-1-X, row sh-1-Y) */
            COPY_ROW(src + (size_t)(sh - 1 - Y) * ss + (size_t)(sw - 1 - (x + ox)) * B)
            break;
        case 270: /* display (X, Y) <- coded (col sw-1-Y, row X) */
            COPY_ROW(src + (size_t)(x + ox) * ss + (size_t)(sw - 1 - Y) * B)
            break;
        default:
            COPY_ROW(src + (size_t)Y * ss + (size_t)(x + ox) * B)
            break;
        }
#undef COPY_ROW
    }
    return RV_OK;
}
