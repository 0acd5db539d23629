// old_kernel PROGRAM [ARGS...]: runs PROGRAM as on a Linux 4.18 kernel (RHEL 8), as far as system calls
// go: a seccomp filter makes every system call added after 4.18 fail with ENOSYS, which is what an old
// kernel answers for a number it does not know. The filter is inherited by everything PROGRAM starts.
// For the tests of ddprun's fallbacks (docs/install.md, "Supported systems"); needs no privileges.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iterator>

namespace {

#if defined(__x86_64__)
constexpr unsigned kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr unsigned kArch = AUDIT_ARCH_AARCH64;
#else
#error "old_kernel: only x86_64 and aarch64 are supported"
#endif

// pidfd_send_signal, the first system call after 4.18 (5.1), has this number on x86_64 and on aarch64;
// from it on both share one table (pidfd_open 434, clone3 435, close_range 436, openat2 437, pidfd_getfd
// 438, faccessat2 439, epoll_pwait2 441, ...). Below it, aarch64's kexec_file_load (294) is 5.0, which
// ddprun does not use.
constexpr unsigned kFirstAfter418 = 424;
// x32 system calls come with the x86_64 architecture and this bit in the number; 4.18 has them, but
// they are numbered differently, and nothing here uses them: refused as unknown.
constexpr unsigned kX32Bit = 0x40000000U;

sock_filter stmt(unsigned short code, unsigned k) {
  return BPF_STMT(code, k);
}
sock_filter jump(unsigned short code, unsigned k, unsigned char jt, unsigned char jf) {
  return BPF_JUMP(code, k, jt, jf);
}

int install_filter() {
  constexpr unsigned kEnosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  const sock_filter prog[] = {
      // Another architecture's numbers mean other calls (e.g. i386 through int 0x80): never guess.
      stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      jump(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      jump(BPF_JMP | BPF_JGE | BPF_K, kX32Bit, 2, 0),
      jump(BPF_JMP | BPF_JGE | BPF_K, kFirstAfter418, 1, 0),
      stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      stmt(BPF_RET | BPF_K, kEnosys),
  };
  sock_fprog fprog{};
  fprog.len = static_cast<unsigned short>(std::size(prog));
  fprog.filter = const_cast<sock_filter*>(prog);
  // Without privileges a filter needs no_new_privs, so that no set-uid program runs under it.
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: old_kernel PROGRAM [ARGS...]\n");
    return 2;
  }
  if (install_filter() != 0) {
    std::fprintf(stderr, "old_kernel: cannot install the seccomp filter: %s\n", std::strerror(errno));
    return 1;
  }
  ::execvp(argv[1], argv + 1);
  std::fprintf(stderr, "old_kernel: cannot run %s: %s\n", argv[1], std::strerror(errno));
  return 127;
}
