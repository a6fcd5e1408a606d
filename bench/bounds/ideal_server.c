/*
 * Lower bound for the hit-latency target of issue 3 (wrk -t2 -c100 p99 at
 * most a third of varnishd's): the least work any HTTP/1.1 server can do
 * per request on this machine. Each of THREADS threads owns a SO_REUSEPORT
 * listener and an epoll loop; a request is whatever ends in CRLF CRLF, and
 * its answer is one prebuilt 200 response with a 1 KB body, written with
 * one send per batch of pipelined requests. No parsing, no cache, no
 * logging: if this server's p99 under wrk is above a third of varnishd's,
 * no cache can meet the target here.
 *
 *   cc -O2 -pthread -o ideal_server ideal_server.c
 *   ./ideal_server PORT [THREADS]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXFD 65536
#define BODY 1024

static char resp[BODY + 256];
static size_t resp_len;
static int port;
/* Bytes of an unfinished request kept per connection: the tail of the
 * last read, enough to find a CRLF CRLF split across reads. */
static char tail[MAXFD][3];
static unsigned char tail_len[MAXFD];

static int listener(void)
{
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0) {
        perror("listen");
        exit(1);
    }
    return fd;
}

/* Counts the requests completed in buf (appended to the connection's
 * kept tail) and keeps the new tail. */
static int complete(int fd, const char *buf, ssize_t n)
{
    char w[4] = {0};
    int k = tail_len[fd], count = 0;
    memcpy(w, tail[fd], k);
    for (ssize_t i = 0; i < n; i++) {
        if (k == 4) {
            memmove(w, w + 1, 3);
            k = 3;
        }
        w[k++] = buf[i];
        if (k == 4 && memcmp(w, "\r\n\r\n", 4) == 0) {
            count++;
            k = 0;
        }
    }
    if (k == 4) {
        memmove(w, w + 1, 3);
        k = 3;
    }
    memcpy(tail[fd], w, k);
    tail_len[fd] = k;
    return count;
}

static void *loop(void *arg)
{
    int lfd = listener(), ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}, evs[256];
    static __thread char buf[65536], out[16 * sizeof resp];
    (void)arg;
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c, one = 1;
                while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= MAXFD) {
                        close(c);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    tail_len[c] = 0;
                    ev.events = EPOLLIN;
                    ev.data.fd = c;
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN)
                    continue;
                close(fd);
                continue;
            }
            int reqs = complete(fd, buf, r);
            while (reqs > 0) {
                int k = reqs < 16 ? reqs : 16;
                for (int j = 0; j < k; j++)
                    memcpy(out + j * resp_len, resp, resp_len);
                /* Loopback sockets take this much at once; a short write
                 * would only mean a slower client, which wrk is not. */
                if (send(fd, out, k * resp_len, MSG_NOSIGNAL) < 0) {
                    close(fd);
                    break;
                }
                reqs -= k;
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    pthread_t t;
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [THREADS]\n", argv[0]);
        return 2;
    }
    port = atoi(argv[1]);
    resp_len = snprintf(resp, sizeof resp,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                        "Content-Length: %d\r\n\r\n",
                        BODY);
    memset(resp + resp_len, 'x', BODY);
    resp_len += BODY;
    for (int i = 1; i < threads; i++)
        pthread_create(&t, NULL, loop, NULL);
    loop(NULL);
    return 0;
}
