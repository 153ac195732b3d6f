/* pg_tcp.c — placeholder, replaced below */
#include "pg.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int cddp_pg_tcp_listen(int *port, char *err)
{
    struct sockaddr_in sa = {0};
    socklen_t sl = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        cddp_pg_seterr(err, "socket() failed: %s", strerror(errno));
        return -1;
    }
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        cddp_pg_seterr(err, "could not listen on a TCP port: %s", strerror(errno));
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

void cddp_pg_local_addr(char *buf, size_t len)
{
    snprintf(buf, len, "127.0.0.1");
}

static int tcp_init(cddp_pg *pg, const cddp_pg_info *info, char *err)
{
    cddp_pg_seterr(err, "TCP transport not built yet");
    return -1;
}
static void tcp_fini(cddp_pg *pg) {}
const cddp_pg_transport_ops cddp_pg_tcp_ops = {.init = tcp_init, .fini = tcp_fini};
