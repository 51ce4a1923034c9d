/* embed_signal.c: the stop request of `ringvit embed` (embed.h): the SIGINT /
 * SIGTERM handler, the flag it sets, which the command (exit code), the ranks'
 * jobs (stop after the current stage) and the dispatch (no more inputs) read,
 * and the temporary file being written, which a second signal removes before
 * it ends the process. Apart from all of them, so none depends on another for it. */
#include <signal.h>
#include <unistd.h>

#include "embed.h"

volatile sig_atomic_t embed_stop_signal;
char embed_tmp_path[4200];

void embed_on_signal(int sig)
{
    if (embed_stop_signal) {
        /* The second signal: at once, without leaving a partial output. */
        if (embed_tmp_path[0])
            unlink(embed_tmp_path);
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    embed_stop_signal = sig;
    static const char msg[] =
        "\nringvit: embed: stopping after the current stage (send the signal again to stop at once)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
}
