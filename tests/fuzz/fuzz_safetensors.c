/* fuzz_safetensors.c: libFuzzer target for the safetensors reader (rv_st_parse):
 * any bytes either fail with a status or give a file whose every tensor lies in
 * the data section and can be looked up and read whole. */
#include <stdint.h>
#include <string.h>

#include "rv_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rv_safetensors *st = NULL;
    if (rv_st_parse(data, size, "<fuzz>", &st) != RV_OK)
        return 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < rv_st_count(st); i++) {
        const rv_st_tensor *t = rv_st_at(st, i);
        const rv_st_tensor *found = NULL;
        if (rv_st_find(st, t->name) != t ||
            rv_st_get(st, t->name, t->dtype, -1, NULL, &found) != RV_OK || found != t)
            __builtin_trap(); /* a listed tensor is found under its name */
        const uint8_t *b = t->data;
        for (size_t k = 0; k < t->nbytes; k += 4096)
            sink ^= b[k]; /* every byte of it is readable */
        if (t->nbytes)
            sink ^= b[t->nbytes - 1];
    }
    (void)rv_st_meta(st, "format");
    (void)sink;
    rv_st_free(&st);
    return 0;
}
