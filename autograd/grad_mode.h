// grad_mode.h — switching graph recording off.
//
//   { rg::NoGradGuard no_grad;  w.sub_(w.grad() * lr); }   // an update is not part of the graph
//
// The flag is per thread, like torch.no_grad().
#pragma once

namespace ringgrad {

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace ringgrad
