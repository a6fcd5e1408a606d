/*
 * The slow services of the bench's waiting scenarios (issue 19): an
 * HTTP/1.1 origin on one epoll thread that answers each request DELAY_MS
 * after it arrived, with no thread or timer per request (every request
 * waits the same time, so the waiting ones form a queue in arrival order).
 *
 *   GET /esi/page  at once: a cacheable page with 8 ESI includes
 *                  (/esi/f0 .. /esi/f7)
 *   GET /esi/fN    after DELAY_MS: an uncacheable fragment of ~200 bytes
 *   anything else  after DELAY_MS: "ok" with X-Ok: 1, uncacheable (the
 *                  service VCL calls with vmod curl)
 *
 *   cc -O2 -o slow_origin slow_origin.c
 *   ./slow_origin PORT DELAY_MS
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXFD 65536
#define QCAP 65536
#define BUFSZ 8192

/* A request waiting for its answer: the connection (and its generation,
 * so that an answer for a connection closed meanwhile is dropped) and
 * what to answer. */
struct waiting {
    int fd;
    unsigned gen;
    int frag; /* -1: the "ok" answer; else the fragment's number */
    int close; /* the request said "Connection: close": end after the answer */
    long long due;
};

static struct waiting q[QCAP];
static unsigned qhead, qtail;
static char *inbuf[MAXFD];
static int inlen[MAXFD];
static unsigned gen[MAXFD];
static long long delay_ns;

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void answer(int fd, const char *extra, const char *body)
{
    char out[2048];
    int n = snprintf(out, sizeof out,
                     "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n%s\r\n%s",
                     strlen(body), extra, body);
    /* Small answers on a socket that only ever holds one: one send. */
    if (send(fd, out, n, MSG_NOSIGNAL) != n)
        shutdown(fd, SHUT_RDWR);
}

static void page(int fd)
{
    char body[1024];
    int n = snprintf(body, sizeof body, "<html>top ");
    for (int i = 0; i < 8; i++)
        n += snprintf(body + n, sizeof body - n, "[<esi:include src=\"/esi/f%d\"/>] ", i);
    snprintf(body + n, sizeof body - n, "bottom</html>");
    answer(fd, "Cache-Control: max-age=3600\r\n", body);
}

static void late(const struct waiting *w)
{
    if (gen[w->fd] != w->gen)
        return;
    if (w->frag < 0) {
        answer(w->fd, "X-Ok: 1\r\nCache-Control: private\r\n", "ok");
    } else {
        char body[512];
        int n = snprintf(body, sizeof body, "fragment %d ", w->frag);
        memset(body + n, 'x', 200);
        body[n + 200] = 0;
        answer(w->fd, "Cache-Control: private, max-age=0\r\n", body);
    }
    if (w->close)
        shutdown(w->fd, SHUT_WR);
}

static void drop(int ep, int fd)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    gen[fd]++;
    inlen[fd] = 0;
}

/* Takes the complete requests out of fd's buffer. */
static void requests(int fd)
{
    char *b = inbuf[fd];
    for (;;) {
        char *end = memmem(b, inlen[fd], "\r\n\r\n", 4);
        if (!end)
            return;
        char *sp = memchr(b, ' ', end - b);
        const char *path = sp ? sp + 1 : "";
        /* Readiness checks send "Connection: close" and read to the end. */
        int close_after = memmem(b, end - b, "Connection: close", 17) != NULL;
        if (strncmp(path, "/esi/page", 9) == 0) {
            page(fd);
            if (close_after)
                shutdown(fd, SHUT_WR);
        } else if (qtail - qhead < QCAP) {
            int frag = -1;
            if (strncmp(path, "/esi/f", 6) == 0)
                frag = atoi(path + 6);
            q[qtail % QCAP] = (struct waiting){fd, gen[fd], frag, close_after, now_ns() + delay_ns};
            qtail++;
        }
        int used = end + 4 - b;
        memmove(b, b + used, inlen[fd] - used);
        inlen[fd] -= used;
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: slow_origin PORT DELAY_MS\n");
        return 2;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max < MAXFD ? rl.rlim_max : MAXFD;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    delay_ns = atoll(argv[2]) * 1000000LL;
    int one = 1, ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 4096) != 0) {
        perror("slow_origin: listen");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls}, evs[512];
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    for (;;) {
        int timeout = -1;
        if (qhead != qtail) {
            long long left = q[qhead % QCAP].due - now_ns();
            timeout = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
        }
        int n = epoll_wait(ep, evs, 512, timeout);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= MAXFD) {
                        close(c);
                        continue;
                    }
                    if (!inbuf[c])
                        inbuf[c] = malloc(BUFSZ);
                    inlen[c] = 0;
                    struct epoll_event ce = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
                }
                continue;
            }
            ssize_t r = recv(fd, inbuf[fd] + inlen[fd], BUFSZ - inlen[fd], 0);
            if (r <= 0) {
                if (r == 0 || (errno != EAGAIN && errno != EINTR))
                    drop(ep, fd);
                continue;
            }
            inlen[fd] += r;
            requests(fd);
            if (inlen[fd] == BUFSZ) /* a head too big for us */
                drop(ep, fd);
        }
        long long now = now_ns();
        while (qhead != qtail && q[qhead % QCAP].due <= now) {
            late(&q[qhead % QCAP]);
            qhead++;
        }
    }
}
