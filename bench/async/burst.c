/*
 * A burst of concurrent requests for the bench's waiting scenario (issue
 * 19): opens N connections to 127.0.0.1:PORT, and once all are open sends
 * one GET PATH on each, back to back, then reads the N responses on one
 * epoll thread. Each request's latency runs from its own send to the last
 * byte of its response (Content-Length framing), so the time the burst
 * takes to send does not count. Prints one line:
 *
 *   ok=N failed=N p50_ms=X p99_ms=X max_ms=X
 *
 *   cc -O2 -o burst burst.c
 *   ./burst PORT PATH N
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUFSZ 4096

struct conn {
    int fd;
    long long sent, done;
    int status;
    char buf[BUFSZ];
    int len;
};

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* Whether c's buffer holds a whole response; sets its status. */
static int complete(struct conn *c)
{
    char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (!end)
        return 0;
    if (c->status == 0)
        c->status = c->len > 12 ? atoi(c->buf + 9) : -1;
    long body = 0;
    for (char *p = c->buf; p < end; p++) {
        if ((p == c->buf || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0) {
            body = atol(p + 15);
            break;
        }
    }
    return c->len >= (end + 4 - c->buf) + body;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: burst PORT PATH N\n");
        return 2;
    }
    int n = atoi(argv[3]);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct conn *cs = calloc(n, sizeof *cs);
    /* Open every connection first (blocking connects: the accept queue is
     * the server's business, and this is not timed). */
    for (int i = 0; i < n; i++) {
        int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            fprintf(stderr, "burst: connection %d: %s\n", i, strerror(errno));
            return 1;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        cs[i].fd = fd;
    }
    char req[512];
    int rlen = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n", argv[2]);
    int ep = epoll_create1(0);
    for (int i = 0; i < n; i++) {
        cs[i].sent = now_ns();
        if (send(cs[i].fd, req, rlen, MSG_NOSIGNAL) != rlen)
            cs[i].status = -1;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
    }
    int left = n;
    long long give_up = now_ns() + 30000000000LL;
    struct epoll_event evs[256];
    while (left > 0 && now_ns() < give_up) {
        int k = epoll_wait(ep, evs, 256, 1000);
        for (int j = 0; j < k; j++) {
            struct conn *c = &cs[evs[j].data.u32];
            ssize_t r = recv(c->fd, c->buf + c->len, BUFSZ - c->len, 0);
            if (r > 0)
                c->len += r;
            if (r > 0 && c->len < BUFSZ && !complete(c))
                continue;
            if (r < 0 && errno == EAGAIN)
                continue;
            if (r > 0 || c->len > 0)
                complete(c);
            c->done = now_ns();
            epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
            close(c->fd);
            left--;
        }
    }
    long long *lat = malloc(n * sizeof *lat);
    int ok = 0;
    for (int i = 0; i < n; i++)
        if (cs[i].done && cs[i].status == 200)
            lat[ok++] = cs[i].done - cs[i].sent;
    if (ok == 0) {
        printf("ok=0 failed=%d\n", n);
        return 1;
    }
    qsort(lat, ok, sizeof *lat, cmp);
    int p99 = (int)(ok * 0.99);
    if (p99 >= ok)
        p99 = ok - 1;
    printf("ok=%d failed=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f\n", ok, n - ok,
           lat[ok / 2] / 1e6, lat[p99] / 1e6, lat[ok - 1] / 1e6);
    return 0;
}
