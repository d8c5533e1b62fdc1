// ringgrad.h — everything a user needs, in one include.
//
//   #include <ringgrad/ringgrad.h>
//   namespace rg = ringgrad;
#pragma once

#include "ringgrad/autograd/grad_mode.h"
#include "ringgrad/autograd/gradcheck.h"
#include "ringgrad/core/device.h"
#include "ringgrad/core/dtype.h"
#include "ringgrad/core/error.h"
#include "ringgrad/core/factory.h"
#include "ringgrad/core/ops.h"
#include "ringgrad/core/storage.h"
#include "ringgrad/core/tensor.h"
#include "ringgrad/core/threads.h"
