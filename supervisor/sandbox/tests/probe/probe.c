/* A static probe run inside sandboxes by the test suite: each subcommand
 * tries one thing and prints one line naming the result (an errno name, or
 * what succeeded). Static so it runs in any image; no libc beyond glibc. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <termios.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/netlink.h>

static const char *en(int e) {
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

static int r(long rc) {
    if (rc < 0) printf("%s", en(errno)); else printf("ok");
    return 0;
}

static int int80(void) {
    long ret;
    /* i386 getpid through int 0x80 from a 64-bit process. */
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20) : "memory");
    printf(ret == getpid() ? "int80 ok\n" : "int80 other %ld\n", ret);
    return 0;
}

static int clone3_userns(void) {
    uint64_t args[11] = {0x10000000 /* CLONE_NEWUSER */, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, 0};
    long rc = syscall(435, args, sizeof args);
    if (rc == 0) _exit(0);
    if (rc > 0) { waitpid(rc, NULL, 0); printf("CLONED\n"); return 0; }
    printf("%s\n", en(errno));
    return 0;
}

static int tiocsti(void) {
    pid_t pid = fork();
    if (pid == 0) {
        int m = posix_openpt(O_RDWR | O_NOCTTY);
        if (m < 0 || grantpt(m) || unlockpt(m)) { printf("nopty %s\n", en(errno)); _exit(0); }
        setsid();
        int s = open(ptsname(m), O_RDWR);
        if (s < 0) { printf("nopty %s\n", en(errno)); _exit(0); }
        ioctl(s, TIOCSCTTY, 0);
        char c = '#';
        unsigned long reqs[2] = {TIOCSTI, TIOCSTI | (1UL << 32)};
        for (int i = 0; i < 2; i++) {
            long rc = syscall(SYS_ioctl, s, reqs[i], &c);
            printf(i ? " " : ""); r(rc);
        }
        printf("\n");
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    return 0;
}

static int tcp(int fam, const char *ip, int port) {
    int s = socket(fam, SOCK_STREAM, 0);
    if (s < 0) return printf("%s", en(errno));
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (fam == AF_INET) {
        struct sockaddr_in *a = (void *)&ss; a->sin_family = AF_INET; a->sin_port = htons(port);
        inet_pton(AF_INET, ip, &a->sin_addr); len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (void *)&ss; a->sin6_family = AF_INET6; a->sin6_port = htons(port);
        inet_pton(AF_INET6, ip, &a->sin6_addr); len = sizeof *a;
    }
    struct timeval tv = {3, 0};
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int rc = connect(s, (void *)&ss, len);
    close(s);
    return rc == 0 ? printf("CONNECTED") : printf("%s", en(errno));
}

static int udp(int fam, const char *ip, int port) {
    int s = socket(fam, SOCK_DGRAM, 0);
    if (s < 0) return printf("%s", en(errno));
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (fam == AF_INET) {
        struct sockaddr_in *a = (void *)&ss; a->sin_family = AF_INET; a->sin_port = htons(port);
        inet_pton(AF_INET, ip, &a->sin_addr); len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (void *)&ss; a->sin6_family = AF_INET6; a->sin6_port = htons(port);
        inet_pton(AF_INET6, ip, &a->sin6_addr); len = sizeof *a;
    }
    int rc = sendto(s, "x", 1, 0, (void *)&ss, len);
    close(s);
    return rc == 1 ? printf("SENT") : printf("%s", en(errno));
}

static int listen_any(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return printf("%s", en(errno));
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (void *)&a, sizeof a) < 0) return printf("%s", en(errno));
    return listen(s, 1) == 0 ? printf("LISTENING") : printf("%s", en(errno));
}

static int environ_scan(const char *canary) {
    DIR *d = opendir("/proc");
    int found = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char p[300], buf[65536];
        snprintf(p, sizeof p, "/proc/%s/environ", e->d_name);
        int fd = open(p, O_RDONLY);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n > 0 && memmem(buf, n, canary, strlen(canary))) { printf("FOUND in %s\n", p); found = 1; }
    }
    if (!found) printf("none\n");
    return 0;
}


/* Runs fn in a child and prints how it ended: "ok", an errno name, or the
 * signal that killed it (a foreign-ABI call meets the seccomp arch check). */
static void in_child(long (*fn)(const void *), const void *arg) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        long rc = fn(arg);
        _exit(rc < 0 ? (int)-rc : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st)) printf("SIG%s", sigabbrev_np(WTERMSIG(st)));
    else if (WEXITSTATUS(st) == 0) printf("ok");
    else printf("%s", en(WEXITSTATUS(st)));
}

/* A copy of s in the low 2 GiB, where a 32-bit pointer can reach it. */
static char *low_copy(const char *s) {
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(2); }
    strncpy(p, s, 4095);
    return p;
}

struct chmod_args { const char *path; unsigned mode; };

/* i386 chmod (15) through int 0x80; returns -errno like the kernel. */
static long ia32_chmod(const void *a) {
    const struct chmod_args *c = a;
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(15), "b"(c->path), "c"(c->mode) : "memory");
    return ret;
}

/* x32 chmod (the x32 bit on x86_64's number 90). */
static long x32_chmod(const void *a) {
    const struct chmod_args *c = a;
    long rc = syscall(0x40000000 | 90, c->path, c->mode);
    return rc < 0 ? -errno : rc;
}

static long ia32_socket_call(const void *a) {
    (void)a;
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(359), "b"(2), "c"(1), "d"(0) : "memory");
    return ret < 0 ? ret : 0;
}

static char door_path[128];
static const char *dp(const char *door, unsigned bits) {
    snprintf(door_path, sizeof door_path, "setid-%s-%o", door, bits);
    return door_path;
}
static void door(const char *name, long rc) { printf("%s ", name); r(rc); printf("\n"); }
static int plain_file(const char *p) {
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (fd >= 0) close(fd);
    return fd;
}

/* Every door through which a file can get S_ISUID/S_ISGID (bits, octal),
 * one line each: "door RESULT". The files stay in the cwd for the host to
 * check after the sandbox ends. Then the same doors without the bits. */
static int setid_doors(const char *bitsarg) {
    unsigned bits = (unsigned)strtoul(bitsarg, NULL, 8);
    unsigned mode = 0755 | bits;
    long fd;
    fd = open(dp("open", bits), O_WRONLY | O_CREAT | O_EXCL, mode); door("open", fd); if (fd >= 0) close(fd);
    fd = syscall(SYS_open, dp("open-raw", bits), O_WRONLY | O_CREAT | O_EXCL, mode); door("open-raw", fd); if (fd >= 0) close(fd);
    fd = syscall(SYS_openat, AT_FDCWD, dp("openat", bits), O_WRONLY | O_CREAT | O_EXCL, mode); door("openat", fd); if (fd >= 0) close(fd);
    fd = open(".", O_TMPFILE | O_WRONLY, mode);
    door("open-tmpfile", fd);
    if (fd >= 0) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%ld", fd);
        linkat(AT_FDCWD, proc, AT_FDCWD, dp("tmpfile", bits), AT_SYMLINK_FOLLOW);
        close(fd);
    }
    fd = syscall(SYS_creat, dp("creat", bits), mode); door("creat", fd); if (fd >= 0) close(fd);
    door("mknod", syscall(SYS_mknod, dp("mknod", bits), S_IFREG | mode, 0));
    door("mknodat", syscall(SYS_mknodat, AT_FDCWD, dp("mknodat", bits), S_IFREG | mode, 0));
    door("mknod-fifo", syscall(SYS_mknod, dp("fifo", bits), S_IFIFO | mode, 0));
    door("mkdir", syscall(SYS_mkdir, dp("mkdir", bits), mode));
    door("mkdirat", syscall(SYS_mkdirat, AT_FDCWD, dp("mkdirat", bits), mode));
    plain_file(dp("chmod", bits));
    door("chmod", syscall(SYS_chmod, door_path, mode));
    plain_file(dp("chmod-hibits", bits));
    door("chmod-hibits", syscall(SYS_chmod, door_path, (1UL << 32) | mode));
    plain_file(dp("fchmod", bits));
    fd = open(door_path, O_RDONLY);
    door("fchmod", syscall(SYS_fchmod, fd, mode));
    if (fd >= 0) close(fd);
    plain_file(dp("fchmodat", bits));
    door("fchmodat", syscall(SYS_fchmodat, AT_FDCWD, door_path, mode));
    plain_file(dp("fchmodat2", bits));
    door("fchmodat2", syscall(452, AT_FDCWD, door_path, mode, 0));
    plain_file(dp("fchmodat2-nofollow", bits));
    door("fchmodat2-nofollow", syscall(452, AT_FDCWD, door_path, mode, AT_SYMLINK_NOFOLLOW));
    mkdir(dp("chmod-dir", bits), 0755);
    door("chmod-dir", syscall(SYS_chmod, door_path, mode));
    struct { uint64_t flags, mode, resolve; } how = {O_WRONLY | O_CREAT, mode, 0};
    fd = syscall(437, AT_FDCWD, dp("openat2", bits), &how, sizeof how); door("openat2", fd); if (fd >= 0) close(fd);
    /* The same doors without the bits work. */
    fd = open(dp("plain-open", bits), O_WRONLY | O_CREAT | O_EXCL, 0644); door("plain-open", fd); if (fd >= 0) close(fd);
    door("plain-chmod", chmod(door_path, 0755));
    door("plain-fchmodat2", syscall(452, AT_FDCWD, door_path, 0750, 0));
    fd = open(door_path, O_RDONLY);
    door("plain-fchmod", fchmod(fd, 0700));
    if (fd >= 0) close(fd);
    door("plain-mkdir", mkdir(dp("plain-mkdir", bits), 0755));
    struct stat st;
    stat(dp("plain-open", bits), &st);
    printf("plain-mode %o\n", st.st_mode & 07777);
    return 0;
}

/* chmod through a foreign ABI: "ia32" (int 0x80) or "x32". */
static int foreign_chmod(const char *abi, const char *bitsarg) {
    unsigned bits = (unsigned)strtoul(bitsarg, NULL, 8);
    char name[64];
    snprintf(name, sizeof name, "setid-%s-chmod-%o", abi, bits);
    plain_file(name);
    struct chmod_args a = {low_copy(name), 0755 | bits};
    in_child(strcmp(abi, "ia32") ? x32_chmod : ia32_chmod, &a);
    printf("\n");
    return 0;
}

/* File capabilities, the other way to make a privileged binary: set
 * security.capability (CAP_SETUID, permitted and effective) on a new file. */
static int setfcap(void) {
    plain_file("setid-fcap");
    struct vfs_cap_data cap = {0};
    cap.magic_etc = VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE;
    cap.data[0].permitted = 1u << CAP_SETUID;
    r(setxattr("setid-fcap", "security.capability", &cap, XATTR_CAPS_SZ_2, 0));
    printf("\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "int80")) return int80();
    if (!strcmp(c, "clone3")) return clone3_userns();
    if (!strcmp(c, "tiocsti")) return tiocsti();
    if (!strcmp(c, "io_uring")) { char p[120] = {0}; long fd = syscall(425, 8, p); printf(fd >= 0 ? "RING\n" : "%s\n", en(errno)); return 0; }
    if (!strcmp(c, "ptrace")) {
        pid_t t = fork();
        if (t == 0) { r(ptrace(PTRACE_TRACEME, 0, 0, 0)); printf(" "); fflush(stdout); _exit(0); }
        waitpid(t, NULL, 0);
        pid_t p = fork();
        if (p == 0) { sleep(5); _exit(0); }
        r(ptrace(PTRACE_ATTACH, p, 0, 0)); printf("\n");
        kill(p, SIGKILL); waitpid(p, NULL, 0);
        return 0;
    }
    if (!strcmp(c, "unshare")) {
        int flags[] = {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID};
        for (int i = 0; i < 4; i++) { printf(i ? " " : ""); r(unshare(flags[i])); }
        printf("\n");
        return 0;
    }
    if (!strcmp(c, "clone-ns")) {
        /* fork with a namespace flag through clone(2) */
        long rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
        if (rc == 0) _exit(0);
        if (rc > 0) { waitpid(rc, NULL, 0); printf("CLONED\n"); } else printf("%s\n", en(errno));
        return 0;
    }
    if (!strcmp(c, "mount") && argc > 2) { r(mount("none", argv[2], "tmpfs", 0, NULL)); printf("\n"); return 0; }
    if (!strcmp(c, "kill") && argc > 2) { r(kill(atoi(argv[2]), SIGKILL)); printf("\n"); return 0; }
    if (!strcmp(c, "read") && argc > 2) {
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0) { printf("%s\n", en(errno)); return 0; }
        char b[4096]; ssize_t n = read(fd, b, sizeof b);
        if (n < 0) printf("%s\n", en(errno)); else printf("read %zd\n", n);
        return 0;
    }
    if (!strcmp(c, "net") && argc > 3) {
        int tp = atoi(argv[2]), up = atoi(argv[3]);
        tcp(AF_INET, "127.0.0.1", tp); printf(" ");
        tcp(AF_INET6, "::1", tp); printf(" ");
        tcp(AF_INET, "1.1.1.1", 80); printf(" ");
        tcp(AF_INET6, "2606:4700:4700::1111", 80); printf(" ");
        udp(AF_INET, "127.0.0.1", up); printf(" ");
        udp(AF_INET, "8.8.8.8", 53); printf(" ");
        udp(AF_INET6, "::1", up); printf(" ");
        listen_any(); printf("\n");
        return 0;
    }
    if (!strcmp(c, "ifaces")) {
        struct if_nameindex *i = if_nameindex();
        if (!i) { printf("%s\n", en(errno)); return 0; }
        for (struct if_nameindex *p = i; p->if_index; p++) printf(p == i ? "%s" : " %s", p->if_name);
        printf("\n");
        return 0;
    }
    if (!strcmp(c, "sockets")) {
        int fams[] = {AF_NETLINK, AF_PACKET, AF_UNIX, AF_INET};
        int protos[] = {9 /* NETLINK_AUDIT */, 0, 0, 0};
        for (int i = 0; i < 4; i++) {
            int type = (fams[i] == AF_UNIX || fams[i] == AF_INET) ? SOCK_STREAM : SOCK_RAW;
            int s = socket(fams[i], type, protos[i]);
            printf(i ? " " : ""); r(s); if (s >= 0) close(s);
        }
        printf("\n");
        return 0;
    }
    if (!strcmp(c, "environ") && argc > 2) return environ_scan(argv[2]);
    if (!strcmp(c, "setid-doors") && argc > 2) return setid_doors(argv[2]);
    if (!strcmp(c, "foreign-chmod") && argc > 3) return foreign_chmod(argv[2], argv[3]);
    if (!strcmp(c, "setfcap")) return setfcap();
    if (!strcmp(c, "ia32-socket")) { in_child(ia32_socket_call, NULL); printf("\n"); return 0; }
    if (!strcmp(c, "ptrace-init")) { r(ptrace(PTRACE_ATTACH, 1, 0, 0)); printf("\n"); return 0; }
    if (!strcmp(c, "netlink-route")) {
        int s = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
        r(s); printf("\n"); if (s >= 0) close(s);
        return 0;
    }
    if (!strcmp(c, "mempolicy")) {
        /* NUMA placement of the caller's own memory, MPOL_DEFAULT: harmless
         * on the host; refused by both backends' one seccomp table. */
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        r(syscall(SYS_set_mempolicy, 0, NULL, 0)); printf(" ");
        r(syscall(SYS_mbind, p, 4096, 0, NULL, 0, 0)); printf("\n");
        return 0;
    }
    if (!strcmp(c, "memfd-secret")) { r(syscall(447, 0)); printf("\n"); return 0; }
    if (!strcmp(c, "ioctl-notty")) {
        /* On stdin, which is no terminal: seccomp answers before the tty layer. */
        unsigned long reqs[3] = {TIOCSTI, TIOCSTI | (1UL << 32), TIOCLINUX};
        for (int i = 0; i < 3; i++) { printf(i ? " " : ""); r(syscall(SYS_ioctl, 0, reqs[i], "x")); }
        printf("\n");
        return 0;
    }
    if (!strcmp(c, "alloc") && argc > 2) {
        /* Touch N MiB, one page at a time: the memory limit must stop it. */
        long mib = atol(argv[2]);
        for (long i = 0; i < mib; i++) {
            char *p = malloc(1 << 20);
            if (!p) { printf("ENOMEM after %ld MiB\n", i); return 0; }
            for (int j = 0; j < (1 << 20); j += 4096) p[j] = 1;
        }
        printf("allocated %ld MiB\n", mib);
        return 0;
    }
    if (!strcmp(c, "misc")) {
        /* bpf, perf_event_open, userfaultfd, keyctl, personality(ADDR_NO_RANDOMIZE), mknod char dev */
        char attr[128] = {0};
        r(syscall(SYS_bpf, 0, attr, 72)); printf(" ");
        uint32_t pe[32] = {0}; pe[0] = 1; pe[1] = 128;
        r(syscall(SYS_perf_event_open, pe, 0, -1, -1, 0)); printf(" ");
        r(syscall(SYS_userfaultfd, 1)); printf(" ");
        r(syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0)); printf(" ");
        r(syscall(SYS_personality, 0x0040000)); printf(" ");
        r(syscall(SYS_name_to_handle_at, AT_FDCWD, "/", attr, attr, 0)); printf("\n");
        return 0;
    }
    fprintf(stderr, "probe: unknown command %s\n", c);
    return 2;
}
