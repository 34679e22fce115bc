// pcollrun: the one-node launcher (like `mpirun -np N` on localhost).
//
//   pcollrun -n N [--provider P] [--timeout-ms T] [--tag-output] prog args...
//
// Hosts the bootstrap store (lib/bootstrap) on 127.0.0.1 with a fresh job key,
// starts N ranks with PCOLL_RANK/SIZE/ROOT/JOB_KEY, forwards their output line by line,
// and if one rank fails (non-zero exit or signal) terminates the others and returns that
// rank's exit code (128+signal for a signal). SIGINT/SIGTERM/SIGHUP to pcollrun are
// forwarded to the ranks; a second one kills them.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <api/settings_catalog.hpp>
#include <bootstrap/bootstrap_settings.hpp>
#include <bootstrap/tcp_store.hpp>
#include <support/env.hpp>
#include <support/error.hpp>
#include <support/fd.hpp>
#include <support/settings.hpp>
#include <support/shm_names.hpp>
#include <support/support_settings.hpp>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxRanks = 1024;
constexpr int kUsageExit = 2;
constexpr int kNotFoundExit = 127;
// How long ranks get to exit after SIGTERM before SIGKILL.
constexpr std::chrono::milliseconds kTermGrace{3000};
// Longest line kept back waiting for its newline; longer ones are forwarded in pieces.
constexpr size_t kMaxLineBytes = 64 * 1024;

const char kUsage[] =
    "usage: pcollrun -n N [--provider P] [--timeout-ms T] [--tag-output] prog [args...]\n"
    "  -n N            number of ranks to start on this host (1-1024)\n"
    "  --provider P    sets PCOLL_PROVIDER for the ranks (ofi, ofi:shm, ofi:tcp, ucx, ...)\n"
    "  --timeout-ms T  sets PCOLL_TIMEOUT_MS for the ranks and the bootstrap store\n"
    "  --tag-output    prefix every output line with [rank]\n"
    "  -h, --help      this help\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "pcollrun: %s\n%s", message.c_str(), kUsage);
  std::exit(kUsageExit);
}

struct Options {
  int ranks = 0;
  std::optional<std::string> provider;
  std::optional<std::string> timeout_ms;
  bool tag_output = false;
  std::vector<std::string> command;
};

int parse_count(const std::string& text) {
  try {
    return static_cast<int>(pcoll::env::parse_u64(text, "-n", 1, kMaxRanks));
  } catch (const pcoll::Error& e) {
    usage_error(e.what());
  }
}

Options parse_options(int argc, char** argv) {
  Options o;
  int i = 1;
  // Value of an option given as "--opt value" or "--opt=value".
  const auto value_of = [&](const std::string& arg, const std::string& name) -> std::optional<std::string> {
    if (arg == name) {
      if (i + 1 >= argc) usage_error(name + " needs a value");
      return std::string(argv[++i]);
    }
    if (arg.rfind(name + "=", 0) == 0) return arg.substr(name.size() + 1);
    return std::nullopt;
  };
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg == "--tag-output") {
      o.tag_output = true;
    } else if (auto n = value_of(arg, "-n")) {
      o.ranks = parse_count(*n);
    } else if (auto np = value_of(arg, "-np")) {
      o.ranks = parse_count(*np);
    } else if (arg.size() > 2 && arg.rfind("-n", 0) == 0 && arg[2] != 'p') {
      o.ranks = parse_count(arg.substr(2));
    } else if (auto p = value_of(arg, "--provider")) {
      if (p->empty()) usage_error("--provider needs a value");
      o.provider = *p;
    } else if (auto t = value_of(arg, "--timeout-ms")) {
      try {
        const auto& range = pcoll::SupportSettings::entry("PCOLL_TIMEOUT_MS");  // the value becomes PCOLL_TIMEOUT_MS
        pcoll::env::parse_u64(*t, "--timeout-ms", range.min, range.max);
      } catch (const pcoll::Error& e) {
        usage_error(e.what());
      }
      o.timeout_ms = *t;
    } else {
      usage_error("unknown option '" + arg + "'");
    }
  }
  if (o.ranks == 0) usage_error("-n N is required");
  if (i >= argc) usage_error("no program to run");
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  return o;
}

// Every setting the ranks read from pcollrun's environment, checked before any rank starts:
// a bad value would otherwise stop every rank at pcoll_init, after the job had started.
// The launcher's own variables (PCOLL_RANK, PCOLL_ROOT, ...) are replaced for the ranks.
// Free-text settings (PCOLL_PROVIDER, PCOLL_NIC, ...) need their readers (the provider
// registry): the ranks check those and name them. Returns the first error, or "".
std::string check_rank_settings() {
  namespace settings = pcoll::settings;
  for (const settings::Listed& row : settings::listed(settings::catalog())) {
    if (row.setting->kind == settings::Kind::launcher) continue;
    if (const auto e = settings::effective(*row.setting); !e.error.empty()) return e.error;
  }
  // The ranks use pcollrun's store; another bootstrap would not find their peers.
  const std::string bootstrap = settings::effective(pcoll::BootstrapSettings::entry("PCOLL_BOOTSTRAP")).value;
  if (bootstrap != "auto" && bootstrap != "store")
    return "PCOLL_BOOTSTRAP=" + bootstrap + " is set, but pcollrun's ranks rendezvous through pcollrun's "
           "store: unset it (or set it to store), or start the job with the launcher " + bootstrap + " needs";
  return "";
}

// Resolves `program` like execvp would, so a typo fails before any rank starts. Returns
// the path, or the reason in `why`.
std::optional<std::string> resolve_program(const std::string& program, std::string& why) {
  const auto check = [](const std::string& path) -> int {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    return ::access(path.c_str(), X_OK) == 0 ? 0 : errno;
  };
  if (program.find('/') != std::string::npos) {
    const int err = check(program);
    if (err == 0) return program;
    why = std::strerror(err);
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  int first_err = ENOENT;
  size_t start = 0;
  for (;;) {
    const size_t end = dirs.find(':', start);
    std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    // Built by appending: g++ 12 -O3 reports a false -Wrestrict for `dir = "."` + operator+.
    std::string candidate = dir.empty() ? std::string(1, '.') : dir;
    candidate.append(1, '/').append(program);
    const int err = check(candidate);
    if (err == 0) return candidate;
    if (err != ENOENT && first_err == ENOENT) first_err = err;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  why = first_err == ENOENT ? "command not found in PATH" : std::strerror(first_err);
  return std::nullopt;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

void write_all(int fd, const std::string& text) {
  // An error (our stdout is gone: EPIPE) drops the output; pcollrun keeps managing the ranks
  // and never waits for a stalled reader.
  pcoll::write_full(fd, std::as_bytes(std::span(text)), std::chrono::milliseconds(0));
}

// One rank's stdout or stderr: whole lines go out at once so that ranks' lines never
// interleave mid-line.
struct OutputStream {
  pcoll::Fd fd;  // read end of the pipe; closed after EOF
  int target = 1;
  std::string pending;

  void emit(const std::string& prefix, const char* data, size_t bytes, bool add_newline) {
    std::string line;
    line.reserve(prefix.size() + bytes + 1);
    line += prefix;
    line.append(data, bytes);
    if (add_newline) line += '\n';
    write_all(target, line);
  }

  // Reads what is there; returns false at EOF.
  bool drain(const std::string& prefix, bool tag) {
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) {
        if (!pending.empty()) emit(prefix, pending.data(), pending.size(), tag);
        pending.clear();
        fd.reset();
        return false;
      }
      pending.append(buffer, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
        emit(prefix, pending.data() + start, nl + 1 - start, false);
      pending.erase(0, start);
      if (pending.size() >= kMaxLineBytes) {
        emit(prefix, pending.data(), pending.size(), tag);
        pending.clear();
      }
    }
  }
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  OutputStream out;
  OutputStream err;
};

class Launcher {
 public:
  explicit Launcher(Options options) : o_(std::move(options)) {}
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  int run() {
    std::string why;
    const auto program = resolve_program(o_.command[0], why);
    if (!program) {
      std::fprintf(stderr, "pcollrun: cannot run '%s': %s\n", o_.command[0].c_str(), why.c_str());
      return kNotFoundExit;
    }
    program_ = *program;
    // Two pipes per rank here and one socket per rank in the store: lift the soft fd limit.
    if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &files);
    }
    if (o_.timeout_ms) ::setenv("PCOLL_TIMEOUT_MS", o_.timeout_ms->c_str(), 1);
    if (const std::string bad = check_rank_settings(); !bad.empty()) {
      std::fprintf(stderr, "pcollrun: %s (in pcollrun's environment, which the ranks inherit)\n", bad.c_str());
      return kUsageExit;
    }

    // Signals arrive through a signalfd in the event loop; ranks start with them unblocked.
    // Blocked before the store thread starts, which inherits the mask: otherwise the kernel
    // may deliver SIGCHLD to that thread and the loop never hears of it.
    sigset_t handled;
    sigemptyset(&handled);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&handled, sig);
    ::sigprocmask(SIG_BLOCK, &handled, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    signal_fd_.reset(::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC));
    if (!signal_fd_) {
      std::fprintf(stderr, "pcollrun: signalfd: %s\n", std::strerror(errno));
      return 1;
    }

    pcoll::bootstrap::StoreServerConfig config;
    config.bind_host = "127.0.0.1";
    config.port = 0;
    config.job_key = pcoll::bootstrap::make_job_key();
    config.size = o_.ranks;
    config.timeout = std::chrono::milliseconds(pcoll::SupportSettings::get_unsigned("PCOLL_TIMEOUT_MS"));
    pcoll::bootstrap::StoreServer store(config);
    const std::string root = "127.0.0.1:" + std::to_string(store.port());

    ranks_.resize(static_cast<size_t>(o_.ranks));
    for (int r = 0; r < o_.ranks; ++r) {
      std::string prefix;
      if (o_.tag_output) prefix.append(1, '[').append(std::to_string(r)).append("] ");
      prefixes_.push_back(std::move(prefix));
    }
    for (int r = 0; r < o_.ranks; ++r) {
      if (const int err = spawn(r, root, config.job_key); err != 0) {
        std::fprintf(stderr, "pcollrun: cannot start rank %d ('%s'): %s\n", r, o_.command[0].c_str(),
                     std::strerror(err));
        first_failure_ = kNotFoundExit;
        terminate_all(SIGKILL);
        break;
      }
    }
    loop();
    store.stop();
    if (first_failure_) return *first_failure_;
    if (interrupted_by_) return 128 + *interrupted_by_;
    return 0;
  }

 private:
  int spawn(int r, const std::string& root, const std::string& key) {
    pcoll::Pipe out;
    pcoll::Pipe err;
    if (const int e = pcoll::open_pipe(out); e != 0) return e;
    if (const int e = pcoll::open_pipe(err); e != 0) return e;
    std::vector<std::string> env;
    const std::vector<std::pair<std::string, std::string>> ours = {
        {"PCOLL_RANK", std::to_string(r)},
        {"PCOLL_SIZE", std::to_string(o_.ranks)},
        {"PCOLL_LOCAL_RANK", std::to_string(r)},
        {"PCOLL_LOCAL_SIZE", std::to_string(o_.ranks)},
        {"PCOLL_ROOT", root},
        {"PCOLL_JOB_KEY", key},
        {"PCOLL_LAUNCHER", "pcollrun"},
        // Under an outer launcher (srun) the ranks must still use our store, not PMIx
        // (check_rank_settings refused any other PCOLL_BOOTSTRAP).
        {"PCOLL_BOOTSTRAP", "store"},
    };
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('='));
      bool replaced = false;
      for (const auto& [key_name, value] : ours) replaced |= key_name == name;
      if (o_.provider && name == "PCOLL_PROVIDER") replaced = true;
      if (!replaced) env.push_back(entry);
    }
    for (const auto& [name, value] : ours) env.push_back(name + "=" + value);
    if (o_.provider) env.push_back("PCOLL_PROVIDER=" + *o_.provider);

    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<char*> argv;
    for (auto& a : o_.command) argv.push_back(a.data());
    argv.push_back(nullptr);

    // The child reports an exec failure's errno through this pipe; EOF means exec worked.
    pcoll::Pipe status;
    if (const int e = pcoll::open_pipe(status); e != 0) return e;
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Child: async-signal-safe calls only until exec (the store thread runs in the parent).
      ::setpgid(0, 0);  // own group: Ctrl-C reaches pcollrun only, which forwards it once
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // pcollrun killed -> no orphaned ranks
      if (::getppid() != parent) ::_exit(kNotFoundExit);
      struct sigaction dfl{};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, 0);
      ::dup2(out.write_end.get(), 1);
      ::dup2(err.write_end.get(), 2);
      ::execve(program_.c_str(), argv.data(), envp.data());
      const int exec_errno = errno;
      [[maybe_unused]] const ssize_t n = ::write(status.write_end.get(), &exec_errno, sizeof exec_errno);
      ::_exit(kNotFoundExit);
    }
    const int fork_err = errno;
    status.write_end.reset();
    out.write_end.reset();
    err.write_end.reset();
    int exec_err = pid < 0 ? fork_err : 0;
    if (pid > 0) {
      ::setpgid(pid, pid);  // also here, so a signal sent right after fork finds the group
      ssize_t n = 0;
      do n = ::read(status.read_end.get(), &exec_err, sizeof exec_err);
      while (n < 0 && errno == EINTR);
      if (n != static_cast<ssize_t>(sizeof exec_err)) exec_err = 0;
      else ::waitpid(pid, nullptr, 0);
    }
    if (exec_err != 0) return exec_err;
    ::fcntl(out.read_end.get(), F_SETFL, O_NONBLOCK);
    ::fcntl(err.read_end.get(), F_SETFL, O_NONBLOCK);
    Rank& rank = ranks_[static_cast<size_t>(r)];
    rank.pid = pid;
    rank.running = true;
    rank.out = {std::move(out.read_end), 1, {}};
    rank.err = {std::move(err.read_end), 2, {}};
    return 0;
  }

  void terminate_all(int sig) {
    for (auto& rank : ranks_)
      if (rank.running) ::kill(-rank.pid, sig);
    if (sig != SIGKILL && !kill_deadline_) {
      kill_deadline_ = Clock::now() + kTermGrace;
      stopping_signal_ = sig;
    }
  }

  void reap() {
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) return;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        Rank& rank = ranks_[r];
        if (rank.pid != pid || !rank.running) continue;
        rank.running = false;
        // A rank killed by a signal could not unlink its files in /dev/shm.
        pcoll::shm_names::remove_of_process(pid);
        int code = 0;
        std::string how;
        if (WIFEXITED(status)) {
          code = WEXITSTATUS(status);
          how = "exited with code " + std::to_string(code);
        } else if (WIFSIGNALED(status)) {
          code = 128 + WTERMSIG(status);
          how = "was killed by " + signal_name(WTERMSIG(status));
        }
        // Ranks we are stopping anyway do not count as the job's failure.
        if (code != 0 && !first_failure_ && !interrupted_by_) {
          first_failure_ = code;
          std::fprintf(stderr, "pcollrun: rank %zu %s; terminating the other ranks\n", r, how.c_str());
          terminate_all(SIGTERM);
        }
      }
    }
  }

  void on_signals() {
    signalfd_siginfo info{};
    while (::read(signal_fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        reap();
      } else if (!interrupted_by_) {
        interrupted_by_ = sig;
        std::fprintf(stderr, "pcollrun: got %s; forwarding it to the ranks\n", signal_name(sig).c_str());
        terminate_all(sig);
      } else {
        std::fprintf(stderr, "pcollrun: got %s again; killing the ranks\n", signal_name(sig).c_str());
        terminate_all(SIGKILL);
      }
    }
  }

  bool any_running() const {
    for (const auto& rank : ranks_)
      if (rank.running) return true;
    return false;
  }

  void loop() {
    std::optional<Clock::time_point> drain_deadline;
    for (;;) {
      std::vector<pollfd> fds{{signal_fd_.get(), POLLIN, 0}};
      std::vector<std::pair<size_t, OutputStream*>> streams;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        for (OutputStream* s : {&ranks_[r].out, &ranks_[r].err}) {
          if (!s->fd) continue;
          fds.push_back({s->fd.get(), POLLIN, 0});
          streams.emplace_back(r, s);
        }
      }
      const bool running = any_running();
      if (!running) {
        // A daemonised grandchild may hold a pipe open forever: drain briefly, then stop.
        if (streams.empty()) return;
        if (!drain_deadline) drain_deadline = Clock::now() + std::chrono::milliseconds(1000);
        if (Clock::now() >= *drain_deadline) return;
      }
      int timeout_ms = 1000;
      for (auto deadline : {kill_deadline_, drain_deadline}) {
        if (!deadline) continue;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
        timeout_ms = std::min(timeout_ms, static_cast<int>(std::max<int64_t>(0, left.count())));
      }
      const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0 && errno != EINTR) {
        std::fprintf(stderr, "pcollrun: poll: %s\n", std::strerror(errno));
        terminate_all(SIGKILL);
        return;
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        auto [r, stream] = streams[i - 1];
        stream->drain(prefixes_[r], o_.tag_output);
      }
      if (fds[0].revents & POLLIN) on_signals();
      reap();  // cheap; covers a SIGCHLD that coalesced with one already being handled
      if (kill_deadline_ && Clock::now() >= *kill_deadline_ && any_running()) {
        std::fprintf(stderr, "pcollrun: ranks still running %lld ms after %s; killing them\n",
                     static_cast<long long>(kTermGrace.count()), signal_name(stopping_signal_).c_str());
        terminate_all(SIGKILL);
        kill_deadline_.reset();
      }
    }
  }

  Options o_;
  int stopping_signal_ = SIGTERM;  // what the ranks got before the kill deadline
  std::string program_;  // resolved path of o_.command[0]
  std::vector<Rank> ranks_;
  std::vector<std::string> prefixes_;  // "[r] " under --tag-output, else ""
  pcoll::Fd signal_fd_;
  std::optional<int> first_failure_;
  std::optional<int> interrupted_by_;
  std::optional<Clock::time_point> kill_deadline_;
};

}  // namespace

int main(int argc, char** argv) {
  Options options = parse_options(argc, argv);
  try {
    return Launcher(std::move(options)).run();
  } catch (const pcoll::Error& e) {
    std::fprintf(stderr, "pcollrun: %s\n", e.what());
    return e.code() == pcoll::Errc::invalid_argument ? kUsageExit : 1;
  }
}
