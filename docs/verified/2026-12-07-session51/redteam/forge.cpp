// forge: honest solve; its constructor writes {"progress":true,"stage":"prepared","first":true}
// to every write-only pipe it holds (the harness's answer pipe), FORGE_N times, hoping for a
// stray "go" that a later wait (the clock's "clock"/"clocked") would consume early.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
static void honest(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) { float v = x[i], acc = 0.f;
    for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f; y[i] = acc; }
}
__attribute__((constructor)) static void forge() {
  const char* m = "{\"progress\": true, \"stage\": \"prepared\", \"first\": true}";
  unsigned n = strlen(m); unsigned char hdr[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16), (unsigned char)(n >> 8), (unsigned char)n};
  for (int fd = 3; fd < 256; ++fd) { struct stat st; int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fstat(fd, &st) || !S_ISFIFO(st.st_mode) || (fl & O_ACCMODE) != O_WRONLY) continue;
    for (int i = 0; i < 3; ++i) { write(fd, hdr, 4); write(fd, m, n); }
    fprintf(stderr, "FORGE wrote 3 'first' to fd %d\n", fd); }
}
extern "C" void solve(const float* x, float* buf, float* y, int N) { honest(x, y, N); std::sort(buf, buf + N); }
