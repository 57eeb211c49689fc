/* The web workload of the ccm-test cluster tier: an HTTP/1.0 server that answers every
 * request with the name of the host it runs on (a Pod's name), so that a request sent
 * through a load balancer shows which Pod answered. Listens on the port given as its only
 * argument (default 8080) and exits on SIGINT or SIGTERM. Linked statically and put in an
 * image FROM scratch, because no image can be pulled where the tests run. */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static void on_stop(int signo) {
    (void)signo;
    _exit(0);
}

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 8080;
    if (port <= 0 || port > 65535) {
        fprintf(stderr, "web: usage: web [PORT]\n");
        return 2;
    }
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    signal(SIGPIPE, SIG_IGN);
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    char body[300];
    int body_len = snprintf(body, sizeof body, "%s\n", host);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int on = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        listen(listener, 64) != 0) {
        perror("web: listening");
        return 1;
    }
    fprintf(stderr, "web: %s listening on port %d\n", host, port);
    for (;;) {
        int conn = accept(listener, NULL, NULL);
        if (conn < 0) {
            continue;
        }
        /* Read the request head (bounded, with a deadline), then answer and close. */
        struct timeval deadline = {5, 0};
        setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &deadline, sizeof deadline);
        char request[4096];
        size_t got = 0;
        while (got < sizeof request - 1) {
            ssize_t n = read(conn, request + got, sizeof request - 1 - got);
            if (n <= 0) {
                break;
            }
            got += (size_t)n;
            request[got] = 0;
            if (strstr(request, "\r\n\r\n") || strstr(request, "\n\n")) {
                break;
            }
        }
        char answer[512];
        int len = snprintf(answer, sizeof answer,
                           "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n"
                           "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
                           body_len, body);
        if (write(conn, answer, (size_t)len) < 0) {
            /* The client went away; nothing to do. */
        }
        close(conn);
    }
}
