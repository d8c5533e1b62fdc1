// file_kind.h — what a path that is not a regular file is, for the errors that refuse it
// ("expected a regular file, got a FIFO (named pipe)"): the readers of IDX and safetensors
// files stat() a path before opening it, since opening a FIFO would block forever.
#pragma once

#include <sys/stat.h>

namespace ringgrad {

inline const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "something other than a file";
}

}  // namespace ringgrad
