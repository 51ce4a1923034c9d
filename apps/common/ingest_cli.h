/* ingest_cli.h: what the media commands (probe, frames, tokens, embed, bench
 * ingest) share: the parsing of a frame rate and of the ingest flags, and
 * standard input as a file. */
#ifndef RV_INGEST_CLI_H
#define RV_INGEST_CLI_H

#include <jansson.h>

#include "rv_ingest.h"

/* Parses a frame rate exactly: "30", "29.97" (up to 6 decimals) or "30000/1001",
 * positive and at most 1000 frames/s. Prints a usage error naming the flag and
 * returns RV_EXIT_USAGE on error, else 0. */
int cli_parse_fps(const char *cmd, const char *flag, const char *text, int *num, int *den);

/* The flag at argv[*i] with its frame-rate value (see cli_take_int). */
int cli_take_fps(const char *cmd, int argc, char **argv, int *i, int *num, int *den);

/* The ingest flags every media command shares (--fps --size --start --duration
 * --audio-stream --video-stream --threads --max-corrupt --pad), parsed into o.
 * Returns 1 when argv[*i] is one of them (*rc is then 0 or a usage exit code,
 * after a message), 0 when it is not. *audio_set, *video_set become 1 when the
 * stream is chosen explicitly. */
int cli_ingest_flag(const char *cmd, int argc, char **argv, int *i, rv_ingest_opts *o,
                       int *audio_set, int *video_set, int *rc);

/* --max-corrupt's value: "N", a count (0 to 2^30), sets max_corrupt = N and
 * max_corrupt_share = 0 (an absolute limit); "P%", a share (0% to 100%, like
 * 0.5%), sets max_corrupt_share = P / 100 and max_corrupt = 0. Without the flag
 * the defaults stand (32 and 1%: a file stops past both). Prints a usage error
 * and returns RV_EXIT_USAGE on a bad value, else 0. */
int cli_parse_max_corrupt(const char *cmd, const char *text, rv_ingest_opts *o);

/* The file to ingest for the command-line argument arg. "-" is standard input:
 * the ingest opens its input more than once (probe, one demuxer per stream), so
 * standard input is first copied to a temporary file in $TMPDIR (default /tmp),
 * which cli_input_done removes. Returns 0, or an exit code after a message. */
int cli_input_open(const char *cmd, const char *arg, char *path, size_t len, int *spooled);
void cli_input_done(const char *path, int spooled);

#endif
