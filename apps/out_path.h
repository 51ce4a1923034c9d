/* out_path.h: the one rule for what an output path (-o, --out-dir entries,
 * --ckpt, --log) may name, shared by every subcommand so none of them replaces
 * a device node, a FIFO or a folder with a regular file. */
#ifndef RV_OUT_PATH_H
#define RV_OUT_PATH_H

#include <stddef.h>

#include "rv_status.h"

/* The file that writing out will create or replace, in target (len bytes):
 *   - out does not exist: out itself;
 *   - out is a regular file: out itself;
 *   - out is a symlink (a chain of them): followed to the final target, which
 *     is written if it is a regular file or does not exist (a dangling link
 *     creates its target). Writers make their temporary file beside the target
 *     and rename it onto the target, so the link stays a link;
 *   - anything else (character or block device, FIFO, socket, directory, or a
 *     link to one) is refused: RV_ERR_IO, "OUT: is a character device; refusing
 *     to replace it (only a regular file is replaced)".
 * The check runs on lstat/stat: something swapped in between it and the write
 * is not caught (callers check again just before writing to narrow the window). */
rv_status rv_out_target(const char *out, char *target, size_t len);

/* Opens the log path (written in place, not renamed) with open(2) flags
 * (O_WRONLY | O_CREAT and O_APPEND or O_TRUNC) and mode after the same check
 * ("refusing to write it"), and checks the opened file is regular, so a FIFO or
 * device named as the log is refused instead of blocking or being written.
 * *fd is the descriptor (blocking) or -1 on error. */
rv_status rv_out_open_log(const char *path, int flags, int mode, int *fd);

#endif
