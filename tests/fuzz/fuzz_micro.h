/* fuzz_micro.h: the micro model the checkpoint target loads into (D 8, one
 * layer, a 2 x 2 grid of 4-pixel patches, 4 x 4 audio patches), small enough
 * that its checkpoint seed is a few kilobytes and a run takes microseconds. */
#ifndef RV_FUZZ_MICRO_H
#define RV_FUZZ_MICRO_H

#include "rv_vit.h"

static inline rv_status fuzz_micro_config(rv_vit_config *c)
{
    rv_status st = rv_vit_preset("tiny", c);
    if (st != RV_OK)
        return st;
    c->dim = 8;
    c->layers = 1;
    c->heads = 2;
    c->mlp = 16;
    c->patch = 4;
    c->grid = 2;
    c->audio_freq = 4;
    c->audio_time = 4;
    c->audio_fstride = 4;
    c->audio_tstride = 4;
    c->image_size = 0;
    return RV_OK;
}

#endif
