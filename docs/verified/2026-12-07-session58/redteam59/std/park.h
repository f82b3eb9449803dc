// park a hijacked libgomp worker at the dock's own futex wait (same syscall nr, stack
// pointer and program counter as /proc/PID/task/TID/syscall showed before the hijack),
// with a timeout, then come back to the attacker's loop (libgomp's leaf wait function
// returns through [sp0], which we set to our continuation).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <link.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
extern "C" long rt_wait_at(unsigned long sp0, unsigned long pc, int* word, long val, void* ts, long op);
asm(R"(
.text
.globl rt_wait_at
.type rt_wait_at,@function
rt_wait_at:
  push %rbx
  push %rbp
  push %r12
  push %r13
  push %r14
  push %r15
  mov %rsp, rt_saved_rsp(%rip)
  lea 1f(%rip), %rax
  mov %rax, (%rdi)
  mov %rdi, %rsp
  mov %rsi, %r11
  mov %rdx, %rdi
  mov %rcx, %rdx
  mov %r8, %r10
  mov %r9, %rsi
  mov $202, %eax
  jmp *%r11
1:
  mov rt_saved_rsp(%rip), %rsp
  pop %r15
  pop %r14
  pop %r13
  pop %r12
  pop %rbp
  pop %rbx
  ret
.data

rt_saved_rsp: .quad 0
.text
)");
struct rt_wait { int tid; unsigned long sp, pc; };
static rt_wait rt_waits[16]; static int rt_nwaits = 0;
static unsigned long rt_glo[8], rt_ghi[8]; static int rt_ng = 0;
static void rt_find_gomp() {
  FILE* f = fopen("/proc/self/maps", "r"); char line[512];
  while (f && fgets(line, sizeof line, f)) {
    if (!strstr(line, "libgomp") || rt_ng >= 8) continue;
    unsigned long lo, hi; if (sscanf(line, "%lx-%lx", &lo, &hi) == 2) { rt_glo[rt_ng] = lo; rt_ghi[rt_ng++] = hi; }
  }
  if (f) fclose(f);
}
static void rt_take_waits() {
  rt_find_gomp();
  DIR* d = opendir("/proc/self/task"); struct dirent* e;
  while (d && (e = readdir(d))) {
    int tid = atoi(e->d_name); if (tid <= 0 || tid == getpid()) continue;
    char p[128], buf[512]; snprintf(p, sizeof p, "/proc/self/task/%d/syscall", tid);
    FILE* f = fopen(p, "r"); if (!f) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f); fclose(f); buf[n] = 0;
    if (strncmp(buf, "202 ", 4)) continue;
    char* tok[16]; int k = 0; for (char* s = strtok(buf, " \n"); s && k < 16; s = strtok(nullptr, " \n")) tok[k++] = s;
    unsigned long sp = strtoul(tok[k-2], nullptr, 16), pc = strtoul(tok[k-1], nullptr, 16);
    for (int g = 0; g < rt_ng; ++g) if (pc >= rt_glo[g] && pc < rt_ghi[g] && rt_nwaits < 16) rt_waits[rt_nwaits++] = {tid, sp, pc};
  }
  if (d) closedir(d);
}
static int rt_pi_word;
// one park of about ms milliseconds; returns the syscall's result
static long rt_park(const rt_wait& w, double ms) {
  int owner = getpid();  // a live thread: FUTEX_LOCK_PI blocks, the kernel sets FUTEX_WAITERS
  __atomic_store_n(&rt_pi_word, owner, __ATOMIC_SEQ_CST);
  timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
  long ns = ts.tv_nsec + (long)(ms * 1e6); ts.tv_sec += ns / 1000000000L; ts.tv_nsec = ns % 1000000000L;
  return rt_wait_at(w.sp, w.pc - 2, &rt_pi_word, owner, &ts, 6 | 128 /* FUTEX_LOCK_PI_PRIVATE */);
}
