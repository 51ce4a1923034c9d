/* ref_common.c: PLACEHOLDER */
#include "ref_ops.h"
int rv_ref_placeholder;
