/* finetune_signal.c: the stop request of `ringvit finetune` (finetune.h): the
 * SIGINT/SIGTERM handler and the flag it sets, which the command (exit code) and
 * every rank's loop (stop after the current step) read. Apart from both, so
 * neither file depends on the other for it. */
#include <signal.h>
#include <unistd.h>

#include "finetune.h"

volatile sig_atomic_t ft_stop_signal;

void ft_on_signal(int sig)
{
    if (ft_stop_signal) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    ft_stop_signal = sig;
    static const char msg[] = "\nringvit: finetune: stopping after the current step (send the "
                              "signal again to stop at once)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
}
