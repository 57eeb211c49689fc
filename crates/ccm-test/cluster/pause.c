/* The sandbox ("pause") container of the ccm-test cluster tier: it holds a Pod's
 * namespaces, reaps the zombies of a shared PID namespace, and exits on SIGINT or
 * SIGTERM, as Kubernetes' own pause does. Linked statically and put in an image FROM
 * scratch, because no image can be pulled where the tests run. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signo) {
    (void)signo;
    _exit(0);
}

static void on_child(int signo) {
    (void)signo;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("pause (ccm-test) 1.0");
        return 0;
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not PID 1, so not reaping the Pod's zombies\n");
    }
    struct sigaction stop = {.sa_handler = on_stop};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
    if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
        sigaction(SIGCHLD, &child, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;) {
        pause();
    }
}
