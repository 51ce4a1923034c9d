/* flat_interrupt.c: rv_flat_interrupt, a process-wide counter that every long
 * loop of a flat call compares with its value at the call's start, so a Ctrl-C
 * in Python stops the calls in flight and not the ones after. */
#include <stdatomic.h>

#include "flat_internal.h"

static atomic_uint interrupts;

void rv_flat_interrupt(void)
{
    atomic_fetch_add(&interrupts, 1); /* lock-free: async-signal-safe */
}

unsigned flat_interrupt_mark(void)
{
    return atomic_load(&interrupts);
}

rv_status flat_interrupt_check(unsigned mark)
{
    return atomic_load(&interrupts) != mark ? rv_fail(RV_ERR_IO, "interrupted") : RV_OK;
}
