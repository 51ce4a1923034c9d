/* ingest_cli.h: what the media commands (probe, frames, tokens, embed, finetune,
 * bench ingest) share: the ingest flags as entries of a flag table (cli_flags.h,
 * which it stands on), --max-corrupt's take, and standard input as a file. */
#ifndef RV_INGEST_CLI_H
#define RV_INGEST_CLI_H

#include <jansson.h>

#include "cli_flags.h"
#include "rv_ingest.h"

/* --max-corrupt's value into the rv_ingest_opts at dst (a cli_take_fn): "N", a
 * count (0 to 2^30), sets max_corrupt = N and max_corrupt_share = 0 (an absolute
 * limit); "P%", a share (0% to 100%, like 0.5%), sets max_corrupt_share = P / 100
 * and max_corrupt = 0. Without the flag the defaults stand (32 and 1%: a file
 * stops past both). */
int cli_take_max_corrupt(const char *cmd, const char *name, const char *value, void *dst);

/* The ingest flags the media commands share, as entries of a flag table
 * (cli_flags.h) filling the rv_ingest_opts at io: --fps F (30, 29.97 or
 * 30000/1001: above 0, at most 1000), --size N (8 to 4096 px), and
 * RV_CLI_INGEST_FLAGS: those two, --start S, --duration S, --audio-stream N,
 * --video-stream N (0 to 65535), --max-corrupt N|P%, --pad. The *_seen (NULL:
 * not kept) become 1 when the flag is given: a stream chosen explicitly. */
#define RV_CLI_INGEST_FPS(io) {.name = "--fps", .kind = RV_CLI_FPS, .dst = (io)}
#define RV_CLI_INGEST_SIZE(io, size_seen)                                                 \
    {.name = "--size", .kind = RV_CLI_INT, .dst = &(io)->size, .lo = 8, .hi = 4096,        \
     .seen = (size_seen)}
#define RV_CLI_INGEST_FLAGS(io, size_seen, audio_seen, video_seen)                        \
    RV_CLI_INGEST_FPS(io), RV_CLI_INGEST_SIZE(io, size_seen),                             \
    {.name = "--start", .kind = RV_CLI_DOUBLE, .dst = &(io)->start_s, .lo = 0, .hi = 1e8},  \
    {.name = "--duration", .kind = RV_CLI_DOUBLE, .dst = &(io)->duration_s, .lo = 1e-6,    \
     .hi = 1e8},                                                                          \
    {.name = "--audio-stream", .kind = RV_CLI_INT, .dst = &(io)->audio_stream, .lo = 0,    \
     .hi = 65535, .seen = (audio_seen)},                                                  \
    {.name = "--video-stream", .kind = RV_CLI_INT, .dst = &(io)->video_stream, .lo = 0,    \
     .hi = 65535, .seen = (video_seen)},                                                  \
    {.name = "--max-corrupt", .kind = RV_CLI_CUSTOM, .dst = (io),                         \
     .take = cli_take_max_corrupt},                                                       \
    {.name = "--pad", .kind = RV_CLI_SWITCH, .dst = &(io)->pad}
/* --threads N, the decoder threads (0 to 256; 0: automatic) of frames and tokens. */
#define RV_CLI_INGEST_THREADS(io)                                                         \
    {.name = "--threads", .kind = RV_CLI_INT, .dst = &(io)->threads, .lo = 0, .hi = 256}

/* The file to ingest for the command-line argument arg. "-" is standard input:
 * the ingest opens its input more than once (probe, one demuxer per stream), so
 * standard input is first copied to a temporary file in $TMPDIR (default /tmp),
 * which cli_input_done removes. Returns 0, or an exit code after a message. */
int cli_input_open(const char *cmd, const char *arg, char *path, size_t len, int *spooled);
void cli_input_done(const char *path, int spooled);

#endif
