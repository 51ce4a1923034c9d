/* ingest_json.h: a path as a JSON string, for the texts the library builds
 * about a file: the probe (probe_json.c) and the tokens report
 * (tokenize/tok_report.c). Internal: never installed; no FFmpeg types. */
#ifndef RV_INGEST_JSON_H
#define RV_INGEST_JSON_H

#include <jansson.h>

/* path as it is when it is valid UTF-8, else with every other byte written as
 * \xNN (rv_utf8_text); NULL when out of memory (or path is NULL). */
json_t *ingest_json_path(const char *path);

#endif
