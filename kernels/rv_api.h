/* rv_api.h: RV_API marks what libringvit exports. The library is built with
 * hidden visibility, so only the functions (and data) declared with RV_API in
 * the installed headers are in its dynamic symbol table; everything else is
 * internal to the library (tests/install/check_symbols.sh checks the two
 * agree). Empty on compilers without symbol visibility. */
#ifndef RV_API_H
#define RV_API_H

#if defined(__GNUC__) || defined(__clang__)
#define RV_API __attribute__((visibility("default")))
#else
#define RV_API
#endif

#endif
