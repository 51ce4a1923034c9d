/* ingest_cli.h: what the ingest commands (probe, frames, bench ingest) share:
 * the probe as JSON and the parsing of a frame rate. */
#ifndef RV_INGEST_CLI_H
#define RV_INGEST_CLI_H

#include <jansson.h>

#include "rv_ingest.h"

/* The probe as a JSON object (new reference; NULL when out of memory). Unknown
 * numbers are null. */
json_t *rv_probe_json(const rv_probe *p);

/* Parses a frame rate exactly: "30", "29.97" (up to 6 decimals) or "30000/1001",
 * positive and at most 1000 frames/s. Prints a usage error naming the flag and
 * returns RV_EXIT_USAGE on error, else 0. */
int rv_cli_parse_fps(const char *cmd, const char *flag, const char *text, int *num, int *den);

/* The flag at argv[*i] with its frame-rate value (see rv_cli_take_int). */
int rv_cli_take_fps(const char *cmd, int argc, char **argv, int *i, int *num, int *den);

/* The file to ingest for the command-line argument arg. "-" is standard input:
 * the ingest opens its input more than once (probe, one demuxer per stream), so
 * standard input is first copied to a temporary file in $TMPDIR (default /tmp),
 * which rv_cli_input_done removes. Returns 0, or an exit code after a message. */
int rv_cli_input_open(const char *cmd, const char *arg, char *path, size_t len, int *spooled);
void rv_cli_input_done(const char *path, int spooled);

#endif
