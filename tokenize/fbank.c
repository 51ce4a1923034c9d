/* fbank.c: Kaldi log-mel filterbank (see rv_fbank.h) with a double-precision
 * av_tx real FFT. Double throughout the frame: the float32 input is exact in
 * double, and the small mel energies far from a strong tone (Hann side lobes)
 * keep their digits, so the result is what exact arithmetic gives to well under
 * the 1e-3 the tests allow. The mel filters are kept as sparse rows (each
 * triangle touches a few FFT bins), which is what makes this fast. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/mem.h>
#include <libavutil/tx.h>

#include "rv_fbank.h"

#define NFFT 512
#define NBINS_FFT (NFFT / 2) /* bins 0..255 carry mel weight; 256 (Nyquist) none */
#define PREEMPH 0.97
#define LOW_HZ 20.0
#define RATE 16000.0

struct rv_fbank {
    AVTXContext *tx;
    av_tx_fn fft;
    double *in;              /* (NFFT) aligned */
    AVComplexDouble *out;    /* (NFFT / 2 + 1) aligned */
    double window[RV_FBANK_LEN];
    int lo[RV_FBANK_BINS];   /* first FFT bin of each mel filter */
    int len[RV_FBANK_BINS];  /* FFT bins it covers */
    int off[RV_FBANK_BINS];  /* its first weight in w */
    double *w;               /* the nonzero weights, filter by filter */
};

static double mel(double hz) { return 1127.0 * log(1.0 + hz / 700.0); }

/* torchaudio's get_mel_banks: triangle m has left/centre/right at mel_low +
 * (m, m+1, m+2) * delta, delta = (mel_high - mel_low) / (bins + 1); the weight
 * of FFT bin i (at i * 16000 / 512 Hz) is max(0, min(up, down)) in mel. */
static rv_status make_filters(rv_fbank *fb)
{
    const double mlo = mel(LOW_HZ), mhi = mel(RATE / 2);
    const double delta = (mhi - mlo) / (RV_FBANK_BINS + 1);
    double bin_mel[NBINS_FFT];
    for (int i = 0; i < NBINS_FFT; i++)
        bin_mel[i] = mel(RATE / NFFT * i);
    int total = 0;
    double *tmp = malloc(sizeof(double) * RV_FBANK_BINS * NBINS_FFT);
    if (!tmp)
        return rv_fail(RV_ERR_NOMEM, "fbank: out of memory");
    for (int m = 0; m < RV_FBANK_BINS; m++) {
        double l = mlo + m * delta, c = mlo + (m + 1) * delta, r = mlo + (m + 2) * delta;
        int first = -1, last = -1;
        for (int i = 0; i < NBINS_FFT; i++) {
            double up = (bin_mel[i] - l) / (c - l), down = (r - bin_mel[i]) / (r - c);
            double v = fmax(0.0, fmin(up, down));
            tmp[m * NBINS_FFT + i] = v;
            if (v > 0) {
                if (first < 0)
                    first = i;
                last = i;
            }
        }
        fb->lo[m] = first < 0 ? 0 : first;
        fb->len[m] = first < 0 ? 0 : last - first + 1;
        fb->off[m] = total;
        total += fb->len[m];
    }
    fb->w = malloc(sizeof(double) * (size_t)(total > 0 ? total : 1));
    if (!fb->w) {
        free(tmp);
        return rv_fail(RV_ERR_NOMEM, "fbank: out of memory");
    }
    for (int m = 0; m < RV_FBANK_BINS; m++)
        memcpy(fb->w + fb->off[m], tmp + m * NBINS_FFT + fb->lo[m], sizeof(double) * fb->len[m]);
    free(tmp);
    return RV_OK;
}

rv_status rv_fbank_new(rv_fbank **out)
{
    *out = NULL;
    rv_fbank *fb = calloc(1, sizeof *fb);
    rv_status st = RV_OK;
    if (!fb)
        return rv_fail(RV_ERR_NOMEM, "fbank: out of memory");
    double scale = 1.0;
    if (av_tx_init(&fb->tx, &fb->fft, AV_TX_DOUBLE_RDFT, 0, NFFT, &scale, 0) < 0) {
        st = rv_fail(RV_ERR_BACKEND, "fbank: libavutil has no %d-point real FFT", NFFT);
        goto end;
    }
    fb->in = av_malloc(sizeof(double) * NFFT);
    fb->out = av_malloc(sizeof(AVComplexDouble) * (NFFT / 2 + 1));
    if (!fb->in || !fb->out) {
        st = rv_fail(RV_ERR_NOMEM, "fbank: out of memory");
        goto end;
    }
    /* torch.hann_window(400, periodic=False) */
    for (int i = 0; i < RV_FBANK_LEN; i++)
        fb->window[i] = 0.5 - 0.5 * cos(2.0 * M_PI * i / (RV_FBANK_LEN - 1));
    if ((st = make_filters(fb)) != RV_OK)
        goto end;
    *out = fb;
    fb = NULL;
end:
    rv_fbank_free(&fb);
    return st;
}

void rv_fbank_free(rv_fbank **pfb)
{
    rv_fbank *fb = pfb ? *pfb : NULL;
    if (!fb)
        return;
    av_tx_uninit(&fb->tx);
    av_free(fb->in);
    av_free(fb->out);
    free(fb->w);
    free(fb);
    *pfb = NULL;
}

int64_t rv_fbank_frames(int64_t n)
{
    return n >= RV_FBANK_LEN ? 1 + (n - RV_FBANK_LEN) / RV_FBANK_HOP : 0;
}

void rv_fbank_frame(rv_fbank *fb, const float *x, float *out)
{
    double *in = fb->in;
    double sum = 0;
    for (int i = 0; i < RV_FBANK_LEN; i++) {
        in[i] = x[i];
        sum += in[i];
    }
    const double mean = sum / RV_FBANK_LEN;
    /* DC removal, pre-emphasis (from the end, so x[i-1] is still the original)
     * and the window in one pass. */
    double prev = in[RV_FBANK_LEN - 1] - mean;
    for (int i = RV_FBANK_LEN - 1; i > 0; i--) {
        double before = in[i - 1] - mean;
        in[i] = (prev - PREEMPH * before) * fb->window[i];
        prev = before;
    }
    in[0] = (prev - PREEMPH * prev) * fb->window[0];
    memset(in + RV_FBANK_LEN, 0, sizeof(double) * (NFFT - RV_FBANK_LEN));
    fb->fft(fb->tx, fb->out, in, sizeof(double));

    double power[NBINS_FFT];
    const AVComplexDouble *X = fb->out;
    for (int k = 0; k < NBINS_FFT; k++)
        power[k] = X[k].re * X[k].re + X[k].im * X[k].im;
    for (int m = 0; m < RV_FBANK_BINS; m++) {
        const double *w = fb->w + fb->off[m], *p = power + fb->lo[m];
        double e = 0;
        for (int i = 0; i < fb->len[m]; i++)
            e += w[i] * p[i];
        out[m] = logf((float)fmax(e, (double)FLT_EPSILON));
    }
}

void rv_fbank_compute(rv_fbank *fb, const float *samples, int64_t n, float *out)
{
    int64_t frames = rv_fbank_frames(n);
    for (int64_t f = 0; f < frames; f++)
        rv_fbank_frame(fb, samples + f * RV_FBANK_HOP, out + f * RV_FBANK_BINS);
}
