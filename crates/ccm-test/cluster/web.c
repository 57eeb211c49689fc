/* The web workload of the ccm-test cluster tier: an HTTP/1.0 server that answers every
 * request with the name of the host it runs on (a Pod's name), so that a request sent
 * through a load balancer shows which Pod answered. `GET /relay/ADDRESS/PORT` instead asks
 * `GET /` of ADDRESS:PORT (IPv4 or IPv6) from this Pod and answers with that answer's body
 * (502 and why, when there is none): Pod-to-Pod traffic a test can drive from outside.
 * Listens on the port given as its only argument (default 8080), on IPv6 and IPv4 where
 * the Pod has IPv6, and exits on SIGINT or SIGTERM. Linked statically and put in an image
 * FROM scratch, because no image can be pulled where the tests run. */
#include <arpa/inet.h>
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

/* Reads from `fd` into `buf` (at most `size - 1` bytes, NUL-terminated) until `stop`
 * (when not NULL) appears, the peer closes, or the socket's deadline passes. */
static size_t read_some(int fd, char *buf, size_t size, const char *stop) {
    size_t got = 0;
    buf[0] = 0;
    while (got < size - 1) {
        ssize_t n = read(fd, buf + got, size - 1 - got);
        if (n <= 0) {
            break;
        }
        got += (size_t)n;
        buf[got] = 0;
        if (stop && (strstr(buf, stop) || strstr(buf, "\n\n"))) {
            break;
        }
    }
    return got;
}

/* `GET /` of address:port, its body in `out`; 0, or -1 with the reason in `out`. */
static int relay(const char *address, int port, char *out, size_t size) {
    struct sockaddr_storage peer = {0};
    socklen_t peer_len;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&peer;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&peer;
    if (inet_pton(AF_INET, address, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((unsigned short)port);
        peer_len = sizeof *v4;
    } else if (inet_pton(AF_INET6, address, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((unsigned short)port);
        peer_len = sizeof *v6;
    } else {
        snprintf(out, size, "not an address: %s\n", address);
        return -1;
    }
    int fd = socket(peer.ss_family, SOCK_STREAM, 0);
    struct timeval deadline = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &deadline, sizeof deadline);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &deadline, sizeof deadline);
    if (fd < 0 || connect(fd, (struct sockaddr *)&peer, peer_len) != 0) {
        snprintf(out, size, "connecting to %s port %d: %m\n", address, port);
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    const char *request = "GET / HTTP/1.0\r\n\r\n";
    char answer[2048];
    if (write(fd, request, strlen(request)) < 0) {
        snprintf(out, size, "sending to %s port %d: %m\n", address, port);
        close(fd);
        return -1;
    }
    read_some(fd, answer, sizeof answer, NULL);
    close(fd);
    char *body = strstr(answer, "\r\n\r\n");
    if (strncmp(answer, "HTTP/1.0 200", 12) != 0 || !body) {
        snprintf(out, size, "no answer from %s port %d\n", address, port);
        return -1;
    }
    snprintf(out, size, "%s", body + 4);
    return 0;
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
    char name[300];
    snprintf(name, sizeof name, "%s\n", host);
    /* IPv6 and IPv4 on one socket where the Pod has IPv6; IPv4 alone otherwise. */
    int off = 0, on = 1;
    int listener = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 addr6 = {0};
    addr6.sin6_family = AF_INET6;
    addr6.sin6_port = htons((unsigned short)port);
    addr6.sin6_addr = in6addr_any;
    if (listener >= 0) {
        setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (bind(listener, (struct sockaddr *)&addr6, sizeof addr6) != 0) {
            close(listener);
            listener = -1;
        }
    }
    if (listener < 0) {
        struct sockaddr_in addr = {0};
        addr.sin_family = AF_INET;
        addr.sin_port = htons((unsigned short)port);
        addr.sin_addr.s_addr = htonl(INADDR_ANY);
        listener = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0) {
            perror("web: binding");
            return 1;
        }
    }
    if (listen(listener, 64) != 0) {
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
        read_some(conn, request, sizeof request, "\r\n\r\n");
        char body[1024];
        const char *status = "200 OK";
        char target[64];
        int target_port;
        if (sscanf(request, "GET /relay/%63[0-9a-fA-F.:]/%d ", target, &target_port) == 2) {
            if (relay(target, target_port, body, sizeof body) != 0) {
                status = "502 Bad Gateway";
            }
        } else {
            snprintf(body, sizeof body, "%s", name);
        }
        char answer[1400];
        int len = snprintf(answer, sizeof answer,
                           "HTTP/1.0 %s\r\nContent-Type: text/plain\r\n"
                           "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                           status, strlen(body), body);
        if (write(conn, answer, (size_t)len) < 0) {
            /* The client went away; nothing to do. */
        }
        close(conn);
    }
}
