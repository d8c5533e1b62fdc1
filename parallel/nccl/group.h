// group.h — an NCCL group that is always closed (internal to the NCCL backend).
//
// Between ncclGroupStart and ncclGroupEnd NCCL only records the calls; ncclGroupEnd
// launches them together (a ring step's send and receive must start together, or every
// rank waits in its send). A group left open — an exception thrown out of it after a
// failed ncclSend, or a bad dtype — would make NCCL defer every later call on this
// thread, forever: the next collective neither runs nor fails. So the calls inside a
// group only note their results; the group is ended whatever happened; then the first
// failure is thrown.
//
// Written over the call results as a template, without nccl.h, so that the tests check
// it with stand-in calls on a machine without NCCL (tests/test_nccl.cpp).
#pragma once

#include <exception>

namespace ringgrad::parallel::nccl_detail {

// Runs start(), body(note), end(). body calls note(result, "ncclSend") after each call;
// the first result other than `ok` is kept. end() runs once start() has succeeded, even
// when a call failed or body threw. Then: body's exception, or
// fail(first failed result, its call's name), or fail(end's result, "ncclGroupEnd").
// fail must throw.
template <typename Result, typename Start, typename End, typename Body, typename Fail>
void in_group(Result ok, Start start, End end, Body body, Fail fail) {
  const Result started = start();
  if (started != ok) fail(started, "ncclGroupStart");
  Result failure = ok;
  const char* failed_call = nullptr;
  auto note = [&](Result result, const char* call) {
    if (result != ok && !failed_call) failure = result, failed_call = call;
  };
  std::exception_ptr thrown;
  try {
    body(note);
  } catch (...) {
    thrown = std::current_exception();
  }
  const Result ended = end();  // always: see above
  if (thrown) std::rethrow_exception(thrown);
  if (failed_call) fail(failure, failed_call);
  if (ended != ok) fail(ended, "ncclGroupEnd");
}

}  // namespace ringgrad::parallel::nccl_detail
