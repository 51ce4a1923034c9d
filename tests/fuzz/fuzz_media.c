/* fuzz_media.c: libFuzzer target for the media path: the probe (headers and
 * FFmpeg's stream analysis, the pixel limit from the codec parameters) and the
 * first second of ingest (decode, resize to 16 x 16, audio to 16 kHz) on any
 * bytes, through FFmpeg's file protocol on a memory file. Every chunk handed out
 * must hold what it says. */
#include <stdint.h>

#include "fuzz_file.h"
#include "rv_ingest.h"

static rv_status on_chunk(const rv_ingest_chunk *c, void *user)
{
    (void)user;
    volatile uint8_t sink = 0;
    if (c->nframes < 0 || c->nsamples < 0 || (c->nframes > 0 && (!c->frames || c->size != 16)))
        __builtin_trap();
    if (c->nframes > 0)
        sink ^= c->frames[(size_t)c->nframes * 16 * 16 * 3 - 1];
    if (c->nsamples > 0)
        sink ^= (uint8_t)(c->audio[c->nsamples - 1] != c->audio[c->nsamples - 1]);
    (void)sink;
    return RV_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_file f;
    if (fuzz_file_open(&f, "media", data, size) != 0)
        return 0;
    rv_probe *p = NULL;
    if (rv_probe_file(f.path, &p) == RV_OK) {
        rv_ingest_opts o;
        rv_ingest_opts_default(&o);
        o.size = 16;
        o.fps_num = 4;
        o.duration_s = 1;
        o.threads = 1;
        rv_ingest_stream(f.path, &o, on_chunk, NULL, NULL);
        rv_probe_free(&p);
    }
    fuzz_file_close(&f);
    return 0;
}
