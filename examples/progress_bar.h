// progress_bar.h — tqdm's progress bar for the examples, on rank 0.
//
//   ProgressBar bar(world.is_main());        // other ranks: a bar that prints nothing
//   bar.start("Epoch 1/5", steps, first, /*per_step=*/batch * world, "samples");
//   for (…) { …; bar.set_loss(loss); bar.update(++done); }   // or update(done, units so far)
//   bar.close();                             // the terminal line is cleared for what follows
//   bar.message("…");                        // a line above the bar (eval results, saves)
//
// On a terminal it is one line redrawn in place (at most 10 times a second):
//   Epoch 1/5:  43%|████████▌           | 200/469 [00:03<00:04, 62.1 it/s, 7949 samples/s, loss=0.5123]
// step/total, percent, elapsed<remaining, steps/s, units/s (samples or tokens), and the
// loss last set. When stdout is a file or a pipe (ctest, a job's log), the same text
// without the bar, as plain lines: `plain_lines` per start() (each 1/plain_lines of the
// way; 0: none, for programs whose own lines already say how far they are).
// RINGGRAD_PROGRESS=bar or =lines chooses instead of the terminal test.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <ringgrad/core/error.h>

// Whether stdout ends at a terminal. Under mpirun a rank's stdout is always a
// pseudo-terminal (Open MPI forwards the ranks' output through one, whatever mpirun's own
// stdout is), so there the launcher decides: the parent process's stdout (mpirun's, on the
// host that started the job; on other hosts the parent is Open MPI's daemon, whose output
// is no terminal). RINGGRAD_PROGRESS=bar or =lines overrides the test.
inline bool stdout_is_terminal() {
  if (const char* choice = std::getenv("RINGGRAD_PROGRESS")) {
    const std::string c = choice;
    if (c == "bar") return true;
    if (c == "lines") return false;
    RG_CHECK(false, "RINGGRAD_PROGRESS", "expected bar or lines, got '", c, "'");
  }
  if (!isatty(fileno(stdout))) return false;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) return true;  // not under Open MPI
  char target[256] = {};
  const std::string link = "/proc/" + std::to_string(getppid()) + "/fd/1";
  const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
  if (n <= 0) return false;
  const std::string where(target, static_cast<size_t>(n));
  return where.starts_with("/dev/pts/") || where.starts_with("/dev/tty");
}

class ProgressBar {
 public:
  explicit ProgressBar(bool shown = true, int plain_lines = 4)
      : shown_(shown), tty_(shown && stdout_is_terminal()), plain_lines_(plain_lines) {}

  bool tty() const { return tty_; }

  // A new bar over steps [done, total): `per_step` units (samples, tokens) per step.
  void start(std::string desc, int64_t total, int64_t done = 0, double per_step = 0,
             std::string unit = "") {
    desc_ = std::move(desc), total_ = total, first_ = done_ = done;
    per_step_ = per_step, unit_ = std::move(unit);
    has_loss_ = false, drawn_ = false, units_ = -1;
    start_ = last_draw_ = std::chrono::steady_clock::now();
  }
  void set_loss(double loss) { loss_ = loss, has_loss_ = true; }

  // `done` steps of `total`; `units`, when given, the units (tokens, …) counted since
  // start(), for batches of different sizes (otherwise steps × per_step).
  void update(int64_t done, double units = -1) {
    const int64_t before = done_;
    done_ = done, units_ = units;
    if (!shown_) return;
    const auto now = std::chrono::steady_clock::now();
    if (tty_) {
      if (done == total_ || now - last_draw_ >= std::chrono::milliseconds(100) || !drawn_) draw(now);
      return;
    }
    // Plain lines at 1/k, 2/k, … of the way (not at the end: the caller's summary follows).
    for (int k = 1; k < plain_lines_; ++k) {
      const int64_t mark = total_ * k / plain_lines_;
      if (before < mark && done >= mark && done < total_) {
        std::printf("%s\n", text(now, false).c_str());
        std::fflush(stdout);
        break;
      }
    }
  }

  // A line of its own: on a terminal above the bar, which is redrawn below it.
  void message(const std::string& line) {
    if (!shown_) return;
    if (tty_ && drawn_) std::printf("\r\033[K");
    std::printf("%s\n", line.c_str());
    if (tty_ && drawn_) std::printf("%s", text(std::chrono::steady_clock::now(), true).c_str());
    std::fflush(stdout);
  }

  // Erases the bar (a terminal line), so that the next output starts on a clean line.
  void close() {
    if (tty_ && drawn_) std::printf("\r\033[K"), std::fflush(stdout);
    drawn_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;

  static std::string clock(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "?";
    const long s = std::lround(seconds);
    char buf[32];
    if (s >= 3600)
      std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
      std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
    return buf;
  }

  std::string text(Clock::time_point now, bool with_bar) const {
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double steps_per_s = elapsed > 0 ? double(done_ - first_) / elapsed : 0.0;
    const double remaining = steps_per_s > 0 ? double(total_ - done_) / steps_per_s : NAN;
    const double fraction = total_ > 0 ? double(done_) / double(total_) : 1.0;
    std::string out = desc_ + ": ";
    char buf[160];
    std::snprintf(buf, sizeof buf, "%3.0f%%", 100 * fraction);
    out += buf;
    if (with_bar) {  // 20 cells, each in eighths
      static const char* const kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
      const int width = 20, eighths = static_cast<int>(fraction * width * 8);
      out += "|";
      for (int i = 0; i < eighths / 8; ++i) out += "█";
      if (eighths / 8 < width) {
        out += kEighths[eighths % 8];
        out += std::string(static_cast<size_t>(width - eighths / 8 - (eighths % 8 ? 1 : 0)), ' ');
      }
      out += "|";
    }
    std::snprintf(buf, sizeof buf, " %lld/%lld [%s<%s, %.1f it/s", static_cast<long long>(done_),
                  static_cast<long long>(total_), clock(elapsed).c_str(), clock(remaining).c_str(),
                  steps_per_s);
    out += buf;
    if (per_step_ > 0 || units_ >= 0) {
      const double units_per_s =
          units_ >= 0 ? (elapsed > 0 ? units_ / elapsed : 0.0) : steps_per_s * per_step_;
      std::snprintf(buf, sizeof buf, ", %.0f %s/s", units_per_s, unit_.c_str());
      out += buf;
    }
    if (has_loss_) {
      std::snprintf(buf, sizeof buf, ", loss=%.4f", loss_);
      out += buf;
    }
    return out + "]";
  }

  void draw(Clock::time_point now) {
    std::printf("\r%s\033[K", text(now, true).c_str());
    std::fflush(stdout);
    last_draw_ = now, drawn_ = true;
  }

  bool shown_, tty_;
  int plain_lines_;
  std::string desc_, unit_;
  int64_t total_ = 0, first_ = 0, done_ = 0;
  double per_step_ = 0, units_ = -1, loss_ = 0;
  bool has_loss_ = false, drawn_ = false;
  Clock::time_point start_, last_draw_;
};
