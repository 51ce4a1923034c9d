/* ref_ops.h: naive double-precision references the tests compare the backends to. */
#ifndef RV_REF_OPS_H
#define RV_REF_OPS_H
#endif
